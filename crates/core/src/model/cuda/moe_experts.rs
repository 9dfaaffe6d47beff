//! The MoE block after routing as two CUDA kernels (`moe_experts_up.cu`,
//! `moe_experts_down.cu`): the routed and shared experts' stacked gate/up products with
//! SwiGLU in one launch, their down products with the router's weights, the shared expert's
//! sigmoid gate and the sum in the other. On MLX's CUDA backend a step is bound by the host's
//! cost per node (docs/benchmarks.md), and the ops route builds about eight kernel nodes and as
//! many views here per MoE layer.
//!
//! On by default where MLX drives CUDA, for every block that fits one launch ([`fits`]): with
//! several output channels a warp for blocks of more than two tokens they beat MLX's
//! `gather_qmm` at B1, at the B8 verify's and AR step's 16 and 8 tokens, and at 512-token
//! prefill chunks on the H200 (docs/benchmarks.md, session 30). `COHORT_MOE_KERNEL=0` turns them
//! off. `moe_check::check_experts` compares them with a float64 host product (`cohort device
//! --check-kernels`); the ops route stays the reference and the route on every other backend.

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};
use crate::model::config::QuantSpec;
use crate::model::storage::Storage;

const UP_SOURCE: &str = include_str!("moe_experts_up.cu");
const UP_MMA_SOURCE: &str = include_str!("moe_experts_up_mma.cu");
const DOWN_SOURCE: &str = include_str!("moe_experts_down.cu");
/// The affine dot product both kernels share.
const HEADER: (&str, &str) = ("affine_dot.cuh", include_str!("affine_dot.cuh"));
const UP_INPUTS: [&str; 8] = ["x", "ids", "gu_w", "gu_s", "gu_b", "sgu_w", "sgu_s", "sgu_b"];
const DOWN_INPUTS: [&str; 10] = ["act", "ids", "scores", "gate", "d_w", "d_s", "d_b", "sd_w", "sd_s", "sd_b"];

/// Warps in a thread block.
const WARPS: i32 = 8;

/// Output channels one warp of the down kernel takes, for a block of `n` tokens. With one
/// channel a warp every warp reads its token's whole input row for a single weight row, and a
/// float32 input row holds eight times a 4-bit weight row's bytes: at a B8 verify's 16 tokens
/// the kernel ran at 0.34 TB/s (docs/benchmarks.md, session 30). Four channels a warp read each
/// input value once for all four (4.5x faster there). A block of a token or two keeps one, since
/// its grid would otherwise hold too few warps. (The up kernel's bf16 input is a quarter of
/// that; two channels a warp made it slower, so it keeps one warp per channel.)
fn down_channels_per_warp(n: i32) -> i32 {
    if n <= 2 { 1 } else { 4 }
}

/// On only where MLX drives CUDA: the kernels have no other backend, so the switch cannot send
/// a CPU or Metal run into a launch that fails.
pub fn enabled() -> bool {
    crate::model::routes::current().moe_kernel && crate::platform::backend::Backend::is_cuda()
}

/// Tokens one launch takes at most (a longer prefill chunk takes the ops route).
pub const MAX_TOKENS: i32 = 1024;

/// Whether a block of `n` tokens with `k` experts each fits one launch: the up kernel's grid has
/// a block per (token, slot) along z, which CUDA caps at 65535.
pub fn fits(n: i32, k: i32) -> bool {
    (1..=MAX_TOKENS).contains(&n) && k >= 1 && (k + 1) * n <= 65535
}

fn up_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new("cohort_moe_experts_up", "moe_experts_up.cu", &UP_INPUTS, &["act"], UP_SOURCE, Some(HEADER))
    })
}

fn up_mma_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new("cohort_moe_experts_up_mma", "moe_experts_up_mma.cu", &UP_INPUTS, &["act"], UP_MMA_SOURCE, None)
    })
}

/// Tokens a block may hold for the tensor-core up kernel: a block finds an expert's tokens by
/// scanning every earlier pair's expert, which is cheap at a verify's 16 tokens and not at a
/// prefill chunk's hundreds (those take the scalar kernel).
pub const MMA_MAX_TOKENS: i32 = 16;

/// Whether the tensor-core up kernel (`moe_experts_up_mma.cu`) takes a block of `n`
/// tokens of dtype `x` with experts of `h` inputs at `spec`, scales and biases of dtype `scales`:
/// bf16 in (the mma's inputs), 4-bit codes, whole 128-input spans and a lane's 32 codes inside
/// one group. Anything else takes the scalar kernel.
pub fn up_mma_fits(n: i32, h: i32, spec: QuantSpec, x: Dtype, scales: Dtype) -> bool {
    (1..=MMA_MAX_TOKENS).contains(&n)
        && spec.bits == 4
        && h % 128 == 0
        && spec.group_size % 32 == 0
        && x == Dtype::Bfloat16
        && scales == Dtype::Bfloat16
}

fn down_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new(
            "cohort_moe_experts_down",
            "moe_experts_down.cu",
            &DOWN_INPUTS,
            &["y"],
            DOWN_SOURCE,
            Some(HEADER),
        )
    })
}

/// The four quantized matrices the kernels read, each `[weight, scales, biases]`: the experts'
/// stacked [gate | up] [E, 2I, ·] and down [E, H, ·], the shared expert's stacked [gate | up]
/// [2IS, ·] and down [H, ·], all at one quantization.
#[derive(Clone)]
pub struct ExpertWeights {
    pub gate_up: [Array; 3],
    pub down: [Array; 3],
    pub shared_gate_up: [Array; 3],
    pub shared_down: [Array; 3],
    pub spec: QuantSpec,
}

impl ExpertWeights {
    /// From the four projections' arrays and storage, in the order above; `None` unless all
    /// four are quantized alike (the kernels read one layout), so the caller keeps the ops route.
    pub fn of(parts: [(&[Array], Storage); 4]) -> Option<ExpertWeights> {
        let spec = parts[0].1.packed_as_stored()?;
        if parts.iter().any(|(_, s)| s.packed_as_stored() != Some(spec)) || ![4, 8].contains(&spec.bits) {
            return None;
        }
        // A dense copy after the three (a narrow projection's, on CUDA) is for the ops route.
        let three = |a: &[Array]| -> Option<[Array; 3]> { <[Array; 3]>::try_from(a.get(..3)?.to_vec()).ok() };
        Some(ExpertWeights {
            gate_up: three(parts[0].0)?,
            down: three(parts[1].0)?,
            shared_gate_up: three(parts[2].0)?,
            shared_down: three(parts[3].0)?,
            spec,
        })
    }
}

/// The block's output [N, H] from its input x [N, H], the router's experts `ids` [N, K] and
/// weights `scores` [N, K], and `gate` [N, GW], whose last column is the shared expert's gate
/// logit.
pub fn apply(x: &Array, ids: &Array, scores: &Array, gate: &Array, w: &ExpertWeights) -> Result<Array> {
    let QuantSpec { bits, group_size: g } = w.spec;
    let per_word = 32 / bits;
    let (xs, gu, dn, sgu, sdn) =
        (x.shape(), w.gate_up[0].shape(), w.down[0].shape(), w.shared_gate_up[0].shape(), w.shared_down[0].shape());
    let fits_shapes = xs.len() == 2
        && ids.shape().len() == 2
        && gu.len() == 3
        && dn.len() == 3
        && sgu.len() == 2
        && sdn.len() == 2
        && gate.shape().len() == 2;
    if !fits_shapes {
        bail!("the MoE expert kernels take 2-D activations and 3-D / 2-D weights (x {xs:?}, experts {gu:?})");
    }
    let (n, h, k) = (xs[0], xs[1], ids.shape()[1]);
    let (e, i, is) = (gu[0], gu[1] / 2, sgu[0] / 2);
    // Every size the kernels index by is checked here: a mismatch would read past a buffer.
    let floating = |d: Dtype| matches!(d, Dtype::Float32 | Dtype::Float16 | Dtype::Bfloat16);
    let scale_dtype = w.gate_up[1].dtype();
    // Packed codes, and scales and biases alike in shape and in one dtype, in all four matrices.
    let same_layout = |m: &[Array; 3]| {
        m[0].dtype() == Dtype::Uint32
            && m[2].shape() == m[1].shape()
            && m[1].dtype() == scale_dtype
            && m[2].dtype() == scale_dtype
    };
    let fits = fits(n, k)
        && [&w.gate_up, &w.down, &w.shared_gate_up, &w.shared_down].into_iter().all(same_layout)
        && floating(scale_dtype)
        && floating(x.dtype())
        && floating(scores.dtype())
        && floating(gate.dtype())
        && gate.shape()[1] >= 1
        && h % g == 0
        && i % g == 0
        && is % g == 0
        && g % per_word == 0
        && gu == [e, 2 * i, h / per_word]
        && dn == [e, h, i / per_word]
        && sgu == [2 * is, h / per_word]
        && sdn == [h, is / per_word]
        && ids.shape() == [n, k]
        && scores.shape() == [n, k]
        && gate.shape()[0] == n
        && w.gate_up[1].shape() == [e, 2 * i, h / g]
        && w.down[1].shape() == [e, h, i / g]
        && w.shared_gate_up[1].shape() == [2 * is, h / g]
        && w.shared_down[1].shape() == [h, is / g];
    if !fits {
        bail!(
            "the MoE expert kernels do not fit these shapes or dtypes (x {xs:?}, ids {:?}, gate/up {gu:?}, down {dn:?}, shared {sgu:?} / {sdn:?}, {bits}-bit g{g})",
            ids.shape()
        );
    }
    let ids = if ids.dtype() == Dtype::Uint32 { ids.clone() } else { ids.as_dtype(Dtype::Uint32)? };
    let width = i.max(is);
    let down_cpw = down_channels_per_warp(n);
    // MLX counts the grid in threads: a block of WARPS warps for each WARPS * cpw channels.
    let warps_for = |channels: i32, cpw: i32| (channels + WARPS * cpw - 1) / (WARPS * cpw) * WARPS;
    let sizes = [("H", h), ("I", i), ("IS", is), ("K", k), ("BITS", bits), ("G", g)];
    let on_tensor_cores =
        crate::model::routes::current().moe_up_mma && up_mma_fits(n, h, w.spec, x.dtype(), scale_dtype);
    let mma_sizes: Vec<(&str, i32)> = sizes.iter().copied().chain([("WARPS", WARPS)]).collect();
    let (up_kernel, up_grid, up_ints) = if on_tensor_cores {
        // A block of WARPS warps for each WARPS * 8 channels: a warp an 8-channel tile (the mma's
        // width) over the whole k axis.
        (up_mma_kernel()?, warps_for(width, 8), mma_sizes.as_slice())
    } else {
        (up_kernel()?, warps_for(width, 1), &sizes[..])
    };
    let up = Launch {
        outputs: vec![(vec![n, k + 1, width], Dtype::Float32)],
        grid: [32, up_grid, n * (k + 1)],
        threads: [32, WARPS, 1],
        ints: up_ints,
        bools: &[],
    };
    let [gw, gs, gb] = &w.gate_up;
    let [sw, ss, sb] = &w.shared_gate_up;
    let act = up_kernel.apply(&[x, &ids, gw, gs, gb, sw, ss, sb], &up)?.pop().expect("one output");
    let down_ints: Vec<(&str, i32)> = sizes.iter().copied().chain([("CPW", down_cpw)]).collect();
    let down = Launch {
        outputs: vec![(vec![n, h], x.dtype())],
        grid: [32, warps_for(h, down_cpw), n],
        threads: [32, WARPS, 1],
        ints: &down_ints,
        bools: &[],
    };
    let [dw, ds, db] = &w.down;
    let [tw, ts, tb] = &w.shared_down;
    let mut y = down_kernel()?.apply(&[&act, &ids, scores, gate, dw, ds, db, tw, ts, tb], &down)?;
    Ok(y.pop().expect("one output"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Routes that ask for the kernels send only a CUDA run to them: elsewhere the launch would
    /// fail.
    #[test]
    fn asking_for_the_kernels_takes_effect_only_on_cuda() {
        use crate::model::routes::{Routes, current, scoped};
        let cuda = crate::platform::backend::Backend::detect() == crate::platform::backend::Backend::Cuda;
        assert_eq!(scoped(Routes { moe_kernel: true, ..current() }, enabled), cuda);
    }

    /// The tensor-core up kernel takes only what its decode and spans handle: bf16 in, 4-bit
    /// codes, whole 128-input spans, a lane's 32 codes inside one group, at most 16 tokens.
    #[test]
    fn the_tensor_core_up_kernel_takes_only_the_blocks_it_decodes() {
        let q = |bits, group_size| QuantSpec { bits, group_size };
        let bf = Dtype::Bfloat16;
        assert!(up_mma_fits(16, 2048, q(4, 64), bf, bf));
        assert!(up_mma_fits(1, 128, q(4, 32), bf, bf));
        for (n, h, spec, x, scales) in [
            (17, 2048, q(4, 64), bf, bf),
            (0, 2048, q(4, 64), bf, bf),
            (16, 2048, q(8, 64), bf, bf),
            (16, 2112, q(4, 64), bf, bf),
            (16, 2048, q(4, 16), bf, bf),
            (16, 2048, q(4, 64), Dtype::Float32, bf),
            (16, 2048, q(4, 64), bf, Dtype::Float16),
        ] {
            assert!(!up_mma_fits(n, h, spec, x, scales), "{n} tokens, {h} inputs, {spec:?}, {x:?} / {scales:?}");
        }
    }

    /// The kernels read one affine layout: a dense part, or parts quantized differently, keep
    /// the block on the ops route.
    #[test]
    fn weights_of_mixed_storage_are_refused() {
        let a = || Array::from_slice(&[0u32], &[1]);
        let q4 = Storage::Quantized(QuantSpec { bits: 4, group_size: 64 });
        let q8 = Storage::Quantized(QuantSpec { bits: 8, group_size: 64 });
        let three = [a(), a(), a()];
        let one = [a()];
        assert!(ExpertWeights::of([(&three, q4), (&three, q4), (&three, q4), (&three, q4)]).is_some());
        assert!(ExpertWeights::of([(&three, q4), (&three, q8), (&three, q4), (&three, q4)]).is_none());
        assert!(ExpertWeights::of([(&three, q4), (&three, q4), (&one, Storage::Dense), (&three, q4)]).is_none());
        // CUDA's load layouts: a dense copy beside the codes is read past; padded codes are not
        // at the projection's width, so they are refused.
        let spec = QuantSpec { bits: 4, group_size: 64 };
        let four = [a(), a(), a(), a()];
        let with_dense = Storage::WithDense(spec);
        let w = ExpertWeights::of([(&three, q4), (&three, q4), (&four, with_dense), (&four, with_dense)]);
        assert!(w.is_some_and(|w| w.spec == spec));
        assert!(
            ExpertWeights::of([(&three, q4), (&three, q4), (&three, Storage::Padded(spec, 1)), (&three, q4)]).is_none()
        );
    }
}
