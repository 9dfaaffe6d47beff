//! Loading what the engine serves: the model folder a `--model` names (or the imported default),
//! the activation dtype and weight policy (given, or the backend's and machine's own), the model
//! under the routes in force with that policy, and its tokenizer, checked to belong together.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::model::forward::LanguageModel;
use crate::model::routes::WeightPolicy;
use crate::model::text::tokenizer::TextTokenizer;

/// A loaded model with what the engine needs beside it.
pub struct Loaded {
    pub model: Box<dyn LanguageModel>,
    pub tokenizer: TextTokenizer,
    /// Short family name for route ids (e.g. "qwen35").
    pub family: String,
    pub dir: PathBuf,
}

impl Loaded {
    /// What loading did with quantized weights.
    pub fn weights(&self) -> WeightPolicy {
        self.model.routes().weights
    }
}

/// What to load, as a command's flags give it (`None`: the default).
#[derive(Debug, Clone, Default)]
pub struct LoadSpec {
    /// A model folder or a hub id (default: the imported default model).
    pub model: Option<String>,
    /// float32, bfloat16 or float16 (default: the backend's).
    pub dtype: Option<String>,
    /// auto, quantized, dequantize or kernel (default: auto).
    pub weights: Option<String>,
}

/// Load what `spec` names.
pub fn load(spec: &LoadSpec) -> Result<Loaded> {
    let dir = match &spec.model {
        Some(m) => crate::model::load::resolve(m)?,
        None => crate::model::load::default_model()?,
    };
    let dtype = match &spec.dtype {
        Some(d) => crate::model::load::parse_dtype(d)?,
        None => crate::model::load::default_dtype(),
    };
    let policy = match spec.weights.as_deref().map(crate::model::load::parse_weight_policy).transpose()?.flatten() {
        Some(p) => p,
        None => crate::model::load::auto_weight_policy(&dir),
    };
    tracing::info!(?policy, "weight policy");
    let model = crate::model::load::load_with_policy(&dir, dtype, policy)?;
    let tokenizer = TextTokenizer::load(&dir)?;
    let vocab = model.vocab_size() as usize;
    if tokenizer.vocab_size() > vocab {
        bail!(
            "{}: the tokenizer has {} tokens but the model's vocabulary is {vocab}: they do not belong together",
            dir.display(),
            tokenizer.vocab_size()
        );
    }
    Ok(Loaded { model, tokenizer, family: family_of(&dir), dir })
}

/// A short family name for route ids.
pub fn family_of(dir: &Path) -> String {
    match crate::model::load::model_type(dir).unwrap_or_default().as_str() {
        "qwen3_5" | "qwen3_5_moe" => "qwen35".into(),
        "" => "model".into(),
        other => other.replace('_', ""),
    }
}
