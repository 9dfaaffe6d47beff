//! Attention on the host for MLX's CPU backend: decode steps, drafts, verifies and prefill chunks
//! of up to [`MAX_QUERIES`] positions.
//!
//! MLX's CPU SDPA is a graph of small ops (and a mask for every block of more than one query):
//! ~170 us for one 9-head query over 200 positions on this machine, more than the layer's
//! projections on the CPU kernel. For prefill chunks its softmax runs MLX's exp at width one
//! (the wheel is built for baseline x86-64), and masked positions cost as much as visible ones.
//! Here every (row, head, query position) attends over exactly the
//! positions it may see, reading the evaluated KV buffer in place; the arithmetic of one query
//! never depends on the others in its block, so a T=2 verify equals two single steps and a cohort
//! row equals its solo run bit for bit.

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cpu_pool::Pool;

/// Query blocks up to this long are attended here (longer prefill chunks take MLX's SDPA).
pub const MAX_QUERIES: i32 = 512;

/// One row's KV storage: `keys`/`values` [slots, kv_heads, capacity, head_dim] (this row's slot
/// is `slot`), and how many positions precede the block.
pub struct RowKv {
    pub keys: Array,
    pub values: Array,
    pub slot: i32,
    pub offset: i32,
}

/// Whether a block of `t` queries in `q`'s dtype runs here.
pub fn applies(q: &Array, t: i32) -> bool {
    crate::model::routes::current().host_attention && q.dtype() == Dtype::Float32 && t <= MAX_QUERIES
}

/// Raw view of an evaluated float32 array.
struct View {
    ptr: *const f32,
    strides: Vec<usize>,
    shape: Vec<i32>,
}

// SAFETY: a View only reads an evaluated array that the caller keeps alive and unchanged while
// the pool's threads run.
unsafe impl Sync for View {}

impl View {
    fn of(a: &Array) -> Result<Self> {
        if a.dtype() != Dtype::Float32 {
            bail!("host attention takes float32, not {:?}", a.dtype());
        }
        // SAFETY: the array was evaluated by the caller; the pointer includes its offset.
        let ptr = unsafe { mlx_sys::mlx_array_data_float32(a.as_ptr()) };
        if ptr.is_null() {
            bail!("host attention: an input has no data");
        }
        Ok(Self { ptr, strides: a.strides().to_vec(), shape: a.shape().to_vec() })
    }

    /// Element (i0, i1, i2, i3).
    fn at(&self, i: [usize; 4]) -> *const f32 {
        let off: usize = i.iter().zip(&self.strides).map(|(a, s)| a * s).sum();
        // SAFETY: callers pass indices inside the shape.
        unsafe { self.ptr.add(off) }
    }

    fn row(&self, i: [usize; 3], len: usize) -> impl Iterator<Item = f32> + '_ {
        let start = self.at([i[0], i[1], i[2], 0]);
        let step = self.strides[3];
        // SAFETY: the last axis holds `len` elements at stride `step`.
        (0..len).map(move |j| unsafe { *start.add(j * step) })
    }
}

/// `softmax(scale * q K^T) V` for `q` [B, heads, T, head_dim] (rotated), row b over the first
/// `rows[b].offset + i + 1` positions of its KV for query i. The KV must already hold the block.
pub fn attend(q: &Array, rows: &[RowKv], scale: f32) -> Result<Array> {
    let shape = q.shape().to_vec();
    if shape.len() != 4 || shape[0] as usize != rows.len() {
        bail!("host attention: queries {shape:?} for {} rows", rows.len());
    }
    let (b, heads, t, d) = (shape[0] as usize, shape[1] as usize, shape[2] as usize, shape[3] as usize);
    let mut arrays: Vec<&Array> = vec![q];
    for r in rows {
        arrays.push(&r.keys);
        arrays.push(&r.values);
    }
    mlx_rs::transforms::eval(arrays)?;
    let qv = View::of(q)?;
    let sources = rows
        .iter()
        .map(|r| {
            let stored = Stored::of(r, t, d, heads)?;
            Ok(Source {
                stored: Some(stored),
                stored_len: r.offset as usize + t,
                block: None,
                offset: r.offset as usize,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = vec![0f32; b * heads * t * d];
    // Output [B, heads, T, d], as the queries are laid out.
    run(&qv, &sources, [heads * t * d, t * d, d], &mut out, scale, true);
    Ok(Array::from_slice(&out, &shape))
}

/// A block whose keys and values are still on the host: `q` [B, T, heads, d] and `k`, `v`
/// [B, T, kv_heads, d] (rotated, row-major), each row b attending over the first
/// `stored[b].offset` positions of its storage (evaluated, as it stood before the block) and
/// then over the block's own positions up to the query's. Returns [B, T, heads, d].
pub struct HostBlock<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub rows: usize,
    pub t: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

pub fn attend_host_block(block: &HostBlock, stored: &[Option<RowKv>], scale: f32) -> Result<Vec<f32>> {
    host_block(block, stored, scale, true)
}

/// [`attend_host_block`] on the portable route whatever the CPU has (tests of both routes).
#[cfg(feature = "testing")]
pub fn attend_host_block_portable(block: &HostBlock, stored: &[Option<RowKv>], scale: f32) -> Result<Vec<f32>> {
    host_block(block, stored, scale, false)
}

fn host_block(block: &HostBlock, stored: &[Option<RowKv>], scale: f32, simd: bool) -> Result<Vec<f32>> {
    let HostBlock { q, k, v, rows, t, heads, kv_heads, head_dim: d } = *block;
    if stored.len() != rows
        || q.len() != rows * t * heads * d
        || k.len() != rows * t * kv_heads * d
        || v.len() != k.len()
    {
        bail!(
            "host attention: a block of {rows} rows x {t} does not match its {} stored rows or its buffers",
            stored.len()
        );
    }
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        bail!("host attention: {heads} query heads over {kv_heads} KV heads");
    }
    let host = |p: &[f32], h: usize| View {
        ptr: p.as_ptr(),
        strides: vec![t * h * d, d, h * d, 1],
        shape: [rows, h, t, d].iter().map(|&x| x as i32).collect(),
    };
    let (qv, kv, vv) = (host(q, heads), host(k, kv_heads), host(v, kv_heads));
    let sources = stored
        .iter()
        .enumerate()
        .map(|(bi, r)| {
            Ok(match r {
                Some(r) => Source {
                    stored: Some(Stored::of(r, 0, d, heads)?),
                    stored_len: r.offset as usize,
                    block: Some((&kv, &vv, bi)),
                    offset: r.offset as usize,
                },
                None => Source { stored: None, stored_len: 0, block: Some((&kv, &vv, bi)), offset: 0 },
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut out = vec![0f32; rows * t * heads * d];
    run(&qv, &sources, [t * heads * d, d, heads * d], &mut out, scale, simd);
    Ok(out)
}

/// A row's evaluated KV storage and its slot in it.
struct Stored {
    keys: View,
    values: View,
    slot: usize,
}

impl Stored {
    /// Checked to hold `offset + t` positions of `d`-wide heads that `heads` query heads share.
    fn of(r: &RowKv, t: usize, d: usize, heads: usize) -> Result<Self> {
        let (keys, values) = (View::of(&r.keys)?, View::of(&r.values)?);
        let kv_heads = keys.shape[1] as usize;
        if keys.shape != values.shape || keys.shape[3] as usize != d || kv_heads == 0 || !heads.is_multiple_of(kv_heads)
        {
            bail!("host attention: keys {:?} / values {:?} do not fit {heads} heads of {d}", keys.shape, values.shape);
        }
        if r.slot < 0 || r.slot >= keys.shape[0] || r.offset < 0 || r.offset as usize + t > keys.shape[2] as usize {
            bail!("host attention: slot {} offset {} + {t} outside keys {:?}", r.slot, r.offset, keys.shape);
        }
        Ok(Self { keys, values, slot: r.slot as usize })
    }
}

/// Where one row's keys come from: its first `stored_len` positions from storage, the rest from
/// row `block.2` of a host block whose position 0 is position `offset`.
struct Source<'a> {
    stored: Option<Stored>,
    stored_len: usize,
    block: Option<(&'a View, &'a View, usize)>,
    offset: usize,
}

/// Positions `0..len` of one KV head: element x of position j at `ptr + j * step + x * elem`.
#[derive(Clone, Copy)]
struct Span {
    ptr: *const f32,
    step: usize,
    elem: usize,
    len: usize,
}

impl Source<'_> {
    fn kv_heads(&self) -> usize {
        match (&self.stored, self.block) {
            (Some(s), _) => s.keys.shape[1] as usize,
            (None, Some((k, _, _))) => k.shape[1] as usize,
            (None, None) => unreachable!("a source has storage or a block"),
        }
    }

    /// KV head `group`'s keys (or values) as two spans: the storage's positions, then the
    /// block's.
    fn spans(&self, group: usize, value: bool) -> [Span; 2] {
        let empty = Span { ptr: std::ptr::null(), step: 0, elem: 1, len: 0 };
        let stored = match &self.stored {
            Some(s) if self.stored_len > 0 => {
                let a = if value { &s.values } else { &s.keys };
                Span { ptr: a.at([s.slot, group, 0, 0]), step: a.strides[2], elem: a.strides[3], len: self.stored_len }
            }
            _ => empty,
        };
        let block = match self.block {
            Some((k, v, row)) => {
                let a = if value { v } else { k };
                let len = a.shape[2] as usize - (self.stored_len - self.offset);
                let first = [row, group, self.stored_len - self.offset, 0];
                Span { ptr: a.at(first), step: a.strides[2], elem: a.strides[3], len }
            }
            None => empty,
        };
        [stored, block]
    }
}

/// Query tiles of about this many (head, position) pairs run one after another on one thread.
const TILE: usize = 8;

/// Query heads of one KV head attended together: each key and value row is read once for all
/// of them (at long context a step's attention is bound by reading the KV, so a group of three
/// heads reads a third of the bytes it would head by head).
const HEAD_GROUP: usize = 4;

/// Every (row, head, query position) of `q` (logical [B, heads, T, d]) over its sources; output
/// element (b, h, t, :) at `b * out_strides[0] + h * out_strides[1] + t * out_strides[2]`.
///
/// The query heads that share a KV head (GQA) are dealt out together, in tiles of whole
/// positions, and attended in groups of up to [`HEAD_GROUP`] that read each key and value row
/// once. A query's own arithmetic (its dot products, softmax and weighted sum, in key order) does
/// not depend on its tile or group.
fn run(qv: &View, sources: &[Source], out_strides: [usize; 3], out: &mut [f32], scale: f32, simd: bool) {
    let (b, heads, t) = (qv.shape[0] as usize, qv.shape[1] as usize, qv.shape[2] as usize);
    let pool = Pool::global();
    let threads = pool.threads();
    let kv_heads = sources.first().map_or(1, Source::kv_heads);
    let share = heads / kv_heads;
    // Smaller tiles when there are too few to keep every thread busy (a short verify block).
    let mut tile = (TILE / share).clamp(1, t.max(1));
    while tile > 1 && b * kv_heads * t.div_ceil(tile) < 2 * threads {
        tile = tile.div_ceil(2);
    }
    let tiles = t.div_ceil(tile);
    let items = b * kv_heads * tiles;
    let dst = super::cpu_pool::Disjoint(out.as_mut_ptr());
    let work = Work { qv, sources, out_strides, dst: &dst, scale, heads, t, kv_heads, tile, tiles };
    // Threads claim items one at a time as they come free, which also evens out a causal
    // prefill chunk's later tiles seeing more keys.
    pool.run_chunks(items, &|mine| {
        #[cfg(target_arch = "x86_64")]
        if simd && *AVX2 {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { work.items_avx2(mine) };
        }
        work.items::<false>(mine)
    });
}

/// One `run`'s inputs, shared by the pool's threads.
struct Work<'a, 'b> {
    qv: &'a View,
    sources: &'a [Source<'b>],
    out_strides: [usize; 3],
    dst: &'a super::cpu_pool::Disjoint,
    scale: f32,
    heads: usize,
    t: usize,
    kv_heads: usize,
    /// Positions a tile holds.
    tile: usize,
    tiles: usize,
}

/// One thread's scratch: a head group's queries and scores (one row of `visible` each), and
/// contiguous copies of strided spans.
#[derive(Default)]
struct Scratch {
    query: Vec<f32>,
    scores: Vec<f32>,
    copies: [Vec<f32>; 2],
}

impl Work<'_, '_> {
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn items_avx2(&self, items: impl Iterator<Item = usize>) {
        self.items::<true>(items)
    }

    /// `AVX`: the caller runs with AVX2 and FMA enabled.
    #[inline(always)]
    fn items<const AVX: bool>(&self, items: impl Iterator<Item = usize>) {
        let mut s = Scratch::default();
        for item in items {
            self.tile_at::<AVX>(item, &mut s);
        }
    }

    /// Tile `item % tiles` of KV head `item / tiles % kv_heads` of row `item / (tiles * kv_heads)`:
    /// its positions one after another, every query head of the KV head at each, so the KV
    /// head's rows stay in cache between them.
    #[inline(always)]
    fn tile_at<const AVX: bool>(&self, item: usize, s: &mut Scratch) {
        let d = self.qv.shape[3] as usize;
        let (bi, group, ti) =
            (item / (self.tiles * self.kv_heads), item / self.tiles % self.kv_heads, item % self.tiles);
        let share = self.heads / self.kv_heads;
        let source = &self.sources[bi];
        let [keys, values] = [false, true].map(|v| source.spans(group, v));
        let (keys, values) = {
            let [kc, vc] = &mut s.copies;
            (contiguous(keys, d, kc), contiguous(values, d, vc))
        };
        let first = ti * self.tile;
        for pos in first..(first + self.tile).min(self.t) {
            let visible = source.offset + pos + 1;
            for h0 in (0..share).step_by(HEAD_GROUP) {
                let heads: Vec<usize> = (group * share + h0..group * share + share.min(h0 + HEAD_GROUP)).collect();
                let n = heads.len();
                s.query.clear();
                for &h in &heads {
                    s.query.extend(self.qv.row([bi, h, pos], d));
                }
                s.scores.clear();
                s.scores.resize(n * visible, 0.0);
                let mut j = 0;
                for span in &keys {
                    let len = span.len.min(visible - j);
                    let rows = SpanRows { stride: visible, j0: j, len };
                    scores_group::<AVX>(&s.query, n, span, &mut s.scores, rows, self.scale);
                    j += len;
                }
                for row in s.scores.chunks_exact_mut(visible) {
                    softmax::<AVX>(row);
                }
                let outs: Vec<*mut f32> = heads
                    .iter()
                    .map(|&h| {
                        let at = bi * self.out_strides[0] + h * self.out_strides[1] + pos * self.out_strides[2];
                        // SAFETY: each (row, head, position) belongs to one tile, whose d outputs
                        // only it writes; `out` outlives `run`.
                        unsafe { self.dst.0.add(at) }
                    })
                    .collect();
                for &o in &outs {
                    // SAFETY: as above.
                    unsafe { std::slice::from_raw_parts_mut(o, d) }.fill(0.0);
                }
                let mut j = 0;
                for span in &values {
                    let len = span.len.min(visible - j);
                    let rows = SpanRows { stride: visible, j0: j, len };
                    weighted_sum_group::<AVX>(&s.scores, rows, span, &outs, d);
                    j += len;
                }
            }
        }
    }
}

/// `spans` with contiguous elements (strided ones copied into `copies`, row-major).
fn contiguous(spans: [Span; 2], d: usize, copies: &mut Vec<f32>) -> [Span; 2] {
    if spans.iter().all(|s| s.elem == 1) {
        return spans;
    }
    copies.clear();
    for span in &spans {
        for p in 0..span.len {
            // SAFETY: spans point into evaluated arrays (or host blocks) holding `len` positions.
            copies.extend((0..d).map(|x| unsafe { *span.ptr.add(p * span.step + x * span.elem) }));
        }
    }
    let [a, b] = spans;
    let base = copies.as_ptr();
    // SAFETY: the second span's rows follow the first's in `copies`.
    let second = unsafe { base.add(a.len * d) };
    [Span { ptr: base, step: d, elem: 1, len: a.len }, Span { ptr: second, step: d, elem: 1, len: b.len }]
}

/// In place: `exp(x - max) / sum`, with [`exp_nonpositive`]'s exponential and the sum taken in
/// eight lanes (element i into lane i mod 8, each lane in key order), then the lanes as
/// ((0+4)+(1+5))+((2+6)+(3+7)): the same on every route.
#[inline(always)]
fn softmax<const AVX: bool>(scores: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if AVX {
        // SAFETY: AVX is only true inside `items_avx2`, on a CPU with AVX2 and FMA.
        return unsafe { softmax_avx(scores) };
    }
    let top = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let mut lanes = [0f32; 8];
    for (i, x) in scores.iter_mut().enumerate() {
        *x = exp_nonpositive(*x - top);
        lanes[i % 8] += *x;
    }
    let total = lane_sum(lanes);
    for x in scores.iter_mut() {
        *x /= total;
    }
}

#[inline(always)]
fn lane_sum(l: [f32; 8]) -> f32 {
    ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]))
}

/// Below this `exp` is taken as zero (`exp(-87.3)` is about the smallest normal float).
const EXP_FLOOR: f32 = -87.3;
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// ln 2 in two parts, the first with few enough bits that `n * LN2_HIGH` is exact.
const LN2_HIGH: f32 = 0.693_359_4;
const LN2_LOW: f32 = -2.121_944_4e-4;
/// Minimax coefficients of `(e^r - 1 - r) / r^2` on |r| <= ln2 / 2, highest first.
const EXP_POLY: [f32; 6] = [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5];

/// `e^x` for `x <= 0` (a softmax's shifted scores) in float32 operations that every route
/// performs alike: `x = n ln2 + r` with n an integer, `e^r` by a polynomial (fused
/// multiply-adds), times `2^n` from its bits. Within 2 ulp of the true value; 0 below
/// [`EXP_FLOOR`] (and for NaN).
#[inline(always)]
pub fn exp_nonpositive(x: f32) -> f32 {
    // NaN fails this test too.
    if x.partial_cmp(&EXP_FLOOR).is_none_or(|o| o == std::cmp::Ordering::Less) {
        return 0.0;
    }
    let n = (x * LOG2_E).round_ties_even();
    let r = n.mul_add(-LN2_HIGH, x);
    let r = n.mul_add(-LN2_LOW, r);
    let mut p = EXP_POLY[0];
    for c in &EXP_POLY[1..] {
        p = p.mul_add(r, *c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// [`softmax`] eight keys at a time in AVX registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn softmax_avx(scores: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = scores.len();
    let whole = n - n % 8;
    let p = scores.as_mut_ptr();
    let mut top = _mm256_set1_ps(f32::NEG_INFINITY);
    let mut i = 0;
    while i < whole {
        // SAFETY: i + 8 <= n.
        top = _mm256_max_ps(top, unsafe { _mm256_loadu_ps(p.add(i)) });
        i += 8;
    }
    let mut lanes = [0f32; 8];
    // SAFETY: 8 floats into an 8-float array.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), top) };
    let top = lanes.iter().chain(&scores[whole..]).fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let vtop = _mm256_set1_ps(top);
    let mut sum = _mm256_setzero_ps();
    i = 0;
    while i < whole {
        // SAFETY: as above.
        unsafe {
            let e = exp_avx(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), vtop));
            _mm256_storeu_ps(p.add(i), e);
            sum = _mm256_add_ps(sum, e);
        }
        i += 8;
    }
    // SAFETY: as above.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    for (l, x) in scores[whole..].iter_mut().enumerate() {
        *x = exp_nonpositive(*x - top);
        lanes[l] += *x;
    }
    let total = _mm256_set1_ps(lane_sum(lanes));
    i = 0;
    while i < whole {
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(p.add(i), _mm256_div_ps(_mm256_loadu_ps(p.add(i)), total)) };
        i += 8;
    }
    let total = lane_sum(lanes);
    for x in scores[whole..].iter_mut() {
        *x /= total;
    }
}

/// [`exp_nonpositive`] of eight lanes, operation for operation.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn exp_avx(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let kept = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_set1_ps(EXP_FLOOR));
    let n =
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(x, _mm256_set1_ps(LOG2_E)));
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_HIGH), x);
    let r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LN2_LOW), r);
    let mut p = _mm256_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
    }
    let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
    // Masked-off lanes may hold any n; their result is dropped below.
    let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
    _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(bits)), kept)
}

/// `out[j] = scale * (q . key j)` for the first `out.len()` keys of `span` (contiguous rows).
///
/// Each dot product accumulates lane l of x = l, l+8, l+16, ... in order with fused
/// multiply-adds, then sums the lanes as ((0+4)+(1+5))+((2+6)+(3+7)): the same on every route,
/// so the same result.
#[inline(always)]
fn scores<const AVX: bool>(q: &[f32], span: &Span, out: &mut [f32], scale: f32) {
    let d = q.len();
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if AVX && d.is_multiple_of(8) {
        // SAFETY: AVX is only true inside `items_avx2`, on a CPU with AVX2 and FMA; the span
        // holds out.len() rows of d contiguous elements.
        done = unsafe { scores_avx(q, span, out, scale) };
    }
    for (j, o) in out.iter_mut().enumerate().skip(done) {
        // SAFETY: as above.
        let k = unsafe { std::slice::from_raw_parts(span.ptr.add(j * span.step), d) };
        *o = scale * dot_plain(q, k);
    }
}

#[inline(always)]
fn dot_plain(q: &[f32], k: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut qc = q.chunks_exact(8);
    let mut kc = k.chunks_exact(8);
    for (a, b) in qc.by_ref().zip(kc.by_ref()) {
        for l in 0..8 {
            acc[l] = a[l].mul_add(b[l], acc[l]);
        }
    }
    for (l, (a, b)) in qc.remainder().iter().zip(kc.remainder()).enumerate() {
        acc[l] = a.mul_add(*b, acc[l]);
    }
    lane_sum(acc)
}

/// Where one span's keys fall in a group's rows of scores (and, after the softmax, weights):
/// query i's are `of(i)`, `len` of them from `j0` in its row of `stride`.
#[derive(Clone, Copy)]
struct SpanRows {
    stride: usize,
    j0: usize,
    len: usize,
}

impl SpanRows {
    #[inline(always)]
    fn of(&self, i: usize) -> std::ops::Range<usize> {
        let start = i * self.stride + self.j0;
        start..start + self.len
    }
}

/// [`scores`] for a group of `n` queries (`qs`, n rows of d): query i's scores `out[rows.of(i)]`
/// from the first `rows.len` keys of `span`, each key row read once for the group. Every score
/// is [`dot_plain`]'s arithmetic.
#[inline(always)]
fn scores_group<const AVX: bool>(qs: &[f32], n: usize, span: &Span, out: &mut [f32], rows: SpanRows, scale: f32) {
    let d = qs.len() / n.max(1);
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if AVX && d.is_multiple_of(8) && n > 1 {
        // SAFETY: AVX is only true inside `items_avx2`, on a CPU with AVX2 and FMA; the span
        // holds `rows.len` rows of d contiguous elements, `out` every query's `rows.of(i)`.
        done = unsafe {
            match n {
                2 => scores_pairs_avx::<2>(qs, span, out, rows, scale),
                3 => scores_pairs_avx::<3>(qs, span, out, rows, scale),
                _ => scores_pairs_avx::<4>(qs, span, out, rows, scale),
            }
        };
    }
    if done == rows.len {
        return;
    }
    let rest = Span { ptr: span.ptr.wrapping_add(done * span.step), len: span.len - done, ..*span };
    for (i, q) in qs.chunks_exact(d).enumerate() {
        let at = rows.of(i);
        scores::<AVX>(q, &rest, &mut out[at.start + done..at.end], scale);
    }
}

/// [`scores_group`] in AVX registers for pairs of keys, `N` queries at a time: returns how many
/// keys it scored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scores_pairs_avx<const N: usize>(
    qs: &[f32],
    span: &Span,
    out: &mut [f32],
    rows: SpanRows,
    scale: f32,
) -> usize {
    use std::arch::x86_64::*;
    let d = qs.len() / N;
    let halves = |acc: __m256| _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let vscale = _mm_set1_ps(scale);
    let q = qs.as_ptr();
    let mut j = 0;
    while j + 2 <= rows.len {
        // SAFETY: keys j and j + 1 are rows of the span.
        let (k0, k1) = unsafe { (span.ptr.add(j * span.step), span.ptr.add((j + 1) * span.step)) };
        let mut acc = [[_mm256_setzero_ps(); 2]; N];
        let mut x = 0;
        while x < d {
            // SAFETY: x + 8 <= d elements in every query and key row.
            unsafe {
                let (a, b) = (_mm256_loadu_ps(k0.add(x)), _mm256_loadu_ps(k1.add(x)));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let qx = _mm256_loadu_ps(q.add(i * d + x));
                    acc[0] = _mm256_fmadd_ps(qx, a, acc[0]);
                    acc[1] = _mm256_fmadd_ps(qx, b, acc[1]);
                }
            }
            x += 8;
        }
        for (i, acc) in acc.iter().enumerate() {
            // As in `scores_avx`: lanes 0 and 1 end up as the two keys' sums.
            let pairs = _mm_hadd_ps(halves(acc[0]), halves(acc[1]));
            let sums = _mm_mul_ps(vscale, _mm_hadd_ps(pairs, pairs));
            let mut two = [0f32; 4];
            // SAFETY: four floats into a four-float array.
            unsafe { _mm_storeu_ps(two.as_mut_ptr(), sums) };
            let at = rows.of(i).start + j;
            out[at] = two[0];
            out[at + 1] = two[1];
        }
        j += 2;
    }
    j
}

/// [`weighted_sum`] for a group of queries: query i's weights `ws[rows.of(i)]` over the first
/// `rows.len` rows of `span`, added into its `d` outputs at `outs[i]`, each value row read once
/// for the group. Every output is [`weighted_sum`]'s arithmetic.
#[inline(always)]
fn weighted_sum_group<const AVX: bool>(ws: &[f32], rows: SpanRows, span: &Span, outs: &[*mut f32], d: usize) {
    #[cfg(target_arch = "x86_64")]
    if AVX && d.is_multiple_of(8) && outs.len() > 1 {
        // SAFETY: as in `scores_group`; every output pointer holds d floats only this group writes.
        unsafe {
            match outs.len() {
                2 => weighted_group_avx::<2>(ws, rows, span, outs, d),
                3 => weighted_group_avx::<3>(ws, rows, span, outs, d),
                _ => weighted_group_avx::<4>(ws, rows, span, outs, d),
            }
        }
        return;
    }
    for (i, &o) in outs.iter().enumerate() {
        // SAFETY: as above.
        let o = unsafe { std::slice::from_raw_parts_mut(o, d) };
        weighted_sum::<AVX>(&ws[rows.of(i)], span, o);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn weighted_group_avx<const N: usize>(ws: &[f32], rows: SpanRows, span: &Span, outs: &[*mut f32], d: usize) {
    let mut x0 = 0;
    while x0 + 16 <= d {
        // SAFETY: forwarded from the caller; x0 + 16 <= d.
        unsafe { accumulate_group::<N, 2>(ws, rows, span, outs, x0) };
        x0 += 16;
    }
    if x0 < d {
        // SAFETY: d is a multiple of 8, so x0 + 8 <= d.
        unsafe { accumulate_group::<N, 1>(ws, rows, span, outs, x0) };
    }
}

/// Elements `x0..x0 + 8 * L` of `N` queries' outputs plus their weighted values, the `N * L`
/// accumulators kept in registers over every key: each the same chain of fused multiply-adds in
/// key order as [`accumulate`]'s.
// `j` indexes the value rows and every query's weights in lockstep.
#[allow(clippy::needless_range_loop)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn accumulate_group<const N: usize, const L: usize>(
    ws: &[f32],
    rows: SpanRows,
    span: &Span,
    outs: &[*mut f32],
    x0: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); L]; N];
    for (i, row) in acc.iter_mut().enumerate() {
        for (c, a) in row.iter_mut().enumerate() {
            // SAFETY: outs[i] holds d >= x0 + 8 * L floats.
            *a = unsafe { _mm256_loadu_ps(outs[i].add(x0 + 8 * c)) };
        }
    }
    let ws: [&[f32]; N] = std::array::from_fn(|i| &ws[rows.of(i)]);
    for j in 0..rows.len {
        // SAFETY: value row j holds elements x0..x0 + 8 * L.
        let v = unsafe { span.ptr.add(j * span.step + x0) };
        let vs: [__m256; L] = std::array::from_fn(|c| unsafe { _mm256_loadu_ps(v.add(8 * c)) });
        for (i, row) in acc.iter_mut().enumerate() {
            let wv = _mm256_set1_ps(ws[i][j]);
            for (a, vc) in row.iter_mut().zip(&vs) {
                *a = _mm256_fmadd_ps(wv, *vc, *a);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (c, a) in row.iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm256_storeu_ps(outs[i].add(x0 + 8 * c), *a) };
        }
    }
}

/// [`scores`] in AVX registers for whole groups of four keys (d a multiple of 8); returns how
/// many keys it scored.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scores_avx(q: &[f32], span: &Span, out: &mut [f32], scale: f32) -> usize {
    use std::arch::x86_64::*;
    let d = q.len();
    let key = |j: usize| unsafe { span.ptr.add(j * span.step) };
    // Lanes (0+4, 1+5, 2+6, 3+7) of one key's accumulator.
    let halves = |acc: __m256| _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps::<1>(acc));
    let vscale = _mm_set1_ps(scale);
    let mut j = 0;
    while j + 4 <= out.len() {
        let (k0, k1, k2, k3) = (key(j), key(j + 1), key(j + 2), key(j + 3));
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut x = 0;
        while x < d {
            // SAFETY: x + 8 <= d elements in the query and in each key row.
            unsafe {
                let qx = _mm256_loadu_ps(q.as_ptr().add(x));
                acc[0] = _mm256_fmadd_ps(qx, _mm256_loadu_ps(k0.add(x)), acc[0]);
                acc[1] = _mm256_fmadd_ps(qx, _mm256_loadu_ps(k1.add(x)), acc[1]);
                acc[2] = _mm256_fmadd_ps(qx, _mm256_loadu_ps(k2.add(x)), acc[2]);
                acc[3] = _mm256_fmadd_ps(qx, _mm256_loadu_ps(k3.add(x)), acc[3]);
            }
            x += 8;
        }
        // hadd(a, b) = (a0+a1, a2+a3, b0+b1, b2+b3): twice gives each key's (0+1)+(2+3) of its
        // halves, which is ((0+4)+(1+5))+((2+6)+(3+7)) of its lanes.
        let pairs01 = _mm_hadd_ps(halves(acc[0]), halves(acc[1]));
        let pairs23 = _mm_hadd_ps(halves(acc[2]), halves(acc[3]));
        let sums = _mm_mul_ps(vscale, _mm_hadd_ps(pairs01, pairs23));
        // SAFETY: j + 4 <= out.len().
        unsafe { _mm_storeu_ps(out.as_mut_ptr().add(j), sums) };
        j += 4;
    }
    j
}

/// `o += sum_j w[j] * value j` over the first `w.len()` values of `span` (contiguous rows), each
/// element accumulated in key order with fused multiply-adds.
#[inline(always)]
fn weighted_sum<const AVX: bool>(w: &[f32], span: &Span, o: &mut [f32]) {
    let d = o.len();
    #[cfg(target_arch = "x86_64")]
    if AVX && d.is_multiple_of(8) {
        // SAFETY: as in `scores`.
        return unsafe { weighted_sum_avx(w, span, o) };
    }
    for (j, &wj) in w.iter().enumerate() {
        // SAFETY: the span holds w.len() rows of d elements.
        let v = unsafe { std::slice::from_raw_parts(span.ptr.add(j * span.step), d) };
        for (x, y) in o.iter_mut().zip(v) {
            *x = wj.mul_add(*y, *x);
        }
    }
}

/// [`weighted_sum`] with up to 64 outputs at a time held in AVX registers over all the keys.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn weighted_sum_avx(w: &[f32], span: &Span, o: &mut [f32]) {
    let mut x0 = 0;
    while x0 + 64 <= o.len() {
        // SAFETY: x0 + 64 <= d.
        unsafe { accumulate::<8>(w, span, x0, &mut o[x0..x0 + 64]) };
        x0 += 64;
    }
    while x0 < o.len() {
        // SAFETY: d is a multiple of 8, so x0 + 8 <= d.
        unsafe { accumulate::<1>(w, span, x0, &mut o[x0..x0 + 8]) };
        x0 += 8;
    }
}

/// `o` (`8 * L` outputs, elements `x0..` of the value rows) plus the weighted values, its `L`
/// eight-lane accumulators kept in registers over every key.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn accumulate<const L: usize>(w: &[f32], span: &Span, x0: usize, o: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut acc = [_mm256_setzero_ps(); L];
    for (c, a) in acc.iter_mut().enumerate() {
        // SAFETY: o holds 8 * L outputs.
        *a = unsafe { _mm256_loadu_ps(o.as_ptr().add(8 * c)) };
    }
    for (j, &wj) in w.iter().enumerate() {
        let wv = _mm256_set1_ps(wj);
        // SAFETY: value row j holds elements x0..x0 + 8 * L.
        let v = unsafe { span.ptr.add(j * span.step + x0) };
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(wv, unsafe { _mm256_loadu_ps(v.add(8 * c)) }, *a);
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: as above.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr().add(8 * c), *a) };
    }
}

#[cfg(target_arch = "x86_64")]
static AVX2: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
});
