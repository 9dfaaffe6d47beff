//! A cohort's attention KV kept in one buffer per layer, [W, kv_heads, capacity, head_dim], with
//! row b in slot b. Rows still own their offsets (committed and physical); only the storage is
//! shared, so a whole-cohort step can RoPE, write and attend every row with one op each instead
//! of one chain per row. On MLX's CPU backend the per-row chain cost more than the projections
//! (docs/benchmarks.md, "Batched cohort attention").

use std::cell::RefCell;
use std::rc::Rc;

use anyhow::{Result, bail};
use mlx_rs::Array;
use mlx_rs::fast::ScaledDotProductAttentionMask;

use super::cache::{KvCache, LayerState, RowCache, row, whole_steps};
use super::linear::LinearRoute;
use super::rope;
use crate::model::cpu::attention_cpu;
use crate::model::ops::{slice, slice_axis, slice_update};

/// One layer's keys and values for every slot.
pub struct SlotBuffer {
    keys: Array,
    values: Array,
}

/// A shared buffer; the cohort that packed it evaluates it once per cycle.
pub type SlotHandle = Rc<RefCell<SlotBuffer>>;

/// Where a packed row's KV lives.
#[derive(Clone)]
pub struct Slot {
    pub buffer: SlotHandle,
    pub index: i32,
}

/// How a layer rotates queries and keys (the arguments of MLX's fast RoPE).
#[derive(Debug, Clone, Copy)]
pub struct RopeSpec {
    pub dims: i32,
    pub traditional: bool,
    pub base: f32,
}

impl SlotBuffer {
    fn capacity(&self) -> i32 {
        self.keys.shape()[2]
    }

    fn width(&self) -> i32 {
        self.keys.shape()[0]
    }

    /// Grow every slot to hold `needed` positions, in steps of KV_STEP.
    fn reserve(&mut self, needed: i32) -> Result<()> {
        let capacity = self.capacity();
        if needed <= capacity {
            return Ok(());
        }
        let grow = whole_steps(needed - capacity);
        let widen = |a: &Array| -> Result<Array> {
            let mut shape = a.shape().to_vec();
            shape[2] = grow;
            let zeros = mlx_rs::ops::zeros_dtype(&shape, a.dtype())?;
            Ok(mlx_rs::ops::concatenate(&[a.clone(), zeros], 2)?)
        };
        self.keys = widen(&self.keys)?;
        self.values = widen(&self.values)?;
        Ok(())
    }
}

/// Evaluate `arrays` together with the buffers' current arrays, at a step boundary, so no
/// pending graph is carried into the next step.
pub fn eval_with<'a>(handles: &[SlotHandle], arrays: impl IntoIterator<Item = &'a Array>) -> Result<()> {
    Ok(mlx_rs::transforms::eval(&with_buffers(handles, arrays))?)
}

/// `arrays` and the buffers' current arrays: what [`eval_with`] evaluates (benchmarks that time
/// the graph's handover to the device evaluate it themselves).
pub fn with_buffers<'a>(handles: &[SlotHandle], arrays: impl IntoIterator<Item = &'a Array>) -> Vec<Array> {
    let mut all: Vec<Array> = arrays.into_iter().cloned().collect();
    for h in handles {
        let b = h.borrow();
        all.extend([b.keys.clone(), b.values.clone()]);
    }
    all
}

impl Slot {
    pub fn capacity(&self) -> i32 {
        self.buffer.borrow().capacity()
    }

    /// One row's write at `offset` ([1, kv_heads, T, head_dim]).
    pub fn write(&self, offset: i32, k: &Array, v: &Array) -> Result<()> {
        let mut buf = self.buffer.borrow_mut();
        buf.reserve(offset + k.shape()[2])?;
        buf.keys = slice_update(&buf.keys, k, &[self.index, 0, offset, 0])?;
        buf.values = slice_update(&buf.values, v, &[self.index, 0, offset, 0])?;
        Ok(())
    }

    /// The whole shared buffer (keys, values), every slot.
    pub fn storage(&self) -> (Array, Array) {
        let buf = self.buffer.borrow();
        (buf.keys.clone(), buf.values.clone())
    }

    /// This slot's first `len` positions, [1, kv_heads, len, head_dim] each.
    pub fn view(&self, len: i32) -> Result<(Array, Array)> {
        let buf = self.buffer.borrow();
        let part = |a: &Array| {
            let s = a.shape();
            slice(a, &[self.index, 0, 0, 0], &[self.index + 1, s[1], len, s[3]])
        };
        Ok((part(&buf.keys)?, part(&buf.values)?))
    }
}

/// Move every attention layer's KV (the MTP history included) of `rows` into shared buffers,
/// row b in slot b. Returns the buffers for the caller to evaluate. A layer no row has written
/// yet (the MTP history of an AR cohort) stays unpacked.
pub fn pack(rows: &mut [RowCache]) -> Result<Vec<SlotHandle>> {
    let Some(first) = rows.first() else { return Ok(Vec::new()) };
    let (layers, width) = (first.layers.len(), rows.len());
    let mut handles = Vec::new();
    for li in 0..=layers {
        let mut caches: Vec<&mut KvCache> = Vec::with_capacity(rows.len());
        for r in rows.iter_mut() {
            if li == layers {
                caches.push(&mut r.mtp);
            } else {
                match r.layers.get_mut(li) {
                    Some(LayerState::Attention(kv)) => caches.push(kv),
                    Some(LayerState::Linear(_)) => break,
                    None => bail!("rows of one cohort differ in layer count"),
                }
            }
        }
        if caches.len() != width {
            continue; // a recurrent layer
        }
        if let Some(h) = pack_layer(&mut caches)? {
            handles.push(h);
        }
    }
    Ok(handles)
}

fn pack_layer(caches: &mut [&mut KvCache]) -> Result<Option<SlotHandle>> {
    let committed: Vec<Option<(Array, Array)>> = caches.iter().map(|c| c.committed()).collect();
    let Some((k0, v0)) = committed.iter().flatten().next() else { return Ok(None) };
    let (kshape, vshape, dtype) = (k0.shape().to_vec(), v0.shape().to_vec(), k0.dtype());
    let longest = caches.iter().map(|c| c.offset()).max().unwrap_or(0);
    // Room for a verify block before the first growth.
    let capacity = whole_steps(longest + 2);
    let padded = |part: Option<&Array>, shape: &[i32]| -> Result<Array> {
        let have = part.map(|p| p.shape()[2]).unwrap_or(0);
        let mut zshape = shape.to_vec();
        zshape[2] = capacity - have;
        let zeros = mlx_rs::ops::zeros_dtype(&zshape, dtype)?;
        Ok(match part {
            Some(p) if have > 0 => mlx_rs::ops::concatenate(&[p.clone(), zeros], 2)?,
            _ => zeros,
        })
    };
    let mut keys = Vec::with_capacity(caches.len());
    let mut values = Vec::with_capacity(caches.len());
    for c in &committed {
        keys.push(padded(c.as_ref().map(|c| &c.0), &kshape)?);
        values.push(padded(c.as_ref().map(|c| &c.1), &vshape)?);
    }
    let buffer = Rc::new(RefCell::new(SlotBuffer {
        keys: mlx_rs::ops::concatenate(&keys, 0)?,
        values: mlx_rs::ops::concatenate(&values, 0)?,
    }));
    for (i, c) in caches.iter_mut().enumerate() {
        c.move_to_slot(Slot { buffer: buffer.clone(), index: i as i32 });
    }
    Ok(Some(buffer))
}

/// One attention step's inputs: `q` [B, heads, T, d], `k` and `v` [B, kv_heads, T, d], before
/// RoPE.
pub struct Block<'a> {
    pub q: &'a Array,
    pub k: &'a Array,
    pub v: &'a Array,
    pub rope: RopeSpec,
    pub scale: f32,
}

/// Rotate, cache and attend `block` for the rows whose KV `caches` are, each at its own offset:
/// one op of each kind for a whole packed cohort on the batched route, otherwise one chain per
/// row.
pub fn attend(caches: &mut [&mut KvCache], block: &Block) -> Result<Array> {
    if let Some(buffer) = whole_cohort(caches) {
        return attend_cohort(&buffer, caches, block);
    }
    let Block { q, k, v, rope, scale } = *block;
    // Every row writes before any row reads, so each write is the only reader of the buffer it
    // updates (see KvCache::write).
    let t = k.shape()[2];
    if attention_cpu::applies(q, t) {
        let offsets: Vec<i32> = caches.iter().map(|c| c.offset()).collect();
        let (qr, kr) = (rope::rope(q, rope, &offsets)?, rope::rope(k, rope, &offsets)?);
        for (i, cache) in caches.iter_mut().enumerate() {
            cache.write(&row(&kr, i as i32)?, &row(v, i as i32)?)?;
        }
        let rows = caches.iter().map(|c| c.host_kv(t)).collect::<Result<Vec<_>>>()?;
        return attention_cpu::attend(&qr, &rows, scale);
    }
    let mut queries = Vec::with_capacity(caches.len());
    for (i, cache) in caches.iter_mut().enumerate() {
        let i = i as i32;
        let offset = cache.offset();
        let rotate = |a: &Array| rope::rope(a, rope, &[offset]);
        queries.push(rotate(&row(q, i)?)?);
        cache.write(&rotate(&row(k, i)?)?, &row(v, i)?)?;
    }
    let mut outs = Vec::with_capacity(caches.len());
    for (cache, qr) in caches.iter().zip(&queries) {
        let whole = || cache.view_first(cache.capacity());
        outs.push(if let Some((keys, values)) = invariant_buffer(qr, whole)? {
            crate::model::cuda::attention_kernel::attend(qr, &keys, &values, &[cache.offset() - t], scale)?
        } else if padded_block(t) {
            let len = cache.capacity();
            let (kall, vall) = cache.view_first(len)?;
            let mask = visibility(&[cache.offset() - t], t, len);
            mlx_rs::fast::scaled_dot_product_attention(qr, &kall, &vall, scale, &mask, None)?
        } else {
            let (kall, vall) = cache.view()?;
            let mask = if t > 1 { Some(ScaledDotProductAttentionMask::Causal) } else { None };
            mlx_rs::fast::scaled_dot_product_attention(qr, &kall, &vall, scale, mask, None)?
        });
    }
    Ok(if outs.len() == 1 { outs.pop().unwrap() } else { mlx_rs::ops::concatenate(&outs, 0)? })
}

/// The whole-cohort step: rotate every row at its own offset, write every slot with one scatter
/// for keys and one for values, and attend with one masked SDPA. Masked-out positions add exact
/// zeros, so on MLX's CPU backend a row's output equals its own-length attention bit for bit
/// (tests/kv_slots.rs).
fn attend_cohort(buffer: &SlotHandle, caches: &mut [&mut KvCache], block: &Block) -> Result<Array> {
    let Block { q, k, v, rope, scale } = *block;
    let t = k.shape()[2];
    let offsets: Vec<i32> = caches.iter().map(|c| c.offset()).collect();
    let rotate = |a: &Array| rope::rope(a, rope, &offsets);
    let (qr, kr) = (rotate(q)?, rotate(k)?);
    let longest = offsets.iter().max().copied().unwrap_or(0) + t;
    put_block(buffer, &offsets, &kr, v)?;
    if attention_cpu::applies(q, t) {
        for c in caches.iter_mut() {
            c.advance(t);
        }
        let rows = caches.iter().map(|c| c.host_kv(t)).collect::<Result<Vec<_>>>()?;
        return attention_cpu::attend(&qr, &rows, scale);
    }
    let (all_keys, all_values) = {
        let buf = buffer.borrow();
        (buf.keys.clone(), buf.values.clone())
    };
    let out = if crate::model::cuda::attention_kernel::serves(&qr, &all_keys, &all_values) {
        crate::model::cuda::attention_kernel::attend(&qr, &all_keys, &all_values, &offsets, scale)?
    } else {
        let len = if padded_block(t) { all_keys.shape()[2] } else { longest };
        let (keys, values) = (slice_axis(&all_keys, 2, 0, len)?, slice_axis(&all_values, 2, 0, len)?);
        let mask = visibility(&offsets, t, len);
        mlx_rs::fast::scaled_dot_product_attention(
            &qr,
            &keys,
            &values,
            scale,
            ScaledDotProductAttentionMask::Array(&mask),
            None,
        )?
    };
    for c in caches.iter_mut() {
        c.advance(t);
    }
    Ok(out)
}

/// Write `k`, `v` [W, kv_heads, T, d] into every slot of `buffer`, row b at `offsets[b]`: one
/// scatter for keys and one for values.
fn put_block(buffer: &SlotHandle, offsets: &[i32], k: &Array, v: &Array) -> Result<()> {
    let t = k.shape()[2];
    let longest = offsets.iter().max().copied().unwrap_or(0) + t;
    let positions: Vec<i32> = offsets.iter().flat_map(|&o| (0..t).map(move |i| o + i)).collect();
    let index = Array::from_slice(&positions, &[offsets.len() as i32, 1, t, 1]);
    let mut buf = buffer.borrow_mut();
    buf.reserve(longest)?;
    let put = |dst: &Array, src: &Array| -> Result<Array> {
        let idx = mlx_rs::ops::broadcast_to(&index, src.shape())?;
        Ok(mlx_rs::ops::indexing::put_along_axis(dst, &idx, src, 2)?)
    };
    buf.keys = put(&buf.keys, k)?;
    buf.values = put(&buf.values, v)?;
    Ok(())
}

/// Each row's KV storage as it stands before a block is written (None for a row that holds
/// nothing yet), for host attention that takes the block itself from the host. Evaluate the
/// arrays before reading them, and drop them before the block is written: a buffer still
/// referenced when the write is evaluated is copied whole instead of updated in place.
pub fn stored_before(caches: &[&mut KvCache]) -> Vec<Option<attention_cpu::RowKv>> {
    caches.iter().map(|c| c.stored_kv()).collect()
}

/// One layer's attention on host buffers (the host decode path): `q` [B, T, heads, d] and `k`,
/// `v` [B, T, kv_heads, d], before RoPE.
pub struct HostQkv {
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    pub t: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// Rotate `qkv` at each row's offset, attend over `stored` (the rows' storage as it stood
/// before the block, from [`stored_before`], evaluated) and the block itself, then write the
/// block. Returns [B, T, heads, d].
pub fn attend_host(
    caches: &mut [&mut KvCache],
    stored: Vec<Option<attention_cpu::RowKv>>,
    qkv: HostQkv,
    rope: RopeSpec,
    scale: f32,
) -> Result<Vec<f32>> {
    let HostQkv { mut q, mut k, v, t, heads, kv_heads, head_dim: d } = qkv;
    let rows = caches.len();
    let offsets: Vec<i32> = caches.iter().map(|c| c.offset()).collect();
    rope::rope_host(&mut q, t, heads, d, rope, &offsets)?;
    rope::rope_host(&mut k, t, kv_heads, d, rope, &offsets)?;
    let block = attention_cpu::HostBlock { q: &q, k: &k, v: &v, rows, t, heads, kv_heads, head_dim: d };
    let attended = attention_cpu::attend_host_block(&block, &stored, scale)?;
    // The storage's last readers go before the write, so MLX updates it in place.
    drop(stored);
    let shape = [rows as i32, t as i32, kv_heads as i32, d as i32];
    let to_cache = |data: &[f32]| Array::from_slice(data, &shape).transpose_axes(&[0, 2, 1, 3]);
    write_block(caches, &to_cache(&k)?, &to_cache(&v)?)?;
    Ok(attended)
}

/// Write a block `k`, `v` [B, kv_heads, T, d] at every row's offset (one scatter each for a
/// whole packed cohort on the batched route, else one write per row); offsets move past it.
pub fn write_block(caches: &mut [&mut KvCache], k: &Array, v: &Array) -> Result<()> {
    let t = k.shape()[2];
    if let Some(buffer) = whole_cohort(caches) {
        let offsets: Vec<i32> = caches.iter().map(|c| c.offset()).collect();
        put_block(&buffer, &offsets, k, v)?;
        for c in caches.iter_mut() {
            c.advance(t);
        }
        return Ok(());
    }
    for (i, cache) in caches.iter_mut().enumerate() {
        cache.write(&row(k, i as i32)?, &row(v, i as i32)?)?;
    }
    Ok(())
}

/// [rows, 1, T, len]: row b's query i sees its own positions 0..=offsets[b] + i and nothing past
/// them.
pub(crate) fn visibility(offsets: &[i32], t: i32, len: i32) -> Array {
    let visible: Vec<bool> =
        offsets.iter().flat_map(|&o| (0..t).flat_map(move |i| (0..len).map(move |j| j <= o + i))).collect();
    Array::from_slice(&visible, &[offsets.len() as i32, 1, t, len])
}

/// Query blocks up to this long (verify and draft blocks, not prefill chunks) may attend over
/// the whole buffer capacity.
const SHORT_BLOCK: i32 = 16;

/// MLX's CUDA backend plans a new attention graph for every key length it meets when more than
/// one query position attends: ~40 ms per new length on the H200, against 0.06 ms when the
/// length repeats (docs/benchmarks.md), and a verify block's key length grows every cycle. So on
/// CUDA short blocks attend over the buffer's whole capacity with a mask: the shape, and the
/// plan, change only when the buffer grows (every KV_STEP positions). Elsewhere the keys are
/// cut to the longest row, which is less work.
fn padded_block(t: i32) -> bool {
    t > 1 && t <= SHORT_BLOCK && crate::model::routes::current().padded_blocks
}

/// On the invariant route, a row's whole key and value buffer (from `whole`) when the
/// short-block kernel holds the block: its attention must be the kernel's alone as in a cohort.
fn invariant_buffer(q: &Array, whole: impl FnOnce() -> Result<(Array, Array)>) -> Result<Option<(Array, Array)>> {
    if crate::model::routes::current().linear != LinearRoute::Invariant || !crate::platform::backend::Backend::is_cuda()
    {
        return Ok(None);
    }
    let (keys, values) = whole()?;
    Ok(crate::model::cuda::attention_kernel::serves(q, &keys, &values).then_some((keys, values)))
}

/// The shared buffer when `caches` are exactly its slots in order and a batched route (MLX's
/// products or the invariant kernels) is on.
fn whole_cohort(caches: &[&mut KvCache]) -> Option<SlotHandle> {
    let routes = crate::model::routes::current();
    if caches.len() < 2 || routes.linear == LinearRoute::RowByRow || !routes.batched_attention {
        return None;
    }
    let first = caches[0].slot()?;
    let whole = first.buffer.borrow().width() == caches.len() as i32
        && caches
            .iter()
            .enumerate()
            .all(|(i, c)| c.slot().is_some_and(|s| s.index == i as i32 && Rc::ptr_eq(&s.buffer, &first.buffer)));
    whole.then(|| first.buffer.clone())
}
