//! `x W^T` for blocks of rows (16 a thread block's tile), each row reduced in one fixed order
//! whatever the block's row count, against an affine-quantized weight (`affine_rows.cu`)
//! or a float one (`dense_rows.cu`), on CUDA. MLX CUDA picks a different kernel by the
//! number of rows (quantized vector and tiled kernels, cuBLAS algorithms), each with its own
//! summation order, so in bf16 a T=2 verify differs from the two single-token steps it stands for
//! and a B8 row from the same row alone (issue 41: 216,412 of 294,912 logits differed on the
//! H200). This kernel serves every projection, LM head included, of every block on the invariant
//! block route ([`crate::model::routes::BlockRoute::Invariant`]; a step, a verify, a prompt
//! read's piece), which the exactness gate chooses when it finds the batched route inexact.
//!
//! The lab's `checks::row_invariant_check` holds it to a float64 host product and to itself:
//! every row of a block must equal, bit for bit, the same row run alone (`cohort-lab device
//! --check-invariance`).

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};
use crate::model::config::QuantSpec;

const SOURCE: &str = include_str!("affine_rows.cu");
const DENSE_SOURCE: &str = include_str!("dense_rows.cu");
/// The tensor-core kernel's body (the lab builds it its own way to time against).
pub const MMA_SOURCE: &str = include_str!("affine_mma.cu");
/// The affine dot product it shares with the MoE expert kernels.
const HEADER: (&str, &str) = ("affine_dot.cuh", include_str!("affine_dot.cuh"));

/// Rows a thread block takes (a B8 verify's 16 positions); a launch takes as many tiles of them
/// as its rows need (a prompt read's piece on the invariant route), each computed as a launch of
/// just its rows would be.
pub const TILE_ROWS: i32 = 16;

/// Rows a launch takes at most: tiles on the grid's z axis.
const MAX_ROWS: i32 = TILE_ROWS * 65_535;

/// Warps in a thread block.
const WARPS: i32 = 8;

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new("cohort_affine_rows", "affine_rows.cu", &["x", "w", "s", "b"], &["y"], SOURCE, Some(HEADER))
    })
}

fn mma_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new("cohort_affine_mma", "affine_mma.cu", &["x", "w", "s", "b"], &["y"], MMA_SOURCE, None)
    })
}

/// Words of a channel's row a lane of the tensor-core kernel loads a span (`affine_mma.cu`):
/// the widest of 4, 2, 1 for which the row is whole spans, a lane's codes lie in one group and
/// fill whole 16-byte loads of x. By the weight's shape alone, never by the block's rows; `None`
/// where no width fits (the scalar kernel serves those).
fn mma_lane_words(input: i32, spec: QuantSpec) -> Option<i32> {
    let per_word = 32 / spec.bits;
    [4, 2, 1].into_iter().find(|&lw| {
        let codes = lw * per_word;
        input % (4 * codes) == 0 && spec.group_size % codes == 0 && codes % 8 == 0
    })
}

/// 8-channel tiles a block of the tensor-core kernel takes: by the width alone. A wide product (an
/// LM head) has blocks enough to take several, each reading x once for all of them.
fn mma_tiles(out: i32) -> i32 {
    if out >= 65_536 {
        4
    } else if out >= 8_192 {
        2
    } else {
        1
    }
}

/// Warps of a tensor-core block, which share its tiles' k axis: as many of its spans as there
/// are, up to [`WARPS`]. By the weight's shape alone, never by the block's rows, so a row's sums
/// meet in the same order at every block size.
fn mma_split(input: i32, lw: i32, spec: QuantSpec) -> i32 {
    let spans = input / (4 * lw * (32 / spec.bits));
    spans.clamp(1, WARPS)
}

/// How a launch lays out its blocks: `channels` output channels a block, `warps` warps a block.
#[derive(Clone, Copy)]
struct Blocks {
    channels: i32,
    warps: i32,
}

impl Blocks {
    /// The scalar kernels' layout: [`WARPS`] warps a block, each with its own `cpw` channels.
    fn warp_channels(cpw: i32) -> Self {
        Blocks { channels: WARPS * cpw, warps: WARPS }
    }
}

fn dense_kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new("cohort_dense_rows", "dense_rows.cu", &["x", "w"], &["y"], DENSE_SOURCE, Some(HEADER))
    })
}

fn floating(dtype: Dtype) -> bool {
    matches!(dtype, Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16)
}

/// Output channels a warp takes: by the weight's width alone, never by the block's rows, so a
/// row meets the same code at every block size. A wide product (an LM head) has warps enough
/// to take four channels each, which reads each value of x once for four weight rows.
fn channels_per_warp(out: i32) -> i32 {
    if out >= 16_384 { 4 } else { 1 }
}

/// Whether the kernel takes a product of `rows` rows of `dtype` over `input` features against a
/// weight quantized as `spec`: on CUDA (it has no other backend), any block the grid holds, 4- or 8-bit
/// codes in whole groups.
pub fn serves_affine(rows: i32, input: i32, spec: QuantSpec, dtype: Dtype) -> bool {
    crate::platform::backend::Backend::is_cuda() && holds_affine(rows, input, spec, dtype)
}

fn holds_affine(rows: i32, input: i32, spec: QuantSpec, dtype: Dtype) -> bool {
    let QuantSpec { bits, group_size: g } = spec;
    (1..=MAX_ROWS).contains(&rows)
        && matches!(bits, 4 | 8)
        && g > 0
        && g % (32 / bits) == 0
        && input > 0
        && input % g == 0
        && floating(dtype)
}

/// Whether the dense kernel takes a product of `rows` rows of `dtype` over `input` features
/// against a float weight of `weight` dtype: on CUDA, any block the grid holds, whole 16-byte loads.
pub fn serves_dense(rows: i32, input: i32, weight: Dtype, dtype: Dtype) -> bool {
    crate::platform::backend::Backend::is_cuda() && holds_dense(rows, input, weight, dtype)
}

fn holds_dense(rows: i32, input: i32, weight: Dtype, dtype: Dtype) -> bool {
    (1..=MAX_ROWS).contains(&rows) && input > 0 && input % 8 == 0 && floating(weight) && floating(dtype)
}

/// `x W^T` for `x` [.., input] (in tiles of [`TILE_ROWS`] rows) and a float weight `w`
/// [out, input]: [.., out] in x's dtype.
pub fn dense_product(x: &Array, w: &Array) -> Result<Array> {
    let shape = x.shape();
    let input = shape[shape.len() - 1];
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    if !(holds_dense(rows, input, w.dtype(), x.dtype()) && w.ndim() == 2 && w.shape()[1] == input) {
        bail!(
            "the row-invariant dense product kernel does not fit x {shape:?} ({:?}) against w {:?} ({:?})",
            x.dtype(),
            w.shape(),
            w.dtype()
        );
    }
    let cpw = channels_per_warp(w.shape()[0]);
    launch(dense_kernel()?, x, &[w], w.shape()[0], Blocks::warp_channels(cpw), &[("CPW", cpw)])
}

/// The launch every kernel here shares: a block of `layout.warps` warps for each
/// `layout.channels` channels, every leading axis of x one run of rows, the result in x's
/// leading shape. x goes in as it is and the result comes out in its final shape: a flattening
/// reshape each side would be two more nodes a product for MLX's host to hand over, ~240 a step
/// at the real geometry. The kernels' K and N are set here; `more` adds a kernel's own constants.
fn launch(
    kernel: &CudaKernel,
    x: &Array,
    weight: &[&Array],
    out: i32,
    layout: Blocks,
    more: &[(&str, i32)],
) -> Result<Array> {
    let shape = x.shape();
    let input = shape[shape.len() - 1];
    let ints: Vec<(&str, i32)> = [("K", input), ("N", out)].into_iter().chain(more.iter().copied()).collect();
    let Blocks { channels, warps } = layout;
    let blocks = (out + channels - 1) / channels;
    let mut out_shape = shape[..shape.len() - 1].to_vec();
    out_shape.push(out);
    // `--product-views` (bench-step) puts the two reshapes back, to time them.
    let views = crate::model::routes::current().product_views;
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    let flat = if views { Some(x.reshape(&[rows, input])?) } else { None };
    let tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    let launch = Launch {
        outputs: vec![(if views { vec![rows, out] } else { out_shape.clone() }, x.dtype())],
        // MLX counts the grid in threads.
        grid: [32, blocks * warps, tiles],
        threads: [32, warps, 1],
        ints: &ints,
        bools: &[],
    };
    let inputs: Vec<&Array> = std::iter::once(flat.as_ref().unwrap_or(x)).chain(weight.iter().copied()).collect();
    let y = kernel.apply(&inputs, &launch)?.pop().expect("one output");
    Ok(if views { y.reshape(&out_shape)? } else { y })
}

/// `x W^T` for `x` [.., input] (in tiles of [`TILE_ROWS`] rows) and the packed weight `w`
/// [out', input * bits / 32] with `scales` and `biases` [out', input / group], of which the first
/// `out` rows are the projection's (a weight padded at load has more): [.., out] in x's dtype.
pub fn affine_product(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: &Array,
    spec: QuantSpec,
    out: i32,
) -> Result<Array> {
    let shape = x.shape();
    let input = shape[shape.len() - 1];
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    let QuantSpec { bits, group_size: g } = spec;
    let fits = holds_affine(rows, input, spec, x.dtype())
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
    if crate::model::routes::current().mma_products
        && let Some(product) = affine_product_mma(x, w, scales, biases, spec, out)
    {
        return product;
    }
    let cpw = channels_per_warp(out);
    launch(
        kernel()?,
        x,
        &[w, scales, biases],
        out,
        Blocks::warp_channels(cpw),
        &[("CPW", cpw), ("BITS", bits), ("G", g)],
    )
}

/// The tensor-core kernel's product (`affine_mma.cu`), for a bf16 block whose weight
/// shape it takes; `None` where it does not (the caller has checked the rest of the fit). Served
/// by [`affine_product`] where the routes ask for it; timed beside it by `cohort device
/// --time-invariance` either way.
pub fn affine_product_mma(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: &Array,
    spec: QuantSpec,
    out: i32,
) -> Option<Result<Array>> {
    mma_product_with(mma_kernel, x, [w, scales, biases], spec, out)
}

/// [`affine_product_mma`] through another build of the tensor-core kernel (the lab times the kernel
/// as its calls were before they were made cheaper, `bench-step --node-costs`).
pub fn mma_product_with(
    kernel: fn() -> Result<&'static CudaKernel>,
    x: &Array,
    weight: [&Array; 3],
    spec: QuantSpec,
    out: i32,
) -> Option<Result<Array>> {
    let input = x.shape()[x.ndim() - 1];
    let lw = mma_lane_words(input, spec).filter(|_| x.dtype() == Dtype::Bfloat16)?;
    let nt = mma_tiles(out);
    let ks = mma_split(input, lw, spec);
    let constants = [("BITS", spec.bits), ("G", spec.group_size), ("LW", lw), ("NT", nt), ("KS", ks)];
    let layout = Blocks { channels: 8 * nt, warps: ks };
    Some(kernel().and_then(|k| launch(k, x, &weight, out, layout, &constants)))
}

/// The scalar kernel (`affine_rows.cu`) with `cpw` output channels a warp, for timing it
/// beside what [`affine_product`] serves (`cohort-lab device --time-invariance`); not row-checked
/// here.
pub fn affine_product_cpw(
    x: &Array,
    w: &Array,
    scales: &Array,
    biases: &Array,
    spec: QuantSpec,
    cpw: i32,
) -> Result<Array> {
    let shape = x.shape();
    let input = shape[shape.len() - 1];
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    if !holds_affine(rows, input, spec, x.dtype()) || ![1, 2, 4, 8].contains(&cpw) {
        bail!("no row-invariant product of x {shape:?} at {cpw} channels a warp");
    }
    let constants = [("CPW", cpw), ("BITS", spec.bits), ("G", spec.group_size)];
    launch(kernel()?, x, &[w, scales, biases], w.shape()[0], Blocks::warp_channels(cpw), &constants)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_takes_step_sized_blocks_of_whole_groups_only() {
        let q4 = QuantSpec { bits: 4, group_size: 32 };
        assert!(holds_affine(1, 576, q4, Dtype::Bfloat16));
        assert!(holds_affine(16, 576, q4, Dtype::Bfloat16));
        assert!(holds_affine(2048, 576, q4, Dtype::Bfloat16), "a prompt read's piece, in tiles");
        assert!(!holds_affine(MAX_ROWS + 1, 576, q4, Dtype::Bfloat16), "more tiles than the grid holds");
        assert!(!holds_affine(0, 576, q4, Dtype::Bfloat16));
        assert!(!holds_affine(2, 570, q4, Dtype::Bfloat16), "a partial group");
        assert!(!holds_affine(2, 576, QuantSpec { bits: 3, group_size: 32 }, Dtype::Bfloat16));
        assert!(!holds_affine(2, 576, q4, Dtype::Int32));
    }

    #[test]
    fn the_dense_kernel_takes_whole_loads_of_float_weights_only() {
        assert!(holds_dense(16, 576, Dtype::Bfloat16, Dtype::Bfloat16));
        assert!(holds_dense(1, 64, Dtype::Float32, Dtype::Bfloat16));
        assert!(holds_dense(17, 576, Dtype::Bfloat16, Dtype::Bfloat16));
        assert!(!holds_dense(MAX_ROWS + 1, 576, Dtype::Bfloat16, Dtype::Bfloat16));
        assert!(!holds_dense(2, 572, Dtype::Bfloat16, Dtype::Bfloat16), "not a whole 16-byte load");
        assert!(!holds_dense(2, 576, Dtype::Uint32, Dtype::Bfloat16), "packed codes");
    }

    #[test]
    fn the_kernel_serves_only_cuda() {
        if !crate::platform::backend::Backend::is_cuda() {
            assert!(!serves_affine(2, 576, QuantSpec { bits: 4, group_size: 32 }, Dtype::Bfloat16));
        }
    }
}
