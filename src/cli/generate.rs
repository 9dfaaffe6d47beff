//! `cohort generate`: requests from a JSONL file or stdin, read as they arrive, results as JSONL
//! written the moment each request ends (completion order; every line carries its request's id),
//! through the same scheduler the TUI uses (each request joins the running cohort at the next
//! cycle).

use std::collections::HashSet;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use super::results_file::{self, Existing, Results, Sink};
use crate::config::model_args::ModelArgs;
use crate::engine::draft_policy::DraftPolicy;
use crate::engine::handle::{EngineHandle, Submission};
use crate::engine::owner::EngineSetup;
use crate::engine::request::{FinishReason, Request, RequestLine, RequestResult};
use crate::engine::row::RowEvent;
use crate::engine::sampler::SamplerConfig;
use crate::engine::scheduler::{Numerics, Preset};
use crate::engine::solo::GenerationMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedulerMode {
    /// Requests decode together, up to 8 rows at once (how they are admitted is the preset's).
    Cohort,
    /// One request at a time on the solo path.
    Serial,
}

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Request file, one JSON object per line ("-" for stdin), read as lines arrive.
    #[arg(long, short = 'i')]
    input: PathBuf,
    /// Where results go (default: stdout), one line as each request ends. An existing file is
    /// refused unless --append or --overwrite says what to do with it; the request file always is.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// Add to an existing -o file, keeping its results: the requests it answers already are
    /// skipped (a rerun after an interruption answers only the rest).
    #[arg(long, requires = "output", conflicts_with = "overwrite")]
    append: bool,
    /// Replace an existing -o file.
    #[arg(long, requires = "output")]
    overwrite: bool,
    /// ar, or mtp (default when the model has MTP weights and the exactness gate allows).
    #[arg(long, value_enum)]
    generation_mode: Option<GenerationMode>,
    #[arg(long, value_enum, default_value = "cohort")]
    scheduler: SchedulerMode,
    /// Scheduling preset: continuous admission (throughput, agent, latency, solo) or sealed B8
    /// cohorts (sealed); docs/configuration.md lists each one's rows, chunk and budget.
    #[arg(long, value_enum, default_value = "throughput")]
    preset: Preset,
    /// Cohort numerics: throughput, balanced or b1-exact.
    #[arg(long, value_enum, default_value = "throughput")]
    numerics: Numerics,
    /// Prompt tokens per prefill chunk (default: the preset's).
    #[arg(long)]
    prefill_chunk: Option<usize>,
    /// Prompt tokens read between two decode cycles (default: one chunk).
    #[arg(long)]
    prefill_budget: Option<usize>,
    /// Whether greedy MTP cohorts may take plain steps while those measure faster (measured,
    /// the default), or draft every cycle (always).
    #[arg(long, value_enum)]
    drafts: Option<DraftPolicy>,
    #[command(flatten)]
    prompt_cache: crate::config::cache_args::PromptCacheArgs,
}

/// What the reader thread hands the writer: a request line (or the result refusing it), or the
/// end of the input (with the error that ended it early, if any).
enum Incoming {
    Line(Box<Result<Request, RequestResult>>),
    End(Option<anyhow::Error>),
}

/// One input line as a request, or the result that refuses it: it keeps the id the line names
/// (a string "id" written before any damage to the line, see [`line_id`]), else it is `line-N`.
/// Blank lines are skipped.
pub fn parse_line(
    input: &Path,
    n: usize,
    bytes: Vec<u8>,
    defaults: &SamplerConfig,
) -> Option<Result<Request, RequestResult>> {
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let message = format!("{}: line {n} is not valid UTF-8", input.display());
            return Some(Err(RequestResult::error(&line_id(&String::from_utf8_lossy(e.as_bytes()), n), message)));
        }
    };
    if text.trim().is_empty() {
        return None;
    }
    let parsed = serde_json::from_str::<RequestLine>(&text)
        .map_err(|e| anyhow::anyhow!("{}: line {n}: {e}", input.display()))
        .and_then(|l| l.into_request(n, defaults));
    Some(parsed.map_err(|e| RequestResult::error(&line_id(&text, n), format!("{e:#}"))))
}

/// The id a refused line names, read up to where the line breaks: a line cut short, holding a
/// number no double holds (`1e400`) or junk after its object, or one that is not UTF-8 (read here
/// with the bad bytes replaced; an id they fall in is not taken), still keeps the string id
/// written before the damage. `line-N` where none can be read.
fn line_id(text: &str, n: usize) -> String {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct FirstId<'a>(&'a mut Option<String>);
    impl<'de> Visitor<'de> for FirstId<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a request object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if key == "id" && self.0.is_none() {
                    *self.0 = Some(map.next_value::<String>()?);
                } else {
                    // Skipped values are scanned, not converted: 1e400 passes here.
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(())
        }
    }
    let mut id = None;
    let _ = serde_json::Deserializer::from_str(text).deserialize_map(FirstId(&mut id));
    id.filter(|id| !id.contains(char::REPLACEMENT_CHARACTER)).unwrap_or_else(|| format!("line-{n}"))
}

/// Read `input` line by line as it arrives (stdin for "-"), handing each line over at once.
fn spawn_reader(input: PathBuf, tx: mpsc::Sender<Incoming>) -> Result<()> {
    let file = if input.as_os_str() == "-" {
        None
    } else {
        Some(std::fs::File::open(&input).with_context(|| format!("cannot open {}", input.display()))?)
    };
    std::thread::Builder::new().name("cohort-generate-input".into()).spawn(move || {
        let mut reader: Box<dyn BufRead> = match file {
            Some(f) => Box::new(std::io::BufReader::new(f)),
            None => Box::new(std::io::stdin().lock()),
        };
        let defaults = SamplerConfig::default();
        let mut seen = std::collections::HashSet::new();
        let mut skipping = false;
        for i in 0.. {
            // A line too long is refused at once (below), then skipped here: a line without end
            // (`-i /dev/zero`) is still refused.
            let line = if std::mem::take(&mut skipping) { skip_line(&mut reader) } else { Ok(()) };
            let item = match line.and_then(|()| read_line(&mut reader)) {
                Ok(Line::End) => break,
                Ok(Line::Whole(bytes)) => parse_line(&input, i + 1, bytes, &defaults),
                Ok(Line::TooLong(start)) => {
                    skipping = true;
                    Some(Err(too_long(&input, i + 1, &start)))
                }
                Err(e) => {
                    let _ = tx.send(Incoming::End(Some(anyhow::anyhow!("reading {}: {e}", input.display()))));
                    return;
                }
            };
            let Some(mut item) = item else { continue };
            // Results are matched to requests by id, so a second line with an id already used in
            // this run, by a request or by a refused line, is refused (the first keeps the id).
            let id = match &item {
                Ok(req) => &req.id,
                Err(refused) => &refused.id,
            };
            if !seen.insert(id.clone()) {
                // The id is the earlier line's: this line's refusal goes by its line number, so
                // every id has exactly one result.
                let message = match item {
                    Ok(req) => format!(
                        "{}: line {}: the id {:?} was used by an earlier line; ids must be unique in one run",
                        input.display(),
                        i + 1,
                        req.id
                    ),
                    Err(refused) => {
                        let why = refused.error.unwrap_or_default();
                        format!("{why} (its id {:?} was used by an earlier line)", refused.id)
                    }
                };
                item = Err(RequestResult::error(&format!("line-{}", i + 1), message));
            }
            if tx.send(Incoming::Line(Box::new(item))).is_err() {
                return;
            }
        }
        let _ = tx.send(Incoming::End(None));
    })?;
    Ok(())
}

/// Longest request line read (a prompt for the largest context windows is a few MB of JSON): a
/// longer one, or one without end (`-i /dev/zero`), is refused, not read until memory runs out.
const MAX_LINE_BYTES: u64 = 32 << 20;

enum Line {
    Whole(Vec<u8>),
    /// The line's first [`MAX_LINE_BYTES`] bytes; the rest is still to be skipped.
    TooLong(Vec<u8>),
    End,
}

/// The next line (without its newline), read no further than [`MAX_LINE_BYTES`].
fn read_line(reader: &mut dyn BufRead) -> std::io::Result<Line> {
    let mut bytes = Vec::new();
    if Read::take(&mut *reader, MAX_LINE_BYTES + 1).read_until(b'\n', &mut bytes)? == 0 {
        return Ok(Line::End);
    }
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        return Ok(Line::Whole(bytes));
    }
    if bytes.len() as u64 <= MAX_LINE_BYTES {
        return Ok(Line::Whole(bytes)); // the last line, without a newline
    }
    bytes.truncate(MAX_LINE_BYTES as usize);
    Ok(Line::TooLong(bytes))
}

/// Skip the rest of a line that was too long, through its newline (or to the end of the input).
fn skip_line(reader: &mut dyn BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

fn too_long(input: &Path, n: usize, start: &[u8]) -> RequestResult {
    let message = format!("{}: line {n} is over {} MB: refused", input.display(), MAX_LINE_BYTES >> 20);
    RequestResult::error(&line_id(&String::from_utf8_lossy(start), n), message)
}

/// Block until a submission's terminal result arrives (deltas are skipped).
pub fn wait(sub: &Submission) -> RequestResult {
    loop {
        match sub.events.recv() {
            Ok(RowEvent::Done(r)) => return *r,
            Ok(_) => {}
            Err(_) => return engine_stopped(sub),
        }
    }
}

/// A submission's terminal result if it has arrived (deltas are skipped), without waiting.
fn try_result(sub: &Submission) -> Option<RequestResult> {
    loop {
        match sub.events.try_recv() {
            Ok(RowEvent::Done(r)) => return Some(*r),
            Ok(_) => {}
            Err(mpsc::TryRecvError::Empty) => return None,
            Err(mpsc::TryRecvError::Disconnected) => return Some(engine_stopped(sub)),
        }
    }
}

fn engine_stopped(sub: &Submission) -> RequestResult {
    RequestResult::error(&sub.id, "the engine stopped before finishing this request".into())
}

pub fn run(args: GenerateArgs) -> Result<u8> {
    if args.output.is_none() && super::stdout::closed_at_start() {
        // Rust put /dev/null there: every result would be lost and the run exit 0.
        anyhow::bail!("stdout is closed, and the results go there: give cohort a stdout, or pass -o FILE");
    }
    // The input is opened first (a mistyped -i touches no output), then the output, both before
    // the model loads (a path that cannot be written is refused at once); lines are read while
    // it loads.
    let (tx, incoming) = mpsc::channel();
    spawn_reader(args.input.clone(), tx)?;
    let existing = match (args.append, args.overwrite) {
        (true, _) => Existing::Append,
        (false, true) => Existing::Overwrite,
        (false, false) => Existing::Refuse,
    };
    let Results { mut sink, answered, name } = results_file::open(args.output.as_deref(), &args.input, existing)?;
    let mut scheduler = args.preset.config();
    if let Some(c) = args.prefill_chunk {
        scheduler.prefill_chunk = c.max(1);
        scheduler.prefill_budget = scheduler.prefill_chunk;
    }
    if let Some(d) = args.drafts {
        scheduler.drafts = d;
    }
    scheduler.prompt_cache = args.prompt_cache.apply(scheduler.prompt_cache);
    if let Some(b) = args.prefill_budget {
        scheduler.prefill_budget = b.max(1);
    }
    let setup = EngineSetup {
        scheduler,
        numerics: args.numerics,
        mode: args.generation_mode,
        serial: args.scheduler == SchedulerMode::Serial,
        allow_inexact: crate::engine::probe::allow_inexact(),
    };
    let engine = args.model.start_engine(setup)?;
    if let Some(p) = &engine.info.probe {
        eprintln!("cohort: {p}");
    }
    let failed = stream_results(&engine, &incoming, &mut sink, &answered).map_err(|unwritten| {
        let n = unwritten.ids.len();
        let s = if n == 1 { "" } else { "s" };
        let verb = if n == 1 { "has" } else { "have" };
        anyhow::anyhow!(
            "cannot write a result to {name} ({}): stopped; {n} request{s} {verb} no result written: {}",
            unwritten.error,
            unwritten.ids.join(", ")
        )
    })?;
    Ok(if failed > 0 { super::exit::SOME_FAILED } else { super::exit::OK })
}

/// A result that could not be written, and every request read that has none written.
struct Unwritten {
    error: std::io::Error,
    ids: Vec<String>,
}

/// How long the writer waits between looks at the input and the results while requests run.
const POLL: Duration = Duration::from_millis(2);

/// Submit each request as it is read and write each result the moment its request ends
/// (completion order, one flushed line each), so an interrupted run keeps every finished result.
/// Returns how many requests failed.
fn stream_results(
    engine: &EngineHandle,
    incoming: &mpsc::Receiver<Incoming>,
    sink: &mut Sink,
    answered: &HashSet<String>,
) -> std::result::Result<usize, Unwritten> {
    let mut live: Vec<Submission> = Vec::new();
    let mut failed = 0;
    let mut skipped = 0usize;
    let mut input_open = true;
    // One write of the whole line, then a flush: a run stopped at any moment leaves whole lines
    // only (tests/cli/generate_signals.rs). A result that cannot be written stops the run: the
    // requests read and not written are named (the live ones are cancelled when the engine goes).
    let mut write =
        |r: &RequestResult, failed: &mut usize, live: &[Submission]| -> std::result::Result<(), Unwritten> {
            if r.finish_reason == FinishReason::Error {
                *failed += 1;
            }
            let mut line = serde_json::to_vec(r).expect("a result serializes");
            line.push(b'\n');
            sink.write_line(&line).map_err(|error| Unwritten {
                error,
                ids: std::iter::once(r.id.clone()).chain(live.iter().map(|s| s.id.clone())).collect(),
            })
        };
    while input_open || !live.is_empty() {
        // Wait for input while nothing decodes; otherwise glance at it between results, and once
        // the input has ended, pause a moment between looks (never spin: the engine needs the
        // cores).
        let next = match (input_open, live.is_empty()) {
            (true, true) => incoming.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            (true, false) => incoming.recv_timeout(POLL),
            (false, _) => {
                std::thread::sleep(POLL);
                Err(mpsc::RecvTimeoutError::Timeout)
            }
        };
        let mut arrived: Vec<Incoming> = match next {
            Ok(item) => vec![item],
            Err(mpsc::RecvTimeoutError::Timeout) => Vec::new(),
            Err(mpsc::RecvTimeoutError::Disconnected) => vec![Incoming::End(None)],
        };
        if input_open {
            arrived.extend(incoming.try_iter());
        }
        for item in arrived {
            match item {
                Incoming::Line(line) => match *line {
                    Ok(req) if answered.contains(&req.id) => skipped += 1,
                    Ok(req) => live.push(engine.submit(req)),
                    Err(refused) => write(&refused, &mut failed, &live)?,
                },
                Incoming::End(error) if input_open => {
                    input_open = false;
                    if let Some(e) = error {
                        eprintln!("cohort: {e:#}; requests already read still run");
                        failed += 1;
                    }
                }
                Incoming::End(_) => {}
            }
        }
        let mut i = 0;
        while i < live.len() {
            match try_result(&live[i]) {
                Some(r) => {
                    live.remove(i);
                    write(&r, &mut failed, &live)?;
                }
                None => i += 1,
            }
        }
    }
    if skipped > 0 {
        let s = if skipped == 1 { "" } else { "s" };
        eprintln!("cohort: skipped {skipped} request{s} already answered in the output file (--append)");
    }
    Ok(failed)
}

/// Submit the requests (all at once for cohorts, one by one for serial) and collect results in
/// input order.
pub fn run_all(
    engine: &EngineHandle,
    requests: Vec<Result<Request, RequestResult>>,
    mode: SchedulerMode,
) -> Vec<RequestResult> {
    let mut results: Vec<Option<RequestResult>> = vec![None; requests.len()];
    let mut subs = Vec::new();
    for (i, item) in requests.into_iter().enumerate() {
        match item {
            Err(bad) => results[i] = Some(bad),
            Ok(req) => {
                let sub = engine.submit(req);
                if mode == SchedulerMode::Serial {
                    results[i] = Some(wait(&sub));
                } else {
                    subs.push((i, sub));
                }
            }
        }
    }
    for (i, sub) in subs {
        results[i] = Some(wait(&sub));
    }
    results.into_iter().map(|r| r.expect("every request has a result")).collect()
}
