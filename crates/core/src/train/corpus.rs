//! Training text: plain-text files (one document a line) cut into fixed-length token windows,
//! and chat prompts (JSONL, `{"prompt": ...}` or `{"messages": [...]}`) the target will answer.
//! Everything is shuffled with the run's seed, so a run is reproducible from its arguments.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::model::text::tokenizer::{ChatMessage, TextTokenizer};
use crate::platform::rng::Rng;

/// What `--data` paths hold, split by kind.
#[derive(Debug, Default)]
pub struct Sources {
    pub text: Vec<PathBuf>,
    pub chat: Vec<PathBuf>,
}

impl Sources {
    /// `.txt` files are text, `.jsonl` files chat prompts; a directory contributes its files.
    pub fn from_paths(paths: &[PathBuf]) -> Result<Self> {
        let mut s = Sources::default();
        for p in paths {
            if p.is_dir() {
                let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                    .with_context(|| format!("cannot read {}", p.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|e| e.is_file())
                    .collect();
                entries.sort();
                for e in entries {
                    s.add(&e, false)?;
                }
            } else {
                s.add(p, true)?;
            }
        }
        Ok(s)
    }

    fn add(&mut self, p: &Path, strict: bool) -> Result<()> {
        match p.extension().and_then(|e| e.to_str()) {
            Some("txt") => self.text.push(p.to_path_buf()),
            Some("jsonl") => self.chat.push(p.to_path_buf()),
            _ if strict => {
                bail!("{}: --data takes .txt (text, one document a line) or .jsonl (chat prompts)", p.display())
            }
            _ => {}
        }
        Ok(())
    }
}

/// Fisher-Yates with the engine's seeded RNG.
pub fn shuffle<T>(v: &mut [T], rng: &mut Rng) {
    for i in (1..v.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
}

/// Token windows of exactly `len` tokens from the text files: each file's documents are
/// tokenised in order and concatenated, then cut; windows of all files are shuffled together
/// and the first `max_windows` kept. Each window becomes a fresh target context (position 0),
/// as a prompt is at inference.
pub fn text_windows(
    tok: &TextTokenizer,
    files: &[PathBuf],
    len: usize,
    max_windows: usize,
    rng: &mut Rng,
) -> Result<Vec<Vec<u32>>> {
    let mut windows = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
        let mut buf: Vec<u32> = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            buf.extend(tok.encode(&format!("{line}\n"))?);
            while buf.len() >= len {
                windows.push(buf.drain(..len).collect());
            }
        }
    }
    shuffle(&mut windows, rng);
    windows.truncate(max_windows);
    Ok(windows)
}

/// Chat prompts from JSONL files, shuffled, then at most `max` of them after the first `skip`:
/// runs with the same `rng` seed and successive skips take disjoint slices of one shuffle.
pub fn chat_prompts(files: &[PathBuf], skip: usize, max: usize, rng: &mut Rng) -> Result<Vec<Vec<ChatMessage>>> {
    let mut out = Vec::new();
    for f in files {
        out.extend(read_prompts(f)?);
    }
    shuffle(&mut out, rng);
    Ok(out.into_iter().skip(skip).take(max).collect())
}

/// Every prompt of one JSONL file, in order.
pub fn read_prompts(f: &Path) -> Result<Vec<Vec<ChatMessage>>> {
    let text = std::fs::read_to_string(f).with_context(|| format!("cannot read {}", f.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).with_context(|| format!("{}: line {}", f.display(), i + 1))?;
        let messages = if let Some(p) = v.get("prompt").and_then(Value::as_str) {
            vec![ChatMessage::new("user", p)]
        } else if let Some(m) = v.get("messages") {
            serde_json::from_value(m.clone())
                .with_context(|| format!("{}: line {}: bad messages", f.display(), i + 1))?
        } else {
            bail!("{}: line {} has neither \"prompt\" nor \"messages\"", f.display(), i + 1);
        };
        out.push(messages);
    }
    Ok(out)
}

/// A chat prompt as the model sees it (its chat template with the generation prompt).
pub fn render_chat(tok: &TextTokenizer, messages: &[ChatMessage]) -> Result<Vec<u32>> {
    tok.encode(&tok.apply_chat_template(messages, true)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_take_disjoint_slices_of_one_shuffle() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("q.jsonl");
        let lines: Vec<String> = (0..50).map(|i| format!("{{\"prompt\": \"question {i}\"}}")).collect();
        std::fs::write(&f, lines.join("\n")).unwrap();
        let files = vec![f];
        let slice = |skip, max| {
            chat_prompts(&files, skip, max, &mut Rng::new(7))
                .unwrap()
                .into_iter()
                .map(|m| m[0].content.clone())
                .collect::<Vec<_>>()
        };
        let whole = slice(0, 50);
        let parts: Vec<String> = [slice(0, 20), slice(20, 20), slice(40, 20)].concat();
        assert_eq!(parts, whole, "successive slices are the whole shuffle in order");
        assert_eq!(slice(40, 20).len(), 10, "the last slice stops at the end");
        let mut sorted = whole.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 50, "every prompt once");
    }
}
