//! The Qwen3.5 / Qwen3.6 hybrid text model (mlx-lm's `qwen3_5` and `qwen3_5_moe`): Gated
//! DeltaNet and gated full-attention layers, dense or MoE MLPs, a final norm, the LM head, and
//! the depth-one MTP module that shares the embedding and the head.

use std::path::Path;

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};

use crate::model::config::{LayerKind, QuantSpec, Qwen35Config};
use crate::model::formats::weights::Weights;
pub use crate::model::forward::{ForwardOutput, LanguageModel, Logits};
use crate::model::layers::cache::{KvCache, LayerState, RowCache};
use crate::model::layers::gated_attention::Attention;
use crate::model::layers::gated_delta::GatedDeltaNet;
use crate::model::layers::linear::{Embedding, Linear};
use crate::model::layers::mlp::Mlp;
use crate::model::layers::moe::SparseMoe;
use crate::model::layers::norm::RmsNorm;
use crate::model::routes::Routes;

pub mod sanitize;

enum Mixer {
    GatedDelta(GatedDeltaNet),
    Full(Attention),
}

enum Ffn {
    Dense(Mlp),
    Moe(Box<SparseMoe>),
}

impl Ffn {
    fn load(
        w: &mut Weights,
        prefix: &str,
        cfg: &Qwen35Config,
        moe: bool,
        quant: &dyn Fn(&str) -> Option<QuantSpec>,
    ) -> Result<Self> {
        Ok(if moe {
            Ffn::Moe(Box::new(SparseMoe::load(w, prefix, cfg, quant)?))
        } else {
            Ffn::Dense(Mlp::load(w, prefix, cfg.hidden_size, cfg.intermediate_size, quant)?)
        })
    }

    fn forward(&self, x: &Array) -> Result<Array> {
        match self {
            Ffn::Dense(m) => m.forward(x),
            Ffn::Moe(m) => m.forward(x),
        }
    }

    fn nbytes(&self) -> usize {
        match self {
            Ffn::Dense(m) => m.nbytes(),
            Ffn::Moe(m) => m.nbytes(),
        }
    }
}

struct DecoderLayer {
    input_norm: RmsNorm,
    post_norm: RmsNorm,
    mixer: Mixer,
    ffn: Ffn,
}

/// The depth-one MTP module: fc(concat(norm(embed(token)), norm(hidden))) -> one full-attention
/// decoder layer with its own KV -> norm -> the shared head.
struct MtpModule {
    pre_fc_norm_embedding: RmsNorm,
    pre_fc_norm_hidden: RmsNorm,
    fc: Linear,
    layer: DecoderLayer,
    norm: RmsNorm,
}

pub struct Qwen35Model {
    pub cfg: Qwen35Config,
    embed: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    lm_head: Option<Linear>,
    mtp: Option<MtpModule>,
    /// Activation dtype (float32 on the CPU, bfloat16 on GPUs).
    pub dtype: Dtype,
    /// The routes in force when it was loaded.
    routes: Routes,
}

impl Qwen35Model {
    /// Load from a model directory (config.json + safetensors, optional mtp.safetensors).
    pub fn load(dir: &Path, dtype: Dtype) -> Result<Self> {
        let cfg = Qwen35Config::load(&dir.join("config.json"))?;
        let mut w = Weights::load_dir(dir)?;
        sanitize::sanitize(&mut w, cfg.tie_word_embeddings)?;
        sanitize::split_grouped_projections(&mut w, &cfg)?;
        if dtype == Dtype::Float32 {
            w.cast_floats(Dtype::Float32)?;
        }
        let model = Self::from_weights(cfg, &mut w, dtype).with_context(|| format!("loading {}", dir.display()))?;
        let left = w.leftover();
        if !left.is_empty() {
            tracing::warn!(count = left.len(), first = %left[0], "checkpoint tensors not used by the model");
        }
        Ok(model)
    }

    pub fn from_weights(cfg: Qwen35Config, w: &mut Weights, dtype: Dtype) -> Result<Self> {
        let quantization = cfg.quantization.clone();
        let quant = move |path: &str| quantization.for_module(path);
        let h = cfg.hidden_size;
        let embed = Embedding::load(w, "model.embed_tokens", cfg.vocab_size, h, quant("model.embed_tokens"))?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers as usize);
        for i in 0..cfg.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let mixer = match cfg.layer_kind(i) {
                LayerKind::GatedDelta => {
                    Mixer::GatedDelta(GatedDeltaNet::load(w, &format!("{p}.linear_attn"), &cfg, &quant)?)
                }
                LayerKind::Full => Mixer::Full(Attention::load(w, &format!("{p}.self_attn"), &cfg, &quant)?),
            };
            layers.push(DecoderLayer {
                input_norm: RmsNorm::load(w, &format!("{p}.input_layernorm.weight"), h, cfg.rms_norm_eps)?,
                post_norm: RmsNorm::load(w, &format!("{p}.post_attention_layernorm.weight"), h, cfg.rms_norm_eps)?,
                mixer,
                ffn: Ffn::load(w, &format!("{p}.mlp"), &cfg, cfg.is_moe_layer(i), &quant)?,
            });
        }
        let norm = RmsNorm::load(w, "model.norm.weight", h, cfg.rms_norm_eps)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(Linear::load(w, "lm_head", h, cfg.vocab_size, quant("lm_head"))?)
        };
        let mtp = if w.contains("mtp.fc.weight") { Some(Self::load_mtp(w, &cfg)?) } else { None };
        Ok(Self { cfg, embed, layers, norm, lm_head, mtp, dtype, routes: crate::model::routes::current() })
    }

    fn load_mtp(w: &mut Weights, cfg: &Qwen35Config) -> Result<MtpModule> {
        let h = cfg.hidden_size;
        let eps = cfg.rms_norm_eps;
        // MTP weights may be quantized differently from the body (MTPLX ships 4-bit g32): the
        // sidecar's mtp_config.json says how, else the stored tensors do.
        let mtp_quant = mtp_quantization(w.dir())?;
        let q = move |path: &str| mtp_quant.as_ref().and_then(|mq| mq.for_module(path));
        let layer = DecoderLayer {
            input_norm: RmsNorm::load(w, "mtp.layers.0.input_layernorm.weight", h, eps)?,
            post_norm: RmsNorm::load(w, "mtp.layers.0.post_attention_layernorm.weight", h, eps)?,
            mixer: Mixer::Full(Attention::load(w, "mtp.layers.0.self_attn", cfg, &q)?),
            ffn: Ffn::load(w, "mtp.layers.0.mlp", cfg, cfg.is_moe(), &q)?,
        };
        Ok(MtpModule {
            pre_fc_norm_embedding: RmsNorm::load(w, "mtp.pre_fc_norm_embedding.weight", h, eps)?,
            pre_fc_norm_hidden: RmsNorm::load(w, "mtp.pre_fc_norm_hidden.weight", h, eps)?,
            fc: Linear::load(w, "mtp.fc", 2 * h, h, q("mtp.fc"))?,
            layer,
            norm: RmsNorm::load(w, "mtp.norm.weight", h, eps)?,
        })
    }

    pub fn layer_kinds(&self) -> Vec<LayerKind> {
        (0..self.cfg.num_hidden_layers).map(|i| self.cfg.layer_kind(i)).collect()
    }

    /// Bytes of all parameters.
    pub fn nbytes(&self) -> usize {
        let mut n = self.embed.table.nbytes() + self.lm_head.as_ref().map(|l| l.nbytes()).unwrap_or(0);
        for l in &self.layers {
            n += l.nbytes();
        }
        if let Some(m) = &self.mtp {
            n += m.fc.nbytes() + m.layer.nbytes();
        }
        n
    }

    fn head(&self, x: &Array) -> Result<Array> {
        match &self.lm_head {
            Some(l) => l.forward(x),
            None => self.embed.as_linear(x),
        }
    }
}

impl LanguageModel for Qwen35Model {
    fn new_row(&self) -> RowCache {
        RowCache::new(&self.layer_kinds())
    }

    fn head_logits(&self, hidden: &Array) -> Result<Array> {
        self.head(hidden)
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
        let full = (0..self.cfg.num_hidden_layers)
            .filter(|&l| matches!(self.cfg.layer_kind(l), crate::model::config::LayerKind::Full))
            .count();
        let layers = full + usize::from(self.has_mtp());
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

    fn forward(
        &self,
        tokens: &Array,
        rows: &mut [&mut RowCache],
        logits: Logits,
        capture: bool,
    ) -> Result<ForwardOutput> {
        let b = tokens.shape()[0];
        if rows.len() as i32 != b {
            bail!("forward: {} rows of state for a batch of {b}", rows.len());
        }
        let t = tokens.shape()[1];
        let mut x = self.embed.forward(tokens, self.dtype)?;
        let mut captures = Vec::with_capacity(self.layers.len());
        // Each residual sum is normed by the norm that follows it (the next layer's input norm,
        // after the last layer the final one), so the two can run as one node.
        let input_norm = |li: usize| self.layers.get(li).map_or(&self.norm, |l| &l.input_norm);
        let mut normed = input_norm(0).forward(&x)?;
        let hand_over = crate::model::routes::current().hand_over_layers;
        for (li, layer) in self.layers.iter().enumerate() {
            if hand_over && li > 0 && li % crate::model::routes::HAND_OVER_LAYERS == 0 {
                // The layers built so far go to the device while the host builds the next ones.
                mlx_rs::transforms::async_eval([&x, &normed])?;
            }
            let (mixed, cap) = match &layer.mixer {
                Mixer::GatedDelta(gdn) => {
                    let mut states: Vec<_> = rows
                        .iter_mut()
                        .map(|r| match &mut r.layers[li] {
                            LayerState::GatedDelta(s) => Ok(s),
                            LayerState::Attention(_) => bail!("row state does not match layer {li}"),
                        })
                        .collect::<Result<_>>()?;
                    gdn.forward(&normed, &mut states, capture)?
                }
                Mixer::Full(attn) => {
                    let mut kvs: Vec<&mut KvCache> = rows
                        .iter_mut()
                        .map(|r| match &mut r.layers[li] {
                            LayerState::Attention(kv) => Ok(kv),
                            LayerState::GatedDelta(_) => bail!("row state does not match layer {li}"),
                        })
                        .collect::<Result<_>>()?;
                    (attn.forward(&normed, &mut kvs)?, None)
                }
            };
            captures.push(cap);
            let (h, post) = layer.post_norm.forward_after_add(&x, &mixed)?;
            (x, normed) = input_norm(li + 1).forward_after_add(&h, &layer.ffn.forward(&post)?)?;
        }
        for r in rows.iter_mut() {
            r.len += t;
        }
        let hidden = normed;
        let logits = match logits {
            Logits::All => Some(self.head(&hidden)?),
            Logits::Last => Some(self.head(&crate::model::ops::slice_axis(&hidden, 1, t - 1, t)?)?),
            Logits::None => None,
        };
        Ok(ForwardOutput { hidden, logits, captures })
    }

    fn mtp_forward(&self, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<Array> {
        self.head(&self.mtp_states(hidden, tokens, rows)?)
    }

    fn mtp_history(&self, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<()> {
        self.mtp_states(hidden, tokens, rows).map(drop)
    }
}

impl Qwen35Model {
    /// The MTP module up to its final norm (what the head reads); appends to each row's MTP
    /// history.
    fn mtp_states(&self, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<Array> {
        let mtp = self.mtp.as_ref().context("this model has no MTP weights")?;
        crate::model::routes::with_padded_float_rows(|| {
            let e = mtp.pre_fc_norm_embedding.forward(&self.embed.forward(tokens, self.dtype)?)?;
            let h = mtp.pre_fc_norm_hidden.forward(hidden)?;
            let x = mtp.fc.forward(&mlx_rs::ops::concatenate(&[e, h], -1)?)?;
            let normed = mtp.layer.input_norm.forward(&x)?;
            let Mixer::Full(attn) = &mtp.layer.mixer else { bail!("MTP layer must be full attention") };
            let mut kvs: Vec<&mut KvCache> = rows.iter_mut().map(|r| &mut r.mtp).collect();
            let (hh, post) = mtp.layer.post_norm.forward_after_add(&x, &attn.forward(&normed, &mut kvs)?)?;
            let (_, out) = mtp.norm.forward_after_add(&hh, &mtp.layer.ffn.forward(&post)?)?;
            Ok(out)
        })
    }
}

impl DecoderLayer {
    fn nbytes(&self) -> usize {
        let m = match &self.mixer {
            Mixer::GatedDelta(g) => g.nbytes(),
            Mixer::Full(a) => a.nbytes(),
        };
        m + self.ffn.nbytes()
    }
}

/// The quantization block of `mtp_config.json` beside a sidecar, when there is one.
fn mtp_quantization(dir: &Path) -> Result<Option<crate::model::config::Quantization>> {
    let path = dir.join("mtp_config.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = crate::model::formats::files::read_text(&path)?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    Ok(Some(
        crate::model::config::parse_quantization(json.get("quantization"))
            .with_context(|| format!("in {}", path.display()))?,
    ))
}
