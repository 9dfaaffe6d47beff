//! The `--model` / `--dtype` arguments shared by every command that loads a model.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::model::forward::LanguageModel;
use crate::model::tokenizer::TextTokenizer;

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model directory (config.json + safetensors) or a hub repo id in the local HF cache.
    #[arg(long, short = 'm')]
    pub model: String,
    /// Activation dtype (default: float32 on the CPU, bfloat16 on GPUs).
    #[arg(long)]
    pub dtype: Option<String>,
}

pub struct LoadedModel {
    pub dir: PathBuf,
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: TextTokenizer,
}

impl ModelArgs {
    pub fn load(&self) -> Result<LoadedModel> {
        let dir = crate::model::load::resolve(&self.model)?;
        let dtype = match &self.dtype {
            Some(d) => crate::model::load::parse_dtype(d)?,
            None => crate::model::load::default_dtype(),
        };
        let model = crate::model::load::load(&dir, dtype)?;
        let tokenizer = TextTokenizer::load(&dir)?;
        let vocab = model.vocab_size() as usize;
        if tokenizer.vocab_size() > vocab {
            anyhow::bail!(
                "{}: the tokenizer has {} tokens but the model's vocabulary is {vocab}: they do not belong together",
                dir.display(),
                tokenizer.vocab_size()
            );
        }
        Ok(LoadedModel { dir, model, tokenizer })
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
