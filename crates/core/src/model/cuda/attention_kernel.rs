//! A packed cohort's attention for a short query block (a B8 verify's 2 positions, an AR step's
//! or a draft's 1) as one CUDA kernel (`attention_short.cu`): every row's queries over
//! its own keys in the slot buffer, visible by the row's offset, online softmax in float32. Where
//! a row holds more than [`SEGMENT`] keys the keys are split into segments of that many positions,
//! a block each, and `attention_merge.cu` combines them in order. On
//! MLX CUDA the masked SDPA it replaces (`attention::attend_cohort`) falls back to ops for
//! head_dim 256: per attention layer a mask made on the host and uploaded, a where over the whole
//! buffer (19 us of a B8 verify's device time a layer, docs/benchmarks.md, session 31), a
//! softmax, two batched matmuls with their pointer set-ups, and the views between them, each a
//! node the host pays for.
//!
//! **Off by default, not yet run on the GPU**: `COHORT_ATTENTION_KERNEL=1` turns it on (CUDA
//! only). [`check`] holds it to a float64 host attention, and the same check runs MLX's masked
//! SDPA as the cohort takes it on any backend, which checks the reference on the CPU
//! (tests/kernels/attention_kernel.rs; `scripts/gpu/r63.sh` runs the CUDA side and times it).

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};
use crate::model::ops::{host_f32, relative_error, slice_axis};
use crate::platform::rng::Rng;

const SOURCE: &str = include_str!("attention_short.cu");
const MERGE_SOURCE: &str = include_str!("attention_merge.cu");

/// Key positions one block of a split launch takes. A B1 step at 128k positions is then 2,048
/// blocks of the real geometry's 16 heads instead of 16 (each warp read 8,192 keys one after
/// another: 94% of the step's device time on an H100, docs/benchmarks.md); a row of at most this
/// many keys gets the bits of an unsplit launch.
pub const SEGMENT: i32 = 1024;
/// load_floats and warp_sum, shared with the expert kernels.
const HEADER: (&str, &str) = ("affine_dot.cuh", include_str!("affine_dot.cuh"));

/// Floats of shared memory the warps' parts take at most (32 KB: WARPS x T x D).
const SHARED_FLOATS: i32 = 8192;

/// Warps a block (one block per row and query head): 16 where their parts fit the shared
/// memory, else 8. At a B8 verify the grid is only 128 blocks, about one an SM, so the warps of
/// a block are all the loads an SM has in flight.
fn warps_for(t: i32, d: i32) -> i32 {
    if 16 * t * d <= SHARED_FLOATS { 16 } else { 8 }
}

/// Query positions a block takes at most: each lane holds a running output of D / 32 floats
/// for every one of them.
pub const MAX_QUERIES: i32 = 2;

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new(
            "cohort_attention_short",
            "attention_short.cu",
            &["q", "keys", "values", "offsets"],
            &["out", "parts", "stats"],
            SOURCE,
            Some(HEADER),
        )
    })
}

fn merge_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new(
            "cohort_attention_merge",
            "attention_merge.cu",
            &["parts", "stats"],
            &["out"],
            MERGE_SOURCE,
            None,
        )
    })
}

/// Segments a launch over rows whose longest sees `longest` keys takes (1: unsplit).
fn segments(longest: i32) -> i32 {
    (longest + SEGMENT - 1) / SEGMENT
}

/// Whether the kernel's layout holds these shapes: q [B, NH, T, D] with T <= [`MAX_QUERIES`],
/// keys and values [B, NKV, CAP, D] with NKV dividing NH, D a multiple of 32 up to 512, one
/// floating dtype throughout.
fn fits(q: &Array, keys: &Array, values: &Array) -> bool {
    let (qs, ks) = (q.shape(), keys.shape());
    if qs.len() != 4 || ks.len() != 4 || values.shape() != ks {
        return false;
    }
    let (b, nh, t, d) = (qs[0], qs[1], qs[2], qs[3]);
    let nkv = ks[1];
    ks[0] == b
        && ks[3] == d
        && t >= 1
        && nkv >= 1
        && nh % nkv == 0
        && d % 32 == 0
        && (32..=512).contains(&d)
        && 8 * t.min(MAX_QUERIES) * d <= SHARED_FLOATS
        && b * nh * segments(ks[2].max(1)) <= 65535
        // The merge takes a block a (row, head, query).
        && b * nh * t <= 65535
        && q.dtype() == keys.dtype()
        && q.dtype() == values.dtype()
        && matches!(q.dtype(), Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16)
}

/// Whether the cohort's attention takes the kernel for this block: turned on, or the invariant
/// block route is (whatever the switch says: a row's queries then meet the same code alone or in
/// a cohort and at one query or two, since warps take keys by index, a query skips the keys it
/// does not see, and the warps' parts meet in one order, which the exactness gate needs of a
/// verify); on CUDA; and a layout it holds.
pub fn serves(q: &Array, keys: &Array, values: &Array) -> bool {
    let routes = crate::model::routes::current();
    let wanted = routes.attention_kernel || routes.block == crate::model::routes::BlockRoute::Invariant;
    wanted && crate::platform::backend::Backend::is_cuda() && fits(q, keys, values)
}

/// Row b's queries `q` [B, NH, T, D] over its keys and values [B, NKV, CAP, D] at positions
/// 0 ..= offsets[b] + t for query t, scaled by `scale`: [B, NH, T, D] in q's dtype. A block of
/// more than [`MAX_QUERIES`] queries (a prompt read's piece on the invariant route) is taken
/// [`MAX_QUERIES`] at a time, a tile of thread blocks each at its queries' own offsets: a query's
/// bits depend only on the key positions it sees, so they are those of the same query in a step
/// or a verify.
pub fn attend(q: &Array, keys: &Array, values: &Array, offsets: &[i32], scale: f32) -> Result<Array> {
    if !fits(q, keys, values) {
        bail!(
            "the short-block attention kernel does not fit q {:?}, keys {:?}, values {:?} ({:?})",
            q.shape(),
            keys.shape(),
            values.shape(),
            q.dtype()
        );
    }
    let (b, nh, t, d) = (q.shape()[0], q.shape()[1], q.shape()[2], q.shape()[3]);
    let (nkv, cap) = (keys.shape()[1], keys.shape()[2]);
    if offsets.len() != b as usize || offsets.iter().any(|&o| o < 0 || o + t > cap) {
        bail!("the short-block attention kernel's offsets {offsets:?} do not fit {b} rows of {cap} positions");
    }
    let segs = segments(offsets.iter().max().map_or(0, |o| o + t));
    let split = segs > 1;
    let offsets = Array::from_slice(offsets, &[b]);
    let tile = t.min(MAX_QUERIES);
    let tiles = (t + tile - 1) / tile;
    let warps = warps_for(tile, d);
    let unused = (vec![1], Dtype::Float32);
    let outputs = if split {
        vec![(vec![1], q.dtype()), (vec![b, nh, t, segs, d], Dtype::Float32), (vec![b, nh, t, segs, 2], Dtype::Float32)]
    } else {
        vec![(q.shape().to_vec(), q.dtype()), unused.clone(), unused]
    };
    let launch = Launch {
        outputs,
        grid: [32 * tiles, warps, b * nh * segs],
        threads: [32, warps, 1],
        ints: &[
            ("NH", nh),
            ("NKV", nkv),
            ("D", d),
            ("T", tile),
            ("WARPS", warps),
            ("SCALE_BITS", scale.to_bits() as i32),
            ("SEG", SEGMENT),
        ],
        bools: &[("SPLIT", split)],
    };
    let mut outs = kernel()?.apply(&[q, keys, values, &offsets], &launch)?;
    if !split {
        return Ok(outs.swap_remove(0));
    }
    let merge = Launch {
        outputs: vec![(q.shape().to_vec(), q.dtype())],
        grid: [d, 1, b * nh * t],
        threads: [d, 1, 1],
        ints: &[],
        bools: &[],
    };
    Ok(merge_kernel()?.apply(&[&outs[1], &outs[2]], &merge)?.pop().expect("one output"))
}

/// A short block's shapes for [`check`].
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub queries: i32,
    pub capacity: i32,
}

impl Shape {
    /// The real Qwen3.6-35B-A3B geometry's attention at a B8 verify, in a 1024-position buffer.
    pub const REAL: Shape = Shape { heads: 16, kv_heads: 2, head_dim: 256, queries: 2, capacity: 1024 };
    /// The same in a buffer of 4,608 positions: rows past [`SEGMENT`] keys take a split launch.
    pub const REAL_LONG: Shape = Shape { capacity: 4608, ..Shape::REAL };
}

/// Random queries, keys and values in `dtype` for rows at `offsets` (one row each), through the
/// kernel when `kernel` (else MLX's masked SDPA over the whole buffer, as the cohort attends on
/// MLX CUDA), against a float64 attention over the same rounded inputs: the relative error.
/// Buffer positions past a row's block hold values of their own, so a kernel that read them
/// would be seen.
pub fn check(s: Shape, offsets: &[i32], dtype: Dtype, kernel: bool, seed: u64) -> Result<f64> {
    let Shape { heads: nh, kv_heads: nkv, head_dim: d, queries: t, capacity: cap } = s;
    let b = offsets.len() as i32;
    let mut rng = Rng::new(seed);
    let mut random = |shape: &[i32]| -> Result<Array> {
        let count: i32 = shape.iter().product();
        let v: Vec<f32> = (0..count).map(|_| (2.0 * rng.next_f64() - 1.0) as f32).collect();
        let a = Array::from_slice(&v, shape).as_dtype(dtype)?;
        a.eval()?;
        Ok(a)
    };
    let q = random(&[b, nh, t, d])?;
    let keys = random(&[b, nkv, cap, d])?;
    let values = random(&[b, nkv, cap, d])?;
    let scale = (d as f32).powf(-0.5);
    let got = if kernel {
        attend(&q, &keys, &values, offsets, scale)?
    } else {
        let mask = crate::model::layers::attention::visibility(offsets, t, cap);
        mlx_rs::fast::scaled_dot_product_attention(
            &q,
            &keys,
            &values,
            scale,
            mlx_rs::fast::ScaledDotProductAttentionMask::Array(&mask),
            None,
        )?
    };
    let (qs, ks, vs) = (host_f32(&q)?, host_f32(&keys)?, host_f32(&values)?);
    let (nh, nkv, t, d, cap) = (nh as usize, nkv as usize, t as usize, d as usize, cap as usize);
    let mut want = vec![0f64; qs.len()];
    for (row, &offset) in offsets.iter().enumerate() {
        for h in 0..nh {
            let kv = (row * nkv + h / (nh / nkv)) * cap * d;
            for i in 0..t {
                let qi = ((row * nh + h) * t + i) * d;
                let seen = offset as usize + i + 1;
                let scores: Vec<f64> = (0..seen)
                    .map(|j| {
                        let dot: f64 = (0..d).map(|c| qs[qi + c] as f64 * ks[kv + j * d + c] as f64).sum();
                        dot * scale as f64
                    })
                    .collect();
                let top = scores.iter().copied().fold(f64::MIN, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let total: f64 = weights.iter().sum();
                for c in 0..d {
                    let o: f64 = weights.iter().enumerate().map(|(j, w)| w * vs[kv + j * d + c] as f64).sum();
                    want[qi + c] = o / total;
                }
            }
        }
    }
    Ok(relative_error(&host_f32(&got)?, &want))
}

/// The kernel against itself, as the exactness gate needs it: a block of `s.queries` queries a
/// row for rows at `offsets` (two: a verify; more: a prompt read's piece), then each query as a
/// one-query step at its own position (query i sees i keys more, as step i of a chain does) and
/// each row alone. Returns how many of the block's (row, query) outputs differ in any bit from
/// the step or the lone row that stands for them.
pub fn check_invariance(s: Shape, offsets: &[i32], dtype: Dtype, seed: u64) -> Result<usize> {
    let Shape { heads: nh, kv_heads: nkv, head_dim: d, capacity: cap, queries } = s;
    let b = offsets.len() as i32;
    let (qkey, kvkey) = mlx_rs::random::split(&mlx_rs::random::key(seed)?, 2)?;
    let q = mlx_rs::random::uniform::<f32, f32>(-1.0, 1.0, &[b, nh, queries, d], Some(&qkey))?.as_dtype(dtype)?;
    let kv = mlx_rs::random::uniform::<f32, f32>(-1.0, 1.0, &[2, b, nkv, cap, d], Some(&kvkey))?.as_dtype(dtype)?;
    let half = |i: i32| -> Result<Array> { Ok(slice_axis(&kv, 0, i, i + 1)?.reshape(&[b, nkv, cap, d])?) };
    let (keys, values) = (half(0)?, half(1)?);
    let scale = (d as f32).powf(-0.5);
    let block = attend(&q, &keys, &values, offsets, scale)?;
    let mut differing = 0;
    let mut count = |got: &Array, want: &Array| -> Result<()> {
        let (g, w) = (host_f32(got)?, host_f32(want)?);
        if g.len() != w.len() || g.iter().zip(&w).any(|(x, y)| x.to_bits() != y.to_bits()) {
            differing += 1;
        }
        Ok(())
    };
    for t in 0..queries {
        let at: Vec<i32> = offsets.iter().map(|o| o + t).collect();
        let step = attend(&slice_axis(&q, 2, t, t + 1)?, &keys, &values, &at, scale)?;
        for row in 0..b {
            let one = |a: &Array| slice_axis(a, 0, row, row + 1);
            count(&one(&slice_axis(&step, 2, 0, 1)?)?, &one(&slice_axis(&block, 2, t, t + 1)?)?)?;
        }
    }
    for row in 0..b {
        let one = |a: &Array| slice_axis(a, 0, row, row + 1);
        let alone = attend(&one(&q)?, &one(&keys)?, &one(&values)?, &offsets[row as usize..=row as usize], scale)?;
        for t in 0..queries {
            count(&slice_axis(&alone, 2, t, t + 1)?, &slice_axis(&one(&block)?, 2, t, t + 1)?)?;
        }
    }
    Ok(differing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeros(shape: &[i32], dtype: Dtype) -> Array {
        Array::zeros::<f32>(shape).unwrap().as_dtype(dtype).unwrap()
    }

    /// The layout's limits: no query, a head width off the warp, mixed
    /// dtypes or heads that do not group keep the masked SDPA.
    #[test]
    fn the_kernel_takes_only_the_layouts_it_holds() {
        let bf = Dtype::Bfloat16;
        let kv = zeros(&[8, 2, 64, 256], bf);
        assert!(fits(&zeros(&[8, 16, 2, 256], bf), &kv, &kv));
        assert!(fits(&zeros(&[8, 16, 1, 256], bf), &kv, &kv));
        assert!(fits(&zeros(&[8, 16, 16, 256], bf), &kv, &kv), "sixteen queries, launched two at a time");
        assert!(!fits(&zeros(&[8, 16, 0, 256], bf), &kv, &kv), "no query");
        assert!(!fits(&zeros(&[8, 16, 2, 256], Dtype::Float32), &kv, &kv), "mixed dtypes");
        assert!(!fits(&zeros(&[8, 15, 2, 256], bf), &kv, &kv), "15 heads on 2 key heads");
        let narrow = zeros(&[8, 2, 64, 48], bf);
        assert!(!fits(&zeros(&[8, 16, 2, 48], bf), &narrow, &narrow), "48 dims");
        assert!(!fits(&zeros(&[4, 16, 2, 256], bf), &kv, &kv), "rows differ");
    }

    /// Off by default, and on only where MLX drives CUDA even when forced.
    #[test]
    fn the_kernel_is_off_unless_forced_on_cuda() {
        let bf = Dtype::Bfloat16;
        let (q, kv) = (zeros(&[2, 16, 1, 256], bf), zeros(&[2, 2, 8, 256], bf));
        use crate::model::routes::{Routes, scoped};
        let defaults = Routes::defaults(crate::platform::backend::Backend::detect());
        assert!(!scoped(defaults, || serves(&q, &kv, &kv)));
        let on = Routes { attention_kernel: true, ..defaults };
        assert_eq!(scoped(on, || serves(&q, &kv, &kv)), crate::platform::backend::Backend::is_cuda());
    }
}
