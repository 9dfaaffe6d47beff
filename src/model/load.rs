//! Finding and loading a model: a local directory, or a hub repo id already in the Hugging Face
//! cache (works offline); the family is chosen by `config.json`'s `model_type`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use mlx_rs::Dtype;

use super::forward::LanguageModel;
use super::qwen3_5::Qwen35Model;

/// Resolve `spec` to a model directory.
pub fn resolve(spec: &str) -> Result<PathBuf> {
    let path = Path::new(spec);
    if path.is_dir() {
        if !path.join("config.json").exists() {
            bail!("{} has no config.json: not a model directory", path.display());
        }
        return Ok(path.to_path_buf());
    }
    if path.exists() {
        bail!("{} is a file; give the model's directory", path.display());
    }
    if spec.split('/').count() == 2 && !spec.starts_with('.') && !spec.starts_with('/') {
        let cache = hf_hub::Cache::from_env();
        let repo = cache.model(spec.to_owned());
        if let Some(config) = repo.get("config.json") {
            return Ok(config.parent().context("cached config.json has no folder")?.to_path_buf());
        }
        bail!(
            "model \"{spec}\" is neither a local directory nor in the Hugging Face cache ({}); download it first (e.g. `huggingface-cli download {spec}`)",
            cache.path().display()
        );
    }
    bail!("model directory {} does not exist", path.display())
}

/// The model_type a directory declares.
pub fn model_type(dir: &Path) -> Result<String> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    Ok(json.get("model_type").and_then(|v| v.as_str()).unwrap_or("").to_owned())
}

/// The activation dtype for the device in use: float32 on the CPU (MLX's CPU bf16 and
/// quantized-bf16 paths are many times slower), bfloat16 on GPUs.
pub fn default_dtype() -> Dtype {
    match crate::engine::runtime::Backend::detect() {
        crate::engine::runtime::Backend::Cpu => Dtype::Float32,
        _ => Dtype::Bfloat16,
    }
}

pub fn parse_dtype(name: &str) -> Result<Dtype> {
    Ok(match name {
        "float32" | "f32" => Dtype::Float32,
        "bfloat16" | "bf16" => Dtype::Bfloat16,
        "float16" | "f16" => Dtype::Float16,
        other => bail!("unknown dtype \"{other}\" (float32, bfloat16, float16)"),
    })
}

/// Load the model in `dir` with activations in `dtype`.
pub fn load(dir: &Path, dtype: Dtype) -> Result<Box<dyn LanguageModel>> {
    match model_type(dir)?.as_str() {
        "qwen3_5" | "qwen3_5_moe" | "qwen3_next" => Ok(Box::new(Qwen35Model::load(dir, dtype)?)),
        "" => bail!("{}: config.json has no \"model_type\"", dir.display()),
        other => bail!("{}: unknown model_type \"{other}\" (supported: qwen3_5, qwen3_5_moe)", dir.display()),
    }
}
