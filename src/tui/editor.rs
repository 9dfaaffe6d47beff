//! Long prompts in the user's own editor: the input's text goes to a temporary file, `$VISUAL`
//! or `$EDITOR` (else `vi`) runs on it through `sh` (so `EDITOR="code --wait"` works, as with
//! git), and what it saved comes back. The event loop gives the terminal to the editor meanwhile
//! (`terminal::suspend` / `resume`).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

/// The editor to run: `$VISUAL`, then `$EDITOR`, then `vi`.
pub fn command() -> String {
    ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|v| std::env::var(v).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "vi".to_owned())
}

/// Run `editor` on a temporary file holding `text` (in `dir`) and return what it saved, less the
/// one newline editors add at the end. The file is removed whatever happens; an editor that fails
/// (vim's `:cq`, a command not found) is an error and nothing comes back.
pub fn edit(text: &str, editor: &str, dir: &Path) -> Result<String> {
    let path = temp_file(dir, text)?;
    let outcome = run(editor, &path);
    let _ = std::fs::remove_file(&path);
    outcome
}

fn run(editor: &str, path: &Path) -> Result<String> {
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(path)
        .status()
        .with_context(|| format!("cannot run {editor}"))?;
    if !status.success() {
        bail!("{editor} exited with {status}: the input is unchanged");
    }
    let mut text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

fn temp_file(dir: &Path, text: &str) -> Result<PathBuf> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    for n in 0..100u32 {
        // .md: editors colour the prompt as Markdown.
        let path = dir.join(format!("cohort-prompt-{}-{nanos}-{n}.md", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut file) => {
                file.write_all(text.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create a file in {}", dir.display())),
        }
    }
    bail!("cannot create a file in {}", dir.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in editor: a script that keeps what it was given and writes `reply`.
    fn fake_editor(dir: &Path, reply: &str, code: i32) -> String {
        let script = dir.join("fake-editor");
        let body = format!(
            "#!/bin/sh\nfor f; do :; done\ncp \"$f\" \"{}\"\nprintf '%s\\n' '{reply}' > \"$f\"\nexit {code}\n",
            dir.join("given").display()
        );
        std::fs::write(&script, body).unwrap();
        std::process::Command::new("chmod").arg("+x").arg(&script).status().unwrap();
        script.display().to_string()
    }

    fn leftovers(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("cohort-prompt"))
            .count()
    }

    #[test]
    fn the_editor_gets_the_text_and_its_file_comes_back() {
        let dir = tempfile::tempdir().unwrap();
        let editor = fake_editor(dir.path(), "rewritten, longer", 0);
        // With arguments, as EDITOR="code --wait" has.
        let back = edit("begun here", &format!("{editor} --wait"), dir.path()).unwrap();
        assert_eq!(back, "rewritten, longer", "one trailing newline dropped");
        assert_eq!(std::fs::read_to_string(dir.path().join("given")).unwrap(), "begun here");
        assert_eq!(leftovers(dir.path()), 0, "the temporary file is removed");
    }

    #[test]
    fn a_failing_editor_gives_nothing_back() {
        let dir = tempfile::tempdir().unwrap();
        let editor = fake_editor(dir.path(), "half done", 1);
        let err = edit("begun", &editor, dir.path()).unwrap_err().to_string();
        assert!(err.contains("exited") && err.contains("unchanged"), "{err}");
        assert!(edit("begun", "no-such-editor-anywhere", dir.path()).is_err());
        assert_eq!(leftovers(dir.path()), 0);
    }
}
