//! The attention layers' q/k norm and RoPE kernel (`cohort_core::model::cuda::qk_norm_rope`)
//! against a float64 RMSNorm and RoPE, the model's ops route against the same reference on any
//! backend, and the kernel against itself (a row's heads the same bits alone, in a block and as
//! a step).

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use cohort_core::model::config::RopeSpec;
use cohort_core::model::cuda::qk_norm_rope::{Heads, apply};
use cohort_core::model::layers::linear::split_widths;
use cohort_core::model::layers::rope;
use cohort_core::model::ops::{host_f32, relative_error, rows_differing as differing_rows, slice_axis};
use cohort_core::platform::rng::Rng;

/// The real geometry's attention heads (16 queries and 2 keys of 256, a quarter of each rotated
/// at base 10^7) for the checks.
pub const REAL: (Heads, RopeSpec) =
    (Heads { heads: 16, kv_heads: 2, head_dim: 256, eps: 1e-6 }, RopeSpec { dims: 64, traditional: false, base: 1e7 });

struct Inputs {
    p: Array,
    q_w: Array,
    k_w: Array,
}

fn inputs(b: i32, t: i32, h: Heads, dtype: Dtype, seed: u64) -> Result<Inputs> {
    let mut rng = Rng::new(seed);
    let mut random = |shape: &[i32], lo: f32, hi: f32| -> Result<Array> {
        let count: i32 = shape.iter().product();
        let v: Vec<f32> = (0..count).map(|_| lo + (hi - lo) * rng.next_f64() as f32).collect();
        let a = Array::from_slice(&v, shape).as_dtype(dtype)?;
        a.eval()?;
        Ok(a)
    };
    Ok(Inputs {
        p: random(&[b, t, h.width()], -3.0, 3.0)?,
        q_w: random(&[h.head_dim], 0.5, 1.5)?,
        k_w: random(&[h.head_dim], 0.5, 1.5)?,
    })
}

/// The same queries and keys through the model's ops route: the product's slices normed by MLX's
/// RMSNorm, then rotated by the layers' RoPE (any backend).
fn by_ops(p: &Array, q_w: &Array, k_w: &Array, h: Heads, rope: RopeSpec, offsets: &[i32]) -> Result<(Array, Array)> {
    let (b, t) = (p.shape()[0], p.shape()[1]);
    let (nh, nkv, hd) = (h.heads, h.kv_heads, h.head_dim);
    let parts = split_widths(p, &[2 * nh * hd, nkv * hd, nkv * hd])?;
    let halves = mlx_rs::ops::split_equal(&parts[0].reshape(&[b, t, nh, 2 * hd])?, 2, -1)?;
    let q = mlx_rs::fast::rms_norm(&halves[0], Some(q_w), h.eps)?.transpose_axes(&[0, 2, 1, 3])?;
    let k = mlx_rs::fast::rms_norm(&parts[1].reshape(&[b, t, nkv, hd])?, Some(k_w), h.eps)?
        .transpose_axes(&[0, 2, 1, 3])?;
    Ok((rope::rope(&q, rope, offsets)?, rope::rope(&k, rope, offsets)?))
}

/// Random product rows for rows at `offsets` (t positions each) in `dtype` through the kernel
/// (`kernel`, CUDA only) or the model's ops route, against a float64 RMSNorm and RoPE of the same
/// rounded inputs: the relative error of the queries and of the keys, each to the reference's
/// largest magnitude.
pub fn check(offsets: &[i32], t: i32, dtype: Dtype, kernel: bool, seed: u64) -> Result<(f64, f64)> {
    let (h, rope) = REAL;
    let b = offsets.len() as i32;
    let Inputs { p, q_w, k_w } = inputs(b, t, h, dtype, seed)?;
    let (q, k) =
        if kernel { apply(&p, &q_w, &k_w, h, rope, offsets)? } else { by_ops(&p, &q_w, &k_w, h, rope, offsets)? };
    let (ps, qws, kws) = (host_f32(&p)?, host_f32(&q_w)?, host_f32(&k_w)?);
    let d = h.head_dim as usize;
    let half = rope.dims as usize / 2;
    let reference = |query: bool| -> Vec<f64> {
        let count = if query { h.heads } else { h.kv_heads } as usize;
        let w = if query { &qws } else { &kws };
        let mut out = vec![0f64; b as usize * count * t as usize * d];
        for (row, &offset) in offsets.iter().enumerate() {
            for ti in 0..t as usize {
                let at = (row * t as usize + ti) * h.width() as usize;
                for head in 0..count {
                    let start = at + if query { head * 2 * d } else { 2 * h.heads as usize * d + head * d };
                    let x: Vec<f64> = ps[start..start + d].iter().map(|&v| v as f64).collect();
                    let scale = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / d as f64 + h.eps as f64).sqrt();
                    let mut y: Vec<f64> = x.iter().zip(w.iter()).map(|(v, &wi)| v * scale * wi as f64).collect();
                    let position = (offset as usize + ti) as f64;
                    for i in 0..half {
                        let theta = position * (rope.base as f64).powf(-(i as f64) / half as f64);
                        let (x1, x2) = (y[i], y[i + half]);
                        y[i] = x1 * theta.cos() - x2 * theta.sin();
                        y[i + half] = x1 * theta.sin() + x2 * theta.cos();
                    }
                    let dst = ((row * count + head) * t as usize + ti) * d;
                    out[dst..dst + d].copy_from_slice(&y);
                }
            }
        }
        out
    };
    Ok((relative_error(&host_f32(&q)?, &reference(true)), relative_error(&host_f32(&k)?, &reference(false))))
}

/// Rows of a block of `offsets.len()` rows of `t` positions whose queries or keys differ in any
/// bit from the same row run alone, or a position from the same position run as a one-position
/// step (CUDA only).
pub fn rows_differing(offsets: &[i32], t: i32, dtype: Dtype, seed: u64) -> Result<usize> {
    let (h, rope) = REAL;
    let b = offsets.len() as i32;
    let Inputs { p, q_w, k_w } = inputs(b, t, h, dtype, seed)?;
    let both = |p: &Array, at: &[i32]| -> Result<Vec<f32>> {
        let (q, k) = apply(p, &q_w, &k_w, h, rope, at)?;
        let (q, k) = (q.transpose_axes(&[0, 2, 1, 3])?, k.transpose_axes(&[0, 2, 1, 3])?);
        let rows = q.shape()[0] * q.shape()[1];
        let joined = mlx_rs::ops::concatenate(
            &[q.reshape(&[rows, h.heads * h.head_dim])?, k.reshape(&[rows, h.kv_heads * h.head_dim])?],
            1,
        )?;
        host_f32(&joined)
    };
    let block = both(&p, offsets)?;
    // Each (row, position) of the block against the same row alone, then against that position
    // alone as a step at its own offset.
    let alone = differing_rows(&block, b * t, |i| {
        let (row, ti) = (i / t, i % t);
        let one = slice_axis(&slice_axis(&p, 0, row, row + 1)?, 1, ti, ti + 1)?;
        both(&one, &[offsets[row as usize] + ti])
    })?;
    let whole_rows = differing_rows(&block, b * t, |i| {
        let (row, ti) = (i / t, i % t);
        let lone = both(&slice_axis(&p, 0, row, row + 1)?, &offsets[row as usize..=row as usize])?;
        let per = lone.len() / t as usize;
        Ok(lone[ti as usize * per..(ti as usize + 1) * per].to_vec())
    })?;
    Ok(alone + whole_rows)
}
