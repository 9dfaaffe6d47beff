//! `cohort import-gguf`: a GGUF file (Llama family, Q4_0 / Q4_1 / Q8_0 / F16 / F32) to an
//! MLX-format checkpoint that cohort and mlx-lm both load.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use crate::platform::paths::Paths;

#[derive(Args)]
pub struct ImportArgs {
    /// The .gguf file.
    file: PathBuf,
    /// Output directory (default: <data dir>/models/<file stem>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// An MTP head (mtp.safetensors) to install beside the imported model.
    #[arg(long)]
    mtp: Option<PathBuf>,
    /// Replace a model already in the output directory: its model files (weights, MTP head,
    /// config, tokenizer) are removed first, so none is left beside the new one.
    #[arg(long)]
    force: bool,
}

pub fn run(args: ImportArgs) -> Result<()> {
    // A head that is not one would be installed and then break a model that loads: checked first.
    if let Some(mtp) = &args.mtp {
        check_mtp_head(mtp)?;
    }
    let out = match args.out {
        Some(o) => o,
        None => {
            let stem = args.file.file_stem().and_then(|s| s.to_str()).context("the GGUF file name has no stem")?;
            let name = stem.split('.').next().unwrap_or(stem);
            if name.is_empty() {
                anyhow::bail!("{}: the file name gives no model name; pass --out DIR", args.file.display());
            }
            Paths::resolve()?.data_dir.join("models").join(name)
        }
    };
    let held = model_files(&out);
    if !held.is_empty() {
        let names: Vec<String> =
            held.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
        if !args.force {
            anyhow::bail!(
                "{} already holds a model ({}): pass --force to replace it (its model files, an MTP head among them, are removed first)",
                out.display(),
                names.join(", ")
            );
        }
        for path in &held {
            std::fs::remove_file(path).with_context(|| format!("cannot remove {}", path.display()))?;
        }
        eprintln!("replacing the model in {} (removed {})", out.display(), names.join(", "));
    }
    std::fs::create_dir_all(&out).with_context(|| format!("cannot create {}", out.display()))?;
    eprintln!("importing {} into {} ...", args.file.display(), out.display());
    let report = crate::model::formats::gguf_import::import_gguf(&args.file, &out)?;
    println!(
        "imported {} ({} tensors, {:.1} M parameters, {:.1} MiB) into {}",
        report.architecture,
        report.tensors_written,
        report.parameters as f64 / 1e6,
        report.safetensors_bytes as f64 / (1 << 20) as f64,
        out.display()
    );
    for note in &report.notes {
        println!("note: {note}");
    }
    if let Some(mtp) = args.mtp {
        std::fs::copy(&mtp, out.join("mtp.safetensors"))
            .with_context(|| format!("cannot copy {} into {}", mtp.display(), out.display()))?;
        println!("installed MTP head {}", mtp.display());
    }
    Ok(())
}

/// The files of a model in `dir` (none where it does not exist): weights and their index, the MTP
/// head, the config and the tokenizer's files.
fn model_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.ends_with(".safetensors")
                || name.ends_with(".safetensors.index.json")
                || [
                    "config.json",
                    "generation_config.json",
                    "tokenizer.json",
                    "tokenizer_config.json",
                    "special_tokens_map.json",
                ]
                .contains(&name.as_str())
        })
        .collect();
    files.sort();
    files
}

/// An MTP head is a safetensors file whose tensors are all `mtp.*`, with the `mtp.fc` projection.
/// Only its header is read, bounded as the model's own files are (a file without end, such as a
/// link to /dev/zero, was read whole and grew memory until allocation failed).
fn check_mtp_head(path: &std::path::Path) -> Result<()> {
    let tensors = crate::model::formats::weights::validate_safetensors(path)
        .map_err(|e| anyhow::anyhow!("{} is not an MTP head (not a safetensors file: {e:#})", path.display()))?;
    let names: Vec<&String> = tensors.keys().collect();
    if let Some(other) = names.iter().find(|n| !n.starts_with("mtp.")) {
        anyhow::bail!(
            "{} is not an MTP head: it holds {other:?} (an MTP head holds mtp.* tensors only)",
            path.display()
        );
    }
    if !names.iter().any(|n| n.starts_with("mtp.fc.")) {
        anyhow::bail!("{} is not an MTP head: it has no mtp.fc projection", path.display());
    }
    Ok(())
}
