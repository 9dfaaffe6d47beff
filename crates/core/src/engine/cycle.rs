//! One decode cycle, as named phases, in the one copy every caller runs: a solo row, a
//! continuous lane (any width), the sealed cohort, and the benchmarks that time them.
//!
//! An MTP cycle is, in order: [`Phase::OweHistory`] (rows whose last draft was accepted write
//! its MTP history entry), [`Phase::Draft`] (the MTP module proposes d after each row's primary
//! x0), [`Phase::Verify`] (the target model reads [x0, d] at T=2, capturing the recurrent state
//! after each position, and its distributions reach the host), [`Phase::Decide`] (each row accepts
//! or rejects its draft with its own RNG) and [`Phase::Commit`] (accepted rows keep both
//! positions and emit d and a bonus token; rejected rows drop the draft's position, restore the
//! position-0 state and emit the corrected token). A plain (AR) cycle is [`Phase::Step`] then
//! Decide and Commit. Admitting and retiring rows happen between cycles (engine/lane.rs: `admit`,
//! `read_prompts`, `retire`).
//!
//! Slot b < runs.len() is runs[b]'s row; slots past it, and rows that have ended, ride along
//! inert: they compute like the others, and are put back exactly as they were after the cycle
//! (keep = 0), so their offsets and states never move.
//!
//! The engine passes [`Untimed`]; a benchmark passes a [`PhaseTimer`], which waits for each
//! phase's arrays at its end so the time it records is that phase's own (evaluating earlier
//! changes when work runs, never what it computes).

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result};
use mlx_rs::{Array, Dtype};

use super::request::GenerationMode;
use super::row::{RowEvent, RowRun};
use super::sampler::{Decision, Dist, SamplerConfig, decide, distributions};
use crate::model::forward::{ForwardOutput, LanguageModel, Logits};
use crate::model::layers::cache::{LayerState, RowCache};
use crate::model::layers::gated_delta::PositionStates;
use crate::model::ops::{host_u32, slice_axis};
use crate::model::text::tokenizer::TextTokenizer;

/// A part of a decode cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    OweHistory,
    /// A plain cycle of MTP rows writing the history entry a draft would have written.
    History,
    Draft,
    Verify,
    Step,
    Decide,
    Commit,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::OweHistory => "owe history",
            Phase::History => "history",
            Phase::Draft => "draft",
            Phase::Verify => "verify",
            Phase::Step => "step",
            Phase::Decide => "decide",
            Phase::Commit => "commit",
        }
    }
}

/// Told when each phase starts and ends, with the arrays the phase produced.
pub trait PhaseClock {
    fn start(&mut self, phase: Phase) -> Result<()>;
    /// The phase's graph has been handed to the device and the phase waits for it (verify, before
    /// its ids reach the host).
    fn handed(&mut self, _phase: Phase) {}
    fn end(&mut self, phase: Phase, outputs: &[&Array]) -> Result<()>;
}

/// The `i`-th cycle's total over the phases it ran, for each cycle `times` recorded.
pub fn cycle_totals(times: &BTreeMap<Phase, Vec<f64>>) -> Vec<f64> {
    let n = times.values().map(Vec::len).max().unwrap_or(0);
    (0..n).map(|i| times.values().filter_map(|v| v.get(i)).sum()).collect()
}

/// The engine's clock: nothing is timed and nothing is evaluated early.
pub struct Untimed;

impl PhaseClock for Untimed {
    fn start(&mut self, _: Phase) -> Result<()> {
        Ok(())
    }
    fn end(&mut self, _: Phase, _: &[&Array]) -> Result<()> {
        Ok(())
    }
}

/// What must be evaluated with a phase's arrays (such as the packed KV buffers they write into).
pub type EvalWith<'a> = Box<dyn Fn(&[&Array]) -> Vec<Array> + 'a>;

/// A benchmark's clock: each phase's wall time in ms, its arrays evaluated before it ends, and
/// when its graph was handed to the device (the host's share of the phase).
pub struct PhaseTimer<'a> {
    eval_with: EvalWith<'a>,
    started: Option<Instant>,
    handed_ms: Option<f64>,
    /// While false, phases run as timed but nothing is recorded (warm-up cycles).
    pub recording: bool,
    pub times: BTreeMap<Phase, Vec<f64>>,
    pub handed: BTreeMap<Phase, Vec<f64>>,
}

impl<'a> PhaseTimer<'a> {
    pub fn new(eval_with: EvalWith<'a>) -> Self {
        Self {
            eval_with,
            started: None,
            handed_ms: None,
            recording: true,
            times: BTreeMap::new(),
            handed: BTreeMap::new(),
        }
    }

    /// Each recorded cycle's total over the phases it ran.
    pub fn cycle_totals(&self) -> Vec<f64> {
        cycle_totals(&self.times)
    }

    fn elapsed_ms(&self) -> Result<f64> {
        Ok(self.started.context("a phase ended that never started")?.elapsed().as_secs_f64() * 1e3)
    }
}

impl PhaseClock for PhaseTimer<'_> {
    fn start(&mut self, _: Phase) -> Result<()> {
        self.started = Some(Instant::now());
        self.handed_ms = None;
        Ok(())
    }

    fn handed(&mut self, _: Phase) {
        self.handed_ms = self.elapsed_ms().ok();
    }

    fn end(&mut self, phase: Phase, outputs: &[&Array]) -> Result<()> {
        let arrays = (self.eval_with)(outputs);
        mlx_rs::transforms::async_eval(&arrays)?;
        let handed = match self.handed_ms.take() {
            Some(h) => h,
            None => self.elapsed_ms()?,
        };
        mlx_rs::transforms::eval(&arrays)?;
        let total = self.elapsed_ms()?;
        self.started = None;
        if self.recording {
            self.times.entry(phase).or_default().push(total);
            self.handed.entry(phase).or_default().push(handed);
        }
        Ok(())
    }
}

/// A slot's decode inputs while it rides along inert: a dummy row's hidden state and token.
#[derive(Clone)]
pub struct Inert {
    pub(crate) hidden: Array,
    pub(crate) primary: u32,
}

/// A one-token row used for padding and for rows that end before they decode.
pub(crate) fn dummy(model: &dyn LanguageModel) -> Result<(RowCache, Inert)> {
    let mut row = model.new_row();
    let (hidden, _, _) = model.prefill(&mut row, &[0], 1, false)?;
    Ok((row, Inert { hidden, primary: 0 }))
}

/// Token ids as an int32 [rows, cols] array.
pub(crate) fn tokens(ids: &[u32], rows: i32, cols: i32) -> Array {
    Array::from_slice(&ids.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[rows, cols])
}

/// The slots of one cycle: which are live rows, and a copy of every inert slot's state to put
/// back after it.
struct Slots {
    active: Vec<bool>,
    inert_before: Vec<Option<RowCache>>,
}

impl Slots {
    fn new(runs: &[RowRun], rows: &[RowCache]) -> Self {
        let active: Vec<bool> = (0..rows.len()).map(|b| b < runs.len() && runs[b].is_active()).collect();
        let inert_before = rows.iter().zip(&active).map(|(r, &a)| (!a).then(|| r.clone())).collect();
        Self { active, inert_before }
    }

    fn width(&self) -> usize {
        self.active.len()
    }

    /// Each slot's sampler (inert slots draw greedily) and penalties.
    fn samplers<'r>(&self, runs: &'r [RowRun]) -> (Vec<SamplerConfig>, Vec<&'r super::sampler::PenaltyState>) {
        (0..self.width())
            .map(|b| {
                if self.active[b] {
                    (runs[b].sampler, &runs[b].penalties)
                } else {
                    (SamplerConfig::greedy(), &*NO_PENALTIES)
                }
            })
            .unzip()
    }

    /// Put every inert slot back as it was before the cycle.
    fn restore_inert(self, rows: &mut [RowCache]) {
        for (row, before) in rows.iter_mut().zip(self.inert_before) {
            if let Some(before) = before {
                *row = before;
            }
        }
    }
}

static NO_PENALTIES: std::sync::LazyLock<super::sampler::PenaltyState> = std::sync::LazyLock::new(Default::default);

/// What the draft phase hands to verify.
struct Drafts {
    /// [W, 2]: x0 and the draft, per slot.
    verify_tokens: Array,
    /// Sampled cohorts: each slot's draft distribution q and its draft d, on the host.
    sampled: Option<(Vec<Dist>, Vec<u32>)>,
    /// Greedy cohorts: the drafts [W, 1], still on the device.
    on_device: Option<Array>,
}

/// What the verify phase hands to decide and commit.
struct Verified {
    out: ForwardOutput,
    /// The target's distribution at position 0 (after x0), per slot.
    p0: Vec<Dist>,
    /// At position 1 (after d) where it is known before the draft is emitted (greedy cohorts).
    p1: Vec<Option<Dist>>,
    q: Vec<Dist>,
    drafts: Vec<u32>,
}

/// Phase OweHistory: write the MTP history entry of every row whose last draft was accepted. A
/// lone row writes it with its draft instead (one T=2 call, as the solo path always has); in a
/// cohort only some rows owe, so they write theirs in one call of their own.
fn owe_history(model: &dyn LanguageModel, runs: &mut [RowRun], rows: &mut [RowCache], slots: &Slots) -> Result<()> {
    if slots.width() == 1 {
        return Ok(());
    }
    let owing: Vec<usize> = (0..slots.width()).filter(|&b| slots.active[b] && runs[b].pending_mtp.is_some()).collect();
    if owing.is_empty() {
        return Ok(());
    }
    let entries: Vec<(Array, u32)> = owing.iter().filter_map(|&b| runs[b].pending_mtp.take()).collect();
    let hidden: Vec<Array> = entries.iter().map(|(h, _)| h.clone()).collect();
    let ids: Vec<u32> = entries.iter().map(|(_, t)| *t).collect();
    let mut subset: Vec<&mut RowCache> =
        rows.iter_mut().enumerate().filter(|(b, _)| owing.contains(b)).map(|(_, r)| r).collect();
    model.mtp_history(&mlx_rs::ops::concatenate(&hidden, 0)?, &tokens(&ids, owing.len() as i32, 1), &mut subset)?;
    Ok(())
}

/// What the MTP module reads in a cycle, every slot alike: the hidden state of its last committed
/// position and the primary token after it (after a lone row's owed entry, which it writes in
/// the same call).
struct MtpInputs {
    /// [W, T, H]
    hidden: Array,
    /// [W, T]
    tokens: Array,
    /// Positions a slot reads: 1, or 2 for a lone row with an owed entry.
    t: i32,
    primary: Vec<u32>,
}

fn mtp_inputs(runs: &mut [RowRun], inert: &[Inert], slots: &Slots) -> Result<MtpInputs> {
    let width = slots.width();
    let mut hidden = Vec::with_capacity(width);
    let mut ids = Vec::with_capacity(width);
    let mut primary = Vec::with_capacity(width);
    for b in 0..width {
        if slots.active[b] {
            let (h, t) = runs[b].draft_inputs()?;
            runs[b].pending_mtp = None;
            primary.push(*t.last().context("a draft input with no token")?);
            hidden.push(h);
            ids.extend(t);
        } else {
            hidden.push(inert[b].hidden.clone());
            primary.push(inert[b].primary);
            ids.push(inert[b].primary);
        }
    }
    let t = (ids.len() / width) as i32;
    Ok(MtpInputs { hidden: mlx_rs::ops::concatenate(&hidden, 0)?, tokens: tokens(&ids, width as i32, t), t, primary })
}

/// Phase History: every slot writes the entry its draft would have written, with no draft (so a
/// row that drafts again later drafts from the very history its MTP cycles would have left).
fn write_history(
    model: &dyn LanguageModel,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    slots: &Slots,
) -> Result<()> {
    let MtpInputs { hidden, tokens, .. } = mtp_inputs(runs, inert, slots)?;
    let mut all: Vec<&mut RowCache> = rows.iter_mut().collect();
    model.mtp_history(&hidden, &tokens, &mut all)
}

/// Phase Draft: the MTP module reads every slot's (hidden, x0) and proposes a draft. A row with
/// no room for two tokens, or decoding AR, proposes nothing of its own (it draws no random number
/// here, exactly as its solo run), and a row's scripted draft (a test hook) replaces the module's.
fn draft(
    model: &dyn LanguageModel,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    slots: &Slots,
) -> Result<Drafts> {
    let width = slots.width();
    let MtpInputs { hidden, tokens: read, t, primary } = mtp_inputs(runs, inert, slots)?;
    let mut all: Vec<&mut RowCache> = rows.iter_mut().collect();
    let q_logits = model.mtp_forward(&hidden, &read, &mut all)?;
    let vocab = *q_logits.shape().last().unwrap();
    let q_last = slice_axis(&q_logits, 1, t - 1, t)?.reshape(&[width as i32, vocab])?;
    let scripted: Vec<Option<u32>> =
        (0..width).map(|b| if slots.active[b] { scripted_draft(&mut runs[b]) } else { None }).collect();
    let x0 = tokens(&primary, width as i32, 1);
    let (cfgs, pens) = slots.samplers(runs);
    if cfgs.iter().all(SamplerConfig::is_greedy) {
        // Greedy cohorts keep their drafts on the device and feed them straight into verify.
        let mut d = mlx_rs::ops::indexing::argmax_axis(&q_last, -1, true)?.as_dtype(Dtype::Int32)?;
        if scripted.iter().any(Option::is_some) {
            let mut host = host_u32(&d)?;
            for (h, s) in host.iter_mut().zip(&scripted) {
                *h = s.unwrap_or(*h);
            }
            d = tokens(&host, width as i32, 1);
        }
        let verify_tokens = mlx_rs::ops::concatenate(&[x0, d.clone()], 1)?;
        return Ok(Drafts { verify_tokens, sampled: None, on_device: Some(d) });
    }
    let mut q = distributions(&q_last, &cfgs, &pens)?;
    let mut ds = Vec::with_capacity(width);
    for b in 0..width {
        ds.push(match scripted[b] {
            Some(d) => {
                q[b] = Dist::one_hot(d);
                d
            }
            None if slots.active[b] && runs[b].drafts() => runs[b].draw(&q[b]),
            None => q[b].argmax(),
        });
    }
    let pairs: Vec<u32> = (0..width).flat_map(|b| [primary[b], ds[b]]).collect();
    Ok(Drafts { verify_tokens: tokens(&pairs, width as i32, 2), sampled: Some((q, ds)), on_device: None })
}

/// A row's next scripted draft (a test hook, feature `testing`), which replaces the module's.
#[cfg(feature = "testing")]
fn scripted_draft(run: &mut RowRun) -> Option<u32> {
    run.draft_script.as_mut().and_then(|q| q.pop_front())
}

#[cfg(not(feature = "testing"))]
fn scripted_draft(_: &mut RowRun) -> Option<u32> {
    None
}

/// Phase Verify: the target model reads [x0, d] for every slot (M = 2 x width), capturing the
/// recurrent state after each position; the distributions the decisions need reach the host.
fn verify(
    model: &dyn LanguageModel,
    runs: &[RowRun],
    rows: &mut [RowCache],
    drafts: Drafts,
    slots: &Slots,
    clock: &mut dyn PhaseClock,
) -> Result<Verified> {
    let width = slots.width();
    let mut all: Vec<&mut RowCache> = rows.iter_mut().collect();
    let out = model.forward(&drafts.verify_tokens, &mut all, Logits::All, true)?;
    let logits = out.logits.as_ref().context("verify returned no logits")?;
    if let Some(d) = drafts.on_device {
        // Only token ids reach the host.
        let am = mlx_rs::ops::indexing::argmax_axis(logits, -1, None)?;
        mlx_rs::transforms::async_eval([&am, &d])?;
        clock.handed(Phase::Verify);
        let (am, d) = (host_u32(&am)?, host_u32(&d)?);
        return Ok(Verified {
            p0: (0..width).map(|b| Dist::one_hot(am[2 * b])).collect(),
            p1: (0..width).map(|b| Some(Dist::one_hot(am[2 * b + 1]))).collect(),
            q: d.iter().map(|&d| Dist::one_hot(d)).collect(),
            drafts: d,
            out,
        });
    }
    let (q, ds) = drafts.sampled.context("a sampled cohort without drafts")?;
    let (cfgs, pens) = slots.samplers(runs);
    let vocab = *logits.shape().last().unwrap();
    let p0 = distributions(&slice_axis(logits, 1, 0, 1)?.reshape(&[width as i32, vocab])?, &cfgs, &pens)?;
    // Position 1's distribution depends on the penalties after the draft: commit computes it.
    Ok(Verified { p0, p1: vec![None; width], q, drafts: ds, out })
}

/// A live row's verdict on its draft.
struct Verdict {
    decision: Decision,
    /// Whether the row proposed a draft (a row with no room for two tokens, or decoding AR, does
    /// not).
    proposed: bool,
}

/// Phase Decide: each live row accepts or rejects its draft with its own RNG. A row with no room
/// for two tokens, or decoding AR, takes position 0's token as plain decoding would (keep = 1).
fn decide_rows(runs: &mut [RowRun], v: &Verified, slots: &Slots) -> Vec<Option<Verdict>> {
    (0..slots.width())
        .map(|b| {
            if !slots.active[b] {
                return None;
            }
            let run = &mut runs[b];
            let proposed = run.drafts();
            let decision = if proposed {
                decide(&v.p0[b], &v.q[b], v.drafts[b], run.sampler.is_greedy(), &mut run.rng)
            } else {
                Decision::Reject(run.draw(&v.p0[b]))
            };
            Some(Verdict { decision, proposed })
        })
        .collect()
}

/// Phase Commit: accepted rows keep both positions, owe the draft's history entry and emit the
/// draft then the bonus token; rejected rows drop the draft's position, take the recurrent state
/// captured after position 0 and emit the corrected token; inert slots are put back.
fn commit(
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    v: Verified,
    verdicts: Vec<Option<Verdict>>,
    slots: Slots,
    events: &mut dyn FnMut(usize, RowEvent),
) -> Result<()> {
    let logits = v.out.logits.as_ref().context("verify returned no logits")?;
    let vocab = *logits.shape().last().unwrap();
    for (b, verdict) in verdicts.into_iter().enumerate() {
        let Some(Verdict { decision, proposed }) = verdict else { continue };
        let run = &mut runs[b];
        // An AR row's cycle is a plain step to it (its stats are those of plain decoding).
        if run.mode == GenerationMode::Mtp {
            run.stats.verify_cycles += 1;
        }
        let hidden = slice_axis(&v.out.hidden, 0, b as i32, b as i32 + 1)?;
        let h0 = slice_axis(&hidden, 1, 0, 1)?;
        match decision {
            Decision::Accept(d) => {
                run.stats.accepted_drafts += 1;
                run.pending_mtp = Some((h0, d));
                run.hidden_last = Some(slice_axis(&hidden, 1, 1, 2)?);
                if run.emit(d, tok, &mut |ev| events(b, ev))? {
                    let bonus = match &v.p1[b] {
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
                if proposed {
                    run.stats.rejected_drafts += 1;
                }
                rows[b].trim_attention(1)?;
                restore_from_capture(&mut rows[b], &v.out.captures, 0, b);
                run.hidden_last = Some(h0);
                run.primary = Some(t);
                run.emit(t, tok, &mut |ev| events(b, ev))?;
            }
        }
    }
    slots.restore_inert(rows);
    Ok(())
}

/// Phase OweHistory, told to the clock (the first phase of both kinds of cycle of MTP rows).
fn owe_phase(
    model: &dyn LanguageModel,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    slots: &Slots,
    clock: &mut dyn PhaseClock,
) -> Result<()> {
    clock.start(Phase::OweHistory)?;
    owe_history(model, runs, rows, slots)?;
    clock.end(Phase::OweHistory, &mtp_arrays(rows))
}

/// One MTP cycle over every slot of `rows`. Events go out with the index of the run that made
/// them.
pub fn mtp(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    clock: &mut dyn PhaseClock,
    events: &mut dyn FnMut(usize, RowEvent),
) -> Result<()> {
    let slots = Slots::new(runs, rows);
    owe_phase(model, runs, rows, &slots, clock)?;

    clock.start(Phase::Draft)?;
    let drafts = draft(model, runs, rows, inert, &slots)?;
    {
        let mut outputs = mtp_arrays(rows);
        outputs.push(&drafts.verify_tokens);
        clock.end(Phase::Draft, &outputs)?;
    }

    clock.start(Phase::Verify)?;
    let verified = verify(model, runs, rows, drafts, &slots, clock)?;
    {
        let mut outputs = row_arrays(rows);
        outputs.push(&verified.out.hidden);
        clock.end(Phase::Verify, &outputs)?;
    }

    clock.start(Phase::Decide)?;
    let verdicts = decide_rows(runs, &verified, &slots);
    clock.end(Phase::Decide, &[])?;

    clock.start(Phase::Commit)?;
    commit(tok, runs, rows, verified, verdicts, slots, events)?;
    {
        let mut outputs = row_arrays(rows);
        outputs.extend(runs.iter().filter_map(|r| r.hidden_last.as_ref()));
        clock.end(Phase::Commit, &outputs)?;
    }
    Ok(())
}

/// One plain step for every slot: feed each row's primary, sample its next token.
pub fn ar(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    clock: &mut dyn PhaseClock,
    events: &mut dyn FnMut(usize, RowEvent),
) -> Result<()> {
    let slots = Slots::new(runs, rows);
    step(model, tok, runs, rows, inert, slots, clock, events)
}

/// One plain step for rows that keep an MTP history: each first writes the history entries an
/// MTP cycle would have written (its owed one, then the one its draft would have), so the
/// cohort can decode without drafts for as long as that is faster and draft again later from
/// the same history. Greedy rows emit exactly what an MTP cycle would emit.
pub(crate) fn ar_keeping_history(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    clock: &mut dyn PhaseClock,
    events: &mut dyn FnMut(usize, RowEvent),
) -> Result<()> {
    let slots = Slots::new(runs, rows);
    owe_phase(model, runs, rows, &slots, clock)?;

    clock.start(Phase::History)?;
    write_history(model, runs, rows, inert, &slots)?;
    clock.end(Phase::History, &mtp_arrays(rows))?;

    step(model, tok, runs, rows, inert, slots, clock, events)
}

/// Phases Step, Decide and Commit of a plain cycle.
#[allow(clippy::too_many_arguments)]
fn step(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
    inert: &[Inert],
    slots: Slots,
    clock: &mut dyn PhaseClock,
    events: &mut dyn FnMut(usize, RowEvent),
) -> Result<()> {
    let width = slots.width();

    clock.start(Phase::Step)?;
    let mut primary = Vec::with_capacity(width);
    for b in 0..width {
        primary.push(if slots.active[b] { runs[b].primary.context("no primary token")? } else { inert[b].primary });
    }
    let out = {
        let mut all: Vec<&mut RowCache> = rows.iter_mut().collect();
        model.forward(&tokens(&primary, width as i32, 1), &mut all, Logits::Last, false)?
    };
    let logits = out.logits.as_ref().context("step returned no logits")?;
    {
        let mut outputs = row_arrays(rows);
        outputs.push(logits);
        clock.end(Phase::Step, &outputs)?;
    }

    clock.start(Phase::Decide)?;
    let vocab = *logits.shape().last().unwrap();
    let (cfgs, pens) = slots.samplers(runs);
    let dists = distributions(&logits.reshape(&[width as i32, vocab])?, &cfgs, &pens)?;
    let next: Vec<Option<u32>> = (0..width).map(|b| slots.active[b].then(|| runs[b].draw(&dists[b]))).collect();
    clock.end(Phase::Decide, &[])?;

    clock.start(Phase::Commit)?;
    for (b, next) in next.into_iter().enumerate() {
        let Some(next) = next else { continue };
        let run = &mut runs[b];
        run.hidden_last = Some(slice_axis(&out.hidden, 0, b as i32, b as i32 + 1)?);
        run.primary = Some(next);
        run.emit(next, tok, &mut |ev| events(b, ev))?;
    }
    slots.restore_inert(rows);
    clock.end(Phase::Commit, &row_arrays(rows))?;
    Ok(())
}

/// One cycle of `kind` over `rows`, every slot a live row (tests that drive rows through a
/// chosen sequence of cycles).
#[cfg(feature = "testing")]
pub fn run_kind(
    kind: super::draft_policy::CycleKind,
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    rows: &mut [RowCache],
) -> Result<()> {
    use super::draft_policy::CycleKind;
    let cycle = match kind {
        CycleKind::Draft => mtp,
        CycleKind::Plain => ar_keeping_history,
    };
    // Rows that have ended ride along inert, as in a lane before it retires them.
    let inert = match runs.iter().all(RowRun::is_active) {
        true => Vec::new(),
        false => vec![dummy(model)?.1; rows.len()],
    };
    cycle(model, tok, runs, rows, &inert, &mut Untimed, &mut |_, _| {})?;
    let hidden = runs.iter().filter_map(|r| r.hidden_last.as_ref());
    mlx_rs::transforms::eval(rows.iter().flat_map(|r| r.arrays()).chain(hidden))?;
    Ok(())
}

/// Replace a row's GDN state with the capture after `position` of a verify block.
fn restore_from_capture(row: &mut RowCache, captures: &[Option<PositionStates>], position: usize, b: usize) {
    for (layer, cap) in row.layers.iter_mut().zip(captures) {
        if let (LayerState::GatedDelta(state), Some(cap)) = (layer, cap) {
            *state = cap[position][b].clone();
        }
    }
}

fn mtp_arrays(rows: &[RowCache]) -> Vec<&Array> {
    rows.iter().flat_map(|r| r.mtp.arrays()).collect()
}

fn row_arrays(rows: &[RowCache]) -> Vec<&Array> {
    rows.iter().flat_map(|r| r.arrays()).collect()
}
