//! What a lane reads of its waiting prompts between two decode cycles: the step's budget, which
//! prompt goes first, where each read ends, and which prompts read together as one block. The
//! planner decides from what the lane tells it (the prompts' progress, whether rows wait, how
//! fast the last lone read went, how the model pads a block) and the lane carries the reads out.

use std::collections::VecDeque;

use super::scheduler::ReadOrder;

/// Prompt tokens a step reads while others wait for it (rows decoding, or other prompts), where
/// a read may split anywhere: on the CPU about a fifth of a second of the default model's reading
/// at 2,000 tokens of context.
pub const SHARED_READ: usize = 64;

/// Prompt tokens a step reads at most while nobody waits, where a read may split anywhere: a
/// request that arrives meanwhile waits for one such piece at most. On the CPU a 2,000-token
/// prompt read in pieces of 128 took 1.05x the time of chunks of 512 (pieces of 64: 1.2x).
pub const LONE_READ: usize = 128;

/// How long a lone read's piece should take: pieces shrink (to [`SHARED_READ`] at the least) as
/// the context grows and reading slows, so a request arriving meanwhile waits about this long at
/// most rather than a whole [`LONE_READ`] piece (~0.4 s at 2,000 tokens of context on the CPU).
pub const LONE_PIECE_S: f64 = 0.2;

/// The tokens of a lone read's next piece, given the rate (tokens/s) the last lone piece read
/// at: what takes [`LONE_PIECE_S`] at that rate, in multiples of 16, within [`SHARED_READ`]
/// ..= [`LONE_READ`]; [`LONE_READ`] before any piece was read.
pub fn lone_piece(rate: Option<f64>) -> usize {
    match rate.filter(|r| r.is_finite() && *r > 0.0) {
        Some(rate) => (((rate * LONE_PIECE_S) as usize) / 16 * 16).clamp(SHARED_READ, LONE_READ),
        None => LONE_READ,
    }
}

/// A waiting prompt as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    /// Tokens read so far.
    pub read: usize,
    /// Tokens of the whole prompt.
    pub len: usize,
    /// Positions the row holds (where its next read starts in the model's view).
    pub row_len: i32,
    pub cancelled: bool,
}

impl Waiting {
    fn left(&self) -> usize {
        self.len - self.read
    }
}

/// A lane's reading settings, fixed when the engine starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPlanner {
    /// Prompt tokens per chunk (the same chunks a solo run reads).
    pub chunk: usize,
    /// Prompt tokens a step may read (whole chunks, at least one).
    pub budget: usize,
    /// A read split anywhere gives the bits of one read whole, so reads may end wherever the
    /// step's budget does.
    pub split_exact: bool,
    /// Several prompts may read as one block (the start-up check found a packed read exact).
    pub packed: bool,
    pub order: ReadOrder,
}

impl ReadPlanner {
    /// Prompt tokens this step may read. Where a read may split anywhere, at most
    /// [`SHARED_READ`] while others wait (`others_wait`: rows decoding, or other prompts to
    /// read) and a piece of about [`LONE_PIECE_S`] ([`lone_piece`]) while nobody does, so a
    /// request never waits long behind a long read; otherwise the budget in whole chunks.
    pub fn step_budget(&self, others_wait: bool, lone_rate: Option<f64>) -> usize {
        match (self.split_exact, others_wait) {
            (true, true) => self.budget.min(SHARED_READ),
            (true, false) => self.budget.min(lone_piece(lone_rate)),
            (false, _) => self.budget,
        }
    }

    /// Puts the prompt to read next at the front: the one with the fewest tokens left (a short
    /// question never waits behind a long paste), or, round robin, the queue's own order.
    pub fn order<T>(&self, queue: &mut VecDeque<T>, waiting: impl Fn(&T) -> Waiting) {
        if self.order == ReadOrder::ShortestFirst {
            queue.make_contiguous().sort_by_key(|r| waiting(r).left());
        }
    }

    /// Where a prompt's next read ends: a whole chunk, or, where a read may split anywhere, no
    /// further than `room` tokens of the step's budget.
    pub fn read_end(&self, w: Waiting, room: usize) -> usize {
        let len = if self.split_exact { self.chunk.min(room) } else { self.chunk };
        (w.read + len.max(1)).min(w.len)
    }

    /// How many prompts from the front of `front` read their next reads as one block: those the
    /// model pads (`padded(row_len, tokens)`: the block length it pads `tokens` to, `None` where
    /// it reads them alone) while the block (prompts x the longest padded read) stays within
    /// `room` positions; always at least the first. One where the lane does not pack.
    pub fn block_len(
        &self,
        front: impl IntoIterator<Item = Waiting>,
        room: usize,
        padded: impl Fn(i32, usize) -> Option<usize>,
    ) -> usize {
        if !self.packed {
            return 1;
        }
        let (mut n, mut width) = (0, 0);
        for w in front {
            let Some(block) = padded(w.row_len, self.read_end(w, room) - w.read).filter(|_| !w.cancelled) else {
                break;
            };
            if n > 0 && width.max(block).saturating_mul(n + 1) > room {
                break;
            }
            (n, width) = (n + 1, width.max(block));
        }
        n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planner(split_exact: bool) -> ReadPlanner {
        ReadPlanner { chunk: 512, budget: 512, split_exact, packed: true, order: ReadOrder::ShortestFirst }
    }

    fn waiting(read: usize, len: usize) -> Waiting {
        Waiting { read, len, row_len: read as i32, cancelled: false }
    }

    #[test]
    fn a_step_reads_less_while_others_wait_where_reads_split_anywhere() {
        assert_eq!(planner(true).step_budget(true, None), SHARED_READ);
        assert_eq!(planner(true).step_budget(false, None), LONE_READ);
        assert_eq!(planner(true).step_budget(false, Some(50.0)), SHARED_READ, "a slow lone read");
        assert_eq!(planner(false).step_budget(true, Some(50.0)), 512, "whole chunks otherwise");
    }

    #[test]
    fn a_read_ends_at_a_chunk_the_room_or_the_prompt() {
        assert_eq!(planner(false).read_end(waiting(0, 2000), 64), 512, "whole chunks");
        assert_eq!(planner(true).read_end(waiting(0, 2000), 64), 64, "split at the room");
        assert_eq!(planner(true).read_end(waiting(1990, 2000), 64), 2000, "the prompt's end");
        assert_eq!(planner(true).read_end(waiting(5, 2000), 0), 6, "at least one token");
    }

    #[test]
    fn the_shortest_prompt_left_reads_first_unless_round_robin() {
        let mut q: VecDeque<Waiting> = [waiting(0, 900), waiting(800, 900), waiting(0, 50)].into();
        planner(true).order(&mut q, |w| *w);
        assert_eq!(q.iter().map(|w| w.left()).collect::<Vec<_>>(), vec![50, 100, 900]);
        let mut q: VecDeque<Waiting> = [waiting(0, 900), waiting(0, 50)].into();
        ReadPlanner { order: ReadOrder::RoundRobin, ..planner(true) }.order(&mut q, |w| *w);
        assert_eq!(q[0].len, 900);
    }

    #[test]
    fn prompts_read_together_while_the_padded_block_fits() {
        let pad16 = |_: i32, tokens: usize| Some(tokens.div_ceil(16) * 16);
        let front = [waiting(0, 40), waiting(0, 30), waiting(0, 100)];
        // Reads of 40, 30 and 64 tokens pad to 48, 32 and 64: two fit 128 (2 x 48), three do not (3 x 64).
        assert_eq!(planner(true).block_len(front, 128, pad16), 2);
        assert_eq!(planner(true).block_len(front, 512, pad16), 3);
        assert_eq!(planner(true).block_len(front, 16, pad16), 1, "always the first");
        assert_eq!(planner(true).block_len(front, 512, |_, _| None), 1, "a model that does not pad");
        let cancelled = [waiting(0, 40), Waiting { cancelled: true, ..waiting(0, 30) }, waiting(0, 20)];
        assert_eq!(planner(true).block_len(cancelled, 512, pad16), 1, "a cancelled prompt ends the block");
        let unpacked = ReadPlanner { packed: false, ..planner(true) };
        assert_eq!(unpacked.block_len(front, 512, pad16), 1);
    }
}
