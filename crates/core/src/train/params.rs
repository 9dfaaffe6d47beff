//! The head's parameters: a flat map from the checkpoint's tensor names to float32 arrays, the
//! shapes a given target requires, and the two initialisations.

use std::collections::HashMap;
use std::rc::Rc;

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};

use crate::model::families::llama::LlamaConfig;

/// Named head tensors (the keys `LlamaModel` reads from an `mtp.safetensors`).
pub type Params = HashMap<Rc<str>, Array>;

pub const PRE_NORM_EMBED: &str = "mtp.pre_fc_norm_embedding.weight";
pub const PRE_NORM_HIDDEN: &str = "mtp.pre_fc_norm_hidden.weight";
pub const FC: &str = "mtp.fc";
pub const INPUT_NORM: &str = "mtp.layers.0.input_layernorm.weight";
pub const POST_NORM: &str = "mtp.layers.0.post_attention_layernorm.weight";
pub const Q: &str = "mtp.layers.0.self_attn.q_proj";
pub const K: &str = "mtp.layers.0.self_attn.k_proj";
pub const V: &str = "mtp.layers.0.self_attn.v_proj";
pub const O: &str = "mtp.layers.0.self_attn.o_proj";
pub const GATE: &str = "mtp.layers.0.mlp.gate_proj";
pub const UP: &str = "mtp.layers.0.mlp.up_proj";
pub const DOWN: &str = "mtp.layers.0.mlp.down_proj";
pub const FINAL_NORM: &str = "mtp.norm.weight";

/// The geometry the head shares with its target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadDims {
    pub hidden: i32,
    pub inter: i32,
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub vocab: i32,
    pub eps: f32,
    pub rope_theta: f32,
    pub rope_traditional: bool,
}

impl HeadDims {
    pub fn from_llama(cfg: &LlamaConfig) -> Self {
        Self {
            hidden: cfg.hidden_size,
            inter: cfg.intermediate_size,
            heads: cfg.num_attention_heads,
            kv_heads: cfg.num_key_value_heads,
            head_dim: cfg.head_dim,
            vocab: cfg.vocab_size,
            eps: cfg.rms_norm_eps,
            rope_theta: cfg.rope_theta,
            rope_traditional: cfg.rope_traditional,
        }
    }

    /// Every linear module as (prefix, input width, output width).
    pub fn linears(&self) -> Vec<(&'static str, i32, i32)> {
        let (h, i, qd, kvd) = (self.hidden, self.inter, self.heads * self.head_dim, self.kv_heads * self.head_dim);
        vec![(FC, 2 * h, h), (Q, h, qd), (K, h, kvd), (V, h, kvd), (O, qd, h), (GATE, h, i), (UP, h, i), (DOWN, i, h)]
    }

    pub fn norms(&self) -> [&'static str; 5] {
        [PRE_NORM_EMBED, PRE_NORM_HIDDEN, INPUT_NORM, POST_NORM, FINAL_NORM]
    }

    /// Every tensor name with its dense shape ([out, in] for linears, [hidden] for norms).
    pub fn shapes(&self) -> Vec<(String, Vec<i32>)> {
        let mut out: Vec<(String, Vec<i32>)> =
            self.linears().into_iter().map(|(p, i, o)| (format!("{p}.weight"), vec![o, i])).collect();
        out.extend(self.norms().iter().map(|n| (n.to_string(), vec![self.hidden])));
        out
    }

    pub fn parameter_count(&self) -> i64 {
        self.shapes().iter().map(|(_, s)| s.iter().map(|&d| d as i64).product::<i64>()).sum()
    }
}

/// Check that `params` holds exactly the head's tensors in the right shapes; a stray, missing
/// or misshapen tensor is named in the error.
pub fn check(params: &Params, dims: &HeadDims, origin: &str) -> Result<()> {
    let want = dims.shapes();
    for (name, shape) in &want {
        let a = params.get(name.as_str()).with_context(|| format!("{origin}: head tensor \"{name}\" is missing"))?;
        if a.shape() != shape.as_slice() {
            bail!(
                "{origin}: head tensor \"{name}\" has shape {:?}, but this model needs {shape:?} (a head trained for another model?)",
                a.shape()
            );
        }
    }
    if let Some(extra) = params.keys().find(|k| !want.iter().any(|(n, _)| n.as_str() == &***k)) {
        bail!("{origin}: unexpected tensor \"{extra}\" (not part of the MTP head)");
    }
    Ok(())
}

fn ones(n: i32) -> Result<Array> {
    Ok(mlx_rs::ops::ones::<f32>(&[n])?)
}

/// Random init: linears ~ N(0, 1/in) (residual outputs scaled down so the untrained layer starts
/// close to identity), norms at 1.
pub fn init_random(dims: &HeadDims, seed: u64) -> Result<Params> {
    let mut key = mlx_rs::random::key(seed)?;
    let mut p = Params::new();
    for (prefix, input, output) in dims.linears() {
        let (k1, k2) = mlx_rs::random::split(&key, 2)?;
        key = k1;
        let mut std = 1.0 / (input as f32).sqrt();
        if prefix == O || prefix == DOWN {
            std *= 0.1;
        }
        let w = mlx_rs::random::normal::<f32>(&[output, input], 0.0, std, &k2)?;
        p.insert(format!("{prefix}.weight").into(), w);
    }
    for n in dims.norms() {
        p.insert(n.into(), ones(dims.hidden)?);
    }
    Ok(p)
}

/// Init from the target: the decoder layer is a copy of the target's last layer, `fc` passes the
/// normalised hidden state through (`[0 | I]`: the token half starts at zero, so the untrained
/// head starts from the target's own prediction rather than from echoing the token), and
/// `mtp.norm` starts as the target's final norm.
pub fn init_from_target(dims: &HeadDims, target: &TargetLayer) -> Result<Params> {
    let h = dims.hidden;
    let eye = mlx_rs::ops::eye::<f32>(h, None, None)?;
    let zero = mlx_rs::ops::zeros::<f32>(&[h, h])?;
    let mut p = Params::new();
    p.insert(format!("{FC}.weight").into(), mlx_rs::ops::concatenate(&[&zero, &eye], 1)?);
    for (name, a) in &target.tensors {
        p.insert(name.as_str().into(), a.as_dtype(Dtype::Float32)?);
    }
    p.insert(PRE_NORM_EMBED.into(), ones(h)?);
    p.insert(PRE_NORM_HIDDEN.into(), ones(h)?);
    check(&p, dims, "init from target")?;
    Ok(p)
}

/// The target tensors `init_from_target` copies, already renamed to head names.
pub struct TargetLayer {
    pub tensors: Vec<(String, Array)>,
}

/// Deep copies (so an optimizer update of one map never aliases another).
pub fn clone_params(p: &Params) -> Params {
    p.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Arrays to evaluate so a map holds no pending graph.
pub fn arrays(p: &Params) -> Vec<&Array> {
    p.values().collect()
}
