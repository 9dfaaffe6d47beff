//! Writing and reading a head as an `mtp.safetensors` the engine loads (`LlamaModel::load_with_mtp`
//! infers each module's quantization from its tensor shapes, so no config file goes with it).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};

use super::params::{self, HeadDims, Params};

/// How the shipped file stores the head's linear layers (norms stay float32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreAs {
    F32,
    Bf16,
    /// 8-bit affine, group 64 (MLX's `quantize`).
    Q8,
    /// 4-bit affine, group 32.
    Q4,
}

/// Write `params` to `path` in the given storage; `meta` goes into the safetensors header.
pub fn save(
    params: &Params,
    dims: &HeadDims,
    store: StoreAs,
    meta: &HashMap<String, String>,
    path: &Path,
) -> Result<()> {
    params::check(params, dims, "saving head")?;
    let mut out: Vec<(String, Array)> = Vec::new();
    for (prefix, _, _) in dims.linears() {
        let name = format!("{prefix}.weight");
        let w = &params[name.as_str()];
        match store {
            StoreAs::F32 => out.push((name, w.as_dtype(Dtype::Float32)?)),
            StoreAs::Bf16 => out.push((name, w.as_dtype(Dtype::Bfloat16)?)),
            StoreAs::Q8 | StoreAs::Q4 => {
                let (bits, group) = if store == StoreAs::Q8 { (8, 64) } else { (4, 32) };
                let (q, s, b) = mlx_rs::ops::quantize(w, group, bits)?;
                out.push((name, q));
                out.push((format!("{prefix}.scales"), s));
                out.push((format!("{prefix}.biases"), b));
            }
        }
    }
    for n in dims.norms() {
        out.push((n.to_owned(), params[n].as_dtype(Dtype::Float32)?));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // Write beside the target and rename, so a crash never leaves a half-written head.
    let tmp = path.with_extension("partial.safetensors");
    Array::save_safetensors(out.iter().map(|(k, v)| (k.as_str(), v)), meta, &tmp)
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot move {} into place", tmp.display()))?;
    Ok(())
}

/// Read a head file (any storage) back as float32 parameters, checked against `dims`.
pub fn load(path: &Path, dims: &HeadDims) -> Result<Params> {
    crate::model::formats::weights::validate_safetensors(path)?;
    let mut raw = Array::load_safetensors(path).map_err(|e| anyhow::anyhow!("{}: cannot load: {e}", path.display()))?;
    let origin = path.display().to_string();
    let mut p = Params::new();
    for (prefix, input, output) in dims.linears() {
        let name = format!("{prefix}.weight");
        let w = raw.remove(&name).with_context(|| format!("{origin}: head tensor \"{name}\" is missing"))?;
        let dense = match (raw.remove(&format!("{prefix}.scales")), raw.remove(&format!("{prefix}.biases"))) {
            (Some(s), Some(b)) => {
                let packed = *w.shape().last().unwrap_or(&0);
                let groups = *s.shape().last().unwrap_or(&0);
                if w.shape().len() != 2
                    || w.shape()[0] != output
                    || groups <= 0
                    || input % groups != 0
                    || (packed * 32) % input != 0
                {
                    bail!(
                        "{origin}: head tensor \"{name}\" is quantized as {:?} with {groups} groups, which does not fit [{output}, {input}] (a head trained for another model?)",
                        w.shape()
                    );
                }
                let (bits, group) = (packed * 32 / input, input / groups);
                mlx_rs::ops::dequantize(&w, &s, &b, group, bits)?.as_dtype(Dtype::Float32)?
            }
            _ => w.as_dtype(Dtype::Float32)?,
        };
        p.insert(name.into(), dense);
    }
    for n in dims.norms() {
        if let Some(a) = raw.remove(n) {
            p.insert(n.into(), a.as_dtype(Dtype::Float32)?);
        }
    }
    if let Some(extra) = raw.keys().next() {
        bail!("{origin}: unexpected tensor \"{extra}\" (not part of the MTP head)");
    }
    params::check(&p, dims, &origin)?;
    mlx_rs::transforms::eval(params::arrays(&p))?;
    Ok(p)
}
