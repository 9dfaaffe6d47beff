//! Where `cohort generate` writes its results: stdout, or a file checked before anything is
//! written to it. Never the request file itself, never an existing file unless asked: `--append`
//! keeps the results there (cutting back a line torn by an interrupted run) and names the requests
//! they answer, so a rerun answers only the rest; `--overwrite` starts the file again.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// What to do with an output file that already holds results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    Refuse,
    Append,
    Overwrite,
}

/// The opened output and the ids of the requests it already answers (`--append` only).
pub struct Results {
    pub sink: Box<dyn Write>,
    pub answered: HashSet<String>,
}

/// Open `output` (stdout where None) for the results of the requests in `input` ("-": stdin).
pub fn open(output: Option<&Path>, input: &Path, existing: Existing) -> Result<Results> {
    let Some(path) = output else {
        return Ok(Results { sink: Box::new(std::io::stdout().lock()), answered: HashSet::new() });
    };
    if input.as_os_str() != "-" && same_file(path, input) {
        bail!(
            "-o {} is the request file (-i): the results would overwrite the requests; write them elsewhere",
            path.display()
        );
    }
    let held = std::fs::metadata(path).map(|m| m.is_file() && m.len() > 0).unwrap_or(false);
    let cannot = || format!("cannot open the output file {}", path.display());
    let (file, answered) = match (held, existing) {
        (true, Existing::Refuse) => {
            let lines = std::fs::read(path).with_context(cannot)?.iter().filter(|&&b| b == b'\n').count();
            bail!(
                "the output file {} already holds {lines} result line{}: --append adds to it (the requests answered there are skipped), --overwrite replaces it",
                path.display(),
                if lines == 1 { "" } else { "s" }
            );
        }
        (true, Existing::Append) => {
            let answered = keep_whole_lines(path).with_context(cannot)?;
            (std::fs::OpenOptions::new().append(true).open(path).with_context(cannot)?, answered)
        }
        _ => (
            std::fs::File::create(path).with_context(|| format!("cannot create the output file {}", path.display()))?,
            HashSet::new(),
        ),
    };
    Ok(Results { sink: Box::new(std::io::BufWriter::new(file)), answered })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Cut a torn last line (a run stopped mid-write) back to the last whole one, and return the ids
/// of the requests the whole lines answer (an error is no answer: it runs again).
fn keep_whole_lines(path: &Path) -> Result<HashSet<String>> {
    let bytes = std::fs::read(path)?;
    let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if whole < bytes.len() {
        std::fs::OpenOptions::new().write(true).open(path)?.set_len(whole as u64)?;
        eprintln!("cohort: {}: cut back a torn last line ({} bytes)", path.display(), bytes.len() - whole);
    }
    let answered = bytes[..whole]
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter(|r| r["finish_reason"] != "error")
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect();
    Ok(answered)
}
