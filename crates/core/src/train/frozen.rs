//! The frozen, shared parts of the target the head reads: the token embedding and the LM head
//! (the same table when tied), dense float32, plus the target's top layer for initialisation.
//! They are read from the checkpoint through the same `Linear::load` path the model uses, with
//! the dequantize policy, so the head trains against exactly the numbers inference multiplies.

use std::path::Path;

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use super::params::{self, HeadDims, TargetLayer};
use crate::model::families::llama::LlamaConfig;
use crate::model::formats::weights::Weights;
use crate::model::layers::linear::Linear;
use crate::model::routes::WeightPolicy;
use crate::model::routes::{self, Routes};

pub struct Frozen {
    /// [vocab, hidden] float32.
    pub embed: Array,
    /// [vocab, hidden] float32 when the head is untied.
    pub lm_head: Option<Array>,
}

impl Frozen {
    /// The matrix logits are computed with (`x W^T`).
    pub fn head_weight(&self) -> &Array {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

/// Read the embedding, LM head and the top decoder layer of the Llama checkpoint in `dir`.
pub fn load(dir: &Path) -> Result<(LlamaConfig, Frozen, TargetLayer)> {
    let cfg = LlamaConfig::load(&dir.join("config.json"))?;
    let dims = HeadDims::from_llama(&cfg);
    let _dequantized = routes::enter(Routes { weights: WeightPolicy::Dequantize, ..routes::current() });
    let mut w = Weights::load_dir(dir)?;
    w.cast_floats(Dtype::Float32)?;
    let q = |p: &str| cfg.quantization.for_module(p);
    let dense = |w: &mut Weights, prefix: &str, i: i32, o: i32| -> Result<Array> {
        Ok(Linear::load(w, prefix, i, o, q(prefix))?.dense_weight()?.as_dtype(Dtype::Float32)?)
    };
    let (h, v) = (dims.hidden, dims.vocab);
    let embed = dense(&mut w, "model.embed_tokens", h, v)?;
    let lm_head = if cfg.tie_word_embeddings || !w.contains("lm_head.weight") {
        None
    } else {
        Some(dense(&mut w, "lm_head", h, v)?)
    };
    let top = format!("model.layers.{}", cfg.num_hidden_layers - 1);
    let mut tensors = Vec::new();
    for (prefix, i, o) in dims.linears() {
        if prefix == params::FC {
            continue;
        }
        let local = prefix.trim_start_matches("mtp.layers.0.");
        tensors.push((format!("{prefix}.weight"), dense(&mut w, &format!("{top}.{local}"), i, o)?));
    }
    for (name, local) in [(params::INPUT_NORM, "input_layernorm"), (params::POST_NORM, "post_attention_layernorm")] {
        tensors.push((name.to_owned(), w.take_shaped(&format!("{top}.{local}.weight"), &[h])?));
    }
    tensors.push((params::FINAL_NORM.to_owned(), w.take_shaped("model.norm.weight", &[h])?));
    let mut all: Vec<&Array> = vec![&embed];
    all.extend(lm_head.iter());
    all.extend(tensors.iter().map(|(_, a)| a));
    mlx_rs::transforms::eval(all)?;
    Ok((cfg, Frozen { embed, lm_head }, TargetLayer { tensors }))
}
