//! The continuous lane: requests join a running cohort at cycle boundaries and leave it the
//! moment they end, and the physical batch is the live rows (or the smallest power of two that
//! holds them).
//!
//! One call of [`Lane::step`] is one cycle boundary: cancelled rows leave, waiting prompts are
//! read for at most the prefill budget (whole chunks, so a prompt read between other rows'
//! cycles gives the state it gives alone), one decode cycle runs over the seated rows, and rows
//! that ended deliver their result at once and free their seat. Every row owns its state, so
//! joining or leaving never touches a peer's context: the KV buffers are packed again for the
//! new set of rows, each row keeping its own offsets.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result};
use mlx_rs::Array;

use super::cohort;
use super::cycle::{self, Inert, Untimed};
use super::draft_policy::{CycleKind, DraftChooser, DraftPolicy};
use super::prepare::prepare;
use super::prompt_cache::decoded::settle_decoded;
use super::prompt_cache::persist::{self, MadeBy, Restored, Saved};
use super::prompt_cache::{Hit, Kept, PromptCache, Reuse, Snapshot};
use super::read_planner::{ReadPlanner, SHARED_READ, Waiting};
use super::request::{FinishReason, Request, RequestResult};
use super::row::{CancelFlag, RowEvent, RowRun};
use super::scheduler::{Numerics, ReadOrder, WidthPolicy};
use super::solo::{GenerationMode, first_token, lone_cycle, route_id};
use super::telemetry::{FinalizeScope, RowState, RowTelemetry, SharedTelemetry};
use crate::model::forward::{LanguageModel, last_position};
use crate::model::layers::cache::{PackedKv, RowCache};
use crate::model::prefill::{read_chunks, write_history};
use crate::model::routes::BlockRoute;
use crate::model::text::tokenizer::TextTokenizer;

/// Answers waiting to be read back into the prompt cache, at most.
const MAX_SETTLES: usize = 16;

/// A request waiting for a row.
pub struct Pending {
    pub req: Request,
    pub cancel: CancelFlag,
    pub events: mpsc::Sender<RowEvent>,
    pub arrived: Instant,
}

impl Pending {
    pub fn done(&self, result: RequestResult) {
        let _ = self.events.send(RowEvent::Done(Box::new(result)));
    }

    /// End a request that never got a row.
    pub fn cancelled(&self) {
        self.done(RequestResult::ended(&self.req.id, FinishReason::Cancelled));
    }
}

/// What a lane runs with, decided once when the engine starts.
#[derive(Debug, Clone)]
pub struct LaneConfig {
    /// Prompt tokens per prefill chunk (the same chunks a solo run reads).
    pub chunk: usize,
    /// Prompt tokens read between two cycles (whole chunks, at least one).
    pub budget: usize,
    pub mode: GenerationMode,
    pub numerics: Numerics,
    /// The batched route the exactness gate chose ([`Numerics::block_route`]).
    pub batched: BlockRoute,
    pub width: WidthPolicy,
    /// Short family name for route ids.
    pub family: String,
    /// Waiting prompts are read several rows to a block where the model pads their chunks and
    /// the start-up check found a packed read exact ([`super::construction::packed_prompt_check`]).
    pub packed_prefill: bool,
    /// Whether cohorts of greedy MTP rows may take plain steps where those measure faster.
    pub drafts: DraftPolicy,
    /// A prompt read split anywhere gives the bits of one read whole (the split-read check,
    /// [`super::prompt_cache::check`]): chunks may then end wherever the reading budget does.
    pub split_exact: bool,
    /// How the prompt cache serves, and its budget.
    pub prompt_cache: PromptCacheSetup,
    /// Which waiting prompt a step reads first.
    pub read_order: ReadOrder,
}

/// The prompt cache as the engine decided it at start-up.
#[derive(Debug, Clone, Default)]
pub struct PromptCacheSetup {
    pub reuse: Reuse,
    pub bytes: u64,
    /// Why reuse is not exact here (the split-read check's finding), when it is not.
    pub inexact_because: Option<String>,
    /// A row that decoded its answer holds the state a fresh read of it gives (the decode check,
    /// [`super::prompt_cache::decoded::decode_read_check`]): a finished answer is kept as it stands
    /// instead of being read back.
    pub answers_as_decoded: bool,
}

impl LaneConfig {
    /// The route a row of mode `mode` takes in a cycle of `kind` at physical width `width`:
    /// alone, its own mode's solo route; beside others, the lane's (an AR row rides an MTP cycle
    /// without a draft), or plain steps where the cohort skipped its drafts.
    pub fn route(&self, mode: GenerationMode, width: usize, kind: CycleKind) -> String {
        match (self.mode, width, kind) {
            (lane, 1, _) => route_id(lane.serving(Some(mode)), 1),
            (GenerationMode::Mtp, w, CycleKind::Draft) => self.numerics.route_id_at(&self.family, w),
            (_, w, _) => format!("{}_ar_batch_b{w}_t1_m{w}", self.family),
        }
    }

    fn block_route(&self) -> BlockRoute {
        self.numerics.block_route(self.batched)
    }
}

/// A row reading its prompt.
struct Reader {
    p: Pending,
    run: RowRun,
    row: RowCache,
    next: usize,
    /// The final-norm hidden state of the last position read, [1, 1, H]: the MTP history entry
    /// the next chunk completes ([`write_history`]).
    carry: Option<Array>,
    /// The last position's logits where the prompt cache held the whole prompt (nothing to read).
    cached_logits: Option<Array>,
    tel: RowTelemetry,
}

impl Reader {
    fn waiting(&self) -> Waiting {
        Waiting {
            read: self.next,
            len: self.run.prompt_ids.len(),
            row_len: self.row.len,
            cancelled: self.run.cancel.is_cancelled(),
        }
    }
}

/// What a seated row keeps beside its `RowRun` and `RowCache`.
struct Seat {
    p: Pending,
    decode_started: Instant,
    tel: RowTelemetry,
}

pub struct Lane<'m> {
    model: &'m dyn LanguageModel,
    tok: &'m TextTokenizer,
    cfg: LaneConfig,
    readers: VecDeque<Reader>,
    /// Seated rows: seats[b], runs[b] and rows[b] are row b; rows past runs.len() are padding.
    seats: Vec<Seat>,
    runs: Vec<RowRun>,
    rows: Vec<RowCache>,
    /// A one-token row: padding, and the inputs of slots with no row.
    dummy: (RowCache, Inert),
    slots: PackedKv,
    /// The seated set changed since the KV was last packed.
    repack: bool,
    cycles: u64,
    /// Prompt reads of several rows in one block.
    packed_reads: u64,
    /// What each step reads of the waiting prompts.
    planner: ReadPlanner,
    /// Tokens per second the last lone read step read at (sizes the next lone piece).
    lone_rate: Option<f64>,
    /// What cycles of each kind have emitted, per width, and the choice that follows from it.
    chooser: DraftChooser,
    /// Cycles of MTP rows that took plain steps because those measured faster.
    plain_cycles: u64,
    /// Rows that took a seat while others decoded, and rows that left while others decoded on.
    joins: usize,
    leaves: usize,
    /// Results of rows that ended, sent once the telemetry says they have left (so a reader
    /// woken by a result never sees its row still live).
    outbox: Vec<(Pending, RequestResult)>,
    /// Rows' states after their prompts, for later prompts that begin with them.
    cache: PromptCache,
    /// Answers to read back into the cache while the lane is idle, oldest first.
    settles: VecDeque<Settle>,
}

/// A finished row's prompt and answer, read back from the prompt's cached state so that the
/// conversation's next turn (which sends them again) resumes after the answer. A decoded answer's
/// state is not what a fresh read of it gives (decode steps take other routes than prompt reads),
/// so it is read again, as a prompt, in the lane's idle time.
struct Settle {
    tokens: Vec<u32>,
    /// Where the prompt ends and the answer starts.
    from: usize,
    /// The row reading it (None until started) and where it stands.
    row: Option<(RowCache, Option<Array>, usize)>,
}

impl<'m> Lane<'m> {
    pub fn new(model: &'m dyn LanguageModel, tok: &'m TextTokenizer, cfg: LaneConfig) -> Result<Self> {
        let dummy = cycle::dummy(model).context("the lane's padding row")?;
        let pc = &cfg.prompt_cache;
        let cache = PromptCache::new(pc.reuse, pc.bytes, pc.inexact_because.clone(), pc.answers_as_decoded);
        let planner = ReadPlanner {
            chunk: cfg.chunk,
            budget: cfg.budget,
            split_exact: cfg.split_exact,
            packed: cfg.packed_prefill,
            order: cfg.read_order,
        };
        Ok(Self {
            planner,
            cache,
            settles: VecDeque::new(),
            model,
            tok,
            cfg,
            readers: VecDeque::new(),
            seats: Vec::new(),
            runs: Vec::new(),
            rows: Vec::new(),
            dummy,
            slots: PackedKv::none(),
            repack: false,
            cycles: 0,
            packed_reads: 0,
            lone_rate: None,
            chooser: DraftChooser::default(),
            plain_cycles: 0,
            joins: 0,
            leaves: 0,
            outbox: Vec::new(),
        })
    }

    /// Rows admitted and not yet ended (reading or decoding).
    pub fn live(&self) -> usize {
        self.readers.len() + self.runs.len()
    }

    /// Add the prompt cache entries saved in `path` ([`persist::load`]).
    pub fn restore_cache(&mut self, path: &Path, made_by: &MadeBy) -> Result<Restored> {
        persist::load(path, made_by, self.model, &mut self.cache)
    }

    /// Write the prompt cache's conversations to `path` ([`persist::save`]).
    pub fn save_cache(&self, path: &Path, made_by: &MadeBy) -> Result<Option<Saved>> {
        persist::save(&self.cache, path, made_by)
    }

    pub fn is_idle(&self) -> bool {
        self.live() == 0
    }

    /// Give `p` a row: refused requests (bad sampler values, over the context window or memory)
    /// end here with their reason; the rest start reading their prompt at the next step.
    pub fn admit(&mut self, p: Pending) {
        let mut run = match prepare(self.model, self.tok, &p.req, p.cancel.clone()) {
            Ok(run) => run,
            Err(e) => return p.done(RequestResult::refused(&p.req.id, format!("{e:#}"))),
        };
        run.serve_in(self.cfg.mode);
        run.arrived = p.arrived;
        run.stats.queue_wait_s = p.arrived.elapsed().as_secs_f64();
        let total = run.prompt_ids.len();
        let _ = p.events.send(RowEvent::Prefill { id: run.id.clone(), done: 0, total });
        let tel = RowTelemetry {
            id: run.id.clone(),
            state: RowState::Prefill,
            prefill_total: total,
            admission_wait_s: run.stats.queue_wait_s,
            mode: Some(run.mode),
            ..Default::default()
        };
        let mut reader = Reader { p, run, row: self.model.new_row(), next: 0, carry: None, cached_logits: None, tel };
        let hit = self.cache.lookup(&reader.run.prompt_ids);
        let found = hit.as_ref().map_or(0, |h| h.len);
        if let Some(Hit { len, row, last }) = hit {
            reader.run.stats.cached_tokens = len;
            reader.run.stats.reuse = Some(self.cache.stats().reuse);
            (reader.row, reader.next, reader.tel.prefill_done) = (row, len, len);
            if let Some((hidden, logits)) = last {
                reader.carry = Some(hidden);
                if len == total {
                    reader.cached_logits = Some(logits);
                }
            }
        }
        self.adopt_settle(&mut reader, found);
        self.readers.push_back(reader);
    }

    /// Where an answer being read back has got further into `r`'s prompt than the cache held
    /// (the next turn came before the lane had finished reading the answer back), the reader takes
    /// over that read: the same reading from the same state, so the same bits.
    fn adopt_settle(&mut self, r: &mut Reader, found: usize) {
        let prompt = &r.run.prompt_ids;
        let Some(i) = self.settles.iter().position(|s| {
            s.row.as_ref().is_some_and(|(_, _, next)| {
                *next > found && *next < prompt.len() && prompt.starts_with(&s.tokens[..*next])
            })
        }) else {
            return;
        };
        let s = self.settles.remove(i).expect("found above");
        let (row, carry, next) = s.row.expect("a started read");
        self.cache.count_adopted(next - found, found > 0);
        r.run.stats.cached_tokens = next;
        r.run.stats.reuse = Some(self.cache.stats().reuse);
        (r.row, r.next, r.tel.prefill_done, r.carry, r.cached_logits) = (row, next, next, carry, None);
    }

    /// One cycle boundary: cancellations, at most a budget of prompt reading, one decode cycle,
    /// and every row that ended leaves with its result. An error poisons the rows live in the
    /// lane (the caller fails them with [`Lane::fail_all`]).
    pub fn step(&mut self, tel: &SharedTelemetry) -> Result<()> {
        self.drop_cancelled_readers();
        self.read_prompts();
        for run in self.runs.iter_mut() {
            if run.is_active() && run.cancel.is_cancelled() {
                run.cancel_now();
            }
        }
        self.retire();
        self.deliver(tel);
        if !self.runs.is_empty() {
            self.cycle(tel)?;
            self.retire();
        }
        if self.is_idle()
            && let Ok(mut t) = tel.lock()
        {
            t.finalize_scope = FinalizeScope::CohortOwnerAfterDecode;
        }
        self.deliver(tel);
        if self.is_idle() && !self.settles.is_empty() {
            self.settle_some();
            self.publish(tel);
        }
        Ok(())
    }

    /// Whether an idle lane still has answers to read back (the owner keeps stepping it while
    /// nothing else arrives).
    pub fn has_background_work(&self) -> bool {
        !self.settles.is_empty()
    }

    /// Read one piece of the oldest answer waiting to be read back; a whole answer read is kept
    /// in the cache. Pieces are small where reads may split anywhere, so a request arriving
    /// meanwhile waits for one piece at most.
    fn settle_some(&mut self) {
        let Some(mut s) = self.settles.pop_front() else { return };
        let model = self.model;
        let (mut row, mut carry, next) = match s.row.take() {
            Some(started) => started,
            None => match self.cache.entry(&s.tokens[..s.from]) {
                Some(snap) => (snap.row, Some(snap.hidden), s.from),
                None => return, // the prompt's state left the cache: nothing to resume from
            },
        };
        let piece = if self.cfg.split_exact { self.cfg.chunk.min(SHARED_READ) } else { self.cfg.chunk };
        let end = (next + piece.max(1)).min(s.tokens.len());
        let part = &s.tokens[next..end];
        let is_last = end == s.tokens.len();
        let mtp = self.cfg.mode == GenerationMode::Mtp;
        let read = crate::model::routes::batched(|| -> Result<Option<(Array, Array)>> {
            let out = read_chunks(model, &mut [&mut row], &[part], &[is_last])?.pop().context("one row read")?;
            if mtp {
                carry = Some(write_history(model, &mut row, carry.as_ref(), &out.hidden, part)?);
            }
            is_last.then(|| last_position(out)).transpose()
        });
        match read {
            Ok(Some((hidden, logits))) => match Snapshot::new(row, &hidden, &logits) {
                Ok(snap) => {
                    self.cache.insert_as(&s.tokens, snap, Kept::Answer);
                    self.cache.count_settled();
                }
                Err(e) => tracing::warn!("keeping a read-back answer in the prompt cache failed: {e:#}"),
            },
            Ok(None) => {
                s.row = Some((row, carry, end));
                self.settles.push_front(s);
            }
            // Only a shortcut is lost: the next turn reads the answer itself.
            Err(e) => tracing::warn!("reading an answer back into the prompt cache failed: {e:#}"),
        }
    }

    /// Fail every live row with `message` (a cycle or a prompt failed: their state is not
    /// trusted) and reset the lane.
    pub fn fail_all(&mut self, message: &str, tel: &SharedTelemetry) {
        for mut r in std::mem::take(&mut self.readers) {
            r.run.fail(message.to_owned());
            self.end(r.p, &mut r.run);
        }
        let (seats, runs) = (std::mem::take(&mut self.seats), std::mem::take(&mut self.runs));
        for (seat, mut run) in seats.into_iter().zip(runs) {
            run.finish = None;
            run.fail(message.to_owned());
            self.end(seat.p, &mut run);
        }
        self.deliver(tel);
    }

    fn drop_cancelled_readers(&mut self) {
        for _ in 0..self.readers.len() {
            let mut r = self.readers.pop_front().unwrap();
            if r.run.cancel.is_cancelled() {
                r.run.cancel_now();
                self.end(r.p, &mut r.run);
            } else {
                self.readers.push_back(r);
            }
        }
    }

    /// A row has ended (finished, cancelled or failed): its result waits in the outbox.
    fn end(&mut self, p: Pending, run: &mut RowRun) {
        let result = run.result(self.tok);
        self.outbox.push((p, result));
    }

    /// Publish the lane as it stands, then send the results of the rows that left. An idle lane
    /// lets go of its rows' KV first: whoever sees it idle must find that memory free.
    fn deliver(&mut self, tel: &SharedTelemetry) {
        if self.is_idle() {
            self.slots = PackedKv::none();
            self.rows.clear();
            // Only returns cached buffers to the system; a failure costs memory, never a row.
            let _ = mlx_rs::memory::clear_cache();
        }
        self.publish(tel);
        for (p, result) in self.outbox.drain(..) {
            p.done(result);
        }
    }

    /// Read waiting prompts as the read planner says (which first, where each read ends, which
    /// read together as one block) until the step's budget is spent (at least one read, so a
    /// lone prompt always moves). A prompt read to its end (or held whole by the prompt cache)
    /// draws its first token and takes a seat.
    fn read_prompts(&mut self) {
        self.seat_cached_prompts();
        let budget = self.planner.step_budget(self.others_wait(), self.lone_rate);
        let lone = self.planner.split_exact && !self.others_wait();
        let started = Instant::now();
        let mut spent = 0;
        let mut pack = self.planner.packed;
        while spent == 0 || spent < budget {
            self.planner.order(&mut self.readers, Reader::waiting);
            let Some(r) = self.readers.front_mut() else { break };
            if r.run.cancel.is_cancelled() {
                // Acts within one chunk of a request being cancelled.
                let mut r = self.readers.pop_front().unwrap();
                r.run.cancel_now();
                self.end(r.p, &mut r.run);
                continue;
            }
            let room = budget.saturating_sub(spent).max(1);
            let n = if pack {
                let front = self.readers.iter().map(Reader::waiting);
                self.planner.block_len(front, room, |row_len, tokens| self.model.prefill_block(row_len, tokens))
            } else {
                1
            };
            let mut readers: Vec<Reader> = self.readers.drain(..n).collect();
            let ends: Vec<usize> = readers.iter().map(|r| self.planner.read_end(r.waiting(), room)).collect();
            let t0 = Instant::now();
            let model = self.model;
            let outs = crate::model::routes::batched(|| {
                let (mut rows, mut parts, mut last) = (Vec::new(), Vec::new(), Vec::new());
                for (r, &end) in readers.iter_mut().zip(&ends) {
                    parts.push(&r.run.prompt_ids[r.next..end]);
                    last.push(end == r.run.prompt_ids.len());
                    rows.push(&mut r.row);
                }
                read_chunks(model, &mut rows, &parts, &last)
            });
            let outs = match outs {
                Ok(outs) => outs,
                Err(e) if n > 1 => {
                    // The rows' state is not trusted after a failed read: each reads its prompt
                    // again from the start, alone, so one bad row cannot fail the others.
                    tracing::warn!("a packed prompt read of {n} rows failed ({e:#}); reading them one at a time");
                    for mut r in readers.into_iter().rev() {
                        (r.row, r.next, r.tel.prefill_done, r.carry) = (model.new_row(), 0, 0, None);
                        r.run.stats.cached_tokens = 0;
                        r.run.stats.reuse = None;
                        self.readers.push_front(r);
                    }
                    pack = false;
                    continue;
                }
                Err(e) => {
                    let mut r = readers.pop().expect("one reader");
                    r.run.fail(format!("prefill failed: {e:#}"));
                    self.end(r.p, &mut r.run);
                    continue;
                }
            };
            let elapsed = t0.elapsed().as_secs_f64();
            self.packed_reads += u64::from(n > 1);
            for ((mut r, out), end) in readers.into_iter().zip(outs).zip(ends) {
                if self.cfg.mode == GenerationMode::Mtp {
                    let part = &r.run.prompt_ids[r.next..end];
                    match write_history(model, &mut r.row, r.carry.as_ref(), &out.hidden, part) {
                        Ok(carry) => r.carry = Some(carry),
                        Err(e) => {
                            r.run.fail(format!("prefill failed: {e:#}"));
                            self.end(r.p, &mut r.run);
                            continue;
                        }
                    }
                }
                spent += end - r.next;
                r.next = end;
                r.tel.prefill_done = end;
                r.run.stats.prefill_s += elapsed;
                let total = r.run.prompt_ids.len();
                if end < total {
                    let _ = r.p.events.send(RowEvent::Prefill { id: r.run.id.clone(), done: end, total });
                    self.readers.push_back(r);
                } else {
                    let last = last_position(out);
                    self.seat(r, last);
                }
            }
        }
        if lone && spent > 0 {
            self.lone_rate = Some(spent as f64 / started.elapsed().as_secs_f64().max(1e-6));
        }
    }

    /// Readers whose whole prompt the cache held take their seats without reading.
    fn seat_cached_prompts(&mut self) {
        for _ in 0..self.readers.len() {
            let mut r = self.readers.pop_front().unwrap();
            match (r.cached_logits.take(), r.carry.clone()) {
                (Some(logits), Some(hidden)) if !r.run.cancel.is_cancelled() => self.seat(r, Ok((hidden, logits))),
                _ => self.readers.push_back(r),
            }
        }
    }

    /// Rows decoding, or more than one prompt to read.
    fn others_wait(&self) -> bool {
        !self.runs.is_empty() || self.readers.len() > 1
    }

    /// The prompt is read (`last`: its last position's hidden state and logits): keep the row's
    /// state in the prompt cache, draw the first token, and seat the row (or deliver it at once
    /// when that token already ended it).
    fn seat(&mut self, mut r: Reader, last: Result<(Array, Array)>) {
        let t0 = Instant::now();
        let started = crate::model::routes::batched(|| -> Result<()> {
            let (hidden_last, logits) = last?;
            if self.cache.serves() {
                let snap = Snapshot::new(r.row.clone(), &hidden_last, &logits)?;
                self.cache.insert(&r.run.prompt_ids, snap);
            }
            let events = &r.p.events;
            first_token(&mut r.run, self.tok, hidden_last, &logits, &mut |ev| {
                let _ = events.send(ev);
            })
        });
        r.run.stats.prefill_s += t0.elapsed().as_secs_f64();
        if let Err(e) = started {
            r.run.fail(format!("prefill failed: {e:#}"));
        }
        if !r.run.is_active() {
            r.run.stats.route = self.cfg.route(r.run.mode, 1, CycleKind::Draft);
            self.end(r.p, &mut r.run);
            return;
        }
        r.run.stats.joined_at_cycle = self.cycles;
        let mut tel = r.tel;
        tel.state = RowState::Decoding;
        tel.joined_at_cycle = self.cycles;
        let live = self.runs.len();
        if live > 0 {
            self.joins += 1;
        }
        self.seats.push(Seat { p: r.p, decode_started: Instant::now(), tel });
        self.runs.push(r.run);
        // The new row takes the first padding slot (or a new one).
        if self.rows.len() > live {
            self.rows[live] = r.row;
        } else {
            self.rows.push(r.row);
        }
        self.fit_padding();
    }

    /// Physical rows: the live rows, then padding up to what the width policy asks for.
    fn fit_padding(&mut self) {
        let physical = self.cfg.width.physical(self.runs.len());
        self.rows.truncate(physical.max(self.runs.len()));
        while self.rows.len() < physical {
            self.rows.push(self.dummy.0.clone());
        }
        self.repack = true;
    }

    /// One decode cycle over every seated row at the lane's current width.
    fn cycle(&mut self, tel: &SharedTelemetry) -> Result<()> {
        let width = self.rows.len();
        if self.repack {
            if width == 1 {
                // Alone, a row is a solo row: its own KV, the solo cycle.
                self.slots = PackedKv::none();
                self.rows[0].unpack();
            } else {
                self.slots = cohort::pack_if_it_fits(self.model, &self.runs, &mut self.rows)?;
            }
            self.slots.eval_with(self.rows.iter().flat_map(|r| r.arrays()))?;
            self.repack = false;
        }
        cohort::fault_hook()?;
        let measured = self.measured_kind(width);
        let kind = measured.unwrap_or(CycleKind::Draft);
        let (started, emitted_before) = (Instant::now(), self.emitted());
        let Lane { model, tok, cfg, seats, runs, rows, dummy, .. } = &mut *self;
        let mut route = |b: usize, ev: RowEvent| {
            let _ = seats[b].p.events.send(ev);
        };
        if width == 1 {
            // The route the exactness gate chose for B1, as a solo run takes it.
            lone_cycle(*model, tok, &mut runs[0], &mut rows[0], cfg.mode, &mut |ev| route(0, ev))?;
        } else {
            let inert = vec![dummy.1.clone(); width];
            crate::model::routes::with_block(cfg.block_route(), || match (cfg.mode, kind) {
                (GenerationMode::Mtp, CycleKind::Draft) => {
                    cycle::mtp(*model, tok, runs, rows, &inert, &mut Untimed, &mut route)
                }
                (GenerationMode::Mtp, CycleKind::Plain) => {
                    cycle::ar_keeping_history(*model, tok, runs, rows, &inert, &mut Untimed, &mut route)
                }
                (GenerationMode::Ar, _) => cycle::ar(*model, tok, runs, rows, &inert, &mut Untimed, &mut route),
            })?;
        }
        // One evaluation per cycle, so no row carries a pending graph into the next.
        let hidden = self.runs.iter().filter_map(|r| r.hidden_last.as_ref());
        self.slots.eval_with(self.rows.iter().flat_map(|r| r.arrays()).chain(hidden))?;
        self.cycles += 1;
        if let Some(kind) = measured {
            let emitted = self.emitted() - emitted_before;
            self.chooser.record(width, kind, emitted, started.elapsed().as_secs_f64());
            self.plain_cycles += u64::from(kind == CycleKind::Plain);
        }
        let live = self.runs.len();
        for run in self.runs.iter_mut() {
            run.stats.real_width = run.stats.real_width.max(live);
            run.stats.route = self.cfg.route(run.mode, width, kind);
        }
        let route = self.runs.first().map_or_else(String::new, |r| r.stats.route.clone());
        self.record_cycle(tel, live, width, route);
        Ok(())
    }

    /// The kind of this cycle where the lane chooses it by measurement: a cohort of MTP rows in
    /// which every row that drafts draws greedily (a sampled row's tokens depend on whether it
    /// drafted; a lone row runs the solo cycle).
    fn measured_kind(&self, width: usize) -> Option<CycleKind> {
        let eligible = self.cfg.mode == GenerationMode::Mtp
            && self.cfg.drafts == DraftPolicy::Measured
            && width > 1
            && self.runs.iter().all(|r| !r.drafts() || r.sampler.is_greedy());
        eligible.then(|| self.chooser.choose(width))
    }

    /// Tokens the seated rows have emitted so far.
    fn emitted(&self) -> usize {
        self.runs.iter().map(|r| r.tokens.len()).sum()
    }

    fn record_cycle(&mut self, tel: &SharedTelemetry, live: usize, width: usize, route: String) {
        let (mut acc, mut rej) = (0, 0);
        for (b, (seat, run)) in self.seats.iter_mut().zip(&self.runs).enumerate() {
            let (a, r) = cohort::observe_row(&mut seat.tel, run, &self.rows[b]);
            (acc, rej) = (acc + a, rej + r);
            seat.tel.slot = Some(b);
        }
        let Ok(mut t) = tel.lock() else { return };
        *t.fixed_width_cycles.entry(width).or_default() += 1;
        *t.real_width_histogram.entry(live).or_default() += 1;
        t.last_real_width = live;
        t.verify_cycles += 1;
        t.accepted_drafts += acc;
        t.rejected_drafts += rej;
        t.last_route = route;
        t.lane_cycles = self.cycles;
        t.packed_reads = self.packed_reads;
        t.plain_cycles = self.plain_cycles;
    }

    /// Every seated row that ended delivers its result now and frees its seat.
    fn retire(&mut self) {
        let mut b = 0;
        let mut left = 0;
        while b < self.runs.len() {
            if self.runs[b].is_active() {
                b += 1;
                continue;
            }
            let seat = self.seats.remove(b);
            let mut run = self.runs.remove(b);
            let row = self.rows.remove(b);
            run.stats.decode_s = seat.decode_started.elapsed().as_secs_f64();
            if run.stats.route.is_empty() {
                run.stats.route = self.cfg.route(run.mode, 1, CycleKind::Draft);
            }
            self.keep_answer(&run, row);
            self.end(seat.p, &mut run);
            left += 1;
        }
        if left == 0 {
            return;
        }
        self.fit_padding();
        if !self.runs.is_empty() {
            self.leaves += left;
        }
    }

    /// Keep a finished row's answer in the cache for the conversation's next turn: as the row
    /// decoded it where that is the state a read gives (reading only the last token drawn), else
    /// read back while the lane is idle.
    fn keep_answer(&mut self, run: &RowRun, row: RowCache) {
        let finished = matches!(run.finish, Some((FinishReason::Stop | FinishReason::Length, _)));
        if !self.cache.serves() || !finished || run.tokens.is_empty() {
            return;
        }
        if self.cfg.prompt_cache.answers_as_decoded {
            let mtp = self.cfg.mode == GenerationMode::Mtp;
            match crate::model::routes::batched(|| settle_decoded(self.model, run, row, self.cfg.chunk, mtp)) {
                Ok(Some((tokens, snap))) => {
                    self.cache.insert_as(&tokens, snap, Kept::Answer);
                    self.cache.count_kept();
                    return;
                }
                Ok(None) => {}
                // Only a shortcut is lost: the answer is read back instead.
                Err(e) => tracing::warn!("keeping a decoded answer in the prompt cache failed: {e:#}"),
            }
        }
        self.settle_later(run);
    }

    /// Queue a finished row's answer to be read back into the cache while the lane is idle.
    fn settle_later(&mut self, run: &RowRun) {
        let tokens = [run.prompt_ids.as_slice(), run.tokens.as_slice()].concat();
        self.settles.push_back(Settle { tokens, from: run.prompt_ids.len(), row: None });
        // An engine that never idles keeps only the newest few.
        while self.settles.len() > MAX_SETTLES {
            self.settles.pop_front();
        }
    }

    /// The lane as it stands now: every live row, the width and route of the running cycle.
    fn publish(&self, tel: &SharedTelemetry) {
        let Ok(mut t) = tel.lock() else { return };
        t.rows = self.seats.iter().map(|s| s.tel.clone()).chain(self.readers.iter().map(|r| r.tel.clone())).collect();
        t.joins = self.joins;
        t.leaves = self.leaves;
        t.active = self.live();
        t.width_now = if self.runs.is_empty() { 0 } else { self.rows.len() };
        t.lane_cycles = self.cycles;
        t.prompt_cache = self.cache.stats().clone();
        t.prompt_cache.reading_back = self.settles.len();
    }
}
