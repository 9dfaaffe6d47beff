//! A residual sum and the RMSNorm after it as one CUDA kernel (`add_rms_norm.cu`). Each
//! decoder layer does this twice (after its mixer and after its MLP, the second normed by the
//! next layer's input norm or the final norm): on MLX's CUDA backend a step is bound by the
//! host's cost per kernel node (docs/benchmarks.md), and the ops route builds two nodes each
//! time, 80 of a B1 step's ~680 kernels at the real geometry.
//!
//! Off by default: on the H200 a custom kernel's node costs the host about twice what the two
//! nodes of MLX's own it replaces do (16.3 against 8.6 us, `bench-step --node-costs`), and with
//! the kernel on the B1 step, the B8 verify and the B8 AR step were each 0.7-1.3 ms slower side
//! by side (docs/benchmarks.md, session 28). `COHORT_ADD_NORM_KERNEL=1` turns it on; the ops
//! route (`add`, then `fast::rms_norm`) serves otherwise, and for mixed dtypes and rows wider
//! than the kernel holds. The lab's `checks::add_norm_check` compares the kernel with a float64
//! host reference and with the ops route (`cohort-lab device --check-kernels`,
//! tests/kernels/add_norm.rs).

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};

const SOURCE: &str = include_str!("add_rms_norm.cu");
/// Rounding to the inputs' element type, which the body sees only as a pointer.
const HEADER: (&str, &str) = ("round_to.cuh", include_str!("round_to.cuh"));

/// Threads a block at most; each holds `D / THREADS` sums in registers.
const MAX_THREADS: i32 = 256;

/// Widest row the kernel takes (32 sums a thread).
pub const MAX_WIDTH: i32 = MAX_THREADS * 32;

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new("cohort_add_rms_norm", "add_rms_norm.cu", &["x", "r", "w"], &["h", "y"], SOURCE, Some(HEADER))
    })
}

/// Whether the kernel takes this sum: turned on (it is off by default), one dtype throughout,
/// the same shape on both sides and a row it holds.
pub fn serves(x: &Array, r: &Array, weight: &Array) -> bool {
    let d = weight.shape().last().copied().unwrap_or(0);
    crate::model::routes::current().add_norm_kernel
        && x.shape() == r.shape()
        && x.shape().last() == Some(&d)
        && weight.ndim() == 1
        && (1..=MAX_WIDTH).contains(&d)
        && x.dtype() == r.dtype()
        && x.dtype() == weight.dtype()
        && matches!(x.dtype(), Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16)
}

/// `h = x + r` and `rms_norm(h) * weight` in one launch (x, r [..., D], weight [D], one dtype).
pub fn add_rms_norm(x: &Array, r: &Array, weight: &Array, eps: f32) -> Result<(Array, Array)> {
    let shape = x.shape().to_vec();
    let d = weight.shape().last().copied().unwrap_or(0);
    if shape != r.shape() || shape.last() != Some(&d) || !(1..=MAX_WIDTH).contains(&d) {
        bail!("the add-norm kernel does not fit {shape:?} + {:?} normed by {:?}", r.shape(), weight.shape());
    }
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    let threads = ((d + 31) / 32 * 32).min(MAX_THREADS);
    let launch = Launch {
        outputs: vec![(shape.clone(), x.dtype()), (shape, x.dtype())],
        grid: [rows * threads, 1, 1],
        threads: [threads, 1, 1],
        ints: &[("D", d), ("THREADS", threads), ("EPS_BITS", eps.to_bits() as i32)],
        bools: &[],
    };
    let mut out = kernel()?.apply(&[x, r, weight], &launch)?;
    let y = out.pop().expect("two outputs");
    let h = out.pop().expect("two outputs");
    Ok((h, y))
}
