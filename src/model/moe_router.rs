//! The MoE router's softmax, top-k and renormalisation as one CUDA kernel
//! (`kernels/moe_router.cu`): on MLX's CUDA backend each node costs host time whatever its size
//! (docs/benchmarks.md), and the ops route builds five kernel nodes per MoE layer for this. The
//! ops route in `moe_graph` stays the CPU and Metal route and the fallback (`COHORT_ROUTER_KERNEL=0`);
//! `check` compares the kernel with a float64 host reference (`cohort device --check-kernels`).

use std::sync::OnceLock;

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::compiled::Switch;
use super::cuda_kernel::{self, CudaKernel, Launch};
use super::ops::host_f32;
use crate::engine::sampler::Rng;

const SOURCE: &str = include_str!("../../kernels/moe_router.cu");

/// The kernel's block holds one thread per expert.
const MAX_EXPERTS: i32 = 1024;

static SWITCH: Switch = Switch::new("COHORT_ROUTER_KERNEL");

/// Force the kernel on or off (`None`: back to the default, on for the CUDA backend only).
pub fn set_enabled(on: Option<bool>) {
    SWITCH.set(on);
}

pub fn enabled() -> bool {
    SWITCH.enabled()
}

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: OnceLock<std::result::Result<CudaKernel, String>> = OnceLock::new();
    cuda_kernel::once(&KERNEL, || {
        CudaKernel::new("cohort_moe_router", "moe_router.cu", &["logits"], &["indices", "scores"], SOURCE)
    })
}

/// The top `k` of the first `experts` columns of `logits` [N, W]: expert ids [N, k] uint32 in
/// descending order of probability, and their softmax probabilities [N, k] float32, renormalised
/// to sum to one when `renormalise`.
pub fn route(logits: &Array, experts: i32, k: i32, renormalise: bool) -> Result<(Array, Array)> {
    let shape = logits.shape();
    if shape.len() != 2 || shape[1] < experts || experts > MAX_EXPERTS || k < 1 || k > experts {
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

/// What `check` found: whether every token's experts came out as the reference's, in order, and
/// the largest score difference relative to the largest score.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RouterReport {
    pub indices_equal: bool,
    pub scores: f64,
}

/// The router on random logits [n, experts + extra] in `dtype` against a float64 host reference
/// (softmax, top k by probability with ties to the lower id, renormalised).
pub fn check(n: i32, experts: i32, extra: i32, k: i32, dtype: Dtype, seed: u64) -> Result<RouterReport> {
    let width = experts + extra;
    let mut rng = Rng::new(seed);
    let host: Vec<f32> = (0..n * width).map(|_| (rng.next_f64() as f32 - 0.5) * 8.0).collect();
    let logits = Array::from_slice(&host, &[n, width]).as_dtype(dtype)?;
    logits.eval()?;
    let seen = host_f32(&logits)?;
    let (indices, scores) = route(&logits, experts, k, true)?;
    let got_ids: Vec<u32> = super::ops::host_u32(&indices)?;
    let got_scores = host_f32(&scores)?;
    let (mut equal, mut worst, mut largest) = (true, 0.0f64, 0.0f64);
    for t in 0..n as usize {
        let row: Vec<f64> = seen[t * width as usize..][..experts as usize].iter().map(|&v| v as f64).collect();
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = row.iter().map(|v| (v - m).exp()).sum();
        let probs: Vec<f64> = row.iter().map(|v| (v - m).exp() / total).collect();
        let mut order: Vec<usize> = (0..experts as usize).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        let kept: f64 = order[..k as usize].iter().map(|&i| probs[i]).sum();
        for (j, &id) in order[..k as usize].iter().enumerate() {
            let at = t * k as usize + j;
            equal &= got_ids[at] as usize == id;
            let want = probs[id] / kept;
            worst = worst.max((got_scores[at] as f64 - want).abs());
            largest = largest.max(want);
        }
    }
    Ok(RouterReport { indices_equal: equal, scores: worst / largest.max(1e-30) })
}
