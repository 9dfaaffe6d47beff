//! The prompt cache kept on disk between runs, so that a resumed TUI session starts warm.
//!
//! When the engine stops, it writes the entries that end a conversation (those no other entry
//! extends: each pane's latest turn) into one safetensors file; an engine that starts with that
//! file, or is pointed at it later ([`super::super::owner::OwnerCommand::CacheFile`]), adds them
//! back. Every array goes to disk as the row holds it, bits unchanged, so a conversation resumed
//! from the file answers as it would have before the restart. The file records what made it
//! ([`MadeBy`]: the build, the device, the model's files, the routes in force); an engine that
//! differs in any of these, or whose cache does not serve exactly, reads the conversations again
//! and says why.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use mlx_rs::Array;
use serde::{Deserialize, Serialize};

use super::{Kept, PromptCache, Reuse, Snapshot};
use crate::model::forward::LanguageModel;
use crate::model::layers::cache::{KvCache, LayerState};

/// The file's name in a session's folder.
pub const FILE_NAME: &str = "prompt-cache.safetensors";
const FORMAT: &str = "cohort-prompt-cache/1";
/// The safetensors metadata key the header goes under.
const HEADER_KEY: &str = "cohort";

/// What made the entries: each part must be the same for them to be served again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MadeBy {
    /// cohort's version and the binary's size and time (a rebuild may change any kernel).
    pub build: String,
    /// MLX's version, the backend and the device.
    pub device: String,
    /// The model folder and each of its files' size and time.
    pub model: String,
    /// The routes, dtype and generation mode the engine reads and decodes with.
    pub routes: String,
}

impl MadeBy {
    /// The first part in which `other` differs from `self`, named for a person.
    fn difference(&self, other: &MadeBy) -> Option<&'static str> {
        [
            (self.build != other.build, "another build of cohort"),
            (self.device != other.device, "another MLX or device"),
            (self.model != other.model, "another model (or its files changed)"),
            (self.routes != other.routes, "other routes or settings"),
        ]
        .into_iter()
        .find_map(|(differs, what)| differs.then_some(what))
    }

    /// The build part for this process: its version, and its binary's size and modification time.
    pub fn this_build() -> String {
        let exe = std::env::current_exe().ok().and_then(|p| std::fs::metadata(p).ok());
        let stamp = exe.map(|m| format!("{} bytes, {}", m.len(), modified_s(&m))).unwrap_or_else(|| "?".into());
        format!("cohort {} ({stamp})", env!("CARGO_PKG_VERSION"))
    }

    /// The model part: the folder and each file in it (name, size, modification time), sorted.
    pub fn model_files(dir: &Path) -> String {
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let m = e.metadata().ok().filter(|m| m.is_file())?;
                        Some(format!("{} {} {}", e.file_name().to_string_lossy(), m.len(), modified_s(&m)))
                    })
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        format!("{}: {}", dir.display(), files.join(", "))
    }
}

fn modified_s(m: &std::fs::Metadata) -> u64 {
    m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs())
}

#[derive(Serialize, Deserialize)]
struct Header {
    format: String,
    made_by: MadeBy,
    entries: Vec<EntryHeader>,
}

#[derive(Serialize, Deserialize)]
struct EntryHeader {
    tokens: usize,
    answer: bool,
    /// Each layer's committed positions (attention) or None (a Gated DeltaNet state).
    layers: Vec<Option<i32>>,
    mtp: i32,
}

/// What a save wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub entries: usize,
    pub tokens: usize,
    pub bytes: u64,
}

/// What a load found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// No file there.
    Nothing,
    /// Entries added to the cache: how many, and the positions they hold.
    Added { entries: usize, tokens: usize },
    /// A file that cannot be served here, and why.
    Refused(String),
}

/// Write the conversations' latest entries to `path` (through a file beside it, renamed into
/// place, so a crash never leaves half a file). Nothing is written when the cache holds none.
pub fn save(cache: &PromptCache, path: &Path, made_by: &MadeBy) -> Result<Option<Saved>> {
    let tips = cache.tips();
    if tips.is_empty() {
        return Ok(None);
    }
    let mut arrays: Vec<(String, Array)> = Vec::new();
    let mut entries = Vec::new();
    let mut tokens = 0;
    for (i, (ids, snap, kept)) in tips.iter().enumerate() {
        let mut layers = Vec::new();
        for (j, layer) in snap.row.layers.iter().enumerate() {
            match layer {
                LayerState::Attention(kv) => {
                    let (k, v) = kv.stored().context("an entry's attention layer holds nothing")?;
                    arrays.push((format!("{i}.{j}.keys"), k));
                    arrays.push((format!("{i}.{j}.values"), v));
                    layers.push(Some(kv.offset()));
                }
                LayerState::GatedDelta(s) => {
                    let (Some(conv), Some(state)) = (s.conv()?, s.ssm()?) else {
                        bail!("an entry's Gated DeltaNet layer holds nothing");
                    };
                    arrays.push((format!("{i}.{j}.conv"), conv));
                    arrays.push((format!("{i}.{j}.state"), state));
                    layers.push(None);
                }
            }
        }
        if let Some((k, v)) = snap.row.mtp.stored() {
            arrays.push((format!("{i}.mtp.keys"), k));
            arrays.push((format!("{i}.mtp.values"), v));
        }
        arrays.push((format!("{i}.hidden"), snap.hidden.clone()));
        arrays.push((format!("{i}.logits"), snap.logits.clone()));
        arrays.push((format!("{i}.tokens"), Array::from_slice(ids, &[ids.len() as i32])));
        tokens += ids.len();
        entries.push(EntryHeader {
            tokens: ids.len(),
            answer: *kept == Kept::Answer,
            layers,
            mtp: snap.row.mtp.offset(),
        });
    }
    let header = Header { format: FORMAT.into(), made_by: made_by.clone(), entries };
    let metadata = HashMap::from([(HEADER_KEY.to_owned(), serde_json::to_string(&header)?)]);
    // The folder is the caller's (a session's, which exists once it holds a transcript): one
    // made here would outlive a session nothing was written to.
    let partial = path.with_extension("partial.safetensors");
    Array::save_safetensors(arrays.iter().map(|(k, v)| (k.as_str(), v)), &metadata, &partial)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot move {} into place", partial.display()))?;
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    Ok(Some(Saved { entries: tips.len(), tokens, bytes }))
}

/// Add the entries saved in `path` to `cache`, oldest first (so its budget keeps the newest),
/// where the file was made as this engine would make it and the cache serves exactly.
pub fn load(path: &Path, made_by: &MadeBy, model: &dyn LanguageModel, cache: &mut PromptCache) -> Result<Restored> {
    if !path.exists() {
        return Ok(Restored::Nothing);
    }
    if cache.stats().reuse != Reuse::Exact {
        return Ok(Restored::Refused(format!(
            "the prompt cache does not serve exactly here ({})",
            cache.stats().reuse.name()
        )));
    }
    crate::model::formats::weights::validate_safetensors(path)?;
    let (mut arrays, metadata) = Array::load_safetensors_with_metadata(path)
        .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
    let header: Header = metadata
        .get(HEADER_KEY)
        .context("not a prompt cache file (no header)")
        .and_then(|h| serde_json::from_str(h).context("its header does not parse"))
        .with_context(|| path.display().to_string())?;
    if header.format != FORMAT {
        return Ok(Restored::Refused(format!("it is in another format ({})", header.format)));
    }
    if let Some(what) = made_by.difference(&header.made_by) {
        return Ok(Restored::Refused(format!("it was made by {what}")));
    }
    let mut take =
        |name: String| arrays.remove(&name).with_context(|| format!("{}: {name} is missing", path.display()));
    let mut rows = Vec::new();
    for (i, entry) in header.entries.iter().enumerate() {
        let mut row = model.new_row();
        if row.layers.len() != entry.layers.len() {
            bail!("{}: entry {i} has {} layers, the model {}", path.display(), entry.layers.len(), row.layers.len());
        }
        for (j, (layer, saved)) in row.layers.iter_mut().zip(&entry.layers).enumerate() {
            match (layer, saved) {
                (LayerState::Attention(kv), Some(offset)) => {
                    *kv = KvCache::restored(take(format!("{i}.{j}.keys"))?, take(format!("{i}.{j}.values"))?, *offset)?;
                }
                (LayerState::GatedDelta(s), None) => {
                    let (conv, state) = (take(format!("{i}.{j}.conv"))?, take(format!("{i}.{j}.state"))?);
                    *s = crate::model::layers::gdn_batch::after_step(&conv, &state).remove(0);
                }
                _ => bail!("{}: entry {i}'s layer {j} is of another kind than the model's", path.display()),
            }
        }
        if entry.mtp > 0 {
            row.mtp = KvCache::restored(take(format!("{i}.mtp.keys"))?, take(format!("{i}.mtp.values"))?, entry.mtp)?;
        }
        row.len = i32::try_from(entry.tokens).context("an entry too long")?;
        let ids = take(format!("{i}.tokens"))?;
        let ids: Vec<u32> = ids.as_slice::<u32>().to_vec();
        if ids.len() != entry.tokens {
            bail!("{}: entry {i} holds {} tokens, its header says {}", path.display(), ids.len(), entry.tokens);
        }
        let snap = Snapshot { row, hidden: take(format!("{i}.hidden"))?, logits: take(format!("{i}.logits"))? };
        let kept = if entry.answer { Kept::Answer } else { Kept::Prompt };
        rows.push((ids, snap, kept));
    }
    // Read from disk now, not on the first use.
    let all: Vec<&Array> = rows.iter().flat_map(|(_, s, _)| s.arrays()).collect();
    mlx_rs::transforms::eval(all).map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", path.display()))?;
    let (entries, tokens) = (rows.len(), rows.iter().map(|(ids, ..)| ids.len()).sum());
    for (ids, snap, kept) in rows {
        cache.insert_as(&ids, snap, kept);
    }
    Ok(Restored::Added { entries, tokens })
}
