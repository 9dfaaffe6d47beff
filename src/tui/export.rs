//! A pane's conversation as Markdown (the `export` key): built from the app's state by
//! `markdown` (pure, so tests see the exact text), written by the event loop with `write` into
//! the session's folder, or the current directory when that cannot be written.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::pane::Pane;
use crate::engine::api::FinishReason;

/// What the header names besides the pane.
pub struct About<'a> {
    /// The pane's number on screen (1-based).
    pub number: usize,
    pub session: &'a str,
    pub model: &'a str,
    pub profile: &'a str,
}

/// The conversation as Markdown: a header, then each turn's question and answer (answers are
/// Markdown already), with what became of an answer that did not finish.
pub fn markdown(pane: &Pane, about: &About) -> String {
    let mut out = format!("# Pane {} · session {}\n\n", about.number, about.session);
    let model = if about.model.is_empty() { "(no model)" } else { about.model };
    out.push_str(&format!("Model `{model}` · profile `{}`\n", about.profile));
    let last = pane.turns.len().saturating_sub(1);
    // Each turn records the system prompt its request carried: it is shown where it changed.
    let mut system: Option<&str> = None;
    for (i, turn) in pane.turns.iter().enumerate() {
        out.push_str("\n---\n\n");
        if turn.system.as_deref() != system {
            system = turn.system.as_deref();
            match system {
                Some(text) => {
                    out.push_str("**System prompt, from this turn on:**\n\n");
                    for line in text.lines() {
                        out.push_str(&format!("> {line}\n"));
                    }
                    out.push('\n');
                }
                None => out.push_str("**No system prompt from this turn on.**\n\n"),
            }
        }
        out.push_str("## You\n\n");
        out.push_str(turn.user.trim_end());
        out.push_str("\n\n## Assistant\n\n");
        if !turn.answer.trim().is_empty() {
            out.push_str(turn.answer.trim_end());
            out.push_str("\n\n");
        }
        let tokens = turn.stats.as_ref().map(|s| s.completion_tokens).unwrap_or(0);
        let note = if i == last && pane.is_busy() {
            Some("*(still answering when exported)*".to_owned())
        } else if turn.interrupted {
            Some("*(interrupted: the session ended before this answer finished)*".to_owned())
        } else {
            match turn.finish {
                Some(FinishReason::Cancelled) => Some(format!("*(cancelled · {tokens} tokens kept)*")),
                Some(FinishReason::Length) => Some(format!("*({tokens} tokens: max_tokens reached)*")),
                Some(FinishReason::Error) => Some(format!(
                    "**Error:** {} *(not sent with later prompts)*",
                    turn.error.as_deref().unwrap_or("unknown error")
                )),
                _ => None,
            }
        };
        if let Some(note) = note {
            out.push_str(&note);
            out.push_str("\n\n");
        }
        // One newline at the end of the file, none doubled.
        while out.ends_with("\n\n") {
            out.pop();
        }
    }
    out
}

/// Write `text` as `pane-<id>.md` (or `pane-<id>-2.md`, … : an earlier export is never
/// overwritten) in the first of `dirs` that can take it; the error names every folder tried.
pub fn write(dirs: &[PathBuf], pane: u32, text: &str) -> Result<PathBuf> {
    let mut failures = Vec::new();
    for dir in dirs {
        match write_in(dir, pane, text) {
            Ok(path) => return Ok(path),
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    if failures.is_empty() {
        bail!("no folder to write to");
    }
    bail!("{}", failures.join("; "))
}

fn write_in(dir: &Path, pane: u32, text: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for n in 1..10_000 {
        let name = if n == 1 { format!("pane-{pane}.md") } else { format!("pane-{pane}-{n}.md") };
        let path = dir.join(name);
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                let written = file.write_all(text.as_bytes()).and_then(|()| file.sync_data());
                return match written {
                    Ok(()) => Ok(path),
                    Err(e) => {
                        // A half-written export is worse than none.
                        let _ = std::fs::remove_file(&path);
                        Err(e).with_context(|| format!("cannot write {}", path.display()))
                    }
                };
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
        }
    }
    bail!("{} holds too many exports of pane {pane}", dir.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exports_get_new_names_and_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = [dir.path().join("session")];
        let first = write(&dirs, 3, "one").unwrap();
        let second = write(&dirs, 3, "two").unwrap();
        assert_eq!(first.file_name().unwrap(), "pane-3.md");
        assert_eq!(second.file_name().unwrap(), "pane-3-2.md");
        assert_eq!(std::fs::read_to_string(first).unwrap(), "one");
        assert_eq!(std::fs::read_to_string(second).unwrap(), "two");
    }

    #[test]
    fn an_unwritable_folder_falls_back_and_total_failure_names_each() {
        let dir = tempfile::tempdir().unwrap();
        // A folder under a plain file can never be created.
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let bad = file.join("session");
        let good = dir.path().join("cwd");
        let path = write(&[bad.clone(), good.clone()], 1, "text").unwrap();
        assert_eq!(path, good.join("pane-1.md"));
        let err = write(&[bad.clone(), file.join("other")], 1, "text").unwrap_err().to_string();
        assert!(err.contains("plain/session") && err.contains("plain/other"), "{err}");
    }
}
