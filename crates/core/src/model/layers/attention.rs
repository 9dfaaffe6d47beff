//! Attention over rows' KV, and where its route is chosen: a whole packed cohort attends as one
//! batch over its shared slots (`kv_slots`), a host-path block attends on the host
//! (`cpu::attention_cpu`), a short block on the invariant CUDA route goes through the short-block
//! kernel (`cuda::attention_kernel`), and anything else attends row by row through MLX's SDPA.
//! Every route gives a row the attention it gets alone (tests/kernels/kv_slots.rs).

use anyhow::Result;
use mlx_rs::Array;
use mlx_rs::fast::ScaledDotProductAttentionMask;

use super::cache::{KvCache, row};
use super::kv_slots::{self, SlotHandle};
use super::rope;
use crate::model::config::RopeSpec;
use crate::model::cpu::attention_cpu;
use crate::model::ops::slice_axis;
use crate::model::routes::BlockRoute;

/// One attention step's inputs: `q` [B, heads, T, d], `k` and `v` [B, kv_heads, T, d], before
/// RoPE, rotated here by `rope`; `None` when they arrive rotated (`cuda::qk_norm_rope` normed
/// and rotated them in one kernel).
pub struct Block<'a> {
    pub q: &'a Array,
    pub k: &'a Array,
    pub v: &'a Array,
    pub rope: Option<RopeSpec>,
    pub scale: f32,
}

/// `a` rotated at `offsets` by `rope`, or as it is when it arrived rotated.
fn rotated(a: &Array, rope: Option<RopeSpec>, offsets: &[i32]) -> Result<Array> {
    match rope {
        Some(spec) => rope::rope(a, spec, offsets),
        None => Ok(a.clone()),
    }
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
        let (qr, kr) = (rotated(q, rope, &offsets)?, rotated(k, rope, &offsets)?);
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
        let rotate = |a: &Array| rotated(a, rope, &[offset]);
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
/// (tests/kernels/kv_slots.rs).
fn attend_cohort(buffer: &SlotHandle, caches: &mut [&mut KvCache], block: &Block) -> Result<Array> {
    let Block { q, k, v, rope, scale } = *block;
    let t = k.shape()[2];
    let offsets: Vec<i32> = caches.iter().map(|c| c.offset()).collect();
    let rotate = |a: &Array| rotated(a, rope, &offsets);
    let (qr, kr) = (rotate(q)?, rotate(k)?);
    let longest = offsets.iter().max().copied().unwrap_or(0) + t;
    kv_slots::put_block(buffer, &offsets, &kr, v)?;
    if attention_cpu::applies(q, t) {
        for c in caches.iter_mut() {
            c.advance(t);
        }
        let rows = caches.iter().map(|c| c.host_kv(t)).collect::<Result<Vec<_>>>()?;
        return attention_cpu::attend(&qr, &rows, scale);
    }
    let (all_keys, all_values) = kv_slots::storage(buffer);
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
    crate::model::cpu::rope_host::rope_host(&mut q, t, heads, d, rope, &offsets)?;
    crate::model::cpu::rope_host::rope_host(&mut k, t, kv_heads, d, rope, &offsets)?;
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
        kv_slots::put_block(&buffer, &offsets, k, v)?;
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
pub fn visibility(offsets: &[i32], t: i32, len: i32) -> Array {
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
    if crate::model::routes::current().block != BlockRoute::Invariant || !crate::platform::backend::Backend::is_cuda() {
        return Ok(None);
    }
    let (keys, values) = whole()?;
    Ok(crate::model::cuda::attention_kernel::serves(q, &keys, &values).then_some((keys, values)))
}

/// The shared buffer when `caches` are exactly its slots in order and a batched route (MLX's
/// products or the invariant kernels) is on.
fn whole_cohort(caches: &[&mut KvCache]) -> Option<SlotHandle> {
    let routes = crate::model::routes::current();
    if caches.len() < 2 || routes.block == BlockRoute::RowByRow || !routes.batched_attention {
        return None;
    }
    kv_slots::shared_buffer(caches)
}
