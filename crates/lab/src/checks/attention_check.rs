//! The short-block attention kernel (`cohort_core::model::cuda::attention_kernel`) against a
//! float64 host attention (and MLX's masked SDPA, as the cohort attends without it, against the
//! same reference on any backend), and against itself: a block's queries bit for bit what
//! single-query steps and lone rows give.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use cohort_core::model::cuda::attention_kernel::attend;
use cohort_core::model::layers::attention::visibility;
use cohort_core::model::ops::{host_f32, relative_error, slice_axis};
use cohort_core::platform::rng::Rng;

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
        let mask = visibility(offsets, t, cap);
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
