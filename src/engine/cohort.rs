//! The B8 cohort: 2 to 8 requests decode in lockstep as the rows of one fixed-width batch, one
//! draft and one T=2 verify per cycle, without ever sharing a logical context.
//!
//! Every row keeps its own state (`RowCache`: KV with committed offsets, GDN conv tail and
//! recurrent state, MTP history) and its own `RowRun` (sampler, RNG, budget, stops, cancel).
//! Batched layers gather the rows' recurrent state per step and hand each row its part back;
//! attention KV is packed after prefill into one buffer per layer with a slot per row
//! (`kv_slots`), the rows keeping their own offsets. Padding, finished and cancelled rows ride
//! along inert: after every cycle they are put back exactly as they were (keep = 0), so their
//! offsets and states never move.

use std::cell::Cell;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};

use super::memory_guard;
use super::prepare::VERIFY_SLACK;
use super::request::FinishReason;
use super::row::{RowEvent, RowRun};
use super::sampler::{Decision, Dist, SamplerConfig, decide, distributions};
use super::solo::{GenerationMode, draft_inputs, prefill_row, restore_from_capture};
use super::telemetry::{RowState, RowTelemetry, SharedTelemetry, push_recent};
use crate::model::cache::RowCache;
use crate::model::forward::{LanguageModel, Logits};
use crate::model::kv_slots;
use crate::model::ops::{host_u32, slice_axis};
use crate::model::tokenizer::TextTokenizer;

/// The physical width every cohort runs at.
pub const FIXED_WIDTH: usize = 8;

thread_local! {
    /// Test hook: make cycle N (1-based, counted on this thread from the call) fail.
    static FAIL_AT_CYCLE: Cell<usize> = const { Cell::new(0) };
    static CYCLES_RUN: Cell<usize> = const { Cell::new(0) };
}

/// Make the Nth cohort cycle run on this thread from now fail (0 = off). The owner thread sets
/// it from its own commands, so tests can reach it through the engine handle too.
pub fn inject_fault_at_cycle(n: usize) {
    CYCLES_RUN.set(0);
    FAIL_AT_CYCLE.set(n);
}

#[derive(Debug, Clone)]
pub struct CohortConfig {
    pub chunk: usize,
    pub route_id: String,
    /// Mtp: one draft and one T=2 verify per cycle. Ar: one T=1 step per cycle for models
    /// without MTP weights (or whose probe declined MTP), still one batch for all rows.
    pub mode: GenerationMode,
}

/// A slot's decode inputs: real rows read theirs from `RowRun`, inert rows keep a dummy's.
#[derive(Clone)]
pub(crate) struct Inert {
    hidden: Array,
    primary: u32,
}

fn tokens(ids: &[u32], rows: i32, cols: i32) -> Array {
    Array::from_slice(&ids.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[rows, cols])
}

/// A one-token row used for padding and for rows cancelled before they decode.
pub(crate) fn dummy(model: &dyn LanguageModel) -> Result<(RowCache, Inert)> {
    let mut row = model.new_row();
    let (hidden, _, _) = model.prefill(&mut row, &[0], 1, false)?;
    Ok((row, Inert { hidden, primary: 0 }))
}

/// Run the sealed cohort `runs` (2 to 8 rows) to completion. Streams deltas through `events`;
/// terminal results are left in the runs for the owner to deliver after cleanup.
pub fn run_cohort(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    cfg: &CohortConfig,
    tel: &SharedTelemetry,
    events: &mut dyn FnMut(RowEvent),
) -> Result<()> {
    if runs.is_empty() || runs.len() > FIXED_WIDTH {
        bail!("a cohort holds 1 to {FIXED_WIDTH} rows, not {}", runs.len());
    }
    let (dummy_row, dummy_in) = dummy(model)?;
    let mut rows: Vec<RowCache> = vec![dummy_row.clone(); FIXED_WIDTH];
    let inert: Vec<Inert> = (0..FIXED_WIDTH).map(|_| Inert { hidden: dummy_in.hidden.clone(), primary: 0 }).collect();
    publish_rows(tel, runs, &rows, RowState::Queued);

    // Prefill row by row; cancellation is polled before each prefill and at the boundary.
    for (b, run) in runs.iter_mut().enumerate() {
        if run.cancel.is_cancelled() {
            run.cancel_now();
            continue;
        }
        set_state(tel, b, RowState::Prefill);
        let mut row = model.new_row();
        match prefill_row(model, tok, run, &mut row, cfg.chunk, cfg.mode == GenerationMode::Mtp, events) {
            Ok(()) if run.cancel.is_cancelled() => run.cancel_now(), // the merge-boundary poll
            Ok(()) => rows[b] = row,                                 // ownership moves into the cohort
            Err(e) => run.fail(format!("prefill failed: {e:#}")),
        }
        if run.finish.is_some() {
            rows[b] = dummy_row.clone(); // a finished row keeps no large state
        }
        set_state(tel, b, if run.is_active() { RowState::Decoding } else { state_of(run) });
    }
    for run in runs.iter_mut() {
        deliver_cancelled(run, tok, events);
    }
    let real = runs.len();
    for run in runs.iter_mut() {
        run.stats.real_width = real;
    }
    let slots = pack_if_it_fits(model, runs, &mut rows)?;
    kv_slots::eval_with(&slots, [])?;
    let t0 = Instant::now();
    while runs.iter().any(|r| r.is_active()) {
        for run in runs.iter_mut() {
            if run.is_active() && run.cancel.is_cancelled() {
                run.cancel_now();
            }
            deliver_cancelled(run, tok, events);
        }
        fault_hook()?;
        let mut by_row = |_: usize, ev: RowEvent| events(ev);
        match cfg.mode {
            GenerationMode::Mtp => cycle(model, tok, runs, &mut rows, &inert, &mut by_row)?,
            GenerationMode::Ar => cycle_ar(model, tok, runs, &mut rows, &inert, &mut by_row)?,
        }
        // One evaluation per cycle, so no row carries a pending graph into the next.
        let hidden = runs.iter().filter_map(|r| r.hidden_last.as_ref());
        kv_slots::eval_with(&slots, rows.iter().flat_map(|r| r.arrays()).chain(hidden))?;
        update_telemetry(tel, runs, &rows);
        // Each row's decode time ends when the row does, not when its cohort does.
        for run in runs.iter_mut() {
            if !run.is_active() && run.stats.decode_s == 0.0 {
                run.stats.decode_s = t0.elapsed().as_secs_f64();
            }
        }
    }
    for run in runs.iter_mut() {
        if run.stats.decode_s == 0.0 {
            run.stats.decode_s = t0.elapsed().as_secs_f64();
        }
        run.stats.route = cfg.route_id.clone();
    }
    Ok(())
}

/// Move every row's KV into one buffer per layer, so a cycle attends all rows at once. Each slot
/// is as long as the longest row may grow, so the buffers can need more than the rows did apart;
/// when the memory available cannot hold them, the rows keep their own KV and attend one by one.
pub(crate) fn pack_if_it_fits(
    model: &dyn LanguageModel,
    runs: &[RowRun],
    rows: &mut [RowCache],
) -> Result<Vec<kv_slots::SlotHandle>> {
    let step = crate::model::cache::KV_STEP as usize;
    let longest = runs.iter().map(|r| r.prompt_ids.len().saturating_add(r.max_tokens)).max().unwrap_or(0);
    let positions = longest.saturating_add(VERIFY_SLACK).div_ceil(step).saturating_mul(step);
    let needed = rows.len().saturating_mul(positions).saturating_mul(model.kv_bytes_per_position());
    if let Err(e) = memory_guard::ensure_fits(needed as u64, "one KV buffer per layer for the cohort's rows") {
        tracing::warn!("{e:#}; the rows keep their own KV and attend one by one");
        return Ok(Vec::new());
    }
    kv_slots::pack(rows)
}

/// A cancelled row closes its stream at once; its peers keep decoding.
fn deliver_cancelled(run: &mut RowRun, tok: &TextTokenizer, events: &mut dyn FnMut(RowEvent)) {
    if !run.delivered && matches!(run.finish, Some((FinishReason::Cancelled, _))) {
        run.delivered = true;
        events(RowEvent::Done(Box::new(run.result(tok))));
    }
}

fn state_of(run: &RowRun) -> RowState {
    match &run.finish {
        None => RowState::Decoding,
        Some((FinishReason::Cancelled, _)) => RowState::Cancelled,
        Some((FinishReason::Error, _)) => RowState::Error,
        Some(_) => RowState::Done,
    }
}

/// The test hook: fail when this thread reaches the cycle `inject_fault_at_cycle` named.
pub(crate) fn fault_hook() -> Result<()> {
    let n = CYCLES_RUN.get() + 1;
    CYCLES_RUN.set(n);
    if FAIL_AT_CYCLE.get() == n {
        bail!("injected fault in cohort cycle {n}");
    }
    Ok(())
}

/// One lockstep MTP cycle (owe history, draft, verify, decide, commit) over every slot of
/// `rows`: slot b < runs.len() is runs[b]'s row, the rest are inert padding. Events go out with
/// the index of the run that made them.
pub(crate) fn cycle(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    events: &mut dyn FnMut(usize, RowEvent),
) -> Result<()> {
    let width = rows.len();
    let active: Vec<bool> = (0..width).map(|b| b < runs.len() && runs[b].is_active()).collect();
    let before: Vec<RowCache> = rows.to_vec();

    // 1. Accepted drafts from the last cycle still owe their MTP history entry.
    let owing: Vec<usize> = (0..width).filter(|&b| active[b] && runs[b].pending_mtp.is_some()).collect();
    if !owing.is_empty() {
        let hs: Vec<Array> = owing.iter().map(|&b| runs[b].pending_mtp.as_ref().unwrap().0.clone()).collect();
        let ts: Vec<u32> = owing.iter().map(|&b| runs[b].pending_mtp.as_ref().unwrap().1).collect();
        let mut subset: Vec<&mut RowCache> =
            rows.iter_mut().enumerate().filter(|(b, _)| owing.contains(b)).map(|(_, r)| r).collect();
        model.mtp_forward(&mlx_rs::ops::concatenate(&hs, 0)?, &tokens(&ts, owing.len() as i32, 1), &mut subset)?;
        for &b in &owing {
            runs[b].pending_mtp = None;
        }
    }

    // 2. Draft for every slot at M = width.
    let mut hidden = Vec::with_capacity(width);
    let mut primary = Vec::with_capacity(width);
    for b in 0..width {
        if active[b] {
            let (h, t) = draft_inputs(&runs[b])?;
            hidden.push(h);
            primary.push(*t.last().unwrap());
        } else {
            hidden.push(inert[b].hidden.clone());
            primary.push(inert[b].primary);
        }
    }
    let hidden = mlx_rs::ops::concatenate(&hidden, 0)?;
    let x0 = tokens(&primary, width as i32, 1);
    {
        let mut all: Vec<&mut RowCache> = rows.iter_mut().collect();
        let q_logits = model.mtp_forward(&hidden, &x0, &mut all)?; // [W, 1, V]
        let cfgs: Vec<SamplerConfig> =
            (0..width).map(|b| if active[b] { runs[b].sampler } else { SamplerConfig::greedy() }).collect();
        let all_greedy = cfgs.iter().all(SamplerConfig::is_greedy);
        let vocab = *q_logits.shape().last().unwrap();
        let q_flat = q_logits.reshape(&[width as i32, vocab])?;

        // 3. Drafts: greedy cohorts keep them on the device and feed them straight into verify.
        let (verify_tokens, q_dists, drafts_dev) = if all_greedy {
            let d = mlx_rs::ops::indexing::argmax_axis(&q_flat, -1, true)?.as_dtype(Dtype::Int32)?;
            (mlx_rs::ops::concatenate(&[x0.clone(), d.clone()], 1)?, None, Some(d))
        } else {
            let pens: Vec<_> =
                (0..width).map(|b| if active[b] { &runs[b].penalties } else { &EMPTY_PENALTIES }).collect();
            let q = distributions(&q_flat, &cfgs, &pens)?;
            let mut ds = Vec::with_capacity(width);
            for b in 0..width {
                // A row with no room for a proposal draws nothing here, exactly as its solo run.
                let proposes = active[b] && runs[b].budget_left() >= 2;
                ds.push(if proposes { runs[b].draw(&q[b]) } else { q[b].argmax() });
            }
            let mut pairs = Vec::with_capacity(2 * width);
            for b in 0..width {
                pairs.extend([primary[b], ds[b]]);
            }
            (tokens(&pairs, width as i32, 2), Some((q, ds)), None)
        };

        // 4. Verify [x0, d] for every slot at M = 2 * width, capturing GDN states per position.
        let out = model.forward(&verify_tokens, &mut all, Logits::All, true)?;
        let logits = out.logits.as_ref().context("verify returned no logits")?;
        let (p0, p1, drafts): (Vec<Dist>, Vec<Option<Dist>>, Vec<u32>) = if let Some(d) = drafts_dev {
            // Only token ids reach the host.
            let am = mlx_rs::ops::indexing::argmax_axis(logits, -1, None)?;
            mlx_rs::transforms::async_eval([&am, &d])?;
            let (am, d) = (host_u32(&am)?, host_u32(&d)?);
            (
                (0..width).map(|b| Dist::one_hot(am[2 * b])).collect(),
                (0..width).map(|b| Some(Dist::one_hot(am[2 * b + 1]))).collect(),
                d.to_vec(),
            )
        } else {
            let (_, ds) = q_dists.as_ref().unwrap();
            let pens: Vec<_> =
                (0..width).map(|b| if active[b] { &runs[b].penalties } else { &EMPTY_PENALTIES }).collect();
            let l0 = slice_axis(logits, 1, 0, 1)?.reshape(&[width as i32, vocab])?;
            let p0 = distributions(&l0, &cfgs, &pens)?;
            // Position-1 distributions depend on penalties after the draft: computed per row below.
            (p0, vec![None; width], ds.clone())
        };
        let q_all: Vec<Dist> = match &q_dists {
            Some((q, _)) => q.clone(),
            None => drafts.iter().map(|&d| Dist::one_hot(d)).collect(),
        };

        // 5. Per-row decision and commit.
        for b in 0..width {
            if !active[b] {
                rows[b] = before[b].clone(); // keep = 0: inert rows change nothing
                continue;
            }
            let run = &mut runs[b];
            run.stats.verify_cycles += 1;
            let h0 = slice_axis(&slice_axis(&out.hidden, 0, b as i32, b as i32 + 1)?, 1, 0, 1)?;
            let h1 = slice_axis(&slice_axis(&out.hidden, 0, b as i32, b as i32 + 1)?, 1, 1, 2)?;
            let greedy = run.sampler.is_greedy();
            let proposal = run.budget_left() >= 2;
            let decision = if proposal {
                decide(&p0[b], &q_all[b], drafts[b], greedy, &mut run.rng)
            } else {
                // No room for two tokens: keep = 1 and take position 0's token as plain decoding would.
                Decision::Reject(run.draw(&p0[b]))
            };
            match decision {
                Decision::Accept(d) => {
                    run.stats.accepted_drafts += 1;
                    run.pending_mtp = Some((h0, d));
                    run.hidden_last = Some(h1);
                    if run.emit(d, tok, &mut |ev| events(b, ev))? {
                        let bonus = match &p1[b] {
                            Some(p) => p.argmax(),
                            None => {
                                let row_logits = slice_axis(&slice_axis(logits, 0, b as i32, b as i32 + 1)?, 1, 1, 2)?
                                    .reshape(&[1, vocab])?;
                                let p = distributions(&row_logits, &[run.sampler], &[&run.penalties])?.remove(0);
                                run.draw(&p)
                            }
                        };
                        run.primary = Some(bonus);
                        run.emit(bonus, tok, &mut |ev| events(b, ev))?;
                    }
                }
                Decision::Reject(t) => {
                    if proposal {
                        run.stats.rejected_drafts += 1;
                    }
                    rows[b].trim_attention(1)?;
                    restore_from_capture(&mut rows[b], &out.captures, 0, b);
                    run.hidden_last = Some(h0);
                    run.primary = Some(t);
                    run.emit(t, tok, &mut |ev| events(b, ev))?;
                }
            }
        }
    }
    Ok(())
}

/// One plain step for every slot: feed each row's primary, sample its next token. Inactive rows
/// are put back as they were (keep = 0).
pub(crate) fn cycle_ar(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    events: &mut dyn FnMut(usize, RowEvent),
) -> Result<()> {
    let width = rows.len();
    let active: Vec<bool> = (0..width).map(|b| b < runs.len() && runs[b].is_active()).collect();
    let before: Vec<RowCache> = rows.to_vec();
    let primary: Vec<u32> =
        (0..width).map(|b| if active[b] { runs[b].primary.unwrap_or(0) } else { inert[b].primary }).collect();
    let out = {
        let mut all: Vec<&mut RowCache> = rows.iter_mut().collect();
        model.forward(&tokens(&primary, width as i32, 1), &mut all, Logits::Last, false)?
    };
    let logits = out.logits.as_ref().context("step returned no logits")?;
    let vocab = *logits.shape().last().unwrap();
    let cfgs: Vec<SamplerConfig> =
        (0..width).map(|b| if active[b] { runs[b].sampler } else { SamplerConfig::greedy() }).collect();
    let pens: Vec<_> = (0..width).map(|b| if active[b] { &runs[b].penalties } else { &EMPTY_PENALTIES }).collect();
    let dists = distributions(&logits.reshape(&[width as i32, vocab])?, &cfgs, &pens)?;
    for b in 0..width {
        if !active[b] {
            rows[b] = before[b].clone();
            continue;
        }
        let run = &mut runs[b];
        let next = run.draw(&dists[b]);
        run.hidden_last = Some(slice_axis(&out.hidden, 0, b as i32, b as i32 + 1)?);
        run.primary = Some(next);
        run.emit(next, tok, &mut |ev| events(b, ev))?;
    }
    Ok(())
}

static EMPTY_PENALTIES: std::sync::LazyLock<super::sampler::PenaltyState> = std::sync::LazyLock::new(Default::default);

fn set_state(tel: &SharedTelemetry, b: usize, state: RowState) {
    if let Ok(mut t) = tel.lock()
        && let Some(r) = t.rows.get_mut(b)
    {
        r.state = state;
    }
}

fn publish_rows(tel: &SharedTelemetry, runs: &[RowRun], rows: &[RowCache], state: RowState) {
    if let Ok(mut t) = tel.lock() {
        t.rows = runs
            .iter()
            .map(|r| RowTelemetry { id: r.id.clone(), state, prefill_total: r.prompt_ids.len(), ..Default::default() })
            .collect();
        t.active = runs.len();
        let _ = rows;
    }
}

fn update_telemetry(tel: &SharedTelemetry, runs: &[RowRun], rows: &[RowCache]) {
    let Ok(mut t) = tel.lock() else { return };
    *t.fixed_width_cycles.entry(rows.len()).or_default() += 1;
    t.verify_cycles += 1;
    let (mut acc, mut rej) = (0, 0);
    for (b, run) in runs.iter().enumerate() {
        let Some(rt) = t.rows.get_mut(b) else { continue };
        let (a, r) = observe_row(rt, run, &rows[b]);
        (acc, rej) = (acc + a, rej + r);
        rt.state = state_of(run);
    }
    t.accepted_drafts += acc;
    t.rejected_drafts += rej;
    t.active = runs.iter().filter(|r| r.is_active()).count();
}

/// Bring a row's telemetry up to date after a cycle; returns the drafts it accepted and rejected
/// in that cycle.
pub(crate) fn observe_row(rt: &mut RowTelemetry, run: &RowRun, row: &RowCache) -> (usize, usize) {
    let newly_accepted = run.stats.accepted_drafts.saturating_sub(rt.accepted);
    let newly_rejected = run.stats.rejected_drafts.saturating_sub(rt.rejected);
    if newly_accepted > 0 || newly_rejected > 0 {
        push_recent(&mut rt.recent_accepts, newly_accepted > 0);
    }
    let (committed, physical) = row.attention_offsets().unwrap_or((row.len, row.len));
    rt.committed_offset = committed;
    rt.physical_offset = physical;
    rt.mtp_committed_offset = row.mtp.offset();
    rt.mtp_physical_offset = row.mtp.physical();
    rt.tokens = run.tokens.len();
    rt.accepted = run.stats.accepted_drafts;
    rt.rejected = run.stats.rejected_drafts;
    let cycles = run.stats.verify_cycles.max(1) as f64;
    rt.tokens_per_cycle = (2 * run.stats.accepted_drafts + run.stats.rejected_drafts) as f64 / cycles;
    (newly_accepted, newly_rejected)
}
