//! Reading a checkpoint's tensors: single or sharded safetensors (`model.safetensors.index.json`),
//! plus an `mtp.safetensors` sidecar, with errors that name the file and the tensor.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};

/// Every tensor of a checkpoint by canonical name, with the file each came from.
pub struct Weights {
    tensors: HashMap<String, Array>,
    origin: HashMap<String, PathBuf>,
    dir: PathBuf,
}

/// The shard files of a model directory, in a stable order.
pub fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = super::files::read_text(&index)?;
        let json: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", index.display()))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .with_context(|| format!("{} has no \"weight_map\" object", index.display()))?;
        let mut files: Vec<PathBuf> = map.values().filter_map(|v| v.as_str()).map(|f| dir.join(f)).collect();
        files.sort();
        files.dedup();
        for f in &files {
            if !f.exists() {
                bail!("{} names shard {}, which is missing", index.display(), f.display());
            }
        }
        return Ok(files);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read model directory {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("model") && name.ends_with(".safetensors")
        })
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no model*.safetensors in {}", dir.display());
    }
    Ok(files)
}

/// Check a safetensors header before MLX reads it, so a truncated or corrupt file gets an error
/// naming the file rather than a generic load failure.
pub fn validate_safetensors(path: &Path) -> Result<BTreeMap<String, (String, Vec<usize>)>> {
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let file_len = file.metadata()?.len();
    let mut len_bytes = [0u8; 8];
    file.read_exact(&mut len_bytes).map_err(|_| {
        anyhow::anyhow!("{}: truncated safetensors file (shorter than its 8-byte header length)", path.display())
    })?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len == 0 || header_len > 100 << 20 || header_len + 8 > file_len {
        bail!(
            "{}: corrupt safetensors header (declares {header_len} header bytes in a {file_len}-byte file)",
            path.display()
        );
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header)?;
    let json: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| anyhow::anyhow!("{}: corrupt safetensors header (not JSON: {e})", path.display()))?;
    let entries =
        json.as_object().with_context(|| format!("{}: corrupt safetensors header (not an object)", path.display()))?;
    let data_len = file_len - 8 - header_len;
    let mut out = BTreeMap::new();
    for (name, entry) in entries {
        if name == "__metadata__" {
            continue;
        }
        let dtype = entry.get("dtype").and_then(|d| d.as_str()).unwrap_or("?").to_owned();
        let shape: Vec<usize> = entry
            .get("shape")
            .and_then(|s| s.as_array())
            .map(|s| s.iter().filter_map(|d| d.as_u64()).map(|d| d as usize).collect())
            .unwrap_or_default();
        let offsets: Vec<u64> = entry
            .get("data_offsets")
            .and_then(|o| o.as_array())
            .map(|o| o.iter().filter_map(|d| d.as_u64()).collect())
            .unwrap_or_default();
        if offsets.len() != 2 || offsets[0] > offsets[1] || offsets[1] > data_len {
            bail!(
                "{}: tensor \"{name}\" lies outside the file (truncated or corrupt: offsets {offsets:?}, {data_len} data bytes)",
                path.display()
            );
        }
        let Some(width) = dtype_bytes(&dtype) else {
            bail!("{}: tensor \"{name}\" has unsupported dtype \"{dtype}\"", path.display());
        };
        let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64));
        if elements.and_then(|n| n.checked_mul(width)) != Some(offsets[1] - offsets[0]) {
            bail!(
                "{}: tensor \"{name}\" declares {dtype} {shape:?} but holds {} bytes (corrupt header)",
                path.display(),
                offsets[1] - offsets[0]
            );
        }
        out.insert(name.clone(), (dtype, shape));
    }
    Ok(out)
}

/// Bytes per element of a safetensors dtype MLX can load.
/// Refuse a file whose floating tensors hold NaN or infinity (they would load and decode
/// nonsense). One reduction per tensor, evaluated together: a fraction of the load's own cost.
fn check_finite(tensors: &HashMap<String, Array>, path: &Path) -> Result<()> {
    let mut names = Vec::new();
    let mut checks = Vec::new();
    for (name, a) in tensors {
        if matches!(a.dtype(), Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16) {
            checks.push(a.is_finite()?.all(None)?);
            names.push(name);
        }
    }
    mlx_rs::transforms::eval(checks.iter())?;
    let mut bad: Vec<&String> = names
        .into_iter()
        .zip(&checks)
        .filter(|(_, c)| !c.try_item_exact::<bool>().unwrap_or(false))
        .map(|(n, _)| n)
        .collect();
    bad.sort();
    if let Some(first) = bad.first() {
        let more = if bad.len() > 1 { format!(" (and {} more tensors)", bad.len() - 1) } else { String::new() };
        bail!("{}: tensor \"{first}\" holds values that are not finite (NaN or infinity){more}", path.display());
    }
    Ok(())
}

fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" => 1,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "F32" | "I32" | "U32" => 4,
        "F64" | "I64" | "U64" => 8,
        _ => return None,
    })
}

/// mlx-lm's canonical key: without the `language_model.` wrapper, with HF's
/// `model.language_model.` spelled `model.`.
pub fn canonical_key(key: &str) -> Option<String> {
    if key.starts_with("vision_tower") || key.starts_with("model.visual") {
        return None;
    }
    let key = key.strip_prefix("language_model.").unwrap_or(key);
    Some(match key.strip_prefix("model.language_model.") {
        Some(rest) => format!("model.{rest}"),
        None => key.to_owned(),
    })
}

impl Weights {
    /// Tensors made in memory (synthetic models); `label` stands in for a folder in errors.
    pub fn from_tensors(tensors: HashMap<String, Array>, label: &str) -> Self {
        Weights { tensors, origin: HashMap::new(), dir: PathBuf::from(label) }
    }

    /// Load every shard of `dir`, and `mtp.safetensors` beside them when present.
    pub fn load_dir(dir: &Path) -> Result<Self> {
        let mut files = shard_files(dir)?;
        let sidecar = dir.join("mtp.safetensors");
        if sidecar.exists() {
            files.push(sidecar);
        }
        let mut w = Weights { tensors: HashMap::new(), origin: HashMap::new(), dir: dir.to_path_buf() };
        for f in &files {
            w.add_file(f)?;
        }
        Ok(w)
    }

    /// Add one safetensors file's tensors (later files do not silently replace earlier ones).
    pub fn add_file(&mut self, path: &Path) -> Result<()> {
        validate_safetensors(path)?;
        let loaded = Array::load_safetensors(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot load tensors: {e}", path.display()))?;
        check_finite(&loaded, path)?;
        for (key, array) in loaded {
            let Some(name) = canonical_key(&key) else { continue };
            if let Some(prev) = self.origin.get(&name) {
                bail!("tensor \"{name}\" appears in both {} and {}", prev.display(), path.display());
            }
            self.origin.insert(name.clone(), path.to_path_buf());
            self.tensors.insert(name, array);
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.tensors.keys()
    }

    pub fn get(&self, name: &str) -> Option<&Array> {
        self.tensors.get(name)
    }

    pub fn insert(&mut self, name: String, array: Array) {
        self.tensors.insert(name, array);
    }

    /// Remove and return a tensor; a missing one is an error naming it and the model folder.
    pub fn take(&mut self, name: &str) -> Result<Array> {
        self.tensors
            .remove(name)
            .with_context(|| format!("tensor \"{name}\" is missing from the checkpoint in {}", self.dir.display()))
    }

    /// Take a tensor and check its shape.
    pub fn take_shaped(&mut self, name: &str, shape: &[i32]) -> Result<Array> {
        let origin = self.origin_of(name);
        let a = self.take(name)?;
        if a.shape() != shape {
            bail!("tensor \"{name}\" in {origin} has shape {:?}, expected {shape:?}", a.shape());
        }
        Ok(a)
    }

    pub fn origin_of(&self, name: &str) -> String {
        self.origin.get(name).map(|p| p.display().to_string()).unwrap_or_else(|| self.dir.display().to_string())
    }

    /// Names not consumed by the model (reported so a wrong checkpoint is noticed).
    pub fn leftover(&self) -> Vec<String> {
        let mut v: Vec<String> = self.tensors.keys().cloned().collect();
        v.sort();
        v
    }

    /// Cast every floating tensor to `dtype` except packed quantized weights (uint32) and those
    /// `keep` names: the CPU runs float32 activations, and mixed dtypes would promote unpredictably.
    pub fn cast_floats(&mut self, dtype: Dtype) -> Result<()> {
        for a in self.tensors.values_mut() {
            if matches!(a.dtype(), Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16) && a.dtype() != dtype {
                *a = a.as_dtype(dtype)?;
            }
        }
        Ok(())
    }
}
