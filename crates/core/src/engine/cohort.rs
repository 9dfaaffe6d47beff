//! The B8 cohort: 2 to 8 requests decode in lockstep as the rows of one fixed-width batch, one
//! draft and one T=2 verify per cycle, without ever sharing a logical context.
//!
//! Every row keeps its own state (`RowCache`: KV with committed offsets, GDN conv tail and
//! recurrent state, MTP history) and its own `RowRun` (sampler, RNG, budget, stops, cancel).
//! Batched layers gather the rows' recurrent state per step and hand each row its part back;
//! attention KV is packed after prefill into one buffer per layer with a slot per row
//! (`RowCache::pack`), the rows keeping their own offsets. Padding, finished and cancelled rows ride
//! along inert: after every cycle they are put back exactly as they were (keep = 0), so their
//! offsets and states never move.

#[cfg(feature = "testing")]
use std::cell::Cell;
use std::time::Instant;

use anyhow::{Result, bail};

use super::cycle::{self, Inert, Untimed, dummy};
use super::prepare::VERIFY_SLACK;
use super::request::FinishReason;
use super::row::{RowEvent, RowRun};
use super::solo::{GenerationMode, prefill_row};
use super::telemetry::{RowState, RowTelemetry, SharedTelemetry, push_recent};
use crate::model::forward::LanguageModel;
use crate::model::layers::cache::{PackedKv, RowCache};
use crate::model::text::tokenizer::TextTokenizer;
use crate::platform::memory;

/// The physical width every cohort runs at: the rows one engine decodes together, and so the
/// panes the TUI shows at most (`config::profile::MAX_PANES`) and the widths the lane packs to.
pub const FIXED_WIDTH: usize = 8;

#[cfg(feature = "testing")]
thread_local! {
    /// Test hook: make cycle N (1-based, counted on this thread from the call) fail.
    static FAIL_AT_CYCLE: Cell<usize> = const { Cell::new(0) };
    static CYCLES_RUN: Cell<usize> = const { Cell::new(0) };
}

/// Make the Nth cohort cycle run on this thread from now fail (0 = off). The owner thread sets
/// it from its own commands, so tests can reach it through the engine handle too.
#[cfg(feature = "testing")]
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
    let inert: Vec<Inert> = vec![dummy_in; FIXED_WIDTH];
    for run in runs.iter_mut() {
        run.serve_in(cfg.mode);
    }
    publish_rows(tel, runs, &rows, RowState::Queued);

    // Prefill row by row; cancellation is polled before each prefill and at the boundary.
    for (b, run) in runs.iter_mut().enumerate() {
        if run.cancel.is_cancelled() {
            run.cancel_now();
            continue;
        }
        set_state(tel, b, RowState::Prefill);
        let mut row = model.new_row();
        // An AR row never drafts, so it needs no MTP history.
        match prefill_row(model, tok, run, &mut row, cfg.chunk, run.mode == GenerationMode::Mtp, events) {
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
    slots.eval_with([])?;
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
            GenerationMode::Mtp => cycle::mtp(model, tok, runs, &mut rows, &inert, &mut Untimed, &mut by_row)?,
            GenerationMode::Ar => cycle::ar(model, tok, runs, &mut rows, &inert, &mut Untimed, &mut by_row)?,
        }
        // One evaluation per cycle, so no row carries a pending graph into the next.
        let hidden = runs.iter().filter_map(|r| r.hidden_last.as_ref());
        slots.eval_with(rows.iter().flat_map(|r| r.arrays()).chain(hidden))?;
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
pub fn pack_if_it_fits(model: &dyn LanguageModel, runs: &[RowRun], rows: &mut [RowCache]) -> Result<PackedKv> {
    let step = crate::model::layers::cache::KV_STEP as usize;
    let longest = runs.iter().map(|r| r.prompt_ids.len().saturating_add(r.max_tokens)).max().unwrap_or(0);
    let positions = longest.saturating_add(VERIFY_SLACK).div_ceil(step).saturating_mul(step);
    let needed = rows.len().saturating_mul(positions).saturating_mul(model.kv_bytes_per_position());
    if let Err(e) = memory::ensure_fits(needed as u64, "one KV buffer per layer for the cohort's rows") {
        tracing::warn!("{e:#}; the rows keep their own KV and attend one by one");
        return Ok(PackedKv::none());
    }
    RowCache::pack(rows)
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
#[cfg(feature = "testing")]
pub(crate) fn fault_hook() -> Result<()> {
    let n = CYCLES_RUN.get() + 1;
    CYCLES_RUN.set(n);
    if FAIL_AT_CYCLE.get() == n {
        bail!("injected fault in cohort cycle {n}");
    }
    Ok(())
}

/// Without the test hooks a cycle never fails on purpose.
#[cfg(not(feature = "testing"))]
pub(crate) fn fault_hook() -> Result<()> {
    Ok(())
}

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
            .map(|r| RowTelemetry {
                id: r.id.clone(),
                state,
                prefill_total: r.prompt_ids.len(),
                mode: Some(r.mode),
                ..Default::default()
            })
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
    rt.mode = Some(run.mode);
    rt.accepted = run.stats.accepted_drafts;
    rt.rejected = run.stats.rejected_drafts;
    let cycles = run.stats.verify_cycles.max(1) as f64;
    rt.tokens_per_cycle = (2 * run.stats.accepted_drafts + run.stats.rejected_drafts) as f64 / cycles;
    (newly_accepted, newly_rejected)
}
