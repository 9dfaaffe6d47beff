//! `x W^T` for a projection, dense or affine-quantized, shaped so MLX picks its fast kernels.
//!
//! Two facts about MLX's CUDA backend (0.32, measured on the H200, docs/benchmarks.md) shape
//! this:
//! - A quantized product reads `x` as a batch of matrices over every axis but the last two:
//!   a B8 verify's [8, 2, H] runs as 8 products of 2 rows, each reading the whole weight again
//!   (the lm_head alone took 1.64 ms of a verify that way). Flattened to [16, H] it reads the
//!   weight once, so every product here takes `x` as rows.
//! - When one group spans a whole row (`group_size >= in`, the test fixtures' 64-wide hidden
//!   size with 64-wide groups; never a real model's), a product of more than one row goes to a
//!   Hopper kernel that gave wrong and run-to-run different results (`device --check-kernels`:
//!   3 x 64 -> 8, 8-bit, relative error 1.01, 8 of 8 repeats differing). Those products take the
//!   dequantized weight there instead: the same values, through an ordinary matmul.

use anyhow::Result;
use mlx_rs::Array;

use crate::engine::runtime::Backend;

/// `x W^T` with `W` quantized as `w`, `scales`, `biases`.
pub fn quantized(x: &Array, w: &Array, scales: &Array, biases: &Array, group_size: i32, bits: i32) -> Result<Array> {
    as_rows(x, |rows| {
        let input = rows.shape()[1];
        if rows.shape()[0] > 1 && group_size >= input && Backend::is_cuda() {
            let dense = mlx_rs::ops::dequantize(w, scales, biases, group_size, bits)?;
            return Ok(mlx_rs::ops::matmul(rows, dense.t())?);
        }
        Ok(mlx_rs::ops::quantized_matmul(rows, w, scales, biases, true, group_size, bits)?)
    })
}

/// `x W^T` with a float `W` [out, in].
pub fn dense(x: &Array, weight: &Array) -> Result<Array> {
    as_rows(x, |rows| Ok(mlx_rs::ops::matmul(rows, weight.t())?))
}

/// Whether products take `x` as rows: on unless `COHORT_FLAT_PRODUCTS=0`, which a benchmark
/// sets to time the batched form beside it.
fn flat() -> bool {
    static FLAT: std::sync::LazyLock<bool> =
        std::sync::LazyLock::new(|| std::env::var("COHORT_FLAT_PRODUCTS").as_deref() != Ok("0"));
    *FLAT
}

/// `f` over `x` as a matrix of rows [rows, in], its result given `x`'s leading shape back.
fn as_rows(x: &Array, f: impl FnOnce(&Array) -> Result<Array>) -> Result<Array> {
    let shape = x.shape();
    if shape.len() <= 2 || !flat() {
        return f(x);
    }
    let input = shape[shape.len() - 1];
    let y = f(&x.reshape(&[-1, input])?)?;
    let mut out = shape[..shape.len() - 1].to_vec();
    out.push(y.shape()[1]);
    Ok(y.reshape(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(a: &Array) -> Vec<f32> {
        a.as_dtype(mlx_rs::Dtype::Float32).unwrap().as_slice::<f32>().to_vec()
    }

    /// x [.., in] times w [out, in] transposed, in f64 on the host.
    fn reference(x: &[f32], w: &[f32], input: usize) -> Vec<f64> {
        let out = w.len() / input;
        x.chunks(input)
            .flat_map(|row| {
                (0..out)
                    .map(move |o| row.iter().zip(&w[o * input..][..input]).map(|(a, b)| *a as f64 * *b as f64).sum())
            })
            .collect()
    }

    #[test]
    fn rows_keep_the_leading_shape_and_match_a_host_product() {
        let x = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[3, 2, 64], None).unwrap();
        let w = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[128, 64], None).unwrap();
        let y = dense(&x, &w).unwrap();
        assert_eq!(y.shape(), &[3, 2, 128]);
        let err = crate::model::ops::relative_error(&host(&y), &reference(&host(&x), &host(&w), 64));
        assert!(err < 1e-5, "dense product off by {err:e}");
        // One group a row (the fixtures' case) and several.
        for group in [64, 32] {
            let (q, s, b) = mlx_rs::ops::quantize(&w, group, 4).unwrap();
            let yq = quantized(&x, &q, &s, &b, group, 4).unwrap();
            assert_eq!(yq.shape(), &[3, 2, 128]);
            let dequantized = mlx_rs::ops::dequantize(&q, &s, &b, group, 4).unwrap();
            let err = crate::model::ops::relative_error(&host(&yq), &reference(&host(&x), &host(&dequantized), 64));
            assert!(err < 1e-5, "quantized product (group {group}) off by {err:e}");
        }
    }
}
