//! A token trie over the cache's entries: a prompt walks down it once, and the walk tells which
//! entries are prefixes of the prompt (they end on its path) and how far the prompt shares its
//! tokens with any entry (where the walk stops), with one entry that goes through that point.
//! A lookup then costs the prompt's length, whatever the cache holds.

use std::collections::HashMap;

/// An entry's key in the trie (the cache numbers its entries).
pub type EntryId = u64;

#[derive(Default)]
struct Node {
    children: HashMap<u32, usize>,
    /// The entry whose tokens end here.
    end: Option<EntryId>,
    /// Entries ending here or below.
    count: usize,
}

pub struct TokenTrie {
    nodes: Vec<Node>,
    /// Nodes no entry reaches any more, for reuse.
    free: Vec<usize>,
}

/// Where a prompt's walk down the trie went.
#[derive(Debug, PartialEq, Eq)]
pub struct Walk {
    /// The longest entry that is a prefix of the prompt: (its length, its id).
    pub prefix: Option<(usize, EntryId)>,
    /// How many of the prompt's tokens the walk matched: the longest common prefix of the prompt
    /// with any entry.
    pub depth: usize,
    /// An entry that shares exactly `depth` tokens with the prompt and goes on past them (None
    /// where every entry through that point ends there).
    pub through: Option<EntryId>,
}

impl Default for TokenTrie {
    fn default() -> Self {
        Self { nodes: vec![Node::default()], free: Vec::new() }
    }
}

impl TokenTrie {
    /// File `id` under `tokens` (replacing an entry of the same tokens).
    pub fn insert(&mut self, tokens: &[u32], id: EntryId) {
        let replaced = self.find(tokens).is_some_and(|n| self.nodes[n].end.is_some());
        let mut at = 0;
        if !replaced {
            self.nodes[at].count += 1;
        }
        for &t in tokens {
            at = match self.nodes[at].children.get(&t) {
                Some(&next) => next,
                None => {
                    let next = self.new_node();
                    self.nodes[at].children.insert(t, next);
                    next
                }
            };
            if !replaced {
                self.nodes[at].count += 1;
            }
        }
        self.nodes[at].end = Some(id);
    }

    /// Take out the entry filed under `tokens`, letting go of the nodes only it reached.
    pub fn remove(&mut self, tokens: &[u32]) {
        if self.find(tokens).is_none_or(|n| self.nodes[n].end.is_none()) {
            return;
        }
        let mut at = 0;
        self.nodes[at].count -= 1;
        for &t in tokens {
            let next = self.nodes[at].children[&t];
            self.nodes[next].count -= 1;
            if self.nodes[next].count == 0 {
                // Nothing below any more: cut the branch here.
                self.nodes[at].children.remove(&t);
                self.release(next);
                return;
            }
            at = next;
        }
        self.nodes[at].end = None;
    }

    /// Walk `prompt` down the trie.
    pub fn walk(&self, prompt: &[u32]) -> Walk {
        let (mut at, mut depth, mut prefix) = (0, 0, None);
        for &t in prompt {
            let Some(&next) = self.nodes[at].children.get(&t) else { break };
            at = next;
            depth += 1;
            if let Some(id) = self.nodes[at].end {
                prefix = Some((depth, id));
            }
        }
        // Any entry below the stopping point (one that goes on past it) shares exactly `depth`.
        let mut through = None;
        let mut below = self.nodes[at].children.values().next().copied();
        while let Some(n) = below {
            if let Some(id) = self.nodes[n].end {
                through = Some(id);
                break;
            }
            below = self.nodes[n].children.values().next().copied();
        }
        Walk { prefix, depth, through }
    }

    fn find(&self, tokens: &[u32]) -> Option<usize> {
        let mut at = 0;
        for t in tokens {
            at = *self.nodes[at].children.get(t)?;
        }
        Some(at)
    }

    fn new_node(&mut self) -> usize {
        match self.free.pop() {
            Some(n) => {
                self.nodes[n] = Node::default();
                n
            }
            None => {
                self.nodes.push(Node::default());
                self.nodes.len() - 1
            }
        }
    }

    /// Return `n` and every node under it to the free list.
    fn release(&mut self, n: usize) {
        let mut stack = vec![n];
        while let Some(n) = stack.pop() {
            stack.extend(self.nodes[n].children.values().copied());
            self.nodes[n] = Node::default();
            self.free.push(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::rng::Rng;

    /// The walk against a plain scan of every entry, over random inserts, replacements and
    /// removals of short token sequences from a small alphabet (so they share prefixes).
    #[test]
    fn the_walk_agrees_with_a_scan_of_every_entry() {
        let mut rng = Rng::new(54);
        let mut trie = TokenTrie::default();
        let mut entries: Vec<(Vec<u32>, EntryId)> = Vec::new();
        let seq =
            |rng: &mut Rng| -> Vec<u32> { (0..1 + rng.next_u64() % 6).map(|_| (rng.next_u64() % 3) as u32).collect() };
        for id in 0..3000u64 {
            match rng.next_u64() % 3 {
                0 if !entries.is_empty() => {
                    let (tokens, _) = entries.swap_remove((rng.next_u64() % entries.len() as u64) as usize);
                    trie.remove(&tokens);
                }
                _ => {
                    let tokens = seq(&mut rng);
                    entries.retain(|(t, _)| *t != tokens);
                    entries.push((tokens.clone(), id));
                    trie.insert(&tokens, id);
                }
            }
            let prompt = seq(&mut rng);
            let walk = trie.walk(&prompt);
            let common = |t: &[u32]| t.iter().zip(&prompt).take_while(|(a, b)| a == b).count();
            let prefix = entries.iter().filter(|(t, _)| common(t) == t.len()).max_by_key(|(t, _)| t.len());
            assert_eq!(walk.prefix, prefix.map(|(t, id)| (t.len(), *id)), "{prompt:?} in {entries:?}");
            let depth = entries.iter().map(|(t, _)| common(t)).max().unwrap_or(0);
            assert_eq!(walk.depth, depth, "{prompt:?} in {entries:?}");
            let through: Vec<EntryId> =
                entries.iter().filter(|(t, _)| common(t) == depth && t.len() > depth).map(|(_, id)| *id).collect();
            match walk.through {
                Some(id) => assert!(through.contains(&id), "{id} not among {through:?}"),
                None => assert!(through.is_empty(), "missed {through:?}"),
            }
        }
        for (tokens, _) in &entries {
            trie.remove(tokens);
        }
        assert_eq!(trie.nodes[0].count, 0);
        assert!(trie.nodes[0].children.is_empty(), "every branch let go");
    }
}
