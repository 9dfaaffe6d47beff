//! What one request owns while it decodes: its prompt, sampler and RNG, budget, stop set and
//! cancel flag, its emitted tokens and text, and its MTP bookkeeping. The solo path and the
//! cohort drive the same `RowRun`, so every row behaves the same whatever its neighbours do.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use anyhow::{Context, Result};
use mlx_rs::Array;

use super::request::{FinishReason, GenerationMode, Request, RequestResult, Stats};
use super::sampler::{Dist, PenaltyState, SamplerConfig};
use crate::model::text::tokenizer::{StreamDecoder, TextTokenizer};
use crate::platform::rng::Rng;

/// Streamed to whoever submitted the request.
#[derive(Debug, Clone)]
pub enum RowEvent {
    /// The prompt was tokenized and checked, and the request waits for a row (always the first
    /// event of a request the engine takes; a refused one gets only its `Done`).
    Queued { id: String, prompt_tokens: usize },
    /// The row started prefilling (`done` of `total` prompt tokens so far).
    Prefill { id: String, done: usize, total: usize },
    /// New text and the ids that produced it.
    Delta { id: String, text: String, ids: Vec<u32> },
    /// The terminal result (exactly once per request).
    Done(Box<RequestResult>),
}

/// A shared flag the owner polls at defined points (before prefill, at the merge boundary,
/// every cycle).
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Cancel flags by request id, for whoever cancels by id (the engine handle, the server client).
/// Held weakly: a request that ended, and whose submitter let go, drops out at the next
/// registration, so a long-running process keeps entries for live requests only.
#[derive(Debug, Default)]
pub struct CancelRegistry(Mutex<HashMap<String, Weak<AtomicBool>>>);

impl CancelRegistry {
    pub fn register(&self, id: &str, flag: &CancelFlag) {
        let mut flags = self.0.lock().unwrap_or_else(|e| e.into_inner());
        flags.retain(|_, f| f.strong_count() > 0);
        flags.insert(id.to_owned(), Arc::downgrade(&flag.0));
    }

    /// Flip the flag of request `id`; an unknown or ended id is ignored.
    pub fn cancel(&self, id: &str) {
        let flag = self.0.lock().unwrap_or_else(|e| e.into_inner()).get(id).and_then(Weak::upgrade);
        if let Some(flag) = flag {
            flag.store(true, Ordering::SeqCst);
        }
    }

    /// Entries kept (live requests, and ended ones not yet dropped).
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub struct RowRun {
    pub id: String,
    pub prompt_ids: Vec<u32>,
    pub sampler: SamplerConfig,
    /// How this row decodes: what its request asked for (MTP when it asked for none), narrowed
    /// to AR by an engine without MTP ([`RowRun::serve_in`]). In an MTP cycle an AR row never
    /// proposes a draft: it takes position 0's token exactly as plain decoding does.
    pub mode: GenerationMode,
    pub rng: Rng,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub eos: Vec<u32>,
    pub cancel: CancelFlag,
    pub tokens: Vec<u32>,
    pub text: String,
    decoder: StreamDecoder,
    pub penalties: PenaltyState,
    pub finish: Option<(FinishReason, Option<String>)>,
    pub stats: Stats,
    pub started: Instant,
    /// When the request reached the engine (time to first token counts from here).
    pub arrived: Instant,
    /// The newest committed token not yet fed to the target (the cycle's primary).
    pub primary: Option<u32>,
    /// The target's final-norm hidden state of the last committed position [1, 1, H].
    pub hidden_last: Option<Array>,
    /// An accepted draft's MTP history entry (verify hidden at position 0, the draft) not yet
    /// written to the MTP KV; folded into the next draft call.
    pub pending_mtp: Option<(Array, u32)>,
    /// Test hook: drafts to propose instead of the MTP module's, one per cycle (the module still
    /// runs, so its history advances exactly as in a real cycle).
    #[cfg(feature = "testing")]
    pub draft_script: Option<std::collections::VecDeque<u32>>,
    /// The terminal result has been sent (cancelled rows report before their cohort ends).
    pub delivered: bool,
}

impl RowRun {
    /// The draft input of the row: its pending accepted entry (if any) then (hidden_last, primary).
    pub fn draft_inputs(&self) -> Result<(Array, Vec<u32>)> {
        let hidden = self.hidden_last.clone().context("no hidden state to draft from")?;
        let x0 = self.primary.context("no primary token")?;
        Ok(match &self.pending_mtp {
            Some((h, d)) => (mlx_rs::ops::concatenate(&[h.clone(), hidden], 1)?, vec![*d, x0]),
            None => (hidden, vec![x0]),
        })
    }

    pub fn new(req: &Request, prompt_ids: Vec<u32>, eos: Vec<u32>, cancel: CancelFlag) -> Self {
        let mut stats = Stats { prompt_tokens: prompt_ids.len(), ..Default::default() };
        stats.real_width = 1;
        Self {
            id: req.id.clone(),
            prompt_ids,
            sampler: req.sampler,
            mode: req.mode.unwrap_or(GenerationMode::Mtp),
            rng: Rng::new(req.seed),
            max_tokens: req.max_tokens,
            stop: req.stop.clone(),
            eos: if req.ignore_eos { Vec::new() } else { eos },
            cancel,
            tokens: Vec::new(),
            text: String::new(),
            decoder: StreamDecoder::new(),
            penalties: PenaltyState::default(),
            finish: None,
            stats,
            started: Instant::now(),
            arrived: Instant::now(),
            primary: None,
            hidden_last: None,
            pending_mtp: None,
            #[cfg(feature = "testing")]
            draft_script: None,
            delivered: false,
        }
    }

    pub fn is_active(&self) -> bool {
        self.finish.is_none()
    }

    /// Tokens the row may still emit.
    pub fn budget_left(&self) -> usize {
        self.max_tokens.saturating_sub(self.tokens.len())
    }

    /// Run in an engine of mode `engine`: the row keeps its own mode where the engine can serve
    /// it, and decodes AR where it cannot (the result says so, never an error).
    pub fn serve_in(&mut self, engine: GenerationMode) {
        self.mode = engine.serving(Some(self.mode));
    }

    /// Whether the row proposes a draft this cycle: it decodes MTP and has room for two tokens.
    pub fn drafts(&self) -> bool {
        self.mode == GenerationMode::Mtp && self.budget_left() >= 2
    }

    /// Draw from `dist` with the row's own RNG (greedy rows never touch the RNG).
    pub fn draw(&mut self, dist: &Dist) -> u32 {
        if self.sampler.is_greedy() { dist.argmax() } else { dist.sample(&mut self.rng) }
    }

    /// Commit one emitted token: stream it, and finish the row on eos, a stop string, or its
    /// budget. Returns whether the row is still active.
    pub fn emit(&mut self, tok: u32, tokenizer: &TextTokenizer, events: &mut dyn FnMut(RowEvent)) -> Result<bool> {
        if !self.is_active() {
            return Ok(false);
        }
        self.tokens.push(tok);
        self.penalties.observe(tok);
        if self.eos.contains(&tok) {
            self.finish = Some((FinishReason::Stop, None));
            return Ok(false);
        }
        let delta = self.decoder.push(tokenizer, &[tok])?;
        if !delta.is_empty() {
            let before = self.text.len();
            self.text.push_str(&delta);
            // A stop string may straddle deltas: search from just before the new text.
            let from = before.saturating_sub(self.stop.iter().map(|s| s.len()).max().unwrap_or(0));
            let from = (0..=from).rev().find(|&i| self.text.is_char_boundary(i)).unwrap_or(0);
            let hit = self
                .stop
                .iter()
                .filter(|s| !s.is_empty())
                .filter_map(|s| self.text[from..].find(s.as_str()).map(|p| from + p))
                .min();
            if let Some(cut) = hit {
                let shown = if cut > before { self.text[before..cut].to_owned() } else { String::new() };
                self.text.truncate(cut);
                if !shown.is_empty() {
                    events(RowEvent::Delta { id: self.id.clone(), text: shown, ids: vec![tok] });
                }
                self.finish = Some((FinishReason::Stop, None));
                return Ok(false);
            }
            events(RowEvent::Delta { id: self.id.clone(), text: delta, ids: vec![tok] });
        }
        if self.tokens.len() >= self.max_tokens {
            self.finish = Some((FinishReason::Length, None));
            return Ok(false);
        }
        Ok(true)
    }

    pub fn fail(&mut self, message: String) {
        if self.finish.is_none() {
            self.finish = Some((FinishReason::Error, Some(message)));
        }
    }

    pub fn cancel_now(&mut self) {
        if self.finish.is_none() {
            self.finish = Some((FinishReason::Cancelled, None));
        }
    }

    /// The terminal result (flushes any text still held back by the stream decoder).
    pub fn result(&mut self, tokenizer: &TextTokenizer) -> RequestResult {
        if matches!(self.finish, None | Some((FinishReason::Length, _)) | Some((FinishReason::Cancelled, _)))
            && let Ok(rest) = self.decoder.finish(tokenizer)
        {
            self.text.push_str(&rest);
        }
        let (reason, error) = self.finish.clone().unwrap_or((FinishReason::Length, None));
        let mut stats = self.stats.clone();
        stats.completion_tokens = self.tokens.len();
        stats.mode = Some(self.mode);
        if stats.decode_s > 0.0 {
            stats.decode_tok_s = self.tokens.len().saturating_sub(1) as f64 / stats.decode_s;
        }
        if stats.prefill_s > 0.0 {
            // The rate of what was read: a cached prefix took no reading.
            stats.prefill_tok_s = stats.prompt_tokens.saturating_sub(stats.cached_tokens) as f64 / stats.prefill_s;
        }
        let drafts = stats.accepted_drafts + stats.rejected_drafts;
        if drafts > 0 {
            stats.acceptance_rate = stats.accepted_drafts as f64 / drafts as f64;
        }
        if stats.verify_cycles > 0 {
            stats.tokens_per_cycle =
                (stats.accepted_drafts * 2 + stats.rejected_drafts) as f64 / stats.verify_cycles as f64;
        }
        RequestResult {
            id: self.id.clone(),
            token_ids: self.tokens.clone(),
            text: self.text.clone(),
            finish_reason: reason,
            error,
            refused: false,
            stats,
        }
    }
}
