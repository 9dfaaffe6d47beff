//! The prompt cache: a row's state after reading a prompt, kept so that a later prompt starting
//! with the same tokens (the next turn of a conversation, a regenerated answer, the same request
//! sent again) resumes from it and reads only what is new.
//!
//! An entry is the state a row reached reading `tokens` from scratch: every attention layer's
//! keys and values, every Gated DeltaNet tail and recurrent state, the MTP history, and the last
//! position's hidden state and logits (so a prompt equal to an entry reads nothing). A Gated
//! DeltaNet state cannot be trimmed back to an earlier position, so an entry serves only prompts
//! that contain all of its tokens; the longest such entry wins. Entries are filed in a token
//! trie ([`trie`]), so a lookup walks the prompt once whatever the cache holds, and kept within a
//! byte budget, the least recently used leaving first.
//!
//! An answer's entry (the state after a turn's prompt and answer) is handed over, not shared, to
//! the prompt that extends it (the conversation's next turn): a row that writes into buffers the
//! cache still holds has MLX copy them whole, on the way to its first token (at 1,188 tokens of
//! history on the 2-core CPU, 0.29 s of a follow-up's 0.07 s read). The turn's own prompt entry
//! stays, so an edit of the next question or a regenerated answer still resumes close by.
//!
//! Whether a resumed read gives the bits of a fresh one is measured when the engine starts
//! ([`check::split_read_check`]); where it does not, the cache serves only when the user allows
//! inexact reuse, and says so ([`Reuse`]).

pub mod check;
pub mod decoded;
pub mod persist;
mod trie;

use mlx_rs::Array;
use serde::{Deserialize, Serialize};

use crate::model::layers::cache::RowCache;
use trie::{EntryId, TokenTrie};

/// Whether cached prefixes are served, and how exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Reuse {
    /// A resumed read equals a fresh one bit for bit (the split-read check passed).
    Exact,
    /// Served although a resumed read may differ from a fresh one (the user allowed it).
    Inexact,
    /// Not served: turned off, no budget, or not exact here and inexact reuse not allowed.
    #[default]
    Off,
}

impl Reuse {
    pub fn name(self) -> &'static str {
        match self {
            Reuse::Exact => "exact",
            Reuse::Inexact => "inexact",
            Reuse::Off => "off",
        }
    }
}

/// What the user asks of the cache (`--prompt-cache`, the profile's `prompt_cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReusePolicy {
    /// Serve cached prefixes only where the split-read check found reuse exact.
    #[default]
    Exact,
    /// Serve them everywhere; where reuse is not exact, results say `reuse: inexact`.
    Inexact,
    /// Never keep or serve a prefix.
    Off,
}

/// How a finished answer reaches the cache (`--prompt-cache-answers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AnswerPolicy {
    /// Read back while the engine is idle (a turn sent at once reads the last answer again).
    ReadBack,
    /// Kept as the row decoded it, where the decode check finds that exact ([`decoded`]); else
    /// read back. A turn sent the moment an answer ends resumes after it.
    #[default]
    Decoded,
}

/// The cache's settings, decided when the engine starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheConfig {
    pub policy: ReusePolicy,
    /// Bytes of row state the cache may hold (0: none).
    pub bytes: u64,
    #[serde(default)]
    pub answers: AnswerPolicy,
}

/// The default budget: 1 GiB of row state (about 22,000 positions of the default model).
pub const DEFAULT_BYTES: u64 = 1 << 30;

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig { policy: ReusePolicy::Exact, bytes: DEFAULT_BYTES, answers: AnswerPolicy::default() }
    }
}

impl CacheConfig {
    /// How the cache serves given what the split-read check found.
    pub fn reuse(&self, split_exact: bool) -> Reuse {
        match self.policy {
            _ if self.bytes == 0 => Reuse::Off,
            ReusePolicy::Off => Reuse::Off,
            ReusePolicy::Exact | ReusePolicy::Inexact if split_exact => Reuse::Exact,
            ReusePolicy::Inexact => Reuse::Inexact,
            ReusePolicy::Exact => Reuse::Off,
        }
    }
}

/// A row's state after reading a prompt: what a prompt that starts with it resumes from.
#[derive(Clone)]
pub struct Snapshot {
    pub row: RowCache,
    /// The last position's final-norm hidden state [1, 1, H] (the next MTP history entry's).
    pub hidden: Array,
    /// The last position's logits [1, 1, V] (a prompt equal to the entry draws from them).
    pub logits: Array,
}

impl Snapshot {
    /// A snapshot of `row` whose last position's `hidden` state and `logits` are copied into
    /// buffers of their own: as they come from a read they are views of the whole chunk's arrays
    /// (a padded block's hidden states, a product padded to 16 rows), which would keep megabytes
    /// alive per entry that its byte count does not see ([`crate::model::ops::own_copy`]).
    pub fn new(row: RowCache, hidden: &Array, logits: &Array) -> mlx_rs::error::Result<Self> {
        use crate::model::ops::own_copy;
        Ok(Snapshot { row, hidden: own_copy(hidden)?, logits: own_copy(logits)? })
    }

    /// Every array the snapshot holds.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut all = self.row.arrays();
        all.extend([&self.hidden, &self.logits]);
        all
    }

    /// Bytes the snapshot holds: every buffer of the row (whole, as allocated) and the last
    /// position's arrays.
    pub fn nbytes(&self) -> u64 {
        let row: usize = self.row.arrays().iter().map(|a| a.nbytes()).sum();
        (row + self.hidden.nbytes() + self.logits.nbytes()) as u64
    }
}

/// What a prompt resumes from ([`PromptCache::lookup`]).
pub struct Hit {
    /// How many of the prompt's tokens the row holds.
    pub len: usize,
    pub row: RowCache,
    /// The last held position's hidden state and logits, where the entry served whole; None
    /// where it was cut back (the read then writes its MTP history as a prompt's first chunk).
    pub last: Option<(Array, Array)>,
}

/// The cache's counters, for `/health`, `/metrics` and the inspector.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheStats {
    pub reuse: Reuse,
    /// Why reuse is not exact here, when the split-read check found a difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inexact_because: Option<String>,
    pub budget_bytes: u64,
    pub bytes_held: u64,
    pub entries: usize,
    /// Prompts that resumed from an entry, and those that found none.
    pub hits: u64,
    pub misses: u64,
    /// Prompt tokens not read again because an entry held them.
    pub tokens_reused: u64,
    pub evictions: u64,
    /// Answers read back into the cache while the engine was idle (so a conversation's next
    /// turn resumes after the answer, not before it).
    #[serde(default)]
    pub settled: u64,
    /// Answers waiting to be read back (or being read back) now.
    #[serde(default)]
    pub reading_back: usize,
    /// Answers kept as their rows decoded them (where decoding leaves the state a read does:
    /// [`decoded::decode_read_check`]), so the next turn resumed after them with nothing read back.
    #[serde(default)]
    pub answers_kept: u64,
    /// Whether finished answers are kept as decoded (true) or read back while idle.
    #[serde(default)]
    pub answers_as_decoded: bool,
    /// Answers' entries handed over to the prompts that extended them (the next turns), which
    /// then left the cache.
    #[serde(default)]
    pub handed_over: u64,
    /// Hits served by an entry cut back to the part it shares with the prompt.
    #[serde(default)]
    pub cut_back: u64,
}

/// What an entry holds the state after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// A prompt, as read: shared with every prompt that starts with it.
    Prompt,
    /// A prompt and its answer: handed over to the first prompt that extends it.
    Answer,
}

struct Entry {
    id: EntryId,
    tokens: Vec<u32>,
    snap: Snapshot,
    kept: Kept,
    bytes: u64,
    /// When it was last stored or served (the cache's own clock).
    used: u64,
}

/// The entries and their counters.
pub struct PromptCache {
    entries: Vec<Entry>,
    /// The entries by their tokens, for lookups.
    trie: TokenTrie,
    next_id: EntryId,
    clock: u64,
    stats: CacheStats,
}

impl PromptCache {
    pub fn new(reuse: Reuse, budget_bytes: u64, inexact_because: Option<String>, answers_as_decoded: bool) -> Self {
        let stats = CacheStats { reuse, budget_bytes, inexact_because, answers_as_decoded, ..CacheStats::default() };
        PromptCache { entries: Vec::new(), trie: TokenTrie::default(), next_id: 0, clock: 0, stats }
    }

    pub fn serves(&self) -> bool {
        self.stats.reuse != Reuse::Off
    }

    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// What `prompt` resumes from: the entry that serves the most of it, whole where its tokens
    /// begin the prompt, or, where its row can be cut back ([`RowCache::cut_back`]: attention
    /// only), cut back to one token short of the part it shares with the prompt (a re-tokenized
    /// answer, an edited message); a whole entry wins a tie. An answer's entry is handed over to a
    /// prompt that goes past it (see the module's notes). Counts a hit or a miss.
    pub fn lookup(&mut self, prompt: &[u32]) -> Option<Hit> {
        if !self.serves() {
            return None;
        }
        // (entry, tokens served, whole) of the best candidate: the longest entry that begins the
        // prompt, or one that shares more with it cut back to one short of the shared part (all
        // of one model's rows cut back or none do); a whole entry wins a tie.
        let walk = self.trie.walk(prompt);
        let index = |id: EntryId| self.entries.iter().position(|e| e.id == id);
        let whole = walk.prefix.and_then(|(len, id)| index(id).map(|i| (i, len, true)));
        let cut = walk
            .through
            .filter(|_| walk.depth >= 2)
            .and_then(index)
            .filter(|&i| self.entries[i].snap.row.cuts_back())
            .map(|i| (i, walk.depth - 1, false));
        let best = match (whole, cut) {
            (Some(w), Some(c)) => Some(if (c.1, c.2) > (w.1, w.2) { c } else { w }),
            (w, c) => w.or(c),
        };
        let Some((i, len, whole)) = best else {
            self.stats.misses += 1;
            return None;
        };
        self.clock += 1;
        let hand_over = self.entries[i].kept == Kept::Answer && (!whole || len < prompt.len());
        let snap = if hand_over {
            self.stats.handed_over += 1;
            let entry = self.entries.swap_remove(i);
            self.trie.remove(&entry.tokens);
            self.refresh();
            entry.snap
        } else {
            self.entries[i].used = self.clock;
            self.entries[i].snap.clone()
        };
        let hit = if whole {
            Some(Hit { len, row: snap.row, last: Some((snap.hidden, snap.logits)) })
        } else {
            // cuts_back() said it would; a row that does not is read from scratch (a miss).
            snap.row.cut_back(len as i32).ok().flatten().map(|row| Hit { len, row, last: None })
        };
        match &hit {
            Some(_) => {
                self.stats.hits += 1;
                self.stats.tokens_reused += len as u64;
                self.stats.cut_back += u64::from(!whole);
            }
            None => self.stats.misses += 1,
        }
        hit
    }

    /// The entry of exactly `tokens`, if held (counts nothing: the engine's own reads use it).
    pub fn entry(&self, tokens: &[u32]) -> Option<Snapshot> {
        self.entries.iter().find(|e| e.tokens == tokens).map(|e| e.snap.clone())
    }

    /// A prompt resumed `extra` tokens further than [`Self::lookup`] found, from an answer being
    /// read back that had got that far: counted as reused (and as a hit, where the lookup missed).
    pub fn count_adopted(&mut self, extra: usize, lookup_hit: bool) {
        self.stats.tokens_reused += extra as u64;
        if !lookup_hit {
            self.stats.misses = self.stats.misses.saturating_sub(1);
            self.stats.hits += 1;
        }
    }

    /// An answer was read back and kept ([`Self::insert`] keeps it).
    pub fn count_settled(&mut self) {
        self.stats.settled += 1;
    }

    /// An answer was kept as its row decoded it ([`Self::insert`] keeps it).
    pub fn count_kept(&mut self) {
        self.stats.answers_kept += 1;
    }

    /// Keep `snap` as the state after reading the prompt `tokens` ([`Kept::Prompt`]).
    pub fn insert(&mut self, tokens: &[u32], snap: Snapshot) {
        self.insert_as(tokens, snap, Kept::Prompt)
    }

    /// Keep `snap` as the state after `tokens` (replacing an entry of the same tokens), then let
    /// the least recently used entries go until the cache is within its budget. A snapshot larger
    /// than the whole budget is not kept.
    pub fn insert_as(&mut self, tokens: &[u32], snap: Snapshot, kept: Kept) {
        if !self.serves() || tokens.is_empty() {
            return;
        }
        let bytes = snap.nbytes();
        if bytes > self.stats.budget_bytes {
            return;
        }
        self.entries.retain(|e| e.tokens != tokens);
        self.clock += 1;
        self.next_id += 1;
        let id = self.next_id;
        self.trie.insert(tokens, id);
        self.entries.push(Entry { id, tokens: tokens.to_vec(), snap, kept, bytes, used: self.clock });
        while self.held() > self.stats.budget_bytes {
            let oldest = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used).expect("over budget, not empty");
            let gone = self.entries.swap_remove(oldest);
            self.trie.remove(&gone.tokens);
            self.stats.evictions += 1;
        }
        self.refresh();
    }

    /// The entries no other entry extends (a conversation's latest turn, a lone request), the
    /// least recently used first: what is worth keeping across a restart ([`persist`]).
    pub fn tips(&self) -> Vec<(&[u32], &Snapshot, Kept)> {
        let extended =
            |e: &Entry| self.entries.iter().any(|o| o.tokens.len() > e.tokens.len() && o.tokens.starts_with(&e.tokens));
        let mut tips: Vec<&Entry> = self.entries.iter().filter(|e| !extended(e)).collect();
        tips.sort_by_key(|e| e.used);
        tips.into_iter().map(|e| (e.tokens.as_slice(), &e.snap, e.kept)).collect()
    }

    fn held(&self) -> u64 {
        self.entries.iter().map(|e| e.bytes).sum()
    }

    fn refresh(&mut self) {
        self.stats.entries = self.entries.len();
        self.stats.bytes_held = self.held();
    }
}

#[cfg(test)]
mod tests;
