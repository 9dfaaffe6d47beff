use mlx_rs::Array;

use super::*;

/// A snapshot of `bytes` bytes (float32 logits), its hidden state marking which one it is.
fn snap(mark: f32, bytes: usize) -> Snapshot {
    let n = (bytes / 4 - 1) as i32;
    Snapshot {
        row: RowCache::new(&[]),
        hidden: Array::from_slice(&[mark], &[1, 1, 1]),
        logits: mlx_rs::ops::zeros::<f32>(&[1, 1, n]).unwrap(),
    }
}

/// A hit's length and the mark of the entry it came from whole (None where it was cut back).
fn got(hit: Hit) -> (usize, Option<f32>) {
    (hit.len, hit.last.map(|(hidden, _)| hidden.as_slice::<f32>()[0]))
}

/// A snapshot of `tokens.len()` tokens (a row with no layers), marked.
fn held(mark: f32, tokens: &[u32]) -> Snapshot {
    let mut s = snap(mark, 64);
    s.row.len = tokens.len() as i32;
    s
}

fn cache(budget: u64) -> PromptCache {
    PromptCache::new(Reuse::Exact, budget, None, false)
}

#[test]
fn the_longest_entry_that_begins_the_prompt_serves_it() {
    let mut c = cache(1 << 20);
    c.insert(&[1, 2], snap(1.0, 64));
    c.insert(&[1, 2, 3, 4], snap(2.0, 64));
    c.insert(&[1, 2, 3, 4, 5, 6, 7], snap(3.0, 64)); // longer than the prompt below
    c.insert(&[1, 9, 3], snap(4.0, 64)); // not a prefix of it
    assert_eq!(got(c.lookup(&[1, 2, 3, 4, 5]).expect("a hit")), (4, Some(2.0)));
    assert_eq!(got(c.lookup(&[1, 2, 3, 4, 5, 6, 7]).expect("a prompt equal to an entry")), (7, Some(3.0)));
    assert!(c.lookup(&[2, 1]).is_none());
    let st = c.stats();
    assert_eq!((st.hits, st.misses, st.tokens_reused, st.entries), (2, 1, 11, 4));
}

#[test]
fn the_least_recently_used_entries_leave_first_and_the_budget_holds() {
    let mut c = cache(1000);
    c.insert(&[1], snap(1.0, 400));
    c.insert(&[2], snap(2.0, 400));
    assert!(c.lookup(&[1, 5]).is_some()); // [1] is now the more recently used
    c.insert(&[3], snap(3.0, 400));
    assert!(c.lookup(&[2]).is_none(), "[2] was the least recently used");
    assert!(c.lookup(&[1]).is_some() && c.lookup(&[3]).is_some());
    let st = c.stats();
    assert_eq!((st.evictions, st.entries), (1, 2));
    assert!(st.bytes_held <= 1000 && st.bytes_held >= 800, "{st:?}");
}

#[test]
fn a_snapshot_larger_than_the_budget_is_not_kept_and_the_same_tokens_replace() {
    let mut c = cache(1000);
    c.insert(&[1], snap(1.0, 4000));
    assert_eq!(c.stats().entries, 0);
    c.insert(&[1], snap(1.0, 100));
    c.insert(&[1], snap(2.0, 100));
    assert_eq!(c.stats().entries, 1);
    assert_eq!(got(c.lookup(&[1]).unwrap()), (1, Some(2.0)));
}

#[test]
fn a_cache_that_does_not_serve_keeps_and_counts_nothing() {
    let mut c = PromptCache::new(Reuse::Off, 1 << 20, None, false);
    c.insert(&[1], snap(1.0, 64));
    assert!(c.lookup(&[1, 2]).is_none());
    assert_eq!(c.stats(), &CacheStats { budget_bytes: 1 << 20, ..CacheStats::default() });
}

#[test]
fn the_policy_and_the_check_decide_how_the_cache_serves() {
    let cfg = |policy, bytes| CacheConfig { policy, bytes, answers: Default::default() };
    assert_eq!(cfg(ReusePolicy::Exact, 1).reuse(true), Reuse::Exact);
    assert_eq!(cfg(ReusePolicy::Exact, 1).reuse(false), Reuse::Off);
    assert_eq!(cfg(ReusePolicy::Inexact, 1).reuse(false), Reuse::Inexact);
    assert_eq!(cfg(ReusePolicy::Inexact, 1).reuse(true), Reuse::Exact);
    assert_eq!(cfg(ReusePolicy::Off, 1).reuse(true), Reuse::Off);
    assert_eq!(cfg(ReusePolicy::Exact, 0).reuse(true), Reuse::Off);
}

#[test]
fn an_answer_a_longer_prompt_extends_is_handed_over_and_everything_else_is_shared() {
    let mut c = cache(1 << 20);
    c.insert_as(&[1, 2], snap(1.0, 64), Kept::Prompt);
    c.insert_as(&[1, 2, 3, 4], snap(2.0, 64), Kept::Answer);
    // The prompt equal to the answer's tokens (a regenerated next turn with nothing new) shares it.
    assert_eq!(got(c.lookup(&[1, 2, 3, 4]).expect("a hit")), (4, Some(2.0)));
    assert_eq!(c.stats().entries, 2);
    // The next turn extends the answer: it takes the entry, so its first write copies nothing.
    assert_eq!(got(c.lookup(&[1, 2, 3, 4, 5]).expect("a hit")), (4, Some(2.0)));
    let st = c.stats().clone();
    assert_eq!((st.entries, st.handed_over, st.hits), (1, 1, 2));
    assert_eq!(st.bytes_held, 64, "the handed-over entry's bytes left the cache");
    // An edit of that turn resumes before the answer, from the prompt entry, which is shared.
    assert_eq!(got(c.lookup(&[1, 2, 9]).expect("a hit")), (2, Some(1.0)));
    assert_eq!((c.stats().entries, c.stats().handed_over), (1, 1));
}

#[test]
fn where_rows_cut_back_the_entry_sharing_the_most_serves_one_token_short_of_it() {
    let mut c = cache(1 << 20);
    c.insert_as(&[1, 2], held(1.0, &[1, 2]), Kept::Prompt);
    c.insert_as(&[1, 2, 3, 4, 5, 6], held(2.0, &[1, 2, 3, 4, 5, 6]), Kept::Answer);
    c.insert_as(&[1, 2, 3, 7, 8], held(3.0, &[1, 2, 3, 7, 8]), Kept::Prompt);
    // Four tokens in common with the answer (a re-tokenized ending): it is cut back to three and
    // handed over; the read starts a history of its own (no last position kept).
    let hit = c.lookup(&[1, 2, 3, 4, 9, 9]).expect("a hit");
    assert_eq!((hit.len, hit.row.len, hit.last.is_some()), (3, 3, false));
    let st = c.stats().clone();
    assert_eq!((st.entries, st.handed_over, st.cut_back, st.tokens_reused), (2, 1, 1, 3));
    // A prompt entry cut back is shared; a whole entry as long as the cut part wins over it.
    let hit = c.lookup(&[1, 2, 3, 7, 9]).expect("a hit");
    assert_eq!((hit.len, hit.row.len, hit.last.is_some()), (3, 3, false));
    assert_eq!(got(c.lookup(&[1, 2, 5]).expect("a hit")), (2, Some(1.0)));
    assert_eq!((c.stats().entries, c.stats().cut_back), (2, 2));
    // A row that cannot be cut back (a Gated DeltaNet layer) serves whole or not at all.
    let mut hybrid = cache(1 << 20);
    let mut s = held(4.0, &[5, 6, 7]);
    s.row = RowCache::new(&[crate::model::config::LayerKind::GatedDelta]);
    s.row.len = 3;
    hybrid.insert_as(&[5, 6, 7], s, Kept::Answer);
    assert!(hybrid.lookup(&[5, 6, 8]).is_none());
    assert_eq!(hybrid.stats().entries, 1);
}
