//! The `--model` / `--dtype` arguments shared by every command that loads a model.

use anyhow::Result;
use clap::Args;

use crate::engine::loader::{LoadSpec, Loaded};

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
    /// or kernel (cohort's CPU kernel on the quantized codes: every block of the Llama host path,
    /// blocks of up to 8 rows elsewhere, float32 for the rest).
    #[arg(long)]
    pub weights: Option<String>,
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
            scheduler: settings.scheduler(),
            numerics: settings.numerics,
            mode: settings.mode,
            serial: false,
            allow_inexact: crate::engine::probe::allow_inexact(),
        };
        (model, setup)
    }

    /// What these flags ask to load.
    pub fn spec(&self) -> LoadSpec {
        LoadSpec { model: self.model.clone(), dtype: self.dtype.clone(), weights: self.weights.clone() }
    }

    /// Load the model, its tokenizer and what the engine needs beside them.
    pub fn load(&self) -> Result<Loaded> {
        crate::engine::loader::load(&self.spec())
    }
}

impl ModelArgs {
    /// Start the engine on this model (loaded on the engine's own thread).
    pub fn start_engine(
        &self,
        setup: crate::engine::owner::EngineSetup,
    ) -> Result<crate::engine::handle::EngineHandle> {
        let spec = self.spec();
        crate::engine::handle::EngineHandle::start(move || crate::engine::loader::load(&spec), setup)
    }
}
