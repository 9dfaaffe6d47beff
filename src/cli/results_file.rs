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
    pub sink: Sink,
    pub answered: HashSet<String>,
    /// What the output is called in messages.
    pub name: String,
}

/// Where result lines go: each line whole or not at all.
pub struct Sink {
    out: Box<dyn Write>,
    /// A file output, and its length up to its last whole line: a line that fails part-way (a
    /// full disk) is cut back to it.
    file: Option<(std::fs::File, u64)>,
}

impl Sink {
    fn stdout() -> Sink {
        Sink { out: Box::new(std::io::stdout().lock()), file: None }
    }

    fn file(file: std::fs::File) -> std::io::Result<Sink> {
        let whole = file.metadata()?.len();
        Ok(Sink { out: Box::new(file.try_clone()?), file: Some((file, whole)) })
    }

    /// Write one line (ending in a newline) and flush it: one write of the whole line, so a run
    /// stopped at any moment leaves whole lines only; a write that fails leaves none of it.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let written = self.out.write_all(line).and_then(|()| self.out.flush());
        if let Some((file, whole)) = &mut self.file {
            match &written {
                Ok(()) => *whole += line.len() as u64,
                Err(_) => {
                    let _ = file.set_len(*whole);
                }
            }
        }
        written
    }
}

/// Open `output` (stdout where None) for the results of the requests in `input` ("-": stdin).
pub fn open(output: Option<&Path>, input: &Path, existing: Existing) -> Result<Results> {
    let Some(path) = output else {
        return Ok(Results { sink: Sink::stdout(), answered: HashSet::new(), name: "stdout".into() });
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
    Ok(Results { sink: Sink::file(file).with_context(cannot)?, answered, name: path.display().to_string() })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes half of what it is given into the file, then fails, as a disk that fills mid-line.
    struct FillsUp(std::fs::File);

    impl Write for FillsUp {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write_all(&buf[..buf.len() / 2])?;
            Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device"))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_that_fails_part_way_is_cut_back_to_the_last_whole_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, "{\"id\":\"a\"}\n").unwrap();
        let file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        let mut sink = Sink::file(file.try_clone().unwrap()).unwrap();
        sink.write_line(b"{\"id\":\"b\"}\n").unwrap();
        sink.out = Box::new(FillsUp(file));
        let err = sink.write_line(b"{\"id\":\"c\",\"text\":\"a long answer\"}\n").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::StorageFull);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{\"id\":\"a\"}\n{\"id\":\"b\"}\n");
    }
}
