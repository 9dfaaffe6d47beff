//! Periodic checkpoints: a directory holding the head (float32), the optimizer moments and the
//! step, so `--resume DIR` continues exactly where the run stopped (batches are drawn from a
//! per-step seed, so the resumed run sees the batches the uninterrupted one would have).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::head_file::{self, StoreAs};
use super::optim::Optim;
use super::params::{HeadDims, Params};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    /// Steps completed.
    pub step: usize,
    pub seed: u64,
    pub objective: String,
    /// The run's settings, to refuse resuming a different run.
    pub settings: String,
}

pub fn head_path(dir: &Path) -> PathBuf {
    dir.join("head.safetensors")
}

pub fn save(dir: &Path, params: &Params, dims: &HeadDims, optim: &mut Optim, state: &State) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    head_file::save(params, dims, StoreAs::F32, &HashMap::new(), &head_path(dir))?;
    optim.save(&dir.join("optim.safetensors"))?;
    let tmp = dir.join("state.json.partial");
    std::fs::write(&tmp, serde_json::to_string_pretty(state)?)?;
    std::fs::rename(&tmp, dir.join("state.json"))?;
    Ok(())
}

/// Load a checkpoint into fresh parameters and optimizer; returns its state.
pub fn load(dir: &Path, dims: &HeadDims, optim: &mut Optim, settings: &str) -> Result<(Params, State)> {
    let text = std::fs::read_to_string(dir.join("state.json"))
        .with_context(|| format!("{} is not a checkpoint (no state.json)", dir.display()))?;
    let state: State = serde_json::from_str(&text).with_context(|| format!("{}/state.json", dir.display()))?;
    if state.settings != settings {
        bail!(
            "{} was written by a run with other settings:\n  it: {}\n  now: {settings}\n(resume with the same data, objective, seq-len, batch and seed)",
            dir.display(),
            state.settings
        );
    }
    let params = head_file::load(&head_path(dir), dims)?;
    optim.load(&dir.join("optim.safetensors"))?;
    Ok((params, state))
}
