//! One pane: a multi-turn conversation, its input box, and the request it has in flight. A pane
//! is one row of the cohort while it generates.

use std::cell::{Cell, RefCell};
use std::time::Instant;

use super::input::InputLine;
use super::rendered::Rendered;
use crate::engine::api::RowState;
use crate::engine::api::{FinishReason, Stats};
use crate::model::text::tokenizer::ChatMessage;

/// One exchange: what the user sent and what came back (so far).
#[derive(Debug, Clone, Default)]
pub struct Turn {
    pub request_id: String,
    pub user: String,
    /// The system prompt the turn's request carried (None: none, or a transcript written before
    /// turns recorded it).
    pub system: Option<String>,
    pub answer: String,
    /// None while generating (or when a session ended before the answer did).
    pub finish: Option<FinishReason>,
    pub error: Option<String>,
    pub stats: Option<Stats>,
    /// Decode speed as the pane saw it (tokens over the time between the first and last).
    pub tokens_per_s: Option<f64>,
    /// Restored from a transcript whose answer never finished (the app stopped mid-answer).
    pub interrupted: bool,
    /// Left out of the conversation sent next, to fit the context window (the user agreed to
    /// it); it stays on screen and in the transcript.
    pub dropped: bool,
    /// Wrapped lines of the answer, kept until the text, width or theme changes.
    pub(crate) rendered: RefCell<Option<RenderCache>>,
}

impl Turn {
    /// The request failed: its message is not part of the conversation sent next.
    pub fn failed(&self) -> bool {
        self.finish == Some(FinishReason::Error)
    }

    /// Part of the conversation sent next: neither failed nor dropped.
    pub fn sent_next(&self) -> bool {
        !self.failed() && !self.dropped
    }
}

/// A turn's rendered lines. Streaming only ever appends, so complete lines are rendered once
/// (`lines`) and only the unfinished last line (`tail`) is rendered again as tokens arrive (with
/// a table still arriving: the markdown state holds its rows until it ends, and the tail draws
/// them).
#[derive(Debug, Clone)]
pub(crate) struct RenderCache {
    /// (width, style epoch) the lines were rendered for.
    pub key: (usize, u64),
    /// The user's message and the answer's complete lines.
    pub lines: Rendered,
    /// How many of `lines` are the user's message.
    pub user_rows: usize,
    /// Bytes of the answer in `lines` (up to and including its last newline).
    pub stable_len: usize,
    /// Markdown state after `stable_len` bytes.
    pub state: crate::tui::markdown::BlockState,
    /// The answer's last, unfinished line (and a table not yet ended).
    pub tail: Rendered,
    /// Answer length `tail` was rendered for.
    pub tail_len: usize,
}

/// The request a pane is waiting on.
#[derive(Debug, Clone)]
pub struct InFlight {
    pub id: String,
    pub sent: Instant,
    /// The app's tick when it was sent (the queue panel's waiting time, from state alone).
    pub sent_tick: u64,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub tokens: usize,
    pub prefill: (usize, usize),
    pub cancel_requested: bool,
}

impl InFlight {
    /// Live decode speed: tokens after the first over the time since it.
    pub fn tokens_per_s(&self) -> Option<f64> {
        let (first, last) = (self.first_token?, self.last_token?);
        let secs = last.duration_since(first).as_secs_f64();
        (self.tokens > 1 && secs > 0.0).then(|| (self.tokens - 1) as f64 / secs)
    }
}

#[derive(Debug)]
pub struct Pane {
    /// Stable id (transcript file `pane-<id>.jsonl`); positions on screen can shift.
    pub id: u32,
    pub turns: Vec<Turn>,
    pub input: InputLine,
    pub state: RowState,
    pub in_flight: Option<InFlight>,
    /// The cohort row this pane's request occupies (or last occupied).
    pub row: Option<usize>,
    /// The first line shown while the user has scrolled up (None = follow the newest text). An
    /// index from the top, so text streaming in below leaves the view where it is.
    pub scroll_top: Option<usize>,
    /// Position while browsing earlier prompts with up/down.
    pub history_pos: Option<usize>,
    /// A message sent while the pane was answering: it goes when the answer ends.
    pub queued: Option<String>,
    /// The request of the turn being edited (its message is in the box): sent, the box's text
    /// replaces that turn and its answer.
    pub editing: Option<String>,
    /// The pane's own system prompt, sampler and max_tokens (None: the profile's).
    pub settings: Option<crate::config::profile::ChatSettings>,
    /// Body height at the last render, so a page scroll moves by what the user sees.
    pub(crate) page: Cell<usize>,
    /// Lines above the visible ones at the last render (the most `scroll` can be).
    pub(crate) max_scroll: Cell<usize>,
    /// Cells the pane's code blocks are scrolled sideways (code is never wrapped).
    pub code_scroll: usize,
    /// The widest code line's overhang at the last render (the most `code_scroll` can be).
    pub(crate) max_code_scroll: Cell<usize>,
    /// The first line shown at the last render (where a search leaves the view).
    pub(crate) shown_top: Cell<usize>,
    /// Matches of the search at the last render (what its keys move through).
    pub search_hits: Cell<usize>,
    /// The draft against the context window.
    pub window: super::window::DraftWindow,
}

impl Pane {
    pub fn new(id: u32) -> Pane {
        Pane {
            id,
            turns: Vec::new(),
            input: InputLine::default(),
            state: RowState::Idle,
            in_flight: None,
            row: None,
            scroll_top: None,
            history_pos: None,
            queued: None,
            editing: None,
            settings: None,
            page: Cell::new(10),
            max_scroll: Cell::new(0),
            code_scroll: 0,
            max_code_scroll: Cell::new(0),
            shown_top: Cell::new(0),
            search_hits: Cell::new(0),
            window: Default::default(),
        }
    }

    /// Generating, prefilling or waiting in the queue.
    pub fn is_busy(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Mark the running answer cancelled and return its request id (once: None when it was
    /// already asked, or nothing runs); a message queued behind it goes back to the box (before
    /// what is there), to edit or send.
    pub fn cancel(&mut self) -> Option<String> {
        if let Some(queued) = self.queued.take() {
            let rest = self.input.take();
            let joined = if rest.is_empty() { queued } else { format!("{queued}\n{rest}") };
            self.input.set(&joined);
        }
        match self.in_flight.as_mut() {
            Some(flight) if !flight.cancel_requested => {
                flight.cancel_requested = true;
                Some(flight.id.clone())
            }
            _ => None,
        }
    }

    /// The turns the next prompt sends: those that neither failed nor were left out, before the
    /// turn being edited (sending replaces it and what follows).
    pub fn sent_turns(&self) -> impl Iterator<Item = &Turn> {
        self.turns.iter().take_while(|t| Some(&t.request_id) != self.editing.as_ref()).filter(|t| t.sent_next())
    }

    /// The conversation so far plus a new user message, as the chat template wants it.
    pub fn messages_with(&self, system: Option<&str>, next: &str) -> Vec<ChatMessage> {
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(ChatMessage::new("system", s));
        }
        // A failed turn (a message over the context window, an engine error) is left out whole:
        // sending its message again would fail again. It stays on screen, marked, and up recalls
        // it. A cancelled turn keeps what the user saw.
        for turn in self.sent_turns() {
            messages.push(ChatMessage::new("user", &turn.user));
            if !turn.answer.is_empty() {
                messages.push(ChatMessage::new("assistant", &turn.answer));
            }
        }
        messages.push(ChatMessage::new("user", next));
        messages
    }

    /// Tokens the conversation holds: the newest turn that worked (its prompt and its answer), or
    /// live while generating once the prompt's size is known. 0 when nothing is known.
    pub fn context_tokens(&self) -> usize {
        if let Some(f) = &self.in_flight
            && f.prefill.1 > 0
        {
            return f.prefill.1 + f.tokens;
        }
        self.turns
            .iter()
            .rev()
            .filter(|t| !t.failed())
            .find_map(|t| t.stats.as_ref().filter(|s| s.prompt_tokens > 0))
            .map(|s| s.prompt_tokens + s.completion_tokens)
            .unwrap_or(0)
    }

    /// The conversation's share of a `max_context`-token window, in whole percent (None when
    /// unknown).
    pub fn context_percent(&self, max_context: i32) -> Option<usize> {
        let (used, max) = (self.context_tokens(), usize::try_from(max_context).ok().filter(|m| *m > 0)?);
        (used > 0).then(|| ((used * 100 + max / 2) / max).max(1))
    }

    /// The newest answer with any text (for copy).
    pub fn last_answer(&self) -> Option<&str> {
        self.turns.iter().rev().map(|t| t.answer.as_str()).find(|a| !a.is_empty())
    }

    /// The pane's messages in order, as (turn index, the answer?) pairs: each turn's question,
    /// then its answer when it has any text (what the copy picker moves over).
    pub fn messages(&self) -> Vec<(usize, bool)> {
        let mut out = Vec::new();
        for (i, turn) in self.turns.iter().enumerate() {
            out.push((i, false));
            if !turn.answer.is_empty() {
                out.push((i, true));
            }
        }
        out
    }

    /// The text of message `index` of `messages`.
    pub fn message_text(&self, index: usize) -> Option<&str> {
        let (turn, answer) = *self.messages().get(index)?;
        let turn = &self.turns[turn];
        Some(if answer { &turn.answer } else { &turn.user })
    }

    /// The turn the in-flight request writes into.
    pub fn turn_for(&mut self, request_id: &str) -> Option<&mut Turn> {
        self.turns.iter_mut().rev().find(|t| t.request_id == request_id)
    }

    /// Earlier prompts, newest last (for history recall).
    pub fn prompts(&self) -> Vec<&str> {
        self.turns.iter().map(|t| t.user.as_str()).collect()
    }

    /// Tokens per second: live while decoding, else the last answer's decode speed.
    pub fn tokens_per_s(&self) -> Option<f64> {
        match &self.in_flight {
            Some(f) => f.tokens_per_s(),
            // The pane's own measure first: a row that ends early in a cohort reports the
            // cohort's whole decode time in its stats.
            None => self
                .turns
                .last()
                .and_then(|t| t.tokens_per_s.or_else(|| t.stats.as_ref().map(|s| s.decode_tok_s)).filter(|v| *v > 0.0)),
        }
    }
}
