//! The invariant route's products (`cohort_core::model::cuda::row_invariant`) against a float64
//! product of the same rounded inputs and against themselves: every row of a block bit for bit
//! what the row gives alone.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use cohort_core::model::config::QuantSpec;
use cohort_core::model::cuda::row_invariant::{affine_product, dense_product};
use cohort_core::model::ops::{host_f32, relative_error, rows_differing, slice_axis};

/// What [`check`] found.
#[derive(Debug, Clone, Copy)]
pub struct RowsReport {
    /// Largest difference from the float64 product, relative to its largest value.
    pub relative_error: f64,
    /// Rows of the block whose output differs in any bit from the same row run alone.
    pub rows_differing: usize,
}

/// One kernel's product of a block, its weight bound in.
type Product = dyn Fn(&Array) -> Result<Array>;

/// A random `rows` x `input` block in `dtype` against a random `out` x `input` weight, quantized
/// as `spec` or (`None`) kept in `dtype`: the kernel's product against a float64 product of the
/// same rounded inputs and (dequantized) weight, and each row of the block against that row alone.
pub fn check(rows: i32, input: i32, out: i32, spec: Option<QuantSpec>, dtype: Dtype, seed: u64) -> Result<RowsReport> {
    let (wkey, xkey) = mlx_rs::random::split(&mlx_rs::random::key(seed)?, 2)?;
    let dense = mlx_rs::random::uniform::<f32, f32>(-1.0, 1.0, &[out, input], Some(&wkey))?.as_dtype(dtype)?;
    let x = mlx_rs::random::uniform::<f32, f32>(-1.0, 1.0, &[rows, input], Some(&xkey))?.as_dtype(dtype)?;
    let (weight, product): (Array, Box<Product>) = match spec {
        Some(spec) => {
            let (w, scales, biases) = mlx_rs::ops::quantize(&dense, spec.group_size, spec.bits)?;
            let weight = mlx_rs::ops::dequantize(&w, &scales, &biases, spec.group_size, spec.bits)?;
            (weight, Box::new(move |x: &Array| affine_product(x, &w, &scales, &biases, spec, out)))
        }
        None => (dense.clone(), Box::new(move |x: &Array| dense_product(x, &dense))),
    };
    let got = product(&x)?;
    let (xs, ws, ys) = (host_f32(&x)?, host_f32(&weight)?, host_f32(&got)?);
    let (k, n) = (input as usize, out as usize);
    let want: Vec<f64> = (0..rows as usize * n)
        .map(|e| {
            let (r, c) = (e / n, e % n);
            (0..k).map(|i| xs[r * k + i] as f64 * ws[c * k + i] as f64).sum()
        })
        .collect();
    let rows_differing = rows_differing(&ys, rows, |r| host_f32(&product(&slice_axis(&x, 0, r, r + 1)?)?))?;
    Ok(RowsReport { relative_error: relative_error(&ys, &want), rows_differing })
}
