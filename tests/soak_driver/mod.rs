//! The soak both soak runs share (tests/soak.rs on a fixture, tests/soak_default_model.rs on
//! the default model): requests in waves through the engine handle, with random cancellations
//! at every point (queued, prefill, the prefill/merge boundary, decode). Every request must end
//! with a finish reason and never with an error, nothing may hang, the queue must drain to 0/0
//! after every wave, and MLX's active memory after each wave, less what the prompt cache reports
//! holding (within its budget, by design), must come back to the first wave's. That subtraction
//! also holds the cache's byte count to what MLX allocated for it: entries that kept views of
//! larger arrays once held 21% more than they counted, and failed it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use cohort::config::model_args::ModelArgs;
use cohort::engine::owner::EngineSetup;
use cohort::engine::request::{FinishReason, Prompt, Request};
use cohort::engine::row::RowEvent;
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::scheduler::{Numerics, Preset};
use cohort::platform::rng::Rng;

/// How long one request may go without an event before it counts as hung.
const HANG: Duration = Duration::from_secs(60);
/// Most active memory a wave may leave behind, relative to the first wave.
pub const MAX_DRIFT_BYTES: i64 = 256 * 1024;

/// What to send. Ranges are inclusive.
#[derive(Debug, Clone)]
pub struct SoakSpec {
    pub requests: usize,
    pub seed: u64,
    pub wave: (usize, usize),
    pub prompt_len: (usize, usize),
    /// Prompt token ids are drawn below this; None: the model's vocabulary.
    pub token_ids_below: Option<u32>,
    pub budget: (usize, usize),
    /// A "decode" cancellation comes after this many streamed tokens (the first token is the
    /// prefill/merge boundary, cancelled there separately).
    pub decode_cancel: (usize, usize),
    /// False: requests may stop at end-of-sequence, as the TUI's do.
    pub ignore_eos: bool,
}

#[derive(Debug)]
pub struct SoakReport {
    /// Requests by finish reason (`Length`, `Stop`, `Cancelled`).
    pub finish_reasons: BTreeMap<String, usize>,
    pub cohorts: usize,
    pub solo_runs: usize,
    pub width_histogram: BTreeMap<usize, usize>,
    pub seconds: f64,
    /// Largest active memory after a wave minus the first wave's, in bytes.
    pub max_drift: i64,
}

#[derive(Clone, Copy, Debug)]
enum CancelAt {
    Never,
    Queued,
    Prefill,
    Boundary,
    Decode(usize),
}

fn draw(rng: &mut Rng, (lo, hi): (usize, usize)) -> usize {
    lo + (rng.next_u64() % (hi - lo + 1) as u64) as usize
}

/// Start an engine on `model` (the throughput preset, as the TUI's default profile runs) and run
/// the soak; panics on any broken rule, returns the figures otherwise.
pub fn soak(model: &Path, spec: &SoakSpec) -> SoakReport {
    // MLX's allocator counts a buffer it reuses from its cache at the buffer's own size, up to
    // two pages more than asked (a 6,000-byte array in a cached 8,000-byte buffer counts 8,000),
    // so with the cache on, active memory less the prompt cache's count moves by which buffers
    // the kept entries happened to reuse: 0.01-2.9 MB over 1,500 requests with answers kept as
    // decoded, up and down, against exactly 0 with the cache off. Off, every byte MLX counts is
    // one an array asked for, and what is left is what the soak looks for.
    mlx_rs::memory::set_cache_limit(0).expect("MLX's buffer cache limit");
    let args = ModelArgs { model: Some(model.display().to_string()), dtype: None, weights: None };
    let engine = args
        .start_engine(EngineSetup {
            scheduler: Preset::Throughput.config(),
            numerics: Numerics::Throughput,
            mode: None,
            serial: false,
            allow_inexact: false,
        })
        .unwrap_or_else(|e| panic!("{}: {e:#}", model.display()));
    let below = u64::from(spec.token_ids_below.unwrap_or(engine.info.vocab_size as u32));
    let mut rng = Rng::new(spec.seed);
    let (mut total, mut finish_reasons) = (0usize, BTreeMap::new());
    let mut baseline = None;
    let mut max_drift: i64 = 0;
    let started = Instant::now();
    while total < spec.requests {
        let wave = draw(&mut rng, spec.wave).min(spec.requests - total);
        let plans: Vec<(Request, CancelAt)> = (0..wave)
            .map(|i| {
                let n = total + i;
                let len = draw(&mut rng, spec.prompt_len);
                let prompt: Vec<u32> = (0..len).map(|_| (rng.next_u64() % below) as u32).collect();
                let sampler =
                    if rng.next_u64().is_multiple_of(2) { SamplerConfig::greedy() } else { SamplerConfig::default() };
                let cancel = match rng.next_u64() % 10 {
                    0 => CancelAt::Queued,
                    1 => CancelAt::Prefill,
                    2 => CancelAt::Boundary,
                    3 | 4 => CancelAt::Decode(draw(&mut rng, spec.decode_cancel)),
                    _ => CancelAt::Never,
                };
                let max_tokens = draw(&mut rng, spec.budget);
                let req = Request {
                    id: format!("s{n}"),
                    prompt: Prompt::Ids(prompt),
                    max_tokens,
                    sampler,
                    seed: n as u64,
                    stop: vec![],
                    ignore_eos: spec.ignore_eos,
                    mode: None,
                };
                (req, cancel)
            })
            .collect();
        total += wave;
        let results: Vec<(String, FinishReason, Option<String>)> = std::thread::scope(|s| {
            let handles: Vec<_> = plans
                .into_iter()
                .map(|(req, at)| {
                    let sub = engine.submit(req);
                    if matches!(at, CancelAt::Queued) {
                        sub.cancel.cancel();
                    }
                    s.spawn(move || {
                        let mut deltas = 0;
                        loop {
                            let ev = sub.events.recv_timeout(HANG).unwrap_or_else(|_| panic!("{} hung", sub.id));
                            match ev {
                                RowEvent::Prefill { .. } if matches!(at, CancelAt::Prefill) => sub.cancel.cancel(),
                                RowEvent::Delta { .. } => {
                                    deltas += 1;
                                    match at {
                                        CancelAt::Boundary if deltas == 1 => sub.cancel.cancel(),
                                        CancelAt::Decode(k) if deltas == k => sub.cancel.cancel(),
                                        _ => {}
                                    }
                                }
                                RowEvent::Done(r) => return (r.id, r.finish_reason, r.error),
                                _ => {}
                            }
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (id, reason, error) in results {
            assert_ne!(reason, FinishReason::Error, "{id}: {error:?}");
            *finish_reasons.entry(format!("{reason:?}")).or_insert(0usize) += 1;
        }
        // Cancelled rows report before their cohort ends: wait for the owner to go idle.
        let idle_by = Instant::now() + HANG;
        while {
            let t = engine.snapshot();
            (t.pending, t.active, t.prompt_cache.reading_back) != (0, 0, 0)
        } {
            assert!(Instant::now() < idle_by, "the engine did not drain");
            std::thread::sleep(Duration::from_millis(5));
        }
        // What the prompt cache holds by design (within its budget) is not left behind.
        let held = engine.snapshot().prompt_cache.bytes_held as i64;
        let active = mlx_rs::memory::active_memory().unwrap() as i64 - held;
        let base = *baseline.get_or_insert(active);
        max_drift = max_drift.max(active - base);
    }
    let t = engine.snapshot();
    assert_eq!((t.pending, t.active), (0, 0));
    assert!(max_drift <= MAX_DRIFT_BYTES, "active memory drifted by {max_drift} bytes");
    assert_eq!(finish_reasons.values().sum::<usize>(), spec.requests, "every request accounted for");
    assert!(finish_reasons.contains_key("Cancelled") && finish_reasons.contains_key("Length"), "{finish_reasons:?}");
    let report = SoakReport {
        finish_reasons,
        cohorts: t.cohorts,
        solo_runs: t.solo_runs,
        width_histogram: t.real_width_histogram,
        seconds: started.elapsed().as_secs_f64(),
        max_drift,
    };
    eprintln!(
        "soak on {}: {} requests in {:.1} s; finish reasons {:?}; cohorts {}, solo runs {}, width histogram {:?}; max active-memory drift {} bytes",
        model.display(),
        spec.requests,
        report.seconds,
        report.finish_reasons,
        report.cohorts,
        report.solo_runs,
        report.width_histogram,
        report.max_drift
    );
    report
}
