//! Reading prompt chunks: one row's, or several rows' packed into one block.
//!
//! Where a model lays a chunk out as a padded block ([`LanguageModel::prefill_block`]), the chunk
//! is read followed by padding positions, which are trimmed from the row's state again; every
//! row's chunk of a packed read is padded to the longest one's block. On MLX's CPU backend with
//! OpenBLAS a row of a product has the same bits in every block whose row count is a multiple of
//! 8 (docs/journal/benchmarks-2026-lanes-and-serving.md), so a row read in a packed block gets
//! exactly the state it gets read alone. The engine checks that at start-up before it packs.
//!
//! Where the exactness gate chose the invariant route (CUDA: MLX's products give a row other
//! bits in another block), a chunk is read in pieces ([`LanguageModel::invariant_piece`]) through
//! the row-invariant kernels, each piece computed as a verify's block is, one row at a time: a
//! prompt's state is then the chain of single steps it stands for wherever its read is split.

use anyhow::{Result, bail};
use mlx_rs::Array;

use super::forward::{ForwardOutput, LanguageModel, Logits};
use super::layers::cache::RowCache;
use super::ops::slice_axis;

/// A row's prompt read chunk by chunk, the one way every prompt is read (a solo run, a lane's
/// readers, a read resumed from a cached prefix): each chunk through [`read_chunks`], then, for
/// an MTP row, the history entries the chunk completes ([`write_history`]). Returns the last
/// position's hidden [1, 1, H] and logits [1, 1, V]; `progress` hears the tokens read so far.
pub fn read_prompt<M: LanguageModel + ?Sized>(
    model: &M,
    row: &mut RowCache,
    ids: &[u32],
    chunk: usize,
    mtp: bool,
    progress: &mut dyn FnMut(usize),
) -> Result<(Array, Array)> {
    resume_prompt(model, row, ids, chunk, mtp, None, progress)
}

/// [`read_prompt`] of `ids` into a row that has already read a prefix (a cached one): `carry` is
/// the prefix's last hidden state (None for a row that has read nothing).
pub fn resume_prompt<M: LanguageModel + ?Sized>(
    model: &M,
    row: &mut RowCache,
    ids: &[u32],
    chunk: usize,
    mtp: bool,
    mut carry: Option<Array>,
    progress: &mut dyn FnMut(usize),
) -> Result<(Array, Array)> {
    if ids.is_empty() {
        bail!("cannot read an empty prompt");
    }
    let mut last = None;
    let mut done = 0;
    for part in ids.chunks(chunk.max(1)) {
        done += part.len();
        let is_last = done == ids.len();
        let mut outs = read_chunks(model, &mut [&mut *row], &[part], &[is_last])?;
        let out = outs.pop().expect("one row read, one output");
        if mtp {
            carry = Some(write_history(model, row, carry.as_ref(), &out.hidden, part)?);
        }
        progress(done);
        if is_last {
            last = Some(super::forward::last_position(out)?);
        }
    }
    Ok(last.expect("a non-empty prompt has a last chunk"))
}

/// The MTP history entries a prompt chunk completes. Entry i pairs position i's final-norm
/// hidden state with token i + 1, so a chunk of tokens `part` read after position `carry`
/// (the hidden state of the position before it, None for a prompt's first chunk) completes the
/// entries of `carry` and of every position of the chunk but its last. Written chunk by chunk
/// (never more than a chunk's entries in one call), a prompt's history does not depend on where
/// its read was split. Returns the chunk's last hidden state [1, 1, H]: the next chunk's `carry`.
pub fn write_history<M: LanguageModel + ?Sized>(
    model: &M,
    row: &mut RowCache,
    carry: Option<&Array>,
    hidden: &Array,
    part: &[u32],
) -> Result<Array> {
    let n = part.len() as i32;
    if n == 0 || hidden.shape()[1] != n {
        bail!("a history write needs a chunk's hidden states ({:?}) for its {n} tokens", hidden.shape());
    }
    let before_last = slice_axis(hidden, 1, 0, n - 1)?;
    let (states, tokens) = match carry {
        Some(c) => (mlx_rs::ops::concatenate(&[c.clone(), before_last], 1)?, part),
        None => (before_last, &part[1..]),
    };
    super::routes::reading_prompt(|| -> Result<()> {
        // On the invariant route in pieces its kernels serve, as the chunk itself was read.
        let piece = piece_in_force(model).unwrap_or(tokens.len().max(1));
        for (i, part) in tokens.chunks(piece).enumerate() {
            let at = (i * piece) as i32;
            let states = slice_axis(&states, 1, at, at + part.len() as i32)?;
            let ids: Vec<i32> = part.iter().map(|&t| t as i32).collect();
            let tokens = Array::from_slice(&ids, &[1, ids.len() as i32]);
            model.mtp_history(&states, &tokens, &mut [&mut *row])?;
            mlx_rs::transforms::eval(row.mtp.arrays())?;
        }
        Ok(())
    })?;
    slice_axis(hidden, 1, n - 1, n)
}

/// One chunk of each row's prompt (`parts[i]` for `rows[i]`) through the model, evaluated (so no
/// graph outlives the read): each row's hidden states [1, len, H], and the logits of its chunk's
/// last position [1, 1, V] where `last[i]`. Several rows need a model that pads their chunks
/// ([`LanguageModel::prefill_block`]).
pub fn read_chunks<M: LanguageModel + ?Sized>(
    model: &M,
    rows: &mut [&mut RowCache],
    parts: &[&[u32]],
    last: &[bool],
) -> Result<Vec<ForwardOutput>> {
    if rows.len() != parts.len() || rows.len() != last.len() || rows.is_empty() {
        bail!("a prompt read needs one chunk and one flag per row ({} rows, {} chunks)", rows.len(), parts.len());
    }
    if let Some(empty) = parts.iter().position(|p| p.is_empty()) {
        bail!("row {empty} of a prompt read has an empty chunk");
    }
    super::routes::reading_prompt(|| read_chunks_now(model, rows, parts, last))
}

fn read_chunks_now<M: LanguageModel + ?Sized>(
    model: &M,
    rows: &mut [&mut RowCache],
    parts: &[&[u32]],
    last: &[bool],
) -> Result<Vec<ForwardOutput>> {
    if let Some(size) = piece_in_force(model) {
        return rows
            .iter_mut()
            .zip(parts)
            .zip(last)
            .map(|((row, part), &is_last)| read_in_pieces(model, row, part, is_last, size))
            .collect();
    }
    let blocks: Vec<Option<usize>> =
        rows.iter().zip(parts).map(|(row, part)| model.prefill_block(row.len, part.len())).collect();
    let outs = match blocks.iter().copied().collect::<Option<Vec<usize>>>() {
        Some(blocks) => read_padded(model, rows, parts, last, blocks.into_iter().max().unwrap_or(0))?,
        None if rows.len() == 1 => vec![read_as_is(model, &mut *rows[0], parts[0], last[0])?],
        None => bail!("this model reads these chunks only one row at a time"),
    };
    let mut to_eval: Vec<&Array> = rows.iter().flat_map(|r| r.arrays()).collect();
    to_eval.extend(outs.iter().flat_map(|o| std::iter::once(&o.hidden).chain(o.logits.as_ref())));
    mlx_rs::transforms::eval(to_eval)?;
    Ok(outs)
}

/// The rows' chunks as one block of `width` positions a row, the padding trimmed from each row
/// again (not evaluated).
fn read_padded<M: LanguageModel + ?Sized>(
    model: &M,
    rows: &mut [&mut RowCache],
    parts: &[&[u32]],
    last: &[bool],
    width: usize,
) -> Result<Vec<ForwardOutput>> {
    let mut ids = vec![0i32; rows.len() * width];
    for (i, part) in parts.iter().enumerate() {
        for (slot, &id) in ids[i * width..].iter_mut().zip(part.iter()) {
            *slot = id as i32;
        }
    }
    let tokens = Array::from_slice(&ids, &[rows.len() as i32, width as i32]);
    let out = model.forward(&tokens, rows, Logits::None, false)?;
    for (row, part) in rows.iter_mut().zip(parts) {
        row.trim_attention((width - part.len()) as i32)?;
    }
    let mut outs = Vec::with_capacity(rows.len());
    for (i, (part, &is_last)) in parts.iter().zip(last).enumerate() {
        let n = part.len() as i32;
        let hidden = slice_axis(&slice_axis(&out.hidden, 0, i as i32, i as i32 + 1)?, 1, 0, n)?;
        // The head on the last position alone, as a chunk read as it is computes it.
        let logits = if is_last { Some(model.head_logits(&slice_axis(&hidden, 1, n - 1, n)?)?) } else { None };
        outs.push(ForwardOutput { hidden, logits, captures: Vec::new() });
    }
    Ok(outs)
}

/// The positions a prompt read takes at once where it goes in pieces (the invariant route in force,
/// [`super::routes::reads_in_pieces`]): the model's [`LanguageModel::invariant_piece`]. None where
/// a chunk is read as one block.
fn piece_in_force<M: LanguageModel + ?Sized>(model: &M) -> Option<usize> {
    super::routes::reads_in_pieces().then(|| model.invariant_piece().max(1))
}

/// A row's chunk on the invariant route, `size` positions at a time ([`piece_in_force`]), each
/// piece a block computed as a verify's is (the row-invariant products, the short-block attention
/// kernel two queries a tile, the recurrence token by token), evaluated before the next. A verify
/// block equals the chain of single steps it stands for, so the chunk's state, hidden states and
/// last logits are the chain's wherever the chunk, or the prompt, is split. Several rows' chunks
/// are read one row after another, a piece holding one row's positions.
fn read_in_pieces<M: LanguageModel + ?Sized>(
    model: &M,
    row: &mut RowCache,
    part: &[u32],
    is_last: bool,
    size: usize,
) -> Result<ForwardOutput> {
    let pieces = part.len().div_ceil(size);
    let mut hiddens = Vec::with_capacity(pieces);
    let mut logits = None;
    for (i, piece) in part.chunks(size).enumerate() {
        let out = read_as_is(model, row, piece, is_last && i + 1 == pieces)?;
        let mut to_eval = row.arrays();
        to_eval.push(&out.hidden);
        to_eval.extend(out.logits.as_ref());
        mlx_rs::transforms::eval(to_eval)?;
        hiddens.push(out.hidden);
        logits = out.logits;
    }
    let hidden =
        if hiddens.len() == 1 { hiddens.pop().expect("one piece") } else { mlx_rs::ops::concatenate(&hiddens, 1)? };
    Ok(ForwardOutput { hidden, logits, captures: Vec::new() })
}

/// A chunk read with no padding: logits of the last position only when `is_last` (not evaluated).
fn read_as_is<M: LanguageModel + ?Sized>(
    model: &M,
    row: &mut RowCache,
    part: &[u32],
    is_last: bool,
) -> Result<ForwardOutput> {
    let tokens = Array::from_slice(&part.iter().map(|&x| x as i32).collect::<Vec<_>>(), &[1, part.len() as i32]);
    model.forward(&tokens, &mut [row], if is_last { Logits::Last } else { Logits::None }, false)
}
