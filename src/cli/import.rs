//! `cohort import-gguf`: a GGUF file (Llama family, Q4_0 / Q4_1 / Q8_0 / F16 / F32) to an
//! MLX-format checkpoint that cohort and mlx-lm both load.

use std::path::PathBuf;

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
