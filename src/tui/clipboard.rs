//! Copy through the terminal: an OSC 52 escape sequence asks the terminal (or tmux, or an ssh
//! client's terminal) to put text on the system clipboard, with no clipboard library or display
//! server. Terminals may ignore it, so the text is also written to a file the user can open.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Terminals cap OSC 52 payloads (xterm: 100 kB by default); larger text goes to the file only.
const OSC52_LIMIT: usize = 74_000;

/// The escape sequence that sets the clipboard to `text`.
pub fn osc52(text: &str) -> String {
    format!("\x1b]52;c;{}\x07", base64(text.as_bytes()))
}

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The fallback file.
pub fn copy_file(data_dir: &Path) -> PathBuf {
    data_dir.join("clipboard").join("last-answer.txt")
}

/// What happened, for the status line.
pub struct Copied {
    pub chars: usize,
    pub sent_osc52: bool,
    pub file: PathBuf,
}

/// Send OSC 52 to `terminal` (when the text is small enough) and write the fallback file.
pub fn copy(text: &str, data_dir: &Path, terminal: &mut dyn Write) -> Result<Copied> {
    let sent_osc52 = text.len() <= OSC52_LIMIT;
    if sent_osc52 {
        terminal.write_all(osc52(text).as_bytes())?;
        terminal.flush()?;
    }
    let file = copy_file(data_dir);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    Ok(Copied { chars: text.chars().count(), sent_osc52, file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (plain, coded) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("foobar", "Zm9vYmFy")]
        {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
        assert_eq!(osc52("hi"), "\x1b]52;c;aGk=\x07");
    }
}
