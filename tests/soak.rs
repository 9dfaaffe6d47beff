//! Soak: 400 requests in waves through the engine handle, with random cancellations at every
//! point (queued, prefill, the prefill/merge boundary, decode). Every request must end with a
//! finish reason, nothing may hang, the queue must drain to 0/0, and MLX's active memory after
//! each wave must come back to its baseline. Figures go to docs/reliability.md.

mod common;

use std::time::{Duration, Instant};

use cohort::cli::model_args::ModelArgs;
use cohort::engine::owner::EngineSetup;
use cohort::engine::request::{FinishReason, Prompt, Request};
use cohort::engine::row::RowEvent;
use cohort::engine::sampler::{Rng, SamplerConfig};
use cohort::engine::scheduler::{Numerics, Preset};
use common::*;

#[derive(Clone, Copy, Debug)]
enum CancelAt {
    Never,
    Queued,
    Prefill,
    Boundary,
    Decode(usize),
}

#[test]
fn four_hundred_requests_in_waves_with_random_cancellations() {
    let args = ModelArgs { model: Some(fixture("qwen35_moe_4bit").display().to_string()), dtype: None, weights: None };
    let engine = args
        .start_engine(EngineSetup {
            scheduler: Preset::Throughput.config(),
            numerics: Numerics::Throughput,
            mode: None,
            serial: false,
        })
        .unwrap();
    let mut rng = Rng::new(2026);
    let (mut total, mut counts) = (0usize, std::collections::BTreeMap::new());
    let mut baseline = None;
    let mut max_drift: i64 = 0;
    let started = Instant::now();
    while total < 400 {
        let wave = (4 + rng.next_u64() % 29) as usize;
        let wave = wave.min(400 - total);
        let plans: Vec<(Request, CancelAt)> = (0..wave)
            .map(|i| {
                let n = total + i;
                let len = 1 + (rng.next_u64() % 120) as usize;
                let prompt: Vec<u32> = (0..len).map(|_| (rng.next_u64() % 500) as u32).collect();
                let sampler =
                    if rng.next_u64().is_multiple_of(2) { SamplerConfig::greedy() } else { SamplerConfig::default() };
                let cancel = match rng.next_u64() % 10 {
                    0 => CancelAt::Queued,
                    1 => CancelAt::Prefill,
                    2 => CancelAt::Boundary,
                    3 | 4 => CancelAt::Decode(1 + (rng.next_u64() % 12) as usize),
                    _ => CancelAt::Never,
                };
                let req = Request {
                    id: format!("s{n}"),
                    prompt: Prompt::Ids(prompt),
                    max_tokens: 2 + (rng.next_u64() % 30) as usize,
                    sampler,
                    seed: n as u64,
                    stop: vec![],
                    ignore_eos: true,
                };
                (req, cancel)
            })
            .collect();
        total += wave;
        let results: Vec<FinishReason> = std::thread::scope(|s| {
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
                            let ev = sub
                                .events
                                .recv_timeout(Duration::from_secs(60))
                                .unwrap_or_else(|_| panic!("{} hung", sub.id));
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
                                RowEvent::Done(r) => return r.finish_reason,
                                _ => {}
                            }
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in results {
            assert_ne!(r, FinishReason::Error);
            *counts.entry(format!("{r:?}")).or_insert(0usize) += 1;
        }
        // Cancelled rows report before their cohort ends: wait for the owner to go idle.
        let idle_by = Instant::now() + Duration::from_secs(60);
        while {
            let t = engine.snapshot();
            (t.pending, t.active) != (0, 0)
        } {
            assert!(Instant::now() < idle_by, "the engine did not drain");
            std::thread::sleep(Duration::from_millis(5));
        }
        mlx_rs::memory::clear_cache().unwrap();
        let active = mlx_rs::memory::active_memory().unwrap() as i64;
        let base = *baseline.get_or_insert(active);
        max_drift = max_drift.max(active - base);
    }
    let t = engine.snapshot();
    assert_eq!((t.pending, t.active), (0, 0));
    assert!(max_drift <= 256 * 1024, "active memory drifted by {max_drift} bytes");
    let accounted: usize = counts.values().sum();
    assert_eq!(accounted, 400);
    assert!(counts.contains_key("Cancelled") && counts.contains_key("Length"), "{counts:?}");
    eprintln!(
        "soak: 400 requests in {:.1} s; finish reasons {counts:?}; cohorts {}, solo runs {}, width histogram {:?}; max active-memory drift {max_drift} bytes",
        started.elapsed().as_secs_f64(),
        t.cohorts,
        t.solo_runs,
        t.real_width_histogram
    );
}
