//! bench-step's B8 steps: eight packed rows with MTP history, then draft + verify + commit
//! cycles and B8 AR steps, each from the same state. [`b8_cycles`] times one configuration;
//! [`interleaved_b8`] takes the arms' switches in turn on the same rows, step by step, so the
//! arms see the same moments of a noisy host (as the interleaved B1 arms do).

use std::time::Instant;

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use super::bench_step::{
    Arm, BenchStepArgs, ProfiledStep, arm_order, close_window, eval_timed, kernel_cells, kernel_columns, min_max, ms,
    print_graph_stats, profile_window, set_arm, synthetic_ids,
};
use crate::engine::cohort::FIXED_WIDTH;
use crate::engine::runtime::median;
use crate::engine::solo::restore_from_capture;
use crate::model::cache::RowCache;
use crate::model::forward::{LanguageModel, Logits};
use crate::model::kv_slots::{self, SlotHandle};
use crate::model::ops::host_u32;
use crate::model::qwen3_5::Qwen35Model;

/// Each timed B8 cycle's parts (the verify's handover too), then each B8 AR step's, in ms.
#[derive(Default)]
pub struct B8Times {
    pub draft: Vec<f64>,
    pub verify: Vec<f64>,
    pub verify_enqueued: Vec<f64>,
    pub commit: Vec<f64>,
    pub sample: Vec<f64>,
    pub ar: Vec<f64>,
    pub ar_enqueued: Vec<f64>,
}

/// Eight rows as in an MTP cohort past its first cycle: prefilled to different lengths, with
/// MTP history, their KV packed, their recurrent states in one batch.
struct Cohort {
    rows: Vec<RowCache>,
    hidden: Array,
    x0: Array,
    slots: Vec<SlotHandle>,
}

impl Cohort {
    fn new(model: &Qwen35Model) -> Result<Self> {
        let ids = |n: usize, salt: u32| synthetic_ids(n, salt, model.cfg.vocab_size);
        let mut rows: Vec<_> = (0..FIXED_WIDTH).map(|_| model.new_row()).collect();
        let mut hidden = Vec::new();
        for (b, r) in rows.iter_mut().enumerate() {
            let (h, _, _) = model.prefill(r, &ids(64 + 8 * b, b as u32 + 2), 512, false)?;
            hidden.push(h);
        }
        let hidden = mlx_rs::ops::concatenate(&hidden, 0)?;
        let x0 =
            Array::from_slice(&(0..FIXED_WIDTH as i32).map(|b| 11 + b).collect::<Vec<_>>(), &[FIXED_WIDTH as i32, 1]);
        model.mtp_forward(&hidden, &x0, &mut rows.iter_mut().collect::<Vec<_>>())?;
        let slots = kv_slots::pack(&mut rows)?;
        kv_slots::eval_with(&slots, [])?;
        // One untimed step of all eight rows, so their recurrent states sit in one batch as in a
        // cohort past its first cycle (model/gdn_batch.rs), not in the prefills' eight.
        let mut refs: Vec<_> = rows.iter_mut().collect();
        model.forward(&x0, &mut refs, Logits::Last, false)?;
        kv_slots::eval_with(&slots, refs.iter().flat_map(|r| r.arrays()))?;
        Ok(Cohort { rows, hidden, x0, slots })
    }

    /// One draft + verify + commit cycle (the `i`-th), timed part by part, then back to the
    /// state before it. Pushes its times when `keep`.
    fn cycle(
        &mut self,
        model: &Qwen35Model,
        args: &BenchStepArgs,
        i: usize,
        keep: bool,
        times: &mut B8Times,
    ) -> Result<()> {
        let before = self.rows.clone();
        let mut refs: Vec<_> = self.rows.iter_mut().collect();
        let window = profile_window(args, ProfiledStep::Draft, i)?;
        let t = Instant::now();
        let q = model.mtp_forward(&self.hidden, &self.x0, &mut refs)?;
        let d = mlx_rs::ops::indexing::argmax_axis(&q.reshape(&[FIXED_WIDTH as i32, -1])?, -1, true)?
            .as_dtype(Dtype::Int32)?;
        if i == 0 && args.graph_stats {
            print_graph_stats("a B8 draft", &refs.iter().flat_map(|r| r.mtp.arrays()).chain([&d]).collect::<Vec<_>>())?;
        }
        kv_slots::eval_with(&self.slots, refs.iter().flat_map(|r| r.mtp.arrays()).chain([&d]))?;
        let t_draft = ms(t);
        close_window(window)?;
        let window = profile_window(args, ProfiledStep::Verify, i)?;
        let t = Instant::now();
        let out = model.forward(&mlx_rs::ops::concatenate(&[self.x0.clone(), d], 1)?, &mut refs, Logits::All, true)?;
        let am = mlx_rs::ops::indexing::argmax_axis(out.logits.as_ref().unwrap(), -1, None)?;
        let outputs: Vec<_> = refs.iter().flat_map(|r| r.arrays()).chain([&am, &out.hidden]).collect();
        if i == 0 && args.graph_stats {
            print_graph_stats("a B8 verify", &outputs)?;
        }
        let t_verify_enqueued = eval_timed(kv_slots::with_buffers(&self.slots, outputs), t)?;
        let t_verify = ms(t);
        close_window(window)?;
        let t = Instant::now();
        let picked = host_u32(&am)?;
        let t_sample = ms(t);
        let t = Instant::now();
        for (b, r) in self.rows.iter_mut().enumerate() {
            r.trim_attention(1)?;
            restore_from_capture(r, &out.captures, 0, b);
        }
        mlx_rs::transforms::eval(self.rows.iter().flat_map(|r| r.arrays()))?;
        let t_commit = ms(t);
        debug_assert_eq!(picked.len(), 2 * FIXED_WIDTH);
        self.rows = before; // every timed cycle starts from the same state
        if keep {
            times.draft.push(t_draft);
            times.verify.push(t_verify);
            times.verify_enqueued.push(t_verify_enqueued);
            times.commit.push(t_commit);
            times.sample.push(t_sample);
        }
        Ok(())
    }

    /// One B8 AR step (T=1 on all eight rows, ids read back), then back to the state before it.
    fn ar_step(
        &mut self,
        model: &Qwen35Model,
        args: &BenchStepArgs,
        i: usize,
        keep: bool,
        times: &mut B8Times,
    ) -> Result<()> {
        let before = self.rows.clone();
        let mut refs: Vec<_> = self.rows.iter_mut().collect();
        let window = profile_window(args, ProfiledStep::Ar, i)?;
        let t = Instant::now();
        let out = model.forward(&self.x0, &mut refs, Logits::Last, false)?;
        let am = mlx_rs::ops::indexing::argmax_axis(out.logits.as_ref().unwrap(), -1, None)?;
        let outputs: Vec<_> = refs.iter().flat_map(|r| r.arrays()).chain([&am]).collect();
        if i == 0 && args.graph_stats {
            print_graph_stats("a B8 AR step", &outputs)?;
        }
        let enqueued = eval_timed(kv_slots::with_buffers(&self.slots, outputs), t)?;
        host_u32(&am)?;
        close_window(window)?;
        if keep {
            times.ar.push(ms(t));
            times.ar_enqueued.push(enqueued);
        }
        self.rows = before;
        Ok(())
    }
}

/// `iters` timed B8 cycles (after two untimed ones), each from the same packed state, then as
/// many B8 AR steps.
pub fn b8_cycles(model: &Qwen35Model, args: &BenchStepArgs, progress: &dyn Fn(&str, f64)) -> Result<B8Times> {
    let mut times = B8Times::default();
    let t_rows = Instant::now();
    let mut cohort = Cohort::new(model)?;
    progress("B8 rows prefilled, packed and stepped once", t_rows.elapsed().as_secs_f64());
    for i in 0..args.iters + 2 {
        let t = Instant::now();
        cohort.cycle(model, args, i, i >= 2, &mut times)?;
        if i < 2 {
            progress(&format!("B8 cycle {}", i + 1), t.elapsed().as_secs_f64());
        }
    }
    progress(
        &format!("{} timed B8 cycles", args.iters),
        [&times.draft, &times.verify, &times.commit, &times.sample].iter().flat_map(|v| v.iter()).sum::<f64>() / 1e3,
    );
    for i in 0..args.iters + 2 {
        cohort.ar_step(model, args, i, i >= 2, &mut times)?;
    }
    Ok(times)
}

/// B8 cycles and B8 AR steps with every arm's switches taken in turn (mirrored order every
/// other round) on one cohort of rows, each step from the same state: the arms' differences in
/// draft, verify and AR time, measured side by side.
pub fn interleaved_b8(model: &Qwen35Model, args: &BenchStepArgs, arms: &[Arm]) -> Result<()> {
    let mut cohort = Cohort::new(model)?;
    let mut times: Vec<B8Times> = arms.iter().map(|_| B8Times::default()).collect();
    for round in 0..args.iters + 2 {
        for a in arm_order(round, arms.len()) {
            set_arm(&arms[a]);
            // Numbered from 2: graph statistics and profiling windows belong to b8_cycles' first
            // two rounds.
            cohort.cycle(model, args, round + 2, round >= 2, &mut times[a])?;
            cohort.ar_step(model, args, round + 2, round >= 2, &mut times[a])?;
        }
    }
    println!("\nB8 steps interleaved ({} rounds, each arm's cycle and AR step from the same eight rows)", args.iters);
    println!(
        "| {} | compiled blocks | draft ms | verify ms | commit ms | cycle ms | B8 AR ms | verify min | verify max |",
        kernel_columns()
    );
    println!("|{}", " --- |".repeat(8 + super::bench_switches::COUNT));
    for (arm, t) in arms.iter().zip(times) {
        let (lo, hi) = min_max(&t.verify);
        let cycles: Vec<f64> =
            (0..t.draft.len()).map(|k| t.draft[k] + t.verify[k] + t.commit[k] + t.sample[k]).collect();
        println!(
            "| {} | {:?} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {lo:.2} | {hi:.2} |",
            kernel_cells(arm),
            arm.compiled,
            median(t.draft),
            median(t.verify),
            median(t.commit),
            median(cycles),
            median(t.ar)
        );
    }
    Ok(())
}
