//! `cohort-lab bench --arrivals`: requests that arrive over time, continuous admission against the
//! sealed B8 lane, each arm on a fresh engine, in ABBA order per round. Three scenarios:
//! - join: a chat turn sent 3 s after seven long answers started: its time to first token;
//! - pair: a long answer beside one short question: the long answer's pace once the short one
//!   has ended, against the same answer decoded alone (tokens over the same window);
//! - staggered: eight requests of 128 tokens arriving 0.5 s apart: aggregate tok/s and mean time
//!   to first token;
//! - reads: four prompts of about 1,500, 600, 150 and 30 tokens sent together: the short
//!   question's time to first token and the mean over the four (the `round-robin` arm reads them
//!   in turns, the others shortest first).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use cohort::config::model_args::ModelArgs;
use cohort_core::engine::draft_policy::DraftPolicy;
use cohort_core::engine::handle::{EngineHandle, Submission};
use cohort_core::engine::owner::EngineSetup;
use cohort_core::engine::request::{Prompt, Request, RequestResult};
use cohort_core::engine::row::RowEvent;
use cohort_core::engine::sampler::SamplerConfig;
use cohort_core::engine::scheduler::{Numerics, Preset, ReadOrder, SchedulerConfig, WidthPolicy};
use cohort_core::engine::solo::GenerationMode;
use cohort_core::model::text::tokenizer::ChatMessage;

/// A submitted request as a client sees it: when it was sent, when each token arrived, its end.
struct Watched {
    sub: Submission,
    sent: Instant,
    /// (arrival, tokens so far) per delta.
    tokens: Vec<(Instant, usize)>,
    done: Option<(Instant, RequestResult)>,
}

impl Watched {
    fn ttft_s(&self) -> Option<f64> {
        self.tokens.first().map(|(t, _)| t.duration_since(self.sent).as_secs_f64())
    }

    /// Tokens a second between the delta that reached `from` tokens and the last one.
    fn pace_from(&self, from: usize) -> Option<f64> {
        let start = self.tokens.iter().find(|(_, n)| *n >= from)?;
        let end = self.tokens.last()?;
        let secs = end.0.duration_since(start.0).as_secs_f64();
        (secs > 0.0 && end.1 > start.1).then(|| (end.1 - start.1) as f64 / secs)
    }

    fn count(&self) -> usize {
        self.tokens.last().map(|(_, n)| *n).unwrap_or(0)
    }
}

struct Client<'e> {
    engine: &'e EngineHandle,
    watched: Vec<Watched>,
}

impl<'e> Client<'e> {
    fn send(&mut self, req: Request) -> usize {
        let sent = Instant::now();
        self.watched.push(Watched { sub: self.engine.submit(req), sent, tokens: Vec::new(), done: None });
        self.watched.len() - 1
    }

    fn poll(&mut self) {
        for w in &mut self.watched {
            for ev in w.sub.events.try_iter() {
                let now = Instant::now();
                match ev {
                    RowEvent::Delta { ids, .. } => {
                        let n = w.count() + ids.len();
                        w.tokens.push((now, n));
                    }
                    RowEvent::Done(r) => w.done = Some((now, *r)),
                    RowEvent::Queued { .. } | RowEvent::Prefill { .. } => {}
                }
            }
        }
    }

    /// Poll until `until` holds (or `limit` passes).
    fn wait(&mut self, limit: Duration, until: impl Fn(&Self) -> bool) -> Result<()> {
        let t0 = Instant::now();
        loop {
            self.poll();
            if until(self) {
                return Ok(());
            }
            anyhow::ensure!(t0.elapsed() < limit, "a scenario ran past {limit:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn all_done(&self) -> bool {
        self.watched.iter().all(|w| w.done.is_some())
    }
}

fn chat(id: &str, text: &str, max_tokens: usize, ignore_eos: bool) -> Request {
    Request {
        id: id.into(),
        prompt: Prompt::Chat(vec![ChatMessage::new("user", text)]),
        max_tokens,
        sampler: SamplerConfig::greedy(),
        seed: 4200,
        stop: vec![],
        ignore_eos,
        mode: None,
    }
}

const LONG_TOPICS: [&str; 8] = [
    "the history of lighthouses",
    "how bread rises",
    "why the sky is blue",
    "a robot gardener",
    "the rules of chess",
    "how volcanoes form",
    "a week of hiking",
    "the life cycle of a butterfly",
];

/// An admission policy to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Arm {
    /// Continuous admission, the physical batch exactly the live rows.
    Continuous,
    /// Continuous admission, the batch padded to 1, 2, 4 or 8 rows.
    PowerOfTwo,
    /// Continuous admission, drafting every cycle (no plain cycles measured against drafting).
    Drafting,
    /// The sealed fixed-B8 lane.
    Sealed,
    /// Continuous admission, waiting prompts read in turns rather than shortest first.
    RoundRobin,
}

impl Arm {
    fn scheduler(self) -> SchedulerConfig {
        match self {
            Arm::Continuous => SchedulerConfig { width: WidthPolicy::Packed, ..Preset::Throughput.config() },
            Arm::PowerOfTwo => SchedulerConfig { width: WidthPolicy::PowerOfTwo, ..Preset::Throughput.config() },
            Arm::Drafting => SchedulerConfig { drafts: DraftPolicy::Always, ..Preset::Throughput.config() },
            Arm::Sealed => Preset::Sealed.config(),
            Arm::RoundRobin => SchedulerConfig { read_order: ReadOrder::RoundRobin, ..Preset::Throughput.config() },
        }
    }

    fn name(self) -> &'static str {
        match self {
            Arm::Continuous => "continuous",
            Arm::PowerOfTwo => "power-of-two",
            Arm::Drafting => "drafting",
            Arm::Sealed => "sealed",
            Arm::RoundRobin => "round-robin",
        }
    }
}

#[derive(Serialize, Default, Clone)]
struct ArmFigures {
    arm: String,
    round: usize,
    join_ttft_s: f64,
    pair_alone_tok_s: f64,
    pair_solo_tok_s: f64,
    pair_ratio: f64,
    staggered_tok_s: f64,
    staggered_mean_ttft_s: f64,
    reads_question_ttft_s: f64,
    reads_mean_ttft_s: f64,
}

const LIMIT: Duration = Duration::from_secs(600);

fn join(engine: &EngineHandle) -> Result<f64> {
    let mut c = Client { engine, watched: Vec::new() };
    for (i, topic) in LONG_TOPICS.iter().take(7).enumerate() {
        c.send(chat(&format!("join-long-{i}"), &format!("Write a long essay about {topic}."), 256, true));
    }
    let t0 = Instant::now();
    c.wait(LIMIT, |_| t0.elapsed() >= Duration::from_secs(3))?;
    let turn = c.send(chat("join-turn", "Say hello.", 16, false));
    c.wait(LIMIT, |c| c.watched[turn].done.is_some())?;
    for i in 0..7 {
        engine.cancel(&format!("join-long-{i}"));
    }
    c.wait(LIMIT, Client::all_done)?;
    c.watched[turn].ttft_s().context("the chat turn streamed nothing")
}

/// (the long answer's pace once alone, the same answer's pace decoded alone over that window)
fn pair(engine: &EngineHandle) -> Result<(f64, f64)> {
    let long = || chat("pair-long", "Write a long essay about the history of lighthouses.", 384, true);
    let mut c = Client { engine, watched: Vec::new() };
    let l = c.send(long());
    let s = c.send(chat("pair-short", "What is 2 + 2?", 24, true));
    c.wait(LIMIT, Client::all_done)?;
    // The window starts when the short answer's last token arrived (a sealed cohort delivers its
    // result only when the long one ends), a few tokens later so the seat has been freed.
    let short_end = c.watched[s].tokens.last().context("the short answer streamed nothing")?.0;
    let at_end = c.watched[l].tokens.iter().take_while(|(t, _)| *t <= short_end).last().map(|x| x.1);
    let from = at_end.unwrap_or(0) + 8;
    let alone = c.watched[l].pace_from(from).context("the long answer ended with its partner")?;
    let mut c = Client { engine, watched: Vec::new() };
    let l = c.send(long());
    c.wait(LIMIT, Client::all_done)?;
    let solo = c.watched[l].pace_from(from).context("the solo answer was too short")?;
    Ok((alone, solo))
}

/// (aggregate tok/s, mean time to first token)
fn staggered(engine: &EngineHandle) -> Result<(f64, f64)> {
    let mut c = Client { engine, watched: Vec::new() };
    let t0 = Instant::now();
    for (i, topic) in LONG_TOPICS.iter().enumerate() {
        c.wait(LIMIT, |_| t0.elapsed() >= Duration::from_millis(500 * i as u64))?;
        c.send(chat(&format!("stagger-{i}"), &format!("Write about {topic}."), 128, true));
    }
    c.wait(LIMIT, Client::all_done)?;
    let end = c.watched.iter().filter_map(|w| w.done.as_ref().map(|d| d.0)).max().unwrap_or(t0);
    let tokens: usize = c.watched.iter().filter_map(|w| w.done.as_ref()).map(|d| d.1.token_ids.len()).sum();
    let ttfts: Vec<f64> = c.watched.iter().filter_map(Watched::ttft_s).collect();
    Ok((tokens as f64 / end.duration_since(t0).as_secs_f64(), ttfts.iter().sum::<f64>() / ttfts.len().max(1) as f64))
}

/// (the short question's time to first token, the mean over the four prompts)
fn reads(engine: &EngineHandle) -> Result<(f64, f64)> {
    let text = |items: usize| -> String {
        let lines: Vec<String> =
            (0..items).map(|i| format!("Item {i}: notes on {}.", LONG_TOPICS[i % LONG_TOPICS.len()])).collect();
        format!("{}\nSummarise these notes in one line.", lines.join("\n"))
    };
    let mut c = Client { engine, watched: Vec::new() };
    for (i, items) in [150, 60, 15].into_iter().enumerate() {
        c.send(chat(&format!("reads-{i}"), &text(items), 8, true));
    }
    let question =
        c.send(chat("reads-question", "What is the capital of France, and which river runs through it?", 8, true));
    c.wait(LIMIT, Client::all_done)?;
    let ttfts: Vec<f64> = c.watched.iter().filter_map(Watched::ttft_s).collect();
    anyhow::ensure!(ttfts.len() == 4, "a prompt streamed nothing");
    let q = c.watched[question].ttft_s().context("the question streamed nothing")?;
    Ok((q, ttfts.iter().sum::<f64>() / 4.0))
}

fn arm(
    model: &ModelArgs,
    which: Arm,
    mode: Option<GenerationMode>,
    numerics: Numerics,
    round: usize,
) -> Result<ArmFigures> {
    let engine = model.start_engine(EngineSetup {
        scheduler: which.scheduler(),
        numerics,
        mode,
        serial: false,
        allow_inexact: cohort_core::engine::probe::allow_inexact(),
    })?;
    if round == 1 {
        eprintln!("{}: mode {:?}, numerics {:?}", which.name(), engine.info.mode, engine.info.numerics);
    }
    let name = which.name();
    let join_ttft_s = join(&engine)?;
    let (alone, solo) = pair(&engine)?;
    let (staggered_tok_s, staggered_mean_ttft_s) = staggered(&engine)?;
    let (reads_question_ttft_s, reads_mean_ttft_s) = reads(&engine)?;
    let f = ArmFigures {
        arm: name.into(),
        round,
        join_ttft_s,
        pair_alone_tok_s: alone,
        pair_solo_tok_s: solo,
        pair_ratio: alone / solo,
        staggered_tok_s,
        staggered_mean_ttft_s,
        reads_question_ttft_s,
        reads_mean_ttft_s,
    };
    println!(
        "{:<12} {:>5} {:>10.3} {:>10.1} {:>10.1} {:>7.2} {:>11.1} {:>10.3} {:>8.3} {:>8.3}",
        f.arm,
        f.round,
        f.join_ttft_s,
        f.pair_alone_tok_s,
        f.pair_solo_tok_s,
        f.pair_ratio,
        f.staggered_tok_s,
        f.staggered_mean_ttft_s,
        f.reads_question_ttft_s,
        f.reads_mean_ttft_s
    );
    Ok(f)
}

pub fn run(
    model: &ModelArgs,
    mode: Option<GenerationMode>,
    numerics: Numerics,
    rounds: usize,
    arms: &[Arm],
    receipt: &Path,
) -> Result<()> {
    println!(
        "{:<12} {:>5} {:>10} {:>10} {:>10} {:>7} {:>11} {:>10} {:>8} {:>8}",
        "arm",
        "round",
        "join_ttft",
        "pair_alone",
        "pair_solo",
        "ratio",
        "stagger_t/s",
        "stagger_ttft",
        "reads_q",
        "reads_mean"
    );
    let mut all = Vec::new();
    for round in 1..=rounds {
        // ABBA: the order flips every round, so drift on a noisy machine falls on every arm.
        let mut order = arms.to_vec();
        if round % 2 == 0 {
            order.reverse();
        }
        for which in order {
            all.push(arm(model, which, mode, numerics, round)?);
        }
    }
    let summary = |name: &str| {
        let of = |f: fn(&ArmFigures) -> f64| middle(all.iter().filter(|a| a.arm == name).map(f).collect());
        serde_json::json!({
            "join_ttft_s": of(|a| a.join_ttft_s), "pair_ratio": of(|a| a.pair_ratio),
            "staggered_tok_s": of(|a| a.staggered_tok_s), "staggered_mean_ttft_s": of(|a| a.staggered_mean_ttft_s),
            "reads_question_ttft_s": of(|a| a.reads_question_ttft_s), "reads_mean_ttft_s": of(|a| a.reads_mean_ttft_s),
        })
    };
    let mut medians = serde_json::Map::new();
    for which in arms {
        let m = summary(which.name());
        println!("median {:<12} {m}", which.name());
        medians.insert(which.name().into(), m);
    }
    let receipt_json = serde_json::json!({
        "scenarios": "join (7 x 256 tokens, a chat turn at 3 s), pair (384 + 24 tokens), staggered (8 x 128, 0.5 s apart), reads (prompts of ~1,500, 600, 150 and 30 tokens sent together, 8 tokens each)",
        "device": cohort_core::platform::backend::RuntimeReport::collect(), "runs": all, "median": medians,
    });
    std::fs::write(receipt, serde_json::to_string_pretty(&receipt_json)?)
        .with_context(|| format!("cannot write {}", receipt.display()))?;
    eprintln!("receipt: {}", receipt.display());
    Ok(())
}

/// The median, the mean of the middle two for an even count (two rounds are the usual case).
fn middle(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if !n.is_multiple_of(2) => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
