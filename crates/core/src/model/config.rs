//! `config.json` as mlx-lm writes it for the Qwen3.5 / Qwen3.6 hybrid family.
//!
//! The rules follow mlx-lm 0.32.2 exactly, quirks included (see docs/architecture.md): the layer
//! kind comes only from `full_attention_interval`; RoPE's theta and rotated fraction come only from
//! `text_config.rope_parameters` (with mlx-lm's defaults when it is missing); MoE iff
//! `num_experts > 0`.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// How a layer rotates queries and keys (the arguments of MLX's fast RoPE).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeSpec {
    pub dims: i32,
    pub traditional: bool,
    pub base: f32,
}

/// Affine quantization of one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub struct QuantSpec {
    pub bits: i32,
    pub group_size: i32,
}

/// The checkpoint's quantization block: a default and per-module overrides (keyed by the module
/// path as stored, e.g. `language_model.model.layers.0.mlp.gate`; `None` = left unquantized).
#[derive(Debug, Clone, Default)]
pub struct Quantization {
    pub default: Option<QuantSpec>,
    pub overrides: HashMap<String, Option<QuantSpec>>,
}

impl Quantization {
    /// The spec for a module path, trying it with and without the `language_model.` prefix.
    pub fn for_module(&self, path: &str) -> Option<QuantSpec> {
        for key in [path.to_owned(), format!("language_model.{path}")] {
            if let Some(spec) = self.overrides.get(&key) {
                return *spec;
            }
        }
        self.default
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum LayerKind {
    /// Gated DeltaNet (the checkpoints' "linear_attention" layers).
    GatedDelta,
    /// Gated full attention.
    Full,
}

/// The text model's geometry.
#[derive(Debug, Clone)]
pub struct Qwen35Config {
    pub model_type: String,
    pub hidden_size: i32,
    pub num_hidden_layers: i32,
    pub num_attention_heads: i32,
    pub num_key_value_heads: i32,
    pub head_dim: i32,
    pub rms_norm_eps: f32,
    pub vocab_size: i32,
    pub tie_word_embeddings: bool,
    pub rope_theta: f32,
    pub partial_rotary_factor: f32,
    pub full_attention_interval: i32,
    pub linear_num_key_heads: i32,
    pub linear_key_head_dim: i32,
    pub linear_num_value_heads: i32,
    pub linear_value_head_dim: i32,
    pub linear_conv_kernel_dim: i32,
    pub num_experts: i32,
    pub num_experts_per_tok: i32,
    pub moe_intermediate_size: i32,
    pub shared_expert_intermediate_size: i32,
    pub intermediate_size: i32,
    pub norm_topk_prob: bool,
    /// qwen3_next: MoE on layers where (i + 1) % step == 0 and not in `mlp_only_layers`.
    pub decoder_sparse_step: i32,
    pub mlp_only_layers: Vec<i32>,
    pub max_position_embeddings: i32,
    pub eos_token_ids: Vec<u32>,
    pub quantization: Quantization,
}

impl Qwen35Config {
    pub fn layer_kind(&self, layer: i32) -> LayerKind {
        if (layer + 1) % self.full_attention_interval == 0 { LayerKind::Full } else { LayerKind::GatedDelta }
    }

    pub fn is_moe(&self) -> bool {
        self.num_experts > 0
    }

    /// Whether layer `i`'s MLP is the sparse MoE block. mlx-lm's qwen3_5 ignores
    /// decoder_sparse_step and mlp_only_layers; its qwen3_next honours them.
    pub fn is_moe_layer(&self, i: i32) -> bool {
        if !self.is_moe() {
            return false;
        }
        if self.model_type != "qwen3_next" {
            return true;
        }
        !self.mlp_only_layers.contains(&i) && (i + 1) % self.decoder_sparse_step.max(1) == 0
    }

    /// Rotated dimensions per attention head.
    pub fn rotary_dims(&self) -> i32 {
        (self.head_dim as f32 * self.partial_rotary_factor) as i32
    }

    /// Channels of the GDN causal convolution (q, k and v).
    pub fn conv_dim(&self) -> i32 {
        2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = super::formats::files::read_text(path)?;
        let root: Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
        Self::from_json(&root).with_context(|| format!("in {}", path.display()))
    }

    pub fn from_json(root: &Value) -> Result<Self> {
        let model_type = root.get("model_type").and_then(Value::as_str).unwrap_or("").to_owned();
        match model_type.as_str() {
            "qwen3_5" | "qwen3_5_moe" | "qwen3_next" => {}
            "" => bail!("config.json has no \"model_type\""),
            "llama" => bail!("model_type \"llama\" is not a Qwen3.5-family model (qwen3_5, qwen3_5_moe, qwen3_next)"),
            other => bail!("unknown model_type \"{other}\" (the Qwen3.5 family: qwen3_5, qwen3_5_moe, qwen3_next)"),
        }
        // mlx-lm: a nested text_config is the text model; a flat config is its own text config.
        let text = root.get("text_config").unwrap_or(root);
        let get = |k: &str| text.get(k);
        let int =
            |k: &str| -> Result<i32> { count(k, get(k))?.with_context(|| format!("config key \"{k}\" is missing")) };
        let int_or = |k: &str, d: i32| -> Result<i32> { Ok(count(k, get(k))?.unwrap_or(d)) };
        let float_or = |k: &str, d: f32| get(k).and_then(Value::as_f64).map(|v| v as f32).unwrap_or(d);
        let bool_or = |k: &str, d: bool| get(k).and_then(Value::as_bool).unwrap_or(d);

        // qwen3_5: RoPE only from rope_parameters (mlx-lm's quirk); qwen3_next: top-level keys.
        let next = model_type == "qwen3_next";
        let rope = if next { Some(text) } else { text.get("rope_parameters") };
        let rope_f =
            |k: &str, d: f32| rope.and_then(|r| r.get(k)).and_then(Value::as_f64).map(|v| v as f32).unwrap_or(d);
        let hidden_size = int("hidden_size")?;
        let num_attention_heads = int("num_attention_heads")?;
        let cfg = Self {
            hidden_size,
            num_hidden_layers: int("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads: int("num_key_value_heads")?,
            head_dim: int_or("head_dim", if num_attention_heads > 0 { hidden_size / num_attention_heads } else { 0 })?,
            rms_norm_eps: float_or("rms_norm_eps", 1e-6),
            vocab_size: int("vocab_size")?,
            tie_word_embeddings: bool_or(
                "tie_word_embeddings",
                root.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false),
            ),
            rope_theta: rope_f("rope_theta", 100_000.0),
            partial_rotary_factor: rope_f("partial_rotary_factor", 0.25),
            full_attention_interval: int_or("full_attention_interval", 4)?,
            linear_num_key_heads: int("linear_num_key_heads")?,
            linear_key_head_dim: int("linear_key_head_dim")?,
            linear_num_value_heads: int("linear_num_value_heads")?,
            linear_value_head_dim: int("linear_value_head_dim")?,
            linear_conv_kernel_dim: int_or("linear_conv_kernel_dim", 4)?,
            num_experts: int_or("num_experts", 0)?,
            num_experts_per_tok: int_or("num_experts_per_tok", 0)?,
            moe_intermediate_size: int_or("moe_intermediate_size", 0)?,
            shared_expert_intermediate_size: int_or("shared_expert_intermediate_size", 0)?,
            intermediate_size: int_or("intermediate_size", 0)?,
            norm_topk_prob: bool_or("norm_topk_prob", !next),
            decoder_sparse_step: int_or("decoder_sparse_step", 1)?,
            mlp_only_layers: get("mlp_only_layers")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_i64).map(|v| v as i32).collect())
                .unwrap_or_default(),
            max_position_embeddings: int_or("max_position_embeddings", 262_144)?,
            eos_token_ids: eos_ids(root.get("eos_token_id"))?,
            quantization: parse_quantization(root.get("quantization"))?,
            model_type,
        };
        cfg.validate()?;
        cfg.check_layer_types(get("layer_types"))?;
        Ok(cfg)
    }

    /// `layer_types`, where the config lists them, must be the layers this reader builds from
    /// `full_attention_interval`: a list of another length or order would be served silently as
    /// the interval says.
    fn check_layer_types(&self, listed: Option<&Value>) -> Result<()> {
        let Some(listed) = listed.filter(|v| !v.is_null()) else { return Ok(()) };
        let names: Vec<&str> =
            listed.as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        let want: Vec<&str> = (0..self.num_hidden_layers)
            .map(|i| match self.layer_kind(i) {
                LayerKind::Full => "full_attention",
                LayerKind::GatedDelta => "linear_attention",
            })
            .collect();
        if names != want {
            bail!(
                "config key \"layer_types\" lists {listed} but num_hidden_layers ({}) and full_attention_interval ({}) give {want:?}",
                self.num_hidden_layers,
                self.full_attention_interval
            );
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        check_ranges(self.num_hidden_layers, self.rms_norm_eps, self.rope_theta, &self.eos_token_ids, self.vocab_size)?;
        if !(self.partial_rotary_factor > 0.0 && self.partial_rotary_factor <= 1.0) {
            bail!("config key \"partial_rotary_factor\" must be in (0, 1] (got {})", self.partial_rotary_factor);
        }
        let positive = [
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("vocab_size", self.vocab_size),
            ("full_attention_interval", self.full_attention_interval),
            ("linear_num_key_heads", self.linear_num_key_heads),
            ("linear_num_value_heads", self.linear_num_value_heads),
            ("linear_conv_kernel_dim", self.linear_conv_kernel_dim),
        ];
        for (k, v) in positive {
            if v <= 0 {
                bail!("config key \"{k}\" must be positive (got {v})");
            }
        }
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            bail!(
                "num_attention_heads ({}) is not a multiple of num_key_value_heads ({})",
                self.num_attention_heads,
                self.num_key_value_heads
            );
        }
        if self.linear_num_value_heads % self.linear_num_key_heads != 0 {
            bail!("linear_num_value_heads is not a multiple of linear_num_key_heads");
        }
        if self.is_moe() && (self.num_experts_per_tok <= 0 || self.num_experts_per_tok > self.num_experts) {
            bail!("num_experts_per_tok ({}) must be in 1..={}", self.num_experts_per_tok, self.num_experts);
        }
        if (0..self.num_hidden_layers).any(|i| !self.is_moe_layer(i)) && self.intermediate_size <= 0 {
            bail!("a dense model needs a positive \"intermediate_size\"");
        }
        Ok(())
    }
}

/// Layers a config may ask for: more would size a model's state (and abort on its allocation)
/// before any weight is read to refute it.
pub const MAX_LAYERS: i32 = 1024;

/// An integer a config gives under `key`, None where absent: refused where it is not an integer
/// or does not fit a 32-bit count (a `vocab_size` of 2^40 wrapped to 0).
pub fn count(key: &str, v: Option<&Value>) -> Result<Option<i32>> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(None) };
    let n = v.as_i64().with_context(|| format!("config key \"{key}\" is {v}: not an integer"))?;
    let n = i32::try_from(n).map_err(|_| anyhow::anyhow!("config key \"{key}\" is {n}: out of range"))?;
    Ok(Some(n))
}

/// The ranges every family's config shares: a layer count within [`MAX_LAYERS`], a norm epsilon
/// and a RoPE base that are positive numbers, end-of-sequence ids inside the vocabulary.
pub fn check_ranges(layers: i32, rms_norm_eps: f32, rope_theta: f32, eos: &[u32], vocab: i32) -> Result<()> {
    if layers > MAX_LAYERS {
        bail!("config key \"num_hidden_layers\" is {layers}: more than the {MAX_LAYERS} layers a model may have");
    }
    for (key, v) in [("rms_norm_eps", rms_norm_eps), ("rope_theta", rope_theta)] {
        if !(v.is_finite() && v > 0.0) {
            bail!("config key \"{key}\" must be a positive number (got {v})");
        }
    }
    if let Some(&id) = eos.iter().find(|&&id| i64::from(id) >= i64::from(vocab)) {
        bail!("config key \"eos_token_id\" holds {id}, outside the vocabulary of {vocab}");
    }
    Ok(())
}

/// `eos_token_id`: a token id or a list of them (absent: none); anything else is refused rather
/// than dropped (a string "2", a negative id).
pub fn eos_ids(v: Option<&Value>) -> Result<Vec<u32>> {
    let id = |x: &Value| -> Result<u32> {
        x.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .with_context(|| format!("config key \"eos_token_id\" holds {x}: not a token id"))
    };
    match v {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(id).collect(),
        Some(x) => Ok(vec![id(x)?]),
    }
}

fn spec_of(v: &Value, what: &str) -> Result<QuantSpec> {
    let bits =
        v.get("bits").and_then(Value::as_i64).with_context(|| format!("quantization {what}: missing \"bits\""))? as i32;
    let group_size = v
        .get("group_size")
        .and_then(Value::as_i64)
        .with_context(|| format!("quantization {what}: missing \"group_size\""))? as i32;
    if let Some(mode) = v.get("mode").and_then(Value::as_str)
        && mode != "affine"
    {
        bail!("quantization {what}: mode \"{mode}\" is not supported (only affine)");
    }
    if ![2, 3, 4, 5, 6, 8].contains(&bits) {
        bail!("quantization {what}: {bits} bits is not supported");
    }
    if ![32, 64, 128].contains(&group_size) {
        bail!("quantization {what}: group size {group_size} is not supported (32, 64 or 128)");
    }
    Ok(QuantSpec { bits, group_size })
}

/// Parse mlx-lm's `quantization` block: global bits/group_size/mode plus per-module entries that
/// are either a spec object or `false` (kept in full precision).
pub fn parse_quantization(v: Option<&Value>) -> Result<Quantization> {
    let Some(Value::Object(map)) = v else { return Ok(Quantization::default()) };
    let default = if map.contains_key("bits") { Some(spec_of(v.unwrap(), "(global)")?) } else { None };
    let mut overrides = HashMap::new();
    for (k, val) in map {
        match val {
            Value::Object(_) => {
                overrides.insert(k.clone(), Some(spec_of(val, k)?));
            }
            Value::Bool(false) => {
                overrides.insert(k.clone(), None);
            }
            _ => {}
        }
    }
    Ok(Quantization { default, overrides })
}
