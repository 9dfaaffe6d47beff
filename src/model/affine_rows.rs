//! `x W^T` for blocks of 1 to 16 rows against an affine-quantized weight, each row reduced in
//! one fixed order whatever the block's row count (`kernels/affine_rows.cu`, CUDA). MLX CUDA
//! picks a different quantized kernel by the number of rows, each with its own summation order,
//! so in bf16 a T=2 verify differs from the two single-token steps it stands for and a B8 row
//! from the same row alone (issue 41: 216,412 of 294,912 logits differed on the H200). This
//! kernel serves every projection of a step-sized block, LM head included, on the invariant
//! linear route ([`super::linear::LinearRoute::Invariant`]), which the exactness gate chooses
//! when it finds the batched route inexact.
//!
//! [`check`] holds it to a float64 host product and to itself: every row of a block must equal,
//! bit for bit, the same row run alone (`cohort device --check-invariance`).

use std::sync::OnceLock;

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::config::QuantSpec;
use super::cuda_kernel::{self, CudaKernel, Launch};
use super::ops::{host_f32, relative_error, slice_axis};

const SOURCE: &str = include_str!("../../kernels/affine_rows.cu");
/// The affine dot product it shares with the MoE expert kernels.
const HEADER: (&str, &str) = ("affine_dot.cuh", include_str!("../../kernels/affine_dot.cuh"));

/// Rows a launch takes at most (a B8 verify's 16 positions).
pub const MAX_ROWS: i32 = 16;

/// Warps in a thread block.
const WARPS: i32 = 8;

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: OnceLock<std::result::Result<CudaKernel, String>> = OnceLock::new();
    cuda_kernel::once(&KERNEL, || {
        CudaKernel::new("cohort_affine_rows", "affine_rows.cu", &["x", "w", "s", "b"], &["y"], SOURCE, Some(HEADER))
    })
}

/// Output channels a warp takes: by the weight's width alone, never by the block's rows, so a
/// row meets the same code at every block size. A wide product (an LM head) has warps enough
/// to take four channels each, which reads each value of x once for four weight rows.
fn channels_per_warp(out: i32) -> i32 {
    if out >= 16_384 { 4 } else { 1 }
}

/// Whether the kernel takes a product of `rows` rows of `dtype` over `input` features against a
/// weight quantized as `spec`: on CUDA (it has no other backend), a step-sized block, 4- or 8-bit
/// codes in whole groups.
pub fn serves(rows: i32, input: i32, spec: QuantSpec, dtype: Dtype) -> bool {
    crate::engine::runtime::Backend::is_cuda() && holds(rows, input, spec, dtype)
}

fn holds(rows: i32, input: i32, spec: QuantSpec, dtype: Dtype) -> bool {
    let QuantSpec { bits, group_size: g } = spec;
    (1..=MAX_ROWS).contains(&rows)
        && matches!(bits, 4 | 8)
        && g > 0
        && g % (32 / bits) == 0
        && input > 0
        && input % g == 0
        && matches!(dtype, Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16)
}

/// `x W^T` for `x` [.., input] (at most [`MAX_ROWS`] rows in all) and the packed weight `w`
/// [out', input * bits / 32] with `scales` and `biases` [out', input / group], of which the first
/// `out` rows are the projection's (a weight padded at load has more): [.., out] in x's dtype.
pub fn product(x: &Array, w: &Array, scales: &Array, biases: &Array, spec: QuantSpec, out: i32) -> Result<Array> {
    let shape = x.shape();
    let input = shape[shape.len() - 1];
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    let QuantSpec { bits, group_size: g } = spec;
    let fits = holds(rows, input, spec, x.dtype())
        && w.dtype() == Dtype::Uint32
        && w.ndim() == 2
        && w.shape()[1] == input * bits / 32
        && (1..=w.shape()[0]).contains(&out)
        && scales.shape() == [w.shape()[0], input / g]
        && biases.shape() == scales.shape()
        && scales.dtype() == biases.dtype()
        && matches!(scales.dtype(), Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16);
    if !fits {
        bail!(
            "the row-invariant product kernel does not fit x {shape:?} ({:?}) against w {:?} ({:?}), scales {:?}, {bits}-bit g{g}, {out} outputs",
            x.dtype(),
            w.shape(),
            w.dtype(),
            scales.shape()
        );
    }
    let cpw = channels_per_warp(out);
    let blocks = (out + WARPS * cpw - 1) / (WARPS * cpw);
    let launch = Launch {
        outputs: vec![(vec![rows, out], x.dtype())],
        // MLX counts the grid in threads: a block of WARPS warps for each WARPS * cpw channels.
        grid: [32, blocks * WARPS, 1],
        threads: [32, WARPS, 1],
        ints: &[("K", input), ("N", out), ("BITS", bits), ("G", g), ("CPW", cpw)],
        bools: &[],
    };
    let flat = x.reshape(&[rows, input])?;
    let y = kernel()?.apply(&[&flat, w, scales, biases], &launch)?.pop().expect("one output");
    let mut out_shape = shape[..shape.len() - 1].to_vec();
    out_shape.push(out);
    Ok(y.reshape(&out_shape)?)
}

/// What [`check`] found.
#[derive(Debug, Clone, Copy)]
pub struct RowsReport {
    /// Largest difference from the float64 product, relative to its largest value.
    pub relative_error: f64,
    /// Rows of the block whose output differs in any bit from the same row run alone.
    pub rows_differing: usize,
}

/// A random `rows` x `input` block in `dtype` against a random `out` x `input` weight quantized
/// as `spec`: the kernel's product against a float64 product of the same rounded inputs and
/// dequantized weight, and each row of the block against that row alone.
pub fn check(rows: i32, input: i32, out: i32, spec: QuantSpec, dtype: Dtype, seed: u64) -> Result<RowsReport> {
    let (wkey, xkey) = mlx_rs::random::split(&mlx_rs::random::key(seed)?, 2)?;
    let dense = mlx_rs::random::uniform::<f32, f32>(-1.0, 1.0, &[out, input], Some(&wkey))?.as_dtype(dtype)?;
    let (w, scales, biases) = mlx_rs::ops::quantize(&dense, spec.group_size, spec.bits)?;
    let x = mlx_rs::random::uniform::<f32, f32>(-1.0, 1.0, &[rows, input], Some(&xkey))?.as_dtype(dtype)?;
    let weight = mlx_rs::ops::dequantize(&w, &scales, &biases, spec.group_size, spec.bits)?;
    let got = product(&x, &w, &scales, &biases, spec, out)?;
    let (xs, ws, ys) = (host_f32(&x)?, host_f32(&weight)?, host_f32(&got)?);
    let (k, n) = (input as usize, out as usize);
    let want: Vec<f64> = (0..rows as usize * n)
        .map(|e| {
            let (r, c) = (e / n, e % n);
            (0..k).map(|i| xs[r * k + i] as f64 * ws[c * k + i] as f64).sum()
        })
        .collect();
    let mut rows_differing = 0;
    for r in 0..rows {
        let alone = host_f32(&product(&slice_axis(&x, 0, r, r + 1)?, &w, &scales, &biases, spec, out)?)?;
        let in_block = &ys[r as usize * n..(r as usize + 1) * n];
        if alone.iter().zip(in_block).any(|(a, b)| a.to_bits() != b.to_bits()) {
            rows_differing += 1;
        }
    }
    Ok(RowsReport { relative_error: relative_error(&ys, &want), rows_differing })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_takes_step_sized_blocks_of_whole_groups_only() {
        let q4 = QuantSpec { bits: 4, group_size: 32 };
        assert!(holds(1, 576, q4, Dtype::Bfloat16));
        assert!(holds(16, 576, q4, Dtype::Bfloat16));
        assert!(!holds(17, 576, q4, Dtype::Bfloat16), "a prefill chunk keeps MLX's kernels");
        assert!(!holds(0, 576, q4, Dtype::Bfloat16));
        assert!(!holds(2, 570, q4, Dtype::Bfloat16), "a partial group");
        assert!(!holds(2, 576, QuantSpec { bits: 3, group_size: 32 }, Dtype::Bfloat16));
        assert!(!holds(2, 576, q4, Dtype::Int32));
    }

    #[test]
    fn the_kernel_serves_only_cuda() {
        if !crate::engine::runtime::Backend::is_cuda() {
            assert!(!serves(2, 576, QuantSpec { bits: 4, group_size: 32 }, Dtype::Bfloat16));
        }
    }
}
