//! The matmul and linear timings `cohort device` prints.

use std::time::Instant;

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use cohort_core::platform::timing::median;

/// One matmul timing: `n x n` by `n x n` in `dtype`, median of `iters` evaluated runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MatmulFigure {
    pub dtype: String,
    pub n: i32,
    pub median_ms: f64,
    pub tflops: f64,
}

/// Time a square matmul on the default device. Each run is evaluated on its own, so the figure
/// includes one host synchronisation per matmul (as a decode step's would).
pub fn time_matmul(n: i32, dtype: Dtype, iters: usize) -> Result<MatmulFigure> {
    if n <= 0 || iters == 0 {
        bail!("matmul size and iteration count must be positive (got n={n}, iters={iters})");
    }
    let key = mlx_rs::random::key(7)?;
    let a = mlx_rs::random::normal::<f32>(&[n, n], None, None, Some(&key))?.as_dtype(dtype)?;
    let b = mlx_rs::random::normal::<f32>(&[n, n], None, None, Some(&key))?.as_dtype(dtype)?;
    mlx_rs::transforms::eval([&a, &b])?;
    let run = || -> Result<f64> {
        let t = Instant::now();
        let c: Array = mlx_rs::ops::matmul(&a, &b)?;
        c.eval()?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    };
    run()?; // warm-up: kernel selection and allocation
    let median_ms = median((0..iters).map(|_| run()).collect::<Result<Vec<_>>>()?);
    let flops = 2.0 * (n as f64).powi(3);
    Ok(MatmulFigure {
        dtype: format!("{dtype:?}").to_lowercase(),
        n,
        median_ms,
        tflops: flops / (median_ms * 1e-3) / 1e12,
    })
}

/// Time `x [m, k] · w [n, k]ᵀ` (a linear layer's shape: w as the model stores it) for each row
/// count in `rows`: in float32 whole, as chunks of at most `chunk` rows and as (w . xᵀ)ᵀ, and on
/// the CPU kernel (on host buffers) for the row counts the host decode path gives it; medians in ms: how each behaves across the M a
/// decode step (1-8) and a verify (16) present.
pub fn time_linear(k: i32, n: i32, rows: &[i32], chunk: i32, iters: usize) -> Result<Vec<LinearTiming>> {
    let key = mlx_rs::random::key(11)?;
    let w = mlx_rs::random::normal::<f32>(&[n, k], None, None, Some(&key))?;
    w.eval()?;
    let wt = w.transpose()?;
    let kernel = |bits| -> Result<Option<cohort_core::model::layers::linear::Linear>> {
        let spec = cohort_core::model::config::QuantSpec { bits, group_size: 32 };
        if !cohort_core::model::cpu::cpu_qmm::simd_available() || k % 32 != 0 {
            return Ok(None);
        }
        Ok(Some(cohort_core::model::layers::linear::Linear::cpu_packed_from(&w, spec)?))
    };
    let (k4, k8) = (kernel(4)?, kernel(8)?);
    let mut out = Vec::new();
    for &m in rows {
        let x = mlx_rs::random::normal::<f32>(&[m, k], None, None, Some(&key))?;
        x.eval()?;
        let time = |product: &dyn Fn() -> Result<Array>| -> Result<f64> {
            let mut times = Vec::new();
            for _ in 0..iters + 1 {
                let t = Instant::now();
                product()?.eval()?;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            times.remove(0);
            Ok(median(times))
        };
        let whole = time(&|| Ok(mlx_rs::ops::matmul(&x, &wt)?))?;
        let split = time(&|| {
            if m <= chunk {
                return Ok(mlx_rs::ops::matmul(&x, &wt)?);
            }
            let parts = (0..m)
                .step_by(chunk as usize)
                .map(|lo| {
                    Ok(mlx_rs::ops::matmul(&cohort_core::model::ops::slice_axis(&x, 0, lo, (lo + chunk).min(m))?, &wt)?)
                })
                .collect::<Result<Vec<Array>>>()?;
            Ok(mlx_rs::ops::concatenate(&parts, 0)?)
        })?;
        // (w . x^T)^T: the weight as BLAS's left operand.
        let flipped = time(&|| Ok(mlx_rs::ops::matmul(&w, x.t())?.t().contiguous()?))?;
        let xs = x.try_as_slice::<f32>()?;
        // The product on host buffers, as the host decode path calls it, for the blocks it serves.
        let on_kernel = |lin: &Option<cohort_core::model::layers::linear::Linear>| -> Result<Option<f64>> {
            match lin {
                Some(cohort_core::model::layers::linear::Linear::CpuPacked { packed, .. }) => {
                    Ok(Some(time(&|| Ok(Array::from_slice(&packed.matmul(xs, m as usize), &[m, n])))?))
                }
                _ => Ok(None),
            }
        };
        out.push(LinearTiming { m, whole, split, flipped, kernel4: on_kernel(&k4)?, kernel8: on_kernel(&k8)? });
    }
    Ok(out)
}

/// Milliseconds for one linear layer at M rows: float32 BLAS whole, in chunks, with the weight as
/// the left operand, and cohort's CPU kernel on 4-bit and 8-bit codes of the same weight (group 32).
pub struct LinearTiming {
    pub m: i32,
    pub whole: f64,
    pub split: f64,
    pub flipped: f64,
    pub kernel4: Option<f64>,
    pub kernel8: Option<f64>,
}
