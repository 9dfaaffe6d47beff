//! `cohort-lab bench`: the reference protocol. Eight unique marker prompts with seeds 4200-4207 run
//! as a serial arm (one after another, each a solo B1 run) and a cohort arm (released together,
//! one B8 cohort), for greedy and the default sampler, in paired rounds. Metric: completed output
//! tokens / wall time per arm; reported: every round, actual token counts, the ratio of medians.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;

use cohort::cli::generate::{SchedulerMode, run_all};
use cohort::config::model_args::ModelArgs;
use cohort_core::engine::owner::EngineSetup;
use cohort_core::engine::request::{FinishReason, Prompt, Request};
use cohort_core::engine::sampler::SamplerConfig;
use cohort_core::engine::scheduler::{Numerics, Preset};
use cohort_core::engine::solo::GenerationMode;
use cohort_core::model::text::tokenizer::ChatMessage;
use cohort_core::platform::timing::median;

#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Output tokens per request.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Paired rounds per sampler.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(long, value_enum)]
    generation_mode: Option<GenerationMode>,
    #[arg(long, value_enum, default_value = "throughput")]
    numerics: Numerics,
    /// Where the JSON receipt goes.
    #[arg(long, default_value = "bench-receipt.json")]
    receipt: PathBuf,
    /// Only this sampler (greedy or default); both when absent.
    #[arg(long)]
    sampler: Option<String>,
    /// Requests that arrive over time instead: continuous admission against the sealed lane,
    /// ABBA (bench_arrivals.rs says what is measured).
    #[arg(long)]
    arrivals: bool,
    /// With --arrivals: the admission policies to compare.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "continuous,sealed")]
    arms: Vec<super::bench_arrivals::Arm>,
}

const TOPICS: [&str; 8] = [
    "the history of lighthouses",
    "how bread rises",
    "why the sky is blue",
    "a short story about a robot gardener",
    "the rules of chess for beginners",
    "how volcanoes form",
    "a packing list for a week of hiking",
    "the life cycle of a butterfly",
];

fn prompts(sampler: SamplerConfig, max_tokens: usize, chat: bool) -> Vec<Request> {
    TOPICS
        .iter()
        .enumerate()
        .map(|(i, topic)| {
            let text = format!("Marker COHORT-{i}. Write about {topic}. Begin your answer with the marker.");
            Request {
                id: format!("bench-{i}"),
                prompt: if chat { Prompt::Chat(vec![ChatMessage::new("user", &text)]) } else { Prompt::Text(text) },
                max_tokens,
                sampler,
                seed: 4200 + i as u64,
                stop: vec![],
                ignore_eos: false,
                mode: None,
            }
        })
        .collect()
}

#[derive(Serialize)]
struct ArmRun {
    sampler: String,
    arm: String,
    round: usize,
    tokens: usize,
    wall_s: f64,
    tps: f64,
    acceptance: f64,
    real_width: usize,
    errors: usize,
}

#[derive(Serialize)]
struct Summary {
    sampler: String,
    serial_median_tps: f64,
    cohort_median_tps: f64,
    ratio_of_medians: f64,
}

pub fn run(args: BenchArgs) -> Result<()> {
    // Refused before the model loads: no round to take a median of, or a receipt that could be
    // written only after every round had run (opened to append, so an old receipt is kept until
    // the new one replaces it).
    if args.rounds == 0 {
        anyhow::bail!("--rounds 0: the bench needs at least one round");
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&args.receipt)
        .with_context(|| format!("cannot write the receipt {}", args.receipt.display()))?;
    if args.arrivals {
        return super::bench_arrivals::run(
            &args.model,
            args.generation_mode,
            args.numerics,
            args.rounds,
            &args.arms,
            &args.receipt,
        );
    }
    let setup = EngineSetup {
        scheduler: Preset::Sealed.config(),
        numerics: args.numerics,
        mode: args.generation_mode,
        serial: false,
        allow_inexact: cohort_core::engine::probe::allow_inexact(),
    };
    let engine = args.model.start_engine(setup)?;
    let chat = cohort_core::model::text::tokenizer::TextTokenizer::load(&engine.info.dir)?.has_chat_template();
    eprintln!(
        "bench: {} mode {:?}, numerics {:?}, {} rounds x 8 requests x {} tokens",
        engine.info.dir.display(),
        engine.info.mode,
        engine.info.numerics,
        args.rounds,
        args.max_tokens
    );
    let samplers: Vec<(&str, SamplerConfig)> =
        [("greedy", SamplerConfig::greedy()), ("default", SamplerConfig::default())]
            .into_iter()
            .filter(|(n, _)| args.sampler.as_deref().is_none_or(|s| s == *n))
            .collect();
    let mut runs = Vec::new();
    let mut summaries = Vec::new();
    println!(
        "{:<8} {:<7} {:>5} {:>7} {:>8} {:>9} {:>6} {:>5}",
        "sampler", "arm", "round", "tokens", "wall_s", "tok/s", "accept", "width"
    );
    for (name, sampler) in samplers {
        let (mut serial_tps, mut cohort_tps) = (Vec::new(), Vec::new());
        for round in 1..=args.rounds {
            for (arm, mode) in [("serial", SchedulerMode::Serial), ("cohort", SchedulerMode::Cohort)] {
                engine.set_serial(mode == SchedulerMode::Serial);
                let reqs = prompts(sampler, args.max_tokens, chat).into_iter().map(Ok).collect();
                let t = Instant::now();
                let results = run_all(&engine, reqs, mode);
                let wall_s = t.elapsed().as_secs_f64();
                // A failed request is not a measurement (it read as a round of 0 tok/s).
                let failed: Vec<_> = results.iter().filter(|r| r.finish_reason == FinishReason::Error).collect();
                if let Some(first) = failed.first() {
                    anyhow::bail!(
                        "{name} {arm} round {round}: {} of {} requests failed: {}",
                        failed.len(),
                        results.len(),
                        first.error.as_deref().unwrap_or("no reason given")
                    );
                }
                let tokens: usize = results.iter().map(|r| r.token_ids.len()).sum();
                let (acc, rej) =
                    results.iter().fold((0, 0), |a, r| (a.0 + r.stats.accepted_drafts, a.1 + r.stats.rejected_drafts));
                let run = ArmRun {
                    sampler: name.into(),
                    arm: arm.into(),
                    round,
                    tokens,
                    wall_s,
                    tps: tokens as f64 / wall_s,
                    acceptance: if acc + rej > 0 { acc as f64 / (acc + rej) as f64 } else { 0.0 },
                    real_width: results.iter().map(|r| r.stats.real_width).max().unwrap_or(0),
                    errors: results.iter().filter(|r| r.finish_reason == FinishReason::Error).count(),
                };
                println!(
                    "{:<8} {:<7} {:>5} {:>7} {:>8.3} {:>9.1} {:>6.2} {:>5}",
                    run.sampler, run.arm, run.round, run.tokens, run.wall_s, run.tps, run.acceptance, run.real_width
                );
                if mode == SchedulerMode::Serial {
                    serial_tps.push(run.tps)
                } else {
                    cohort_tps.push(run.tps)
                }
                runs.push(run);
            }
        }
        let (s, c) = (median(serial_tps), median(cohort_tps));
        println!("{name}: cohort/serial ratio of medians = {:.3}x ({c:.1} vs {s:.1} tok/s)", c / s);
        summaries.push(Summary {
            sampler: name.into(),
            serial_median_tps: s,
            cohort_median_tps: c,
            ratio_of_medians: c / s,
        });
    }
    engine.set_serial(false);
    let receipt = serde_json::json!({
        "model": engine.info.dir, "mode": engine.info.mode, "numerics": engine.info.numerics, "probe": engine.info.probe,
        "construction_check": engine.info.construction, "max_tokens": args.max_tokens, "rounds": args.rounds,
        "device": cohort_core::platform::backend::RuntimeReport::collect(), "runs": runs, "summary": summaries,
    });
    std::fs::write(&args.receipt, serde_json::to_string_pretty(&receipt)?)
        .with_context(|| format!("cannot write {}", args.receipt.display()))?;
    eprintln!("receipt: {}", args.receipt.display());
    Ok(())
}
