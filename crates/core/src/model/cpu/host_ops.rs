//! Element-wise pieces of a decoder layer on host buffers (RMSNorm, SwiGLU's gate, residual
//! adds), for the CPU decode path that keeps a block's activations out of MLX between layers.

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

/// `x * rsqrt(mean(x^2) + eps) * weight` for each row of `x` (`weight.len()` wide).
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let d = weight.len();
    let mut out = vec![0f32; x.len()];
    for (row, dst) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let mut acc = [0f32; 8];
        let mut chunks = row.chunks_exact(8);
        for c in chunks.by_ref() {
            for l in 0..8 {
                acc[l] += c[l] * c[l];
            }
        }
        let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
        let sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
        let inv = 1.0 / (sum / d as f32 + eps).sqrt();
        for ((o, v), w) in dst.iter_mut().zip(row).zip(weight) {
            *o = v * inv * w;
        }
    }
    out
}

/// `silu(gate) * up`, element by element, into `gate`.
pub fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `x += y`.
pub fn add_assign(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// The values of an evaluated, contiguous float32 array (weights the host path reads in place).
pub fn values(a: &Array) -> Result<&[f32]> {
    if a.dtype() != Dtype::Float32 {
        bail!("the host path reads float32, not {:?}", a.dtype());
    }
    Ok(a.try_as_slice::<f32>()?)
}

/// A block's values as a host vector (evaluating and making it contiguous as needed).
pub fn to_host(a: &Array) -> Result<Vec<f32>> {
    let a = if a.dtype() == Dtype::Float32 { a.clone() } else { a.as_dtype(Dtype::Float32)? };
    in_order(&a)
}

/// Token ids of `tokens` (any integer dtype, any shape), in order.
pub fn token_ids(tokens: &Array) -> Result<Vec<i32>> {
    let t = if tokens.dtype() == Dtype::Int32 { tokens.clone() } else { tokens.as_dtype(Dtype::Int32)? };
    in_order(&t)
}

/// Elements in logical order: read in place when row-contiguous, else through a contiguous copy.
fn in_order<T: mlx_rs::ArrayElement + Clone>(a: &Array) -> Result<Vec<T>> {
    a.eval()?;
    if let Ok(v) = a.try_as_slice::<T>() {
        return Ok(v.to_vec());
    }
    let c = a.contiguous()?;
    c.eval()?;
    Ok(c.try_as_slice::<T>()?.to_vec())
}
