//! The solo B1 path: one request, plain autoregressive decoding or depth-one MTP.
//!
//! MTP cycle (per row): the primary token x0 is already emitted; (1) draft: the MTP module reads
//! (hidden of the last committed position, x0), plus any accepted draft's pending history entry,
//! and proposes d; (2) verify [x0, d] at T=2 capturing the GDN state after each position; (3)
//! accept d with min(1, p/q) (greedy: d == argmax p); (4) commit keep = 2 (state as it stands,
//! MTP history gains (verify hidden 0, d)) or keep = 1 (attention trimmed by one, GDN state from
//! the position-0 capture); (5) the bonus token (from p at position 1) or the corrected token
//! (from the residual at position 0) becomes the next primary.

use std::time::Instant;

use anyhow::{Context, Result};
use mlx_rs::Array;

use super::cycle::{self, Untimed};
use super::row::{RowEvent, RowRun};
use super::sampler::{Dist, distributions};
use crate::model::forward::{LanguageModel, Logits};
use crate::model::layers::cache::RowCache;
use crate::model::ops::slice_axis;
use crate::model::prefill::read_prompt;
use crate::model::text::tokenizer::TextTokenizer;

pub use super::request::GenerationMode;

/// The processed distribution of one row of logits [.., V] (last position).
pub fn dist_of(run: &RowRun, logits: &Array) -> Result<Dist> {
    let v = *logits.shape().last().unwrap();
    let flat = logits.reshape(&[-1, v])?;
    let n = flat.shape()[0];
    let last = slice_axis(&flat, 0, n - 1, n)?;
    Ok(distributions(&last, &[run.sampler], &[&run.penalties])?.remove(0))
}

fn token_array(ids: &[u32]) -> Array {
    cycle::tokens(ids, 1, ids.len() as i32)
}

/// Prefill the row (and its MTP history when `mtp`), then emit the first token.
pub fn prefill_row(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    run: &mut RowRun,
    row: &mut RowCache,
    chunk: usize,
    mtp: bool,
    events: &mut dyn FnMut(RowEvent),
) -> Result<()> {
    let t0 = Instant::now();
    let total = run.prompt_ids.len();
    events(RowEvent::Prefill { id: run.id.clone(), done: 0, total });
    let id = run.id.clone();
    let mut progress = |done: usize| {
        if done < total {
            events(RowEvent::Prefill { id: id.clone(), done, total });
        }
    };
    let (hidden_last, logits) = read_prompt(model, row, &run.prompt_ids, chunk, mtp, &mut progress)?;
    run.stats.prefill_s = t0.elapsed().as_secs_f64();
    first_token(run, tok, hidden_last, &logits, events)
}

/// A prompt has been read: draw and emit the row's first token from the last position's logits.
pub fn first_token(
    run: &mut RowRun,
    tok: &TextTokenizer,
    hidden_last: Array,
    logits: &Array,
    events: &mut dyn FnMut(RowEvent),
) -> Result<()> {
    run.hidden_last = Some(hidden_last);
    let dist = dist_of(run, logits)?;
    let x0 = run.draw(&dist);
    run.primary = Some(x0);
    run.stats.ttft_s = run.arrived.elapsed().as_secs_f64();
    run.emit(x0, tok, events)?;
    Ok(())
}

/// Run one request to completion on the solo path.
pub fn run_solo(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    run: &mut RowRun,
    mode: GenerationMode,
    chunk: usize,
    events: &mut dyn FnMut(RowEvent),
) -> Result<()> {
    run_solo_on(model, tok, run, &mut model.new_row(), mode, chunk, events)
}

/// `run_solo` on a caller-provided row state (tests inspect it afterwards).
pub fn run_solo_on(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    run: &mut RowRun,
    row: &mut RowCache,
    mode: GenerationMode,
    chunk: usize,
    events: &mut dyn FnMut(RowEvent),
) -> Result<()> {
    // The row's own mode where this engine's can serve it.
    run.serve_in(mode);
    let mode = run.mode;
    if run.cancel.is_cancelled() {
        run.cancel_now();
        return Ok(());
    }
    let mtp = mode == GenerationMode::Mtp;
    prefill_row(model, tok, run, row, chunk, mtp, events)?;
    let t0 = Instant::now();
    if !mtp && run.sampler.is_greedy() {
        ar_pipelined(model, tok, run, row, events)?;
    }
    while run.is_active() {
        if run.cancel.is_cancelled() {
            run.cancel_now();
            break;
        }
        lone_cycle(model, tok, run, row, mode, events)?;
        if mtp {
            // One evaluation a cycle, as a lane does after each of its cycles, so the row carries
            // no pending graph (verify captures, trimmed KV) into the next.
            let mut arrays = row.arrays();
            arrays.extend(run.hidden_last.as_ref());
            mlx_rs::transforms::eval(arrays)?;
        }
    }
    run.stats.decode_s = t0.elapsed().as_secs_f64();
    run.stats.route = route_id(mode, 1);
    Ok(())
}

/// One cycle of a row decoding alone (the solo path, and a continuous lane down to one row) in
/// an engine of mode `mode`: a draft and a T=2 verify when the row decodes MTP and has room for
/// two tokens, else one plain step.
pub fn lone_cycle(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    run: &mut RowRun,
    row: &mut RowCache,
    mode: GenerationMode,
    events: &mut dyn FnMut(RowEvent),
) -> Result<()> {
    let mtp = mode.serving(Some(run.mode)) == GenerationMode::Mtp;
    let room_for_two = run.budget_left() >= 2;
    if mtp && !room_for_two {
        // No room for a proposal: still record this transition in the MTP history so it always
        // covers every committed token.
        advance_mtp_history(model, run, row)?;
    }
    let runs = std::slice::from_mut(run);
    let rows = std::slice::from_mut(row);
    let mut events = |_: usize, ev: RowEvent| events(ev);
    if mtp && room_for_two {
        return cycle::mtp(model, tok, runs, rows, &[], &mut Untimed, &mut events);
    }
    cycle::ar(model, tok, runs, rows, &[], &mut Untimed, &mut events)
}

pub fn route_id(mode: GenerationMode, width: usize) -> String {
    match mode {
        GenerationMode::Ar => format!("ar_b{width}"),
        GenerationMode::Mtp => format!("mtp_d1_b{width}_t2"),
    }
}

/// A greedy step handed to the device: the next token [1, 1] (still on the device) and the hidden
/// state. The argmax is the sampler's greedy one (over float32 logits, lowest id on ties).
fn greedy_step(model: &dyn LanguageModel, token: &Array, row: &mut RowCache) -> Result<(Array, Array)> {
    let out = model.forward(token, &mut [&mut *row], Logits::Last, false)?;
    let logits = out.logits.context("no logits")?;
    let v = *logits.shape().last().unwrap();
    let next =
        mlx_rs::ops::indexing::argmax_axis(&logits.reshape(&[-1, v])?.as_dtype(mlx_rs::Dtype::Float32)?, -1, None)?;
    let next = next.as_dtype(mlx_rs::Dtype::Int32)?.reshape(&[1, 1])?;
    let mut arrays = row.arrays();
    arrays.push(&next);
    mlx_rs::transforms::async_eval(arrays)?;
    Ok((next, out.hidden))
}

/// Greedy AR decoding, pipelined as mlx-lm's `generate_step` is: each step is built from the
/// previous step's token while that is still on the device, and handed over before that token is
/// read, so the host builds step n + 1 while the device runs step n (on the H200 a B1 step's
/// graph takes about as long to hand over as the device takes to run it). The tokens are those
/// of `ar_step`. A row that stops on eos or a stop string leaves one step computed and unused;
/// its state is the request's own and is dropped with it.
fn ar_pipelined(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    run: &mut RowRun,
    row: &mut RowCache,
    events: &mut dyn FnMut(RowEvent),
) -> Result<()> {
    let x = run.primary.context("no primary token")?;
    if !run.is_active() {
        return Ok(());
    }
    let mut pending = greedy_step(model, &token_array(&[x]), row)?;
    while run.is_active() {
        if run.cancel.is_cancelled() {
            run.cancel_now();
            break;
        }
        // The budget's last token needs no step after it.
        let following = if run.budget_left() > 1 { Some(greedy_step(model, &pending.0, row)?) } else { None };
        let next = pending.0.item_cast::<u32>();
        run.hidden_last = Some(pending.1);
        run.primary = Some(next);
        run.emit(next, tok, events)?;
        match following {
            Some(f) => pending = f,
            None => break,
        }
    }
    Ok(())
}

/// Write the row's pending entry and (hidden_last, primary) to its MTP history without drafting.
fn advance_mtp_history(model: &dyn LanguageModel, run: &mut RowRun, row: &mut RowCache) -> Result<()> {
    let (h_in, t_in) = run.draft_inputs()?;
    run.pending_mtp = None;
    model.mtp_history(&h_in, &token_array(&t_in), &mut [row])
}
