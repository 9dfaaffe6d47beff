//! The MoE router's softmax, top-k and renormalisation as one CUDA kernel
//! (`moe_router.cu`): on MLX's CUDA backend each node costs host time whatever its size
//! (docs/benchmarks.md), and the ops route builds five kernel nodes per MoE layer for this. The
//! ops route in `moe_graph` stays the CPU and Metal route and the fallback (`COHORT_ROUTER_KERNEL=0`);
//! `moe_check::check_router` compares the kernel with a float64 host reference.

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};

const SOURCE: &str = include_str!("moe_router.cu");

/// The kernel's block holds one thread per expert.
const MAX_EXPERTS: i32 = 1024;

/// Tokens one launch can route: each is a block along the grid's y axis, which CUDA caps. A
/// larger block of tokens (a long prefill chunk) takes the ops route.
pub const MAX_TOKENS: i32 = 65535;

/// The router as one kernel (`Routes::router_kernel`).
pub fn enabled() -> bool {
    crate::model::routes::current().router_kernel
}

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new("cohort_moe_router", "moe_router.cu", &["logits"], &["indices", "scores"], SOURCE, None)
    })
}

/// The top `k` of the first `experts` columns of `logits` [N, W]: expert ids [N, k] uint32 in
/// descending order of probability, and their softmax probabilities [N, k] float32, renormalised
/// to sum to one when `renormalise`.
pub fn route(logits: &Array, experts: i32, k: i32, renormalise: bool) -> Result<(Array, Array)> {
    let shape = logits.shape();
    if shape.len() != 2 || shape[0] > MAX_TOKENS || shape[1] < experts || experts > MAX_EXPERTS || k < 1 || k > experts
    {
        bail!("the router kernel does not fit logits {shape:?} with {experts} experts, top {k}");
    }
    let n = shape[0];
    let block = (experts + 31) / 32 * 32;
    let launch = Launch {
        outputs: vec![(vec![n, k], Dtype::Uint32), (vec![n, k], Dtype::Float32)],
        grid: [block, n, 1],
        threads: [block, 1, 1],
        ints: &[("E", experts), ("K", k)],
        bools: &[("NORM", renormalise)],
    };
    let mut out = kernel()?.apply(&[logits], &launch)?;
    let scores = out.pop().expect("two outputs");
    let indices = out.pop().expect("two outputs");
    Ok((indices, scores))
}
