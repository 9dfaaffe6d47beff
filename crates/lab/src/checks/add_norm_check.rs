//! The residual sum and RMSNorm kernel (`cohort_core::model::cuda::add_norm`) against a float64
//! host reference and against the ops route it replaces.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use cohort_core::model::cuda::add_norm::add_rms_norm;
use cohort_core::model::ops::{host_f32, relative_error};
use cohort_core::platform::rng::Rng;

/// What [`check`] found, each relative to the reference's largest magnitude: the sum and the
/// normed output against float64, and the normed output against the ops route.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct AddNormReport {
    pub sum: f64,
    pub normed: f64,
    pub against_ops: f64,
}

/// Random x, r [n, d] and weight [d] in `dtype`, through the kernel when `kernel` (else the ops
/// route), against a float64 reference of the sum and its RMSNorm over the same rounded inputs.
pub fn check(n: i32, d: i32, dtype: Dtype, kernel: bool, seed: u64) -> Result<AddNormReport> {
    let mut rng = Rng::new(seed);
    let mut random = |count: i32, lo: f32, hi: f32| -> Result<Array> {
        let v: Vec<f32> = (0..count).map(|_| lo + (hi - lo) * rng.next_f64() as f32).collect();
        let a = Array::from_slice(&v, &[count]).as_dtype(dtype)?;
        a.eval()?;
        Ok(a)
    };
    let x = random(n * d, -3.0, 3.0)?.reshape(&[n, d])?;
    let r = random(n * d, -1.0, 1.0)?.reshape(&[n, d])?;
    let w = random(d, 0.5, 1.5)?;
    let eps = 1e-6f32;
    let ops = |x: &Array, r: &Array| -> Result<(Array, Array)> {
        let h = x.add(r)?;
        let y = mlx_rs::fast::rms_norm(&h, Some(&w), eps)?;
        Ok((h, y))
    };
    let (h, y) = if kernel { add_rms_norm(&x, &r, &w, eps)? } else { ops(&x, &r)? };
    let (_, y_ops) = ops(&x, &r)?;
    let (xs, rs, ws) = (host_f32(&x)?, host_f32(&r)?, host_f32(&w)?);
    let mut want_h = vec![0f64; xs.len()];
    let mut want_y = vec![0f64; xs.len()];
    for row in 0..n as usize {
        let at = row * d as usize;
        let sums: Vec<f64> = (0..d as usize).map(|i| xs[at + i] as f64 + rs[at + i] as f64).collect();
        let scale = 1.0 / (sums.iter().map(|s| s * s).sum::<f64>() / d as f64 + eps as f64).sqrt();
        for (i, s) in sums.iter().enumerate() {
            want_h[at + i] = *s;
            want_y[at + i] = s * scale * ws[i] as f64;
        }
    }
    let got_y = host_f32(&y)?;
    Ok(AddNormReport {
        sum: relative_error(&host_f32(&h)?, &want_h),
        normed: relative_error(&got_y, &want_y),
        against_ops: relative_error(&got_y, &host_f32(&y_ops)?.iter().map(|&v| v as f64).collect::<Vec<_>>()),
    })
}
