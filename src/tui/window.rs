//! The context window in view before sending: what the draft would send (counted off the UI
//! thread with the engine's own tokenizer and chat template), its share of the window, and,
//! for a message that would not fit, an offer to leave the oldest turns out of the conversation
//! (shown in the pane and recorded in the transcript, never done silently).

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use anyhow::Result;

use crate::engine::api::Prompt;
use crate::engine::api::{VERIFY_SLACK, prompt_ids};
use crate::model::text::tokenizer::{ChatMessage, TextTokenizer};

/// A draft is counted once it has been left alone this many ticks (about 0.1 s), not on every
/// key.
pub const SETTLE_TICKS: u64 = 3;

/// Counts what a chat prompt encodes to, as the engine will: its tokenizer and chat template.
#[derive(Clone)]
pub struct PromptCounter(Arc<TextTokenizer>);

impl PromptCounter {
    pub fn new(tokenizer: TextTokenizer) -> Self {
        Self(Arc::new(tokenizer))
    }

    /// The prompt `messages` send, and the draft alone (the last message's text), in tokens.
    pub fn count(&self, messages: &[ChatMessage]) -> Result<Counted> {
        let prompt = prompt_ids(&self.0, &Prompt::Chat(messages.to_vec()))?.len();
        let draft = messages.last().map(|m| self.text(&m.content)).transpose()?.unwrap_or(0);
        Ok(Counted { prompt, draft })
    }

    /// Tokens of plain text (no template).
    pub fn text(&self, text: &str) -> Result<usize> {
        Ok(if text.is_empty() { 0 } else { self.0.encode(text)?.len() })
    }
}

impl PartialEq for PromptCounter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for PromptCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PromptCounter")
    }
}

/// A counted draft: the whole prompt it would send, and its own text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub prompt: usize,
    pub draft: usize,
}

/// Offered for the draft `key`: leave the `turns` oldest turns out and send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DropOffer {
    pub key: u64,
    pub turns: usize,
}

/// A pane's view of its draft against the window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DraftWindow {
    /// The draft last seen (its key) and the tick it changed.
    seen: Option<(u64, u64)>,
    /// The draft being counted now.
    counting: Option<u64>,
    /// The newest count and the draft it is for.
    counted: Option<(u64, Counted)>,
    pub offer: Option<DropOffer>,
}

impl DraftWindow {
    /// Note the draft `key` at `tick`; true when it has settled and has no count yet (count it).
    pub fn wants_count(&mut self, key: u64, tick: u64) -> bool {
        match self.seen {
            Some((k, _)) if k == key => {}
            _ => self.seen = Some((key, tick)),
        }
        let settled = self.seen.is_some_and(|(_, at)| tick >= at + SETTLE_TICKS);
        let known = self.counted.is_some_and(|(k, _)| k == key) || self.counting == Some(key);
        if settled && !known {
            self.counting = Some(key);
            return true;
        }
        false
    }

    /// A count came back (an error leaves the draft uncounted: the engine still says why at send).
    pub fn counted(&mut self, key: u64, counted: Option<Counted>) {
        if self.counting == Some(key) {
            self.counting = None;
        }
        if let Some(c) = counted {
            self.counted = Some((key, c));
        }
    }

    /// The count of draft `key`, when it is known.
    pub fn count_of(&self, key: u64) -> Option<Counted> {
        self.counted.filter(|(k, _)| *k == key).map(|(_, c)| c)
    }

    /// Forget every count (the box is empty, or what the draft is sent with changed).
    pub fn clear(&mut self) {
        *self = DraftWindow::default();
    }
}

/// Identifies a draft together with everything it would be sent with (the system prompt, the
/// turns kept, max_tokens), so a count is never shown for another prompt.
pub fn draft_key(system: Option<&str>, turns: &[(&str, &str)], draft: &str, max_tokens: usize) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (system, turns, draft, max_tokens).hash(&mut h);
    h.finish()
}

/// Tokens a prompt of `prompt` tokens needs with `max_tokens` to generate, as the engine checks
/// it (`prepare`).
pub fn needed(prompt: usize, max_tokens: usize) -> usize {
    prompt.saturating_add(max_tokens).saturating_add(VERIFY_SLACK)
}

/// How many of the oldest turns (sizes in tokens, oldest first) to leave out so that a prompt
/// of `prompt` tokens fits `window` with `max_tokens`: None when even leaving out all of them
/// would not do (the message itself, or max_tokens, is too large).
pub fn turns_to_drop(sizes: &[usize], prompt: usize, max_tokens: usize, window: usize) -> Option<usize> {
    let mut left = needed(prompt, max_tokens);
    for (dropped, size) in std::iter::once(0).chain(sizes.iter().copied()).enumerate() {
        left = left.saturating_sub(size);
        if left <= window {
            return Some(dropped);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fewest_oldest_turns_that_make_room_are_offered() {
        // 900 + 100 + 2 = 1002 over a window of 1000: the first turn (50) makes room.
        assert_eq!(turns_to_drop(&[50, 300, 200], 900, 100, 1000), Some(1));
        assert_eq!(turns_to_drop(&[1, 1, 300], 900, 100, 1000), Some(2));
        assert_eq!(turns_to_drop(&[1, 1, 300], 900, 100, 999), Some(3));
        assert_eq!(turns_to_drop(&[50], 800, 100, 1000), Some(0));
        assert_eq!(turns_to_drop(&[10, 10], 1200, 100, 1000), None);
        assert_eq!(turns_to_drop(&[], 10, usize::MAX, 1000), None);
    }

    #[test]
    fn a_draft_is_counted_once_it_settles_and_only_once() {
        let mut w = DraftWindow::default();
        assert!(!w.wants_count(7, 10));
        assert!(!w.wants_count(7, 12));
        assert!(w.wants_count(7, 13));
        assert!(!w.wants_count(7, 14), "already being counted");
        w.counted(7, Some(Counted { prompt: 40, draft: 3 }));
        assert_eq!(w.count_of(7), Some(Counted { prompt: 40, draft: 3 }));
        assert!(!w.wants_count(7, 20));
        // Another keystroke: the old count is not shown for it, and it waits to settle.
        assert!(!w.wants_count(8, 21));
        assert_eq!(w.count_of(8), None);
        assert!(w.wants_count(8, 24));
        w.counted(8, None);
        assert_eq!(w.count_of(8), None);
    }
}
