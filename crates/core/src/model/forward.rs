//! What every model family offers the engine: a batched forward over row-owned state, chunked
//! prefill built on it, and the MTP draft module.

use anyhow::{Result, bail};
use mlx_rs::Array;

use super::layers::cache::RowCache;
use super::layers::gated_delta::PositionStates;

/// Which positions get logits from a forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    /// Every position (verify blocks).
    All,
    /// Only the last position (prefill).
    Last,
    /// None (intermediate prefill chunks).
    None,
}

/// What a forward pass returns.
pub struct ForwardOutput {
    /// Final-norm hidden states [B, T, H] (what the MTP module reads).
    pub hidden: Array,
    /// [B, T or 1, V], unless `Logits::None` was asked for.
    pub logits: Option<Array>,
    /// Per GDN layer (by layer index), every row's state after each position, when captured.
    pub captures: Vec<Option<PositionStates>>,
}

/// A causal LM the engine can drive.
pub trait LanguageModel {
    /// Fresh state for one row.
    fn new_row(&self) -> RowCache;

    /// Run `tokens` [B, T] through the model; `rows[b]` is row b's state and advances by T.
    /// With `capture`, GDN layers also return every row's state after each position.
    fn forward(
        &self,
        tokens: &Array,
        rows: &mut [&mut RowCache],
        logits: Logits,
        capture: bool,
    ) -> Result<ForwardOutput>;

    /// The MTP module on `hidden` [B, T, H] (the target's final-norm states) and the tokens that
    /// follow them [B, T]; appends to each row's MTP history and returns logits [B, T, V].
    fn mtp_forward(&self, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<Array>;

    /// [`Self::mtp_forward`] for its history alone: the entries are appended, the head is not
    /// run (a draft's head is most of the module's cost, and a head on the CPU kernel runs
    /// eagerly whether or not its logits are read).
    fn mtp_history(&self, hidden: &Array, tokens: &Array, rows: &mut [&mut RowCache]) -> Result<()>;

    /// The model's head on final-norm hidden states [B, T, H]: logits [B, T, V].
    fn head_logits(&self, hidden: &Array) -> Result<Array>;

    /// How a prompt chunk of `tokens` positions, read at `offset`, is laid out: `Some(rows)` when
    /// it is read as a block of `rows` positions (the chunk, then padding trimmed again) so that
    /// several rows' chunks packed into one block give every row the bits it gets alone
    /// ([`super::prefill::read_chunks`]); None when it is read as it is, and only alone.
    fn prefill_block(&self, _offset: i32, _tokens: usize) -> Option<usize> {
        None
    }

    /// Positions a prompt read takes at once on the invariant route: the longest block in which
    /// every layer still computes a row as a step does (the row-invariant products and the
    /// attention kernel take blocks of any length in tiles; compiled graphs, the fused Gated
    /// DeltaNet norm and the tensor-core expert kernel serve step-sized blocks only).
    fn invariant_piece(&self) -> usize {
        super::routes::INVARIANT_PIECE
    }

    fn has_mtp(&self) -> bool;
    fn vocab_size(&self) -> i32;
    /// The context window (positions) the model was configured for.
    fn max_context(&self) -> i32;
    /// Bytes of attention KV one position of one row adds (all full-attention layers and the MTP
    /// layer; recurrent state is fixed-size and not counted).
    fn kv_bytes_per_position(&self) -> usize;
    /// End-of-sequence ids from the model's config (the tokenizer may add its own).
    fn eos_ids(&self) -> Vec<u32>;
    /// Activation dtype.
    fn dtype(&self) -> mlx_rs::Dtype;
    /// The routes the model was loaded under (its weights' layout follows them): whoever drives
    /// the model puts them in force ([`crate::model::routes::enter`]), with the block route the
    /// exactness gate chose.
    fn routes(&self) -> crate::model::routes::Routes;

    /// Prefill one row with `ids` in chunks of `chunk`, evaluating between chunks so memory stays
    /// bounded; returns the last position's hidden [1, 1, H] and logits [1, 1, V], and the hidden
    /// of every position when `keep_hidden` (for the MTP history).
    fn prefill(
        &self,
        row: &mut RowCache,
        ids: &[u32],
        chunk: usize,
        keep_hidden: bool,
    ) -> Result<(Array, Array, Option<Array>)> {
        self.prefill_with_progress(row, ids, chunk, keep_hidden, &mut |_| {})
    }

    /// `prefill`, calling `progress` with the prompt tokens done after every chunk (the TUI shows
    /// it for long prompts).
    fn prefill_with_progress(
        &self,
        row: &mut RowCache,
        ids: &[u32],
        chunk: usize,
        keep_hidden: bool,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(Array, Array, Option<Array>)> {
        if ids.is_empty() {
            bail!("cannot prefill an empty prompt");
        }
        let chunk = chunk.max(1);
        let mut hiddens = Vec::new();
        let mut last = None;
        let n_chunks = ids.len().div_ceil(chunk);
        for (ci, part) in ids.chunks(chunk).enumerate() {
            let is_last = ci + 1 == n_chunks;
            let out = prefill_chunk(self, row, part, is_last)?;
            progress((ci * chunk + part.len()).min(ids.len()));
            if keep_hidden {
                hiddens.push(out.hidden.clone());
            }
            if is_last {
                last = Some(last_position(out)?);
            }
        }
        let (h, l) = last.expect("at least one chunk");
        let all = if keep_hidden { Some(mlx_rs::ops::concatenate(&hiddens, 1)?) } else { None };
        Ok((h, l, all))
    }
}

/// One chunk of a row's prompt through the model, evaluated (so no graph outlives the chunk):
/// logits of the last position only when `is_last`. Chunked prefill is a run of these, so a
/// prompt read chunk by chunk between other rows' cycles gives the same state as one read whole.
pub fn prefill_chunk<M: LanguageModel + ?Sized>(
    model: &M,
    row: &mut RowCache,
    part: &[u32],
    is_last: bool,
) -> Result<ForwardOutput> {
    let mut outs = super::prefill::read_chunks(model, &mut [row], &[part], &[is_last])?;
    Ok(outs.pop().expect("one row read, one output"))
}

/// The last chunk's final position: its hidden state [1, 1, H] and its logits [1, 1, V].
pub fn last_position(out: ForwardOutput) -> Result<(Array, Array)> {
    let t = out.hidden.shape()[1];
    let logits = out.logits.ok_or_else(|| anyhow::anyhow!("the last prefill chunk returned no logits"))?;
    Ok((super::ops::slice_axis(&out.hidden, 1, t - 1, t)?, logits))
}
