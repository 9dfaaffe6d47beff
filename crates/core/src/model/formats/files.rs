//! Reading the small text files a model directory holds (configs, indexes, templates) with a
//! size bound: a file that is a link to /dev/zero, or gigabytes of junk, is refused rather than
//! read until memory runs out.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Largest config-like file read (far beyond any real one: tokenizer configs with chat
/// templates run to a few hundred KB, shard indexes to a few MB).
pub const MAX_TEXT_BYTES: u64 = 32 << 20;

/// A tokenizer.json holds the whole vocabulary and merges (tens of MB for large vocabularies).
pub const MAX_TOKENIZER_BYTES: u64 = 512 << 20;

/// `path` as UTF-8 text, refused past [`MAX_TEXT_BYTES`].
pub fn read_text(path: &Path) -> Result<String> {
    read_bounded(path, MAX_TEXT_BYTES)
}

/// `path` as UTF-8 text, refused past `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).with_context(|| format!("cannot read {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!("{} is over {} MB: not a file of this kind", path.display(), limit >> 20);
    }
    String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8 text", path.display()))
}
