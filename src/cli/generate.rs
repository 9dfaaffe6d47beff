//! `cohort generate`: requests from a JSONL file (or stdin), results as JSONL, through the same
//! scheduler the TUI uses (each request joins the running cohort at the next cycle).

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use super::model_args::ModelArgs;
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
    /// Request file, one JSON object per line ("-" for stdin).
    #[arg(long, short = 'i')]
    input: PathBuf,
    /// Where results go (default: stdout).
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
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
}

/// Parse every line; a bad line becomes an error result for that line, the rest still run.
pub fn read_requests(input: &std::path::Path, defaults: &SamplerConfig) -> Result<Vec<Result<Request, RequestResult>>> {
    let reader: Box<dyn BufRead> = if input.as_os_str() == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(input).with_context(|| format!("cannot open {}", input.display()))?,
        ))
    };
    let mut out = Vec::new();
    for (i, line) in reader.split(b'\n').enumerate() {
        let n = i + 1;
        let bytes = line.with_context(|| format!("reading {}", input.display()))?;
        let Ok(text) = String::from_utf8(bytes) else {
            out.push(Err(RequestResult::error(
                &format!("line-{n}"),
                format!("{}: line {n} is not valid UTF-8", input.display()),
            )));
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let parsed = serde_json::from_str::<RequestLine>(&text)
            .map_err(|e| anyhow::anyhow!("{}: line {n}: {e}", input.display()))
            .and_then(|l| l.into_request(n, defaults));
        out.push(parsed.map_err(|e| RequestResult::error(&format!("line-{n}"), format!("{e:#}"))));
    }
    Ok(out)
}

/// Block until a submission's terminal result arrives (deltas are skipped).
pub fn wait(sub: &Submission) -> RequestResult {
    loop {
        match sub.events.recv() {
            Ok(RowEvent::Done(r)) => return *r,
            Ok(_) => {}
            Err(_) => return RequestResult::error(&sub.id, "the engine stopped before finishing this request".into()),
        }
    }
}

pub fn run(args: GenerateArgs) -> Result<u8> {
    let requests = read_requests(&args.input, &SamplerConfig::default())?;
    let mut scheduler = args.preset.config();
    if let Some(c) = args.prefill_chunk {
        scheduler.prefill_chunk = c.max(1);
        scheduler.prefill_budget = scheduler.prefill_chunk;
    }
    if let Some(b) = args.prefill_budget {
        scheduler.prefill_budget = b.max(1);
    }
    let setup = EngineSetup {
        scheduler,
        numerics: args.numerics,
        mode: args.generation_mode,
        serial: args.scheduler == SchedulerMode::Serial,
    };
    let engine = args.model.start_engine(setup)?;
    if let Some(p) = &engine.info.probe {
        eprintln!("cohort: {p}");
    }
    let results = run_all(&engine, requests, args.scheduler);
    let mut sink: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut failed = 0;
    for result in results {
        if result.finish_reason == FinishReason::Error {
            failed += 1;
        }
        writeln!(sink, "{}", serde_json::to_string(&result)?)?;
    }
    sink.flush()?;
    Ok(if failed > 0 { super::exit::SOME_FAILED } else { super::exit::OK })
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
