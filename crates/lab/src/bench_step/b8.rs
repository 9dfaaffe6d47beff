//! bench-step's B8 figures: eight greedy rows decoding through the engine's own cycle
//! (`engine::cycle`, the code a continuous lane and the sealed cohort run), their KV packed as
//! the lane packs it. [`b8_cycles`] times each phase of the MTP cycles with a `PhaseTimer`, then
//! the same number of plain (AR) cycles, then runs MTP cycles untimed as the lane does (one
//! evaluation a cycle) for the aggregate the engine serves. [`interleaved_b8`] takes the arms'
//! switches in turn on the same eight rows, cycle by cycle, so the arms see the same moments of a
//! noisy host.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use mlx_rs::Array;

use super::{
    Arm, BenchStepArgs, ProfiledStep, arm_order, arm_routes, close_window, kernel_cells, kernel_columns, min_max,
    print_graph_stats, profile_window, synthetic_ids,
};
use cohort_core::engine::cohort::{FIXED_WIDTH, pack_if_it_fits};
use cohort_core::engine::cycle::{self, Phase, PhaseClock, PhaseTimer, Untimed};
use cohort_core::engine::request::{Prompt, Request};
use cohort_core::engine::row::{CancelFlag, RowRun};
use cohort_core::engine::sampler::SamplerConfig;
use cohort_core::engine::solo::prefill_row;
use cohort_core::model::families::qwen3_5::Qwen35Model;
use cohort_core::model::forward::LanguageModel;
use cohort_core::model::layers::cache::{PackedKv, RowCache};
use cohort_core::model::text::tokenizer::TextTokenizer;
use cohort_core::platform::timing::median;

/// The B8 figures: each MTP cycle phase's times and handovers, the AR cycles', and what the
/// untimed cycles emitted.
#[derive(Default)]
pub struct B8Times {
    pub mtp: BTreeMap<Phase, Vec<f64>>,
    pub mtp_handed: BTreeMap<Phase, Vec<f64>>,
    pub ar: BTreeMap<Phase, Vec<f64>>,
    pub ar_handed: BTreeMap<Phase, Vec<f64>>,
    /// The untimed MTP cycles, run as the lane runs them: tokens emitted, seconds, and the drafts
    /// accepted of those proposed.
    pub served_tokens: usize,
    pub served_s: f64,
    pub accepted: usize,
    pub proposed: usize,
}

impl B8Times {
    /// Median of a phase's times (NaN when the phase never ran).
    pub fn median(times: &BTreeMap<Phase, Vec<f64>>, phase: Phase) -> f64 {
        match times.get(&phase) {
            Some(v) if !v.is_empty() => median(v.clone()),
            _ => f64::NAN,
        }
    }

    /// Median over cycles of the whole cycle (the sum of its phases).
    pub fn cycle_median(times: &BTreeMap<Phase, Vec<f64>>) -> f64 {
        let totals = cycle::cycle_totals(times);
        if totals.is_empty() { f64::NAN } else { median(totals) }
    }
}

/// The tokenizer the rows decode with: the model folder's, or numbered words for a synthetic
/// model (which has none).
pub fn tokenizer_for(dir: Option<&std::path::Path>, vocab: usize) -> Result<TextTokenizer> {
    match dir {
        Some(d) if d.join("tokenizer.json").exists() => TextTokenizer::load(d),
        _ => TextTokenizer::numbered(vocab),
    }
}

/// Eight rows as a lane holds them: prompts of different lengths read, first tokens emitted,
/// MTP history written, KV packed.
struct Cohort<'m> {
    model: &'m Qwen35Model,
    tok: &'m TextTokenizer,
    runs: Vec<RowRun>,
    rows: Vec<RowCache>,
    slots: PackedKv,
}

impl<'m> Cohort<'m> {
    fn new(model: &'m Qwen35Model, tok: &'m TextTokenizer, cycles: usize) -> Result<Self> {
        let mut runs = Vec::with_capacity(FIXED_WIDTH);
        let mut rows = Vec::with_capacity(FIXED_WIDTH);
        for b in 0..FIXED_WIDTH {
            let ids = synthetic_ids(64 + 8 * b, b as u32 + 2, model.cfg.vocab_size);
            let req = Request {
                id: format!("b8-{b}"),
                prompt: Prompt::Ids(ids.clone()),
                // Room for two tokens a cycle, so every row proposes in every cycle.
                max_tokens: 2 * cycles + 4,
                sampler: SamplerConfig::greedy(),
                seed: b as u64,
                stop: Vec::new(),
                ignore_eos: true,
                mode: None,
            };
            let mut run = RowRun::new(&req, ids, Vec::new(), CancelFlag::default());
            let mut row = model.new_row();
            prefill_row(model, tok, &mut run, &mut row, 512, true, &mut |_| {})?;
            runs.push(run);
            rows.push(row);
        }
        let slots = pack_if_it_fits(model, &runs, &mut rows)?;
        let cohort = Cohort { model, tok, runs, rows, slots };
        cohort.settle()?;
        Ok(cohort)
    }

    /// One cycle of `mode` with `clock`, then the lane's one evaluation a cycle.
    fn cycle(&mut self, mtp: bool, clock: &mut dyn PhaseClock) -> Result<()> {
        let model: &dyn LanguageModel = self.model;
        let run = if mtp { cycle::mtp } else { cycle::ar };
        run(model, self.tok, &mut self.runs, &mut self.rows, &[], clock, &mut |_, _| {})?;
        self.settle()
    }

    fn settle(&self) -> Result<()> {
        let hidden = self.runs.iter().filter_map(|r| r.hidden_last.as_ref());
        self.slots.eval_with(self.rows.iter().flat_map(|r| r.arrays()).chain(hidden))
    }

    /// A phase timer that evaluates each phase's arrays with the packed KV buffers they write.
    fn timer(&self) -> PhaseTimer<'static> {
        let slots = self.slots.clone();
        PhaseTimer::new(Box::new(move |outputs: &[&Array]| slots.with_buffers(outputs.iter().copied())))
    }

    fn emitted(&self) -> usize {
        self.runs.iter().map(|r| r.tokens.len()).sum()
    }

    fn drafts(&self) -> (usize, usize) {
        let accepted = self.runs.iter().map(|r| r.stats.accepted_drafts).sum::<usize>();
        (accepted, accepted + self.runs.iter().map(|r| r.stats.rejected_drafts).sum::<usize>())
    }
}

/// bench-step's clock: the phase timer, plus `--graph-stats` of the first cycle's draft, verify
/// and step graphs and the `--profile-step` window around its phase.
struct BenchClock<'a> {
    timer: PhaseTimer<'static>,
    args: &'a BenchStepArgs,
    cycle: usize,
    window: Option<crate::cuda_profiler::Window>,
}

fn profiled(phase: Phase) -> Option<ProfiledStep> {
    match phase {
        Phase::Draft => Some(ProfiledStep::Draft),
        Phase::Verify => Some(ProfiledStep::Verify),
        Phase::Step => Some(ProfiledStep::Ar),
        _ => None,
    }
}

impl PhaseClock for BenchClock<'_> {
    fn start(&mut self, phase: Phase) -> Result<()> {
        if let Some(step) = profiled(phase) {
            self.window = profile_window(self.args, step, self.cycle)?;
        }
        self.timer.start(phase)
    }

    fn handed(&mut self, phase: Phase) {
        self.timer.handed(phase);
    }

    fn end(&mut self, phase: Phase, outputs: &[&Array]) -> Result<()> {
        if self.cycle == 0 && self.args.graph_stats && profiled(phase).is_some() {
            print_graph_stats(&format!("a B8 {}", phase.name()), outputs)?;
        }
        self.timer.end(phase, outputs)?;
        close_window(self.window.take())
    }
}

/// `iters` timed MTP cycles (after two untimed ones), as many AR cycles, then `iters` MTP cycles
/// untimed as the lane runs them, on one cohort of eight rows.
pub fn b8_cycles(
    model: &Qwen35Model,
    tok: &TextTokenizer,
    args: &BenchStepArgs,
    progress: &dyn Fn(&str, f64),
) -> Result<B8Times> {
    let t_rows = Instant::now();
    let mut cohort = Cohort::new(model, tok, 3 * (args.iters + 2))?;
    progress("B8 rows prefilled, first tokens drawn, KV packed", t_rows.elapsed().as_secs_f64());
    let mut times = B8Times::default();
    for mtp in [true, false] {
        let timer = cohort.timer();
        let mut clock = BenchClock { timer, args, cycle: 0, window: None };
        let t = Instant::now();
        for i in 0..args.iters + 2 {
            clock.cycle = i;
            clock.timer.recording = i >= 2;
            cohort.cycle(mtp, &mut clock)?;
        }
        let what = if mtp { "MTP" } else { "AR" };
        progress(&format!("{} B8 {what} cycles, each phase timed", args.iters + 2), t.elapsed().as_secs_f64());
        let PhaseTimer { times: phases, handed, .. } = clock.timer;
        if mtp {
            (times.mtp, times.mtp_handed) = (phases, handed);
        } else {
            (times.ar, times.ar_handed) = (phases, handed);
        }
    }
    let (tokens, (accepted, proposed)) = (cohort.emitted(), cohort.drafts());
    let t = Instant::now();
    for _ in 0..args.iters {
        cohort.cycle(true, &mut Untimed)?;
    }
    times.served_s = t.elapsed().as_secs_f64();
    times.served_tokens = cohort.emitted() - tokens;
    let (a, p) = cohort.drafts();
    (times.accepted, times.proposed) = (a - accepted, p - proposed);
    progress(&format!("{} B8 MTP cycles untimed, as served", args.iters), times.served_s);
    Ok(times)
}

/// One arm's turn in an interleaved round, as (MTP cycle, timed): each kind once untimed and then
/// once timed, so a timed cycle reads what a cycle of its own kind left, as in a served cohort.
/// An MTP cycle right after an AR cycle would read the step's contiguous mixer state, not the
/// verify's per-position batch, and so hide what reading that batch costs (the copies the
/// in-place read spares).
const TURN: [(bool, bool); 4] = [(true, false), (true, true), (false, false), (false, true)];

/// B8 MTP and AR cycles with every arm's switches taken in turn (mirrored order every other
/// round) on one cohort of eight rows: the arms' differences per phase, measured side by side.
pub fn interleaved_b8(model: &Qwen35Model, tok: &TextTokenizer, args: &BenchStepArgs, arms: &[Arm]) -> Result<()> {
    let rounds = args.iters + 2;
    let mut cohort = Cohort::new(model, tok, TURN.len() * rounds * arms.len())?;
    let mut mtp: Vec<BTreeMap<Phase, Vec<f64>>> = vec![BTreeMap::new(); arms.len()];
    let mut ar: Vec<BTreeMap<Phase, Vec<f64>>> = vec![BTreeMap::new(); arms.len()];
    let base = cohort_core::model::routes::current();
    for round in 0..rounds {
        for a in arm_order(round, arms.len()) {
            let _in_force = cohort_core::model::routes::enter(arm_routes(&arms[a], base));
            for (is_mtp, timed) in TURN {
                let mut timer = cohort.timer();
                timer.recording = timed && round >= 2;
                cohort.cycle(is_mtp, &mut timer)?;
                let into = if is_mtp { &mut mtp[a] } else { &mut ar[a] };
                for (phase, t) in timer.times {
                    into.entry(phase).or_default().extend(t);
                }
            }
        }
    }
    println!(
        "\nB8 cycles interleaved ({} rounds, each arm's MTP and AR cycles on the same eight rows, each timed after one of its kind)",
        args.iters
    );
    println!(
        "| {} | compiled blocks | owe history ms | draft ms | verify ms | decide ms | commit ms | cycle ms | B8 AR cycle ms | verify min | verify max |",
        kernel_columns()
    );
    println!("|{}", " --- |".repeat(10 + super::switches::COUNT));
    for (a, arm) in arms.iter().enumerate() {
        let (lo, hi) = min_max(mtp[a].get(&Phase::Verify).map(Vec::as_slice).unwrap_or(&[]));
        let m = |p| B8Times::median(&mtp[a], p);
        println!(
            "| {} | {:?} | {:.2} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.2} | {lo:.2} | {hi:.2} |",
            kernel_cells(arm),
            arm.compiled,
            m(Phase::OweHistory),
            m(Phase::Draft),
            m(Phase::Verify),
            m(Phase::Decide),
            m(Phase::Commit),
            B8Times::cycle_median(&mtp[a]),
            B8Times::cycle_median(&ar[a]),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::TURN;

    #[test]
    fn every_timed_cycle_follows_an_untimed_cycle_of_its_kind() {
        for (i, &(is_mtp, timed)) in TURN.iter().enumerate() {
            if timed {
                assert!(
                    i > 0 && TURN[i - 1] == (is_mtp, false),
                    "timed cycle {i} follows {:?}",
                    TURN.get(i.wrapping_sub(1))
                );
            }
        }
        // Both kinds are timed.
        assert!(TURN.contains(&(true, true)) && TURN.contains(&(false, true)));
    }
}
