//! The `--model` / `--dtype` arguments shared by every command that loads a model.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::model::forward::LanguageModel;
use crate::model::text::tokenizer::TextTokenizer;

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model directory (config.json + safetensors) or a hub repo id in the local HF cache
    /// (default: the imported SmolLM2-135M-Instruct).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Activation dtype (default: float32 on the CPU, bfloat16 on GPUs).
    #[arg(long)]
    pub dtype: Option<String>,
    /// Weights: auto (on the CPU, when float32 fits in a quarter of memory: `kernel` where the
    /// CPU has AVX2 and FMA, else `dequantize`), quantized, dequantize (float32 products only),
    /// or kernel (cohort's CPU kernel on the quantized codes for decode-sized blocks, float32 for
    /// prefill).
    #[arg(long)]
    pub weights: Option<String>,
}

pub struct LoadedModel {
    pub dir: PathBuf,
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: TextTokenizer,
    pub policy: crate::model::layers::linear::WeightPolicy,
}

impl ModelArgs {
    /// The model and the engine a profile's settings ask for (the TUI and the one-shot prompt
    /// both start their engine from these).
    pub fn from_settings(settings: &crate::config::profile::Settings) -> (Self, crate::engine::owner::EngineSetup) {
        let model = ModelArgs {
            model: settings.model.clone(),
            dtype: settings.dtype.clone(),
            weights: settings.weights.clone(),
        };
        let setup = crate::engine::owner::EngineSetup {
            scheduler: settings.preset.config(),
            numerics: settings.numerics,
            mode: settings.mode,
            serial: false,
            allow_inexact: crate::engine::probe::allow_inexact(),
        };
        (model, setup)
    }

    pub fn load(&self) -> Result<LoadedModel> {
        let dir = match &self.model {
            Some(m) => crate::model::load::resolve(m)?,
            None => crate::model::load::default_model()?,
        };
        let dtype = match &self.dtype {
            Some(d) => crate::model::load::parse_dtype(d)?,
            None => crate::model::load::default_dtype(),
        };
        let policy = match self.weights.as_deref().map(crate::model::load::parse_weight_policy).transpose()?.flatten() {
            Some(p) => p,
            None => crate::model::load::auto_weight_policy(&dir),
        };
        tracing::info!(?policy, "weight policy");
        let model = crate::model::load::load_with_policy(&dir, dtype, policy)?;
        let tokenizer = TextTokenizer::load(&dir)?;
        let vocab = model.vocab_size() as usize;
        if tokenizer.vocab_size() > vocab {
            anyhow::bail!(
                "{}: the tokenizer has {} tokens but the model's vocabulary is {vocab}: they do not belong together",
                dir.display(),
                tokenizer.vocab_size()
            );
        }
        Ok(LoadedModel { dir, model, tokenizer, policy })
    }
}

impl ModelArgs {
    /// Start the engine on this model (loaded on the engine's own thread).
    pub fn start_engine(
        &self,
        setup: crate::engine::owner::EngineSetup,
    ) -> Result<crate::engine::handle::EngineHandle> {
        let args = self.clone();
        crate::engine::handle::EngineHandle::start(
            move || {
                let loaded = args.load()?;
                let family = family_of(&loaded.dir);
                Ok(crate::engine::owner::Loaded {
                    model: loaded.model,
                    tokenizer: loaded.tokenizer,
                    family,
                    dir: loaded.dir,
                    weights: loaded.policy,
                })
            },
            setup,
        )
    }
}

/// A short family name for route ids.
pub fn family_of(dir: &std::path::Path) -> String {
    match crate::model::load::model_type(dir).unwrap_or_default().as_str() {
        "qwen3_5" | "qwen3_5_moe" => "qwen35".into(),
        "" => "model".into(),
        other => other.replace('_', ""),
    }
}
