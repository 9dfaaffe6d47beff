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

static ON: std::sync::LazyLock<std::sync::atomic::AtomicBool> = std::sync::LazyLock::new(|| {
    std::sync::atomic::AtomicBool::new(super::cpu_pool::host_route_on("COHORT_HOST_ATTENTION"))
});

/// On by default on MLX's CPU backend (`COHORT_HOST_ATTENTION=0` starts a process with it off).
pub fn enabled() -> bool {
    ON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Turn host attention on or off (tests check MLX's SDPA route on the CPU too).
pub fn set_enabled(on: bool) {
    ON.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether a block of `t` queries in `q`'s dtype runs here.
pub fn applies(q: &Array, t: i32) -> bool {
    enabled() && q.dtype() == Dtype::Float32 && t <= MAX_QUERIES
}

/// Raw view of an evaluated float32 array.
struct View {
    ptr: *const f32,
    strides: Vec<usize>,
    shape: Vec<i32>,
}

// SAFETY: a View only reads an evaluated array that the caller keeps alive and unchanged while
// the pool's parts run.
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
    run(&qv, &sources, [heads * t * d, t * d, d], &mut out, scale);
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
    run(&qv, &sources, [t * heads * d, d, heads * d], &mut out, scale);
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

impl Source<'_> {
    /// Key or value row j of KV head `group` and its element stride.
    fn at(&self, j: usize, group: usize, value: bool) -> (*const f32, usize) {
        if j < self.stored_len
            && let Some(s) = &self.stored
        {
            let a = if value { &s.values } else { &s.keys };
            return (a.at([s.slot, group, j, 0]), a.strides[3]);
        }
        let (k, v, row) = self.block.expect("positions past the storage come from the block");
        let a = if value { v } else { k };
        (a.at([row, group, j - self.offset, 0]), a.strides[3])
    }
}

/// Every (row, head, query position) of `q` (logical [B, heads, T, d]) over its sources; output
/// element (b, h, t, :) at `b * out_strides[0] + h * out_strides[1] + t * out_strides[2]`.
fn run(qv: &View, sources: &[Source], out_strides: [usize; 3], out: &mut [f32], scale: f32) {
    let (b, heads, t, d) = (qv.shape[0] as usize, qv.shape[1] as usize, qv.shape[2] as usize, qv.shape[3] as usize);
    let items = b * heads * t;
    let pool = Pool::global();
    let parts = pool.threads().min(items).max(1);
    let per = items.div_ceil(parts);
    let dst = super::cpu_pool::Disjoint(out.as_mut_ptr());
    let dst = &dst;
    pool.run(parts, &|p| {
        let mut scores = Vec::new();
        let mut query = vec![0f32; d];
        for item in p * per..((p + 1) * per).min(items) {
            let (bi, hi, ti) = (item / (heads * t), item / t % heads, item % t);
            let source = &sources[bi];
            let kv_heads = match (&source.stored, source.block) {
                (Some(s), _) => s.keys.shape[1] as usize,
                (None, Some((k, _, _))) => k.shape[1] as usize,
                (None, None) => unreachable!("a source has storage or a block"),
            };
            let group = hi / (heads / kv_heads);
            let visible = source.offset + ti + 1;
            for (x, v) in query.iter_mut().zip(qv.row([bi, hi, ti], d)) {
                *x = v;
            }
            scores.clear();
            let mut top = f32::NEG_INFINITY;
            for j in 0..visible {
                let (k, stride) = source.at(j, group, false);
                let s = scale * dot(&query, k, stride, d);
                top = top.max(s);
                scores.push(s);
            }
            let mut total = 0f32;
            for s in scores.iter_mut() {
                *s = (*s - top).exp();
                total += *s;
            }
            let at = bi * out_strides[0] + hi * out_strides[1] + ti * out_strides[2];
            // SAFETY: each item owns its d outputs; `out` outlives `run`.
            let o = unsafe { std::slice::from_raw_parts_mut(dst.0.add(at), d) };
            for (j, w) in scores.iter().enumerate() {
                let (v, stride) = source.at(j, group, true);
                axpy(o, w / total, v, stride);
            }
        }
    });
}

/// `q . k` with k read at `stride`: eight-lane AVX2 where the CPU has it (the same operations
/// in the same order, so the same result).
fn dot(q: &[f32], k: *const f32, stride: usize, d: usize) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if *AVX2 {
        // SAFETY: the CPU has AVX2; the caller's pointer contract is forwarded.
        return unsafe { dot_avx2(q, k, stride, d) };
    }
    dot_plain(q, k, stride, d)
}

#[cfg(target_arch = "x86_64")]
static AVX2: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| std::arch::is_x86_feature_detected!("avx2"));

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(q: &[f32], k: *const f32, stride: usize, d: usize) -> f32 {
    dot_plain(q, k, stride, d)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn axpy_avx2(o: &mut [f32], w: f32, v: *const f32, stride: usize) {
    axpy_plain(o, w, v, stride)
}

/// `q . k` with k read at `stride`; eight partial sums, so the compiler vectorizes it.
#[inline(always)]
fn dot_plain(q: &[f32], k: *const f32, stride: usize, d: usize) -> f32 {
    let mut acc = [0f32; 8];
    if stride == 1 {
        // SAFETY: the key row holds d contiguous elements.
        let k = unsafe { std::slice::from_raw_parts(k, d) };
        let mut qc = q.chunks_exact(8);
        let mut kc = k.chunks_exact(8);
        for (a, b) in qc.by_ref().zip(kc.by_ref()) {
            for l in 0..8 {
                acc[l] += a[l] * b[l];
            }
        }
        for (l, (a, b)) in qc.remainder().iter().zip(kc.remainder()).enumerate() {
            acc[l] += a * b;
        }
    } else {
        for (j, a) in q.iter().enumerate() {
            // SAFETY: j < d elements at `stride`.
            acc[j % 8] += a * unsafe { *k.add(j * stride) };
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `o += w * v`, v read at `stride`.
fn axpy(o: &mut [f32], w: f32, v: *const f32, stride: usize) {
    #[cfg(target_arch = "x86_64")]
    if *AVX2 {
        // SAFETY: the CPU has AVX2; the caller's pointer contract is forwarded.
        return unsafe { axpy_avx2(o, w, v, stride) };
    }
    axpy_plain(o, w, v, stride)
}

#[inline(always)]
fn axpy_plain(o: &mut [f32], w: f32, v: *const f32, stride: usize) {
    if stride == 1 {
        // SAFETY: the value row holds o.len() contiguous elements.
        let v = unsafe { std::slice::from_raw_parts(v, o.len()) };
        for (x, y) in o.iter_mut().zip(v) {
            *x += w * y;
        }
    } else {
        for (j, x) in o.iter_mut().enumerate() {
            // SAFETY: j < o.len() elements at `stride`.
            *x += w * unsafe { *v.add(j * stride) };
        }
    }
}
