//! The benchmarks' phase timer against the engine's untimed cycle, on a synthetic hybrid model.

use cohort::engine::cycle::{self, Phase, PhaseClock, PhaseTimer, Untimed};
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::CancelFlag;
use cohort::engine::row::RowRun;
use cohort::engine::sampler::SamplerConfig;
use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::forward::LanguageModel;
use cohort::model::layers::cache::RowCache;
use cohort::model::text::tokenizer::TextTokenizer;
use mlx_rs::{Array, Dtype};

fn model() -> Qwen35Model {
    let cfg = cohort_lab::synth::geometry("qwen35-moe-small", Some(2), Some(256)).unwrap();
    let mut w = cohort_lab::synth::make_weights(&cfg, Dtype::Float32, 11).unwrap();
    Qwen35Model::from_weights(cfg, &mut w, Dtype::Float32).unwrap()
}

/// Three rows: greedy, and two sampled at temperature 1 (so drafts are sometimes accepted on
/// random weights, and the owe-history and keep = 2 paths run).
fn rows(model: &Qwen35Model, tok: &TextTokenizer) -> (Vec<RowRun>, Vec<RowCache>) {
    let mut runs = Vec::new();
    let mut rows = Vec::new();
    for b in 0..3u32 {
        let ids: Vec<u32> = (0..5 + 3 * b).map(|i| (i * 37 + b * 11) % 256).collect();
        let sampler = if b == 0 {
            SamplerConfig::greedy()
        } else {
            SamplerConfig { temperature: 1.0, top_p: 1.0, top_k: 0, ..SamplerConfig::default() }
        };
        let req = Request {
            id: format!("r{b}"),
            prompt: Prompt::Ids(ids.clone()),
            max_tokens: 40,
            sampler,
            seed: 100 + u64::from(b),
            stop: Vec::new(),
            ignore_eos: true,
            mode: None,
        };
        let mut run = RowRun::new(&req, ids, Vec::new(), CancelFlag::default());
        let mut row = model.new_row();
        cohort::engine::solo::prefill_row(model, tok, &mut run, &mut row, 64, true, &mut |_| {}).unwrap();
        runs.push(run);
        rows.push(row);
    }
    (runs, rows)
}

/// Each row's tokens after 12 cycles, and the drafts accepted over all rows.
fn decode(model: &Qwen35Model, tok: &TextTokenizer, mtp: bool, clock: &mut dyn PhaseClock) -> (Vec<Vec<u32>>, usize) {
    let (mut runs, mut rows) = rows(model, tok);
    let cycle = if mtp { cycle::mtp } else { cycle::ar };
    for _ in 0..12 {
        cycle(model, tok, &mut runs, &mut rows, &[], clock, &mut |_, _| {}).unwrap();
    }
    (runs.iter().map(|r| r.tokens.clone()).collect(), runs.iter().map(|r| r.stats.accepted_drafts).sum())
}

/// A benchmark's timer evaluates every phase's arrays before the next phase starts; the
/// engine's cycle does not. The tokens must not depend on it, or the benchmark would time a
/// different computation from the one served. And every phase of the cycle is timed.
#[test]
fn timing_the_phases_changes_no_token_and_times_each_phase() {
    let model = model();
    let tok = TextTokenizer::numbered(256).unwrap();
    for mtp in [true, false] {
        let (untimed, accepted) = decode(&model, &tok, mtp, &mut Untimed);
        let mut timer = PhaseTimer::new(Box::new(|o: &[&Array]| o.iter().map(|a| (*a).clone()).collect()));
        let (timed, _) = decode(&model, &tok, mtp, &mut timer);
        assert_eq!(untimed, timed, "mtp {mtp}");
        assert_eq!(accepted > 0, mtp, "some drafts accepted, so the owe-history phase wrote entries");
        assert!(untimed.iter().all(|t| t.len() > 12), "every row emitted a token a cycle: {untimed:?}");
        let phases: Vec<Phase> = timer.times.keys().copied().collect();
        let expected = if mtp {
            vec![Phase::OweHistory, Phase::Draft, Phase::Verify, Phase::Decide, Phase::Commit]
        } else {
            vec![Phase::Step, Phase::Decide, Phase::Commit]
        };
        assert_eq!(phases, expected);
        assert!(timer.times.values().all(|v| v.len() == 12), "one time per phase a cycle");
        assert_eq!(timer.cycle_totals().len(), 12);
    }
}
