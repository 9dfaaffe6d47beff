//! `cohort generate`: requests from a JSONL file (or stdin), results as JSONL.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use super::model_args::ModelArgs;
use crate::engine::prepare::prepare;
use crate::engine::request::{FinishReason, Request, RequestLine, RequestResult};
use crate::engine::row::CancelFlag;
use crate::engine::sampler::SamplerConfig;
use crate::engine::solo::{GenerationMode, run_solo};

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
    /// ar, or mtp (default when the model has MTP weights).
    #[arg(long, value_enum)]
    generation_mode: Option<GenerationMode>,
    /// Prompt tokens per prefill chunk.
    #[arg(long, default_value_t = 512)]
    prefill_chunk: usize,
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

pub fn run(args: GenerateArgs) -> Result<u8> {
    let requests = read_requests(&args.input, &SamplerConfig::default())?;
    let loaded = args.model.load()?;
    let model = loaded.model.as_ref();
    let mode = choose_mode(model, args.generation_mode, &loaded.dir)?;
    let mut sink: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut failed = 0;
    for item in requests {
        let result = match item {
            Err(bad) => bad,
            Ok(req) => match prepare(model, &loaded.tokenizer, &req, CancelFlag::default()) {
                Err(e) => RequestResult::error(&req.id, format!("{e:#}")),
                Ok(mut run) => {
                    match run_solo(model, &loaded.tokenizer, &mut run, mode, args.prefill_chunk, &mut |_| {}) {
                        Ok(()) => run.result(&loaded.tokenizer),
                        Err(e) => {
                            run.fail(format!("{e:#}"));
                            run.result(&loaded.tokenizer)
                        }
                    }
                }
            },
        };
        if result.finish_reason == FinishReason::Error {
            failed += 1;
        }
        writeln!(sink, "{}", serde_json::to_string(&result)?)?;
        sink.flush()?;
    }
    Ok(if failed > 0 { super::exit::SOME_FAILED } else { super::exit::OK })
}

/// AR or MTP: MTP when asked for (or by default with MTP weights) and the exactness gate allows.
pub fn choose_mode(
    model: &dyn crate::model::forward::LanguageModel,
    asked: Option<GenerationMode>,
    dir: &std::path::Path,
) -> Result<GenerationMode> {
    if asked == Some(GenerationMode::Mtp) && !model.has_mtp() {
        anyhow::bail!("--generation-mode mtp: {} has no MTP weights", dir.display());
    }
    if asked == Some(GenerationMode::Ar) || !model.has_mtp() {
        return Ok(GenerationMode::Ar);
    }
    let decision = crate::engine::probe::gate(model, super::probe::allow_inexact())?;
    tracing::info!("{}", decision.summary);
    if !decision.mtp_allowed {
        eprintln!("cohort: {}", decision.summary);
        return Ok(GenerationMode::Ar);
    }
    Ok(GenerationMode::Mtp)
}
