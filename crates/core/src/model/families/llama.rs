//! The Llama family (mlx-lm's `llama`: SmolLM2, Llama 2/3-style dense models without RoPE
//! scaling): standard grouped-query attention with full RoPE, a SwiGLU MLP, RMSNorm, tied or
//! separate LM head. Implements [`LanguageModel`] like [`super::qwen3_5::Qwen35Model`], with a generic
//! depth-one MTP head loaded from an `mtp.safetensors` sidecar when one is present.

use std::path::Path;

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};
use serde_json::Value;

use crate::model::config::RopeSpec;
use crate::model::config::{LayerKind, QuantSpec, Quantization, check_ranges, count, eos_ids, parse_quantization};
use crate::model::formats::weights::Weights;
pub use crate::model::forward::{ForwardOutput, LanguageModel, Logits};
use crate::model::layers::attention::{self, Block};
use crate::model::layers::cache::{KvCache, LayerState, RowCache};
use crate::model::layers::linear::{Embedding, Linear};
use crate::model::layers::mlp::Mlp;
use crate::model::layers::norm::RmsNorm;
use crate::model::routes::Routes;
use crate::platform::backend::Backend;

mod host;
pub use host::blocks_served as host_blocks_served;

/// `config.json` of a llama checkpoint, read with mlx-lm's `llama.ModelArgs` defaults.
#[derive(Debug, Clone)]
pub struct LlamaConfig {
    pub model_type: String,
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub intermediate_size: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub rope_theta: f32,
    pub rope_traditional: bool,
    pub tie_word_embeddings: bool,
    pub max_position_embeddings: i32,
    pub eos_token_ids: Vec<u32>,
    pub quantization: Quantization,
}

impl LlamaConfig {
    pub fn load(path: &Path) -> Result<Self> {
        let text = crate::model::formats::files::read_text(path)?;
        let root: Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
        Self::from_json(&root).with_context(|| format!("in {}", path.display()))
    }

    pub fn from_json(root: &Value) -> Result<Self> {
        let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or("").to_owned();
        if model_type != "llama" {
            bail!("model_type \"{model_type}\" is not llama");
        }
        let int = |k: &str| -> Result<i32> {
            count(k, root.get(k))?.with_context(|| format!("config key \"{k}\" is missing"))
        };
        let int_or = |k: &str, d: i32| -> Result<i32> { Ok(count(k, root.get(k))?.unwrap_or(d)) };
        let float_or = |k: &str, d: f32| root.get(k).and_then(Value::as_f64).map(|v| v as f32).unwrap_or(d);
        let bool_or = |k: &str, d: bool| root.get(k).and_then(Value::as_bool).unwrap_or(d);
        for k in ["attention_bias", "mlp_bias"] {
            if bool_or(k, false) {
                bail!("\"{k}\": true is not supported (bias-free projections only)");
            }
        }
        if let Some(rs) = root.get("rope_scaling")
            && !rs.is_null()
        {
            let kind = rs.get("rope_type").or_else(|| rs.get("type")).and_then(Value::as_str).unwrap_or("?");
            if kind != "default" {
                bail!("rope_scaling of type \"{kind}\" is not supported");
            }
        }
        let hidden_size = int("hidden_size")?;
        let num_attention_heads = int("num_attention_heads")?;
        let cfg = Self {
            hidden_size,
            num_hidden_layers: int("num_hidden_layers")?,
            intermediate_size: int("intermediate_size")?,
            num_attention_heads,
            num_key_value_heads: int_or("num_key_value_heads", num_attention_heads)?,
            head_dim: int_or("head_dim", if num_attention_heads > 0 { hidden_size / num_attention_heads } else { 0 })?,
            rms_norm_eps: float_or("rms_norm_eps", 1e-6),
            vocab_size: int("vocab_size")?,
            rope_theta: float_or("rope_theta", 10_000.0),
            rope_traditional: bool_or("rope_traditional", false),
            // mlx-lm's llama.ModelArgs defaults to tied embeddings.
            tie_word_embeddings: bool_or("tie_word_embeddings", true),
            max_position_embeddings: int_or("max_position_embeddings", 4096)?,
            eos_token_ids: eos_ids(root.get("eos_token_id"))?,
            quantization: parse_quantization(root.get("quantization"))?,
            model_type,
        };
        for (k, v) in [
            ("hidden_size", cfg.hidden_size),
            ("num_hidden_layers", cfg.num_hidden_layers),
            ("intermediate_size", cfg.intermediate_size),
            ("num_attention_heads", cfg.num_attention_heads),
            ("num_key_value_heads", cfg.num_key_value_heads),
            ("head_dim", cfg.head_dim),
            ("vocab_size", cfg.vocab_size),
        ] {
            if v <= 0 {
                bail!("config key \"{k}\" must be positive (got {v})");
            }
        }
        check_ranges(cfg.num_hidden_layers, cfg.rms_norm_eps, cfg.rope_theta, &cfg.eos_token_ids, cfg.vocab_size)?;
        if cfg.num_attention_heads % cfg.num_key_value_heads != 0 {
            bail!(
                "num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                cfg.num_attention_heads,
                cfg.num_key_value_heads
            );
        }
        Ok(cfg)
    }
}

/// Llama attention: q/k/v/o projections, RoPE over the whole head, grouped KV heads.
struct LlamaAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    heads: i32,
    kv_heads: i32,
    head_dim: i32,
    rope_theta: f32,
    rope_traditional: bool,
}

impl LlamaAttention {
    fn load(
        w: &mut Weights,
        prefix: &str,
        cfg: &LlamaConfig,
        quant: &dyn Fn(&str) -> Option<QuantSpec>,
    ) -> Result<Self> {
        let (h, nh, nkv, hd) = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim);
        let lin = |w: &mut Weights, name: &str, i, o| {
            Linear::load(w, &format!("{prefix}.{name}"), i, o, quant(&format!("{prefix}.{name}")))
        };
        Ok(Self {
            q_proj: lin(w, "q_proj", h, nh * hd)?,
            k_proj: lin(w, "k_proj", h, nkv * hd)?,
            v_proj: lin(w, "v_proj", h, nkv * hd)?,
            o_proj: lin(w, "o_proj", nh * hd, h)?,
            heads: nh,
            kv_heads: nkv,
            head_dim: hd,
            rope_theta: cfg.rope_theta,
            rope_traditional: cfg.rope_traditional,
        })
    }

    /// x [B, T, H]; `caches[b]` is row b's KV for this layer (rows differ in position).
    fn forward(&self, x: &Array, caches: &mut [&mut KvCache]) -> Result<Array> {
        let (b, t) = (x.shape()[0], x.shape()[1]);
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let split =
            |a: Array, n: i32| -> Result<Array> { Ok(a.reshape(&[b, t, n, hd])?.transpose_axes(&[0, 2, 1, 3])?) };
        let queries = split(self.q_proj.forward(x)?, nh)?;
        let keys = split(self.k_proj.forward(x)?, nkv)?;
        let values = split(self.v_proj.forward(x)?, nkv)?;
        let scale = (hd as f32).powf(-0.5);
        let rope = RopeSpec { dims: hd, traditional: self.rope_traditional, base: self.rope_theta };
        let block = Block { q: &queries, k: &keys, v: &values, rope: Some(rope), scale };
        let o = attention::attend(caches, &block)?;
        let o = o.transpose_axes(&[0, 2, 1, 3])?.reshape(&[b, t, nh * hd])?;
        self.o_proj.forward(&o)
    }

    fn nbytes(&self) -> usize {
        [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj].iter().map(|l| l.nbytes()).sum()
    }
}

struct DecoderLayer {
    input_norm: RmsNorm,
    post_norm: RmsNorm,
    attn: LlamaAttention,
    mlp: Mlp,
}

impl DecoderLayer {
    fn load(w: &mut Weights, p: &str, cfg: &LlamaConfig, quant: &dyn Fn(&str) -> Option<QuantSpec>) -> Result<Self> {
        let (h, eps) = (cfg.hidden_size, cfg.rms_norm_eps);
        Ok(Self {
            input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm.weight"), h, eps)?,
            post_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm.weight"), h, eps)?,
            attn: LlamaAttention::load(w, &format!("{p}.self_attn"), cfg, quant)?,
            mlp: Mlp::load(w, &format!("{p}.mlp"), h, cfg.intermediate_size, quant)?,
        })
    }

    fn forward(&self, x: &Array, kvs: &mut [&mut KvCache]) -> Result<Array> {
        let h = x.add(self.attn.forward(&self.input_norm.forward(x)?, kvs)?)?;
        Ok(h.add(self.mlp.forward(&self.post_norm.forward(&h)?)?)?)
    }

    fn nbytes(&self) -> usize {
        self.attn.nbytes() + self.mlp.nbytes()
    }
}

/// The generic depth-one MTP head: `fc(concat(norm_e(embed(token)), norm_h(hidden)))` -> one
/// Llama decoder layer with its own KV -> norm -> the model's head. Norm weights are plain
/// multipliers (Llama convention, nothing is added to them).
struct MtpModule {
    pre_fc_norm_embedding: RmsNorm,
    pre_fc_norm_hidden: RmsNorm,
    fc: Linear,
    layer: DecoderLayer,
    norm: RmsNorm,
}

pub struct LlamaModel {
    pub cfg: LlamaConfig,
    embed: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    mtp: Option<MtpModule>,
    /// Activation dtype (float32 on the CPU).
    pub dtype: Dtype,
    /// Whether the body and the MTP head can take the host decode path (`host.rs`).
    host_body: bool,
    host_mtp: bool,
    /// The routes in force when it was loaded.
    routes: Routes,
    /// Prompt chunks read on MLX's products are padded to a multiple of [`PREFILL_ROWS`]
    /// positions (MLX's CPU backend in float32, where OpenBLAS keeps a row's bits in such blocks).
    pads_prefill: bool,
}

/// What a padded prompt chunk's positions are a multiple of.
pub const PREFILL_ROWS: usize = 8;

impl LlamaModel {
    /// Load from a model directory (config.json + safetensors, and `mtp.safetensors` beside
    /// them when present).
    pub fn load(dir: &Path, dtype: Dtype) -> Result<Self> {
        Self::load_with_mtp(dir, None, dtype)
    }

    /// Load, taking the MTP head from `mtp` (a safetensors file) instead of the directory's
    /// `mtp.safetensors`.
    pub fn load_with_mtp(dir: &Path, mtp: Option<&Path>, dtype: Dtype) -> Result<Self> {
        let cfg = LlamaConfig::load(&dir.join("config.json"))?;
        let mut w = Weights::load_dir(dir)?;
        if let Some(p) = mtp {
            if dir.join("mtp.safetensors").exists() && p != dir.join("mtp.safetensors") {
                bail!("{} has its own mtp.safetensors; cannot also load {}", dir.display(), p.display());
            }
            if p != dir.join("mtp.safetensors") {
                w.add_file(p)?;
            }
        }
        // mlx-lm's llama sanitize: drop RoPE buffers, and lm_head when the embeddings are tied.
        let keys: Vec<String> = w.keys().cloned().collect();
        for k in keys {
            if k.contains("self_attn.rotary_emb.inv_freq") || (cfg.tie_word_embeddings && k == "lm_head.weight") {
                w.take(&k)?;
            }
        }
        // One float dtype throughout: mixed float16 scales and float32 activations would promote.
        w.cast_floats(dtype)?;
        let mtp_quant = match mtp {
            Some(p) => quantization_beside(p.parent().unwrap_or(dir))?,
            None => quantization_beside(dir)?,
        };
        let model =
            Self::from_weights(cfg, &mut w, dtype, mtp_quant).with_context(|| format!("loading {}", dir.display()))?;
        let left = w.leftover();
        if !left.is_empty() {
            tracing::warn!(count = left.len(), first = %left[0], "checkpoint tensors not used by the model");
        }
        Ok(model)
    }

    fn from_weights(cfg: LlamaConfig, w: &mut Weights, dtype: Dtype, mtp_quant: Option<Quantization>) -> Result<Self> {
        let quantization = cfg.quantization.clone();
        let quant = move |path: &str| quantization.for_module(path);
        let h = cfg.hidden_size;
        let embed = Embedding::load(w, "model.embed_tokens", cfg.vocab_size, h, quant("model.embed_tokens"))?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers as usize);
        for i in 0..cfg.num_hidden_layers {
            layers.push(DecoderLayer::load(w, &format!("model.layers.{i}"), &cfg, &quant)?);
        }
        let norm = RmsNorm::load(w, "model.norm.weight", h, cfg.rms_norm_eps)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(Linear::load(w, "lm_head", h, cfg.vocab_size, quant("lm_head"))?)
        };
        let mtp = if w.contains("mtp.fc.weight") {
            // The sidecar's quantization may differ from the body's: its mtp_config.json says
            // how when present, else each module's stored tensor shapes do.
            let q = move |path: &str| mtp_quant.as_ref().and_then(|mq| mq.for_module(path));
            let eps = cfg.rms_norm_eps;
            Some(MtpModule {
                pre_fc_norm_embedding: RmsNorm::load(w, "mtp.pre_fc_norm_embedding.weight", h, eps)?,
                pre_fc_norm_hidden: RmsNorm::load(w, "mtp.pre_fc_norm_hidden.weight", h, eps)?,
                fc: Linear::load(w, "mtp.fc", 2 * h, h, q("mtp.fc"))?,
                layer: DecoderLayer::load(w, "mtp.layers.0", &cfg, &q)?,
                norm: RmsNorm::load(w, "mtp.norm.weight", h, eps)?,
            })
        } else {
            None
        };
        let routes = crate::model::routes::current();
        let pads_prefill = dtype == Dtype::Float32 && Backend::detect() == Backend::Cpu;
        let mut model = Self {
            cfg,
            embed,
            layers,
            norm,
            lm_head,
            mtp,
            dtype,
            host_body: false,
            host_mtp: false,
            routes,
            pads_prefill,
        };
        (model.host_body, model.host_mtp) = model.host_support();
        Ok(model)
    }

    pub fn layer_kinds(&self) -> Vec<LayerKind> {
        vec![LayerKind::Full; self.layers.len()]
    }

    /// Bytes of all parameters.
    pub fn nbytes(&self) -> usize {
        let mut n = self.embed.table.nbytes() + self.lm_head.as_ref().map(|l| l.nbytes()).unwrap_or(0);
        n += self.norm.weight.nbytes();
        for l in &self.layers {
            n += l.nbytes() + l.input_norm.weight.nbytes() + l.post_norm.weight.nbytes();
        }
        if let Some(m) = &self.mtp {
            n += m.fc.nbytes() + m.layer.nbytes();
        }
        n
    }

    /// The MTP module on MLX's ops up to its final norm (what the head reads); appends to each
    /// row's MTP history.
    fn mtp_states(&self, mtp: &MtpModule, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<Array> {
        crate::model::routes::with_padded_float_rows(|| {
            let e = mtp.pre_fc_norm_embedding.forward(&self.embed.forward(tokens, self.dtype)?)?;
            let h = mtp.pre_fc_norm_hidden.forward(hidden)?;
            let x = mtp.fc.forward(&mlx_rs::ops::concatenate(&[e, h], -1)?)?;
            let mut kvs: Vec<&mut KvCache> = rows.iter_mut().map(|r| &mut r.mtp).collect();
            let out = mtp.layer.forward(&x, &mut kvs)?;
            mtp.norm.forward(&out)
        })
    }

    fn head(&self, x: &Array) -> Result<Array> {
        match &self.lm_head {
            Some(l) => l.forward(x),
            None => self.embed.as_linear(x),
        }
    }
}

impl LanguageModel for LlamaModel {
    /// A fresh row: every layer is `LayerState::Attention`.
    fn new_row(&self) -> RowCache {
        RowCache::new(&self.layer_kinds())
    }

    /// On the host path the head's product is the host path's own (the kernel), so a packed
    /// prompt read's last logits are those of a chunk read alone.
    fn head_logits(&self, hidden: &Array) -> Result<Array> {
        if self.host_serves(false) {
            return self.host_head_logits(hidden);
        }
        self.head(hidden)
    }

    /// Chunks padded to whole blocks of [`PREFILL_ROWS`]: on MLX's products a chunk of any length
    /// then gives each of its rows the bits it gets in any other chunk (the host path's kernel
    /// does so in blocks of any size), so where a read splits does not matter.
    fn prefill_block(&self, offset: i32, tokens: usize) -> Option<usize> {
        let rows = tokens.next_multiple_of(PREFILL_ROWS);
        let fits = (offset.max(0) as usize).saturating_add(rows) <= self.cfg.max_position_embeddings.max(0) as usize;
        (self.pads_prefill && fits).then_some(rows)
    }

    /// Every layer of the family is products, norms, RoPE and attention, which the invariant
    /// route's kernels compute alike in blocks of any length: a prompt read takes a quarter of a
    /// GPU chunk at once (a few host-built graphs a chunk, not one every 16 positions).
    fn invariant_piece(&self) -> usize {
        crate::model::routes::INVARIANT_PIECE_ATTENTION_ONLY
    }

    fn has_mtp(&self) -> bool {
        self.mtp.is_some()
    }

    fn vocab_size(&self) -> i32 {
        self.cfg.vocab_size
    }

    fn max_context(&self) -> i32 {
        self.cfg.max_position_embeddings
    }

    fn kv_bytes_per_position(&self) -> usize {
        let layers = self.cfg.num_hidden_layers as usize + usize::from(self.has_mtp());
        layers
            * 2
            * (self.cfg.num_key_value_heads * self.cfg.head_dim) as usize
            * crate::model::ops::dtype_bytes(self.dtype())
    }

    fn eos_ids(&self) -> Vec<u32> {
        self.cfg.eos_token_ids.clone()
    }

    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn routes(&self) -> Routes {
        self.routes
    }

    /// Run `tokens` [B, T] through the model; `rows[b]` is row b's state and advances by T.
    /// `capture` is accepted for interface parity (a Llama has no recurrent state to capture).
    fn forward(
        &self,
        tokens: &Array,
        rows: &mut [&mut RowCache],
        logits: Logits,
        _capture: bool,
    ) -> Result<ForwardOutput> {
        let b = tokens.shape()[0];
        if rows.len() as i32 != b {
            bail!("forward: {} rows of state for a batch of {b}", rows.len());
        }
        let t = tokens.shape()[1];
        if self.host_serves(false) {
            return self.host_forward(tokens, rows, logits);
        }
        let mut x = self.embed.forward(tokens, self.dtype)?;
        for (li, layer) in self.layers.iter().enumerate() {
            let mut kvs: Vec<&mut KvCache> = rows
                .iter_mut()
                .map(|r| match r.layers.get_mut(li) {
                    Some(LayerState::Attention(kv)) => Ok(kv),
                    _ => bail!("row state does not match layer {li} (not a Llama row)"),
                })
                .collect::<Result<_>>()?;
            x = layer.forward(&x, &mut kvs)?;
        }
        for r in rows.iter_mut() {
            r.len += t;
        }
        let hidden = self.norm.forward(&x)?;
        let logits = match logits {
            Logits::All => Some(self.head(&hidden)?),
            Logits::Last => Some(self.head(&crate::model::ops::slice_axis(&hidden, 1, t - 1, t)?)?),
            Logits::None => None,
        };
        Ok(ForwardOutput { hidden, logits, captures: (0..self.layers.len()).map(|_| None).collect() })
    }

    /// The MTP head on `hidden` [B, T, H] (final-norm states) and the tokens that follow them
    /// [B, T]; appends to each row's MTP KV and returns logits [B, T, V].
    fn mtp_forward(&self, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<Array> {
        let mtp = self.mtp.as_ref().context("this model has no MTP weights (no mtp.safetensors)")?;
        if self.host_serves(true) {
            return self.host_mtp_forward(mtp, hidden, tokens, rows, true).map(|l| l.expect("the head was asked for"));
        }
        self.head(&self.mtp_states(mtp, hidden, tokens, rows)?)
    }

    /// The MTP module without its head: on the CPU the head (the tied 49,152-row embedding on
    /// cohort's kernel) runs eagerly even when no one reads its logits, and costs more than the
    /// module itself.
    fn mtp_history(&self, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<()> {
        let mtp = self.mtp.as_ref().context("this model has no MTP weights (no mtp.safetensors)")?;
        if self.host_serves(true) {
            return self.host_mtp_forward(mtp, hidden, tokens, rows, false).map(drop);
        }
        self.mtp_states(mtp, hidden, tokens, rows).map(drop)
    }
}

/// The `quantization` block of an `mtp_config.json` in `dir`, when there is one.
fn quantization_beside(dir: &Path) -> Result<Option<Quantization>> {
    let path = dir.join("mtp_config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = crate::model::formats::files::read_text(&path)?;
    let json: Value = serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    Ok(Some(parse_quantization(json.get("quantization")).with_context(|| format!("in {}", path.display()))?))
}

/// True when `dir/config.json` names the llama architecture.
pub fn is_llama_dir(dir: &Path) -> bool {
    crate::model::formats::files::read_text(&dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("model_type").and_then(Value::as_str).map(|s| s == "llama"))
        .unwrap_or(false)
}
