//! Synthetic checkpoints: random weights at a named geometry, made in memory on the device in
//! the exact layout mlx-lm writes (affine-quantized linears, stacked experts, MTP layer), so the
//! real load path builds the model. For step-time measurements where acceptance cannot matter.

use std::collections::HashMap;

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use cohort_core::model::config::{QuantSpec, Qwen35Config};
use cohort_core::model::formats::weights::Weights;

/// Qwen3.6-35B-A3B's text geometry (see ../shared/notes/reference-systems.md), with `layers`
/// decoder layers (40 in the real model).
pub fn qwen36_35b_a3b(layers: i32, vocab: i32) -> Result<Qwen35Config> {
    let quant = moe_quantization(layers);
    let json = serde_json::json!({
        "model_type": "qwen3_5_moe",
        "text_config": {
            "hidden_size": 2048, "num_hidden_layers": layers, "full_attention_interval": 4,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
            "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512, "vocab_size": vocab, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": false, "max_position_embeddings": 131072,
        },
        "quantization": quant,
    });
    Qwen35Config::from_json(&json)
}

/// 4-bit g64, with the routers 8-bit g64 recorded per module, as mlx-lm's MoE predicate writes
/// (and [`make_weights`] makes them).
fn moe_quantization(layers: i32) -> serde_json::Value {
    let mut quant = serde_json::json!({"group_size": 64, "bits": 4, "mode": "affine"});
    for l in 0..layers {
        for m in ["mlp.gate", "mlp.shared_expert_gate"] {
            quant[format!("language_model.model.layers.{l}.{m}")] = serde_json::json!({"group_size": 64, "bits": 8});
        }
    }
    quant
}

/// The same block kinds at a small width (16 experts, top-4; 512 hidden), for checks that need
/// the whole load and probe path in seconds rather than the real geometry's sizes.
pub fn qwen35_moe_small(layers: i32, vocab: i32) -> Result<Qwen35Config> {
    let json = serde_json::json!({
        "model_type": "qwen3_5_moe",
        "text_config": {
            "hidden_size": 512, "num_hidden_layers": layers, "full_attention_interval": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
            "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            "linear_num_key_heads": 4, "linear_key_head_dim": 64, "linear_num_value_heads": 8,
            "linear_value_head_dim": 64, "linear_conv_kernel_dim": 4,
            "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 128,
            "shared_expert_intermediate_size": 128, "vocab_size": vocab, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": false, "max_position_embeddings": 8192,
        },
        "quantization": moe_quantization(layers),
    });
    Qwen35Config::from_json(&json)
}

/// A named geometry; `layers` and `vocab` shrink it for quick checks.
pub fn geometry(name: &str, layers: Option<i32>, vocab: Option<i32>) -> Result<Qwen35Config> {
    match name {
        "qwen36-35b-a3b" => qwen36_35b_a3b(layers.unwrap_or(40), vocab.unwrap_or(248_320)),
        "qwen35-moe-small" => qwen35_moe_small(layers.unwrap_or(4), vocab.unwrap_or(4096)),
        other => bail!("unknown synthetic geometry \"{other}\" (qwen36-35b-a3b, qwen35-moe-small)"),
    }
}

struct Maker {
    seed: u64,
    n: u64,
    dtype: Dtype,
    tensors: HashMap<String, Array>,
}

impl Maker {
    fn normal(&mut self, shape: &[i32], std: f32) -> Result<Array> {
        self.n += 1;
        let key = mlx_rs::random::key(self.seed.wrapping_mul(1_000_003).wrapping_add(self.n))?;
        Ok(mlx_rs::random::normal::<f32>(shape, 0.0, std, &key)?.as_dtype(self.dtype)?)
    }

    /// A linear [.., out, in], quantized when `spec` is given; evaluated at once so the float
    /// original is freed before the next one is made.
    fn linear(&mut self, name: &str, lead: &[i32], out: i32, inp: i32, spec: Option<QuantSpec>) -> Result<()> {
        let mut shape = lead.to_vec();
        shape.extend([out, inp]);
        let w = self.normal(&shape, (inp as f32).powf(-0.5))?;
        match spec {
            Some(s) => {
                let (q, scales, biases) = mlx_rs::ops::quantize(&w, s.group_size, s.bits)?;
                mlx_rs::transforms::eval([&q, &scales, &biases])?;
                self.tensors.insert(format!("{name}.weight"), q);
                self.tensors.insert(format!("{name}.scales"), scales);
                self.tensors.insert(format!("{name}.biases"), biases);
            }
            None => {
                w.eval()?;
                self.tensors.insert(format!("{name}.weight"), w);
            }
        }
        Ok(())
    }

    fn vector(&mut self, name: &str, n: i32, value: f32) -> Result<()> {
        let v = mlx_rs::ops::full::<f32>(&[n], Array::from_f32(value))?.as_dtype(self.dtype)?;
        self.tensors.insert(name.to_owned(), v);
        Ok(())
    }

    fn attention(&mut self, p: &str, cfg: &Qwen35Config, q: Option<QuantSpec>) -> Result<()> {
        let (h, nh, nkv, hd) = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        self.linear(&format!("{p}.q_proj"), &[], nh * hd * 2, h, q)?;
        self.linear(&format!("{p}.k_proj"), &[], nkv * hd, h, q)?;
        self.linear(&format!("{p}.v_proj"), &[], nkv * hd, h, q)?;
        self.linear(&format!("{p}.o_proj"), &[], h, nh * hd, q)?;
        self.vector(&format!("{p}.q_norm.weight"), hd, 1.0)?;
        self.vector(&format!("{p}.k_norm.weight"), hd, 1.0)
    }

    fn moe(&mut self, p: &str, cfg: &Qwen35Config, q: Option<QuantSpec>) -> Result<()> {
        let (h, e, i, s) =
            (cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size, cfg.shared_expert_intermediate_size);
        let gate_spec = Some(QuantSpec { bits: 8, group_size: 64 });
        self.linear(&format!("{p}.gate"), &[], e, h, gate_spec)?;
        self.linear(&format!("{p}.switch_mlp.gate_proj"), &[e], i, h, q)?;
        self.linear(&format!("{p}.switch_mlp.up_proj"), &[e], i, h, q)?;
        self.linear(&format!("{p}.switch_mlp.down_proj"), &[e], h, i, q)?;
        self.linear(&format!("{p}.shared_expert.gate_proj"), &[], s, h, q)?;
        self.linear(&format!("{p}.shared_expert.up_proj"), &[], s, h, q)?;
        self.linear(&format!("{p}.shared_expert.down_proj"), &[], h, s, q)?;
        self.linear(&format!("{p}.shared_expert_gate"), &[], 1, h, gate_spec)
    }
}

/// Random weights for `cfg` (4-bit g64 body, 8-bit g64 routers, 4-bit g32 MTP), as `Weights`.
pub fn make_weights(cfg: &Qwen35Config, dtype: Dtype, seed: u64) -> Result<Weights> {
    let body = cfg.quantization.default;
    let mtp_spec = Some(QuantSpec { bits: 4, group_size: 32 });
    let mut m = Maker { seed, n: 0, dtype, tensors: HashMap::new() };
    let h = cfg.hidden_size;
    m.linear("model.embed_tokens", &[], cfg.vocab_size, h, body)?;
    m.linear("lm_head", &[], cfg.vocab_size, h, body)?;
    m.vector("model.norm.weight", h, 1.0)?;
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}");
        m.vector(&format!("{p}.input_layernorm.weight"), h, 1.0)?;
        m.vector(&format!("{p}.post_attention_layernorm.weight"), h, 1.0)?;
        if cfg.layer_kind(l) == cohort_core::model::config::LayerKind::GatedDelta {
            let a = format!("{p}.linear_attn");
            let (hv, dv) = (cfg.linear_num_value_heads, cfg.linear_value_head_dim);
            m.linear(&format!("{a}.in_proj_qkv"), &[], cfg.conv_dim(), h, body)?;
            m.linear(&format!("{a}.in_proj_z"), &[], hv * dv, h, body)?;
            m.linear(&format!("{a}.in_proj_b"), &[], hv, h, body)?;
            m.linear(&format!("{a}.in_proj_a"), &[], hv, h, body)?;
            m.linear(&format!("{a}.out_proj"), &[], h, hv * dv, body)?;
            let conv = m.normal(&[cfg.conv_dim(), cfg.linear_conv_kernel_dim, 1], 0.3)?;
            m.tensors.insert(format!("{a}.conv1d.weight"), conv);
            m.tensors.insert(format!("{a}.A_log"), mlx_rs::ops::zeros::<f32>(&[hv])?);
            m.vector(&format!("{a}.dt_bias"), hv, 1.0)?;
            m.vector(&format!("{a}.norm.weight"), dv, 1.0)?;
        } else {
            m.attention(&format!("{p}.self_attn"), cfg, body)?;
        }
        m.moe(&format!("{p}.mlp"), cfg, body)?;
    }
    // The MTP layer: fc, pre-fc norms, one full-attention MoE decoder layer, norm.
    m.linear("mtp.fc", &[], h, 2 * h, mtp_spec)?;
    for n in ["mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"] {
        m.vector(n, h, 1.0)?;
    }
    m.vector("mtp.layers.0.input_layernorm.weight", h, 1.0)?;
    m.vector("mtp.layers.0.post_attention_layernorm.weight", h, 1.0)?;
    m.attention("mtp.layers.0.self_attn", cfg, mtp_spec)?;
    m.moe("mtp.layers.0.mlp", cfg, mtp_spec)?;
    Ok(Weights::from_tensors(m.tensors, "<synthetic>"))
}
