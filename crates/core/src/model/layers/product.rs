//! `x W^T` for a projection, dense or affine-quantized, shaped so MLX picks its fast kernels.
//!
//! Two facts about MLX's CUDA backend (0.32, measured on the H200, docs/benchmarks.md) shape
//! this:
//! - A quantized product reads `x` as a batch of matrices over every axis but the last two:
//!   a B8 verify's [8, 2, H] runs as 8 products of 2 rows, each reading the whole weight again
//!   (the lm_head alone took 1.64 ms of a verify that way). Flattened to [16, H] it reads the
//!   weight once, so every product here takes `x` as rows.
//! - When one group spans a whole row (`group_size >= in`, the test fixtures' 64-wide hidden
//!   size with 64-wide groups; never a real model's), a product of more than one row goes to a
//!   Hopper kernel that gave wrong and run-to-run different results (`device --check-kernels`:
//!   3 x 64 -> 8, 8-bit, relative error 1.01, 8 of 8 repeats differing). Those products take the
//!   dequantized weight there instead: the same values, through an ordinary matmul.
//! - Its tiled kernels need a multiple of 128 outputs; any other width goes to a naive kernel
//!   (the B8 verify's stacked mixer input, 12352 wide, took 1.41 ms there for 30 products).
//!   Such products are padded with zero rows at load ([`Layout::Padded`]) and their result is
//!   cut back to the projection's width.
//! - A tiled product gets one thread block per 128 outputs, so a narrow one (the 2048-wide
//!   out-projections, the router's 257) runs on a few of the H200's 132 SMs: 80 of them took
//!   2.8 ms of a verify. Those keep a dequantized copy of the weight ([`Layout::WithDense`]) that
//!   blocks of [`DENSE_MIN_ROWS`] rows or more take through cuBLAS; smaller blocks stay on MLX's
//!   quantized vector kernel, which reads a quarter of the bytes.

use anyhow::Result;
use mlx_rs::Array;

use crate::model::config::QuantSpec;
use crate::model::storage::Storage;
use crate::platform::backend::Backend;

/// Output width MLX CUDA's tiled quantized kernels work in.
pub const TILE_N: i32 = 128;

/// Projections at most this wide keep a dense copy: at most 32 of those 128-wide thread blocks.
pub const NARROW_MAX_OUT: i32 = 4096;

/// Blocks of this many rows or more take a dense copy: below it MLX CUDA takes its quantized
/// vector kernel, which is fast at any width.
pub const DENSE_MIN_ROWS: i32 = 8;

/// How a quantized projection is laid out for the backend's kernels, chosen at load.
#[derive(Clone)]
pub enum Layout {
    /// As stored.
    Plain,
    /// Zero rows appended up to a multiple of [`TILE_N`] outputs; the first `out` are the
    /// projection's.
    Padded { out: i32 },
    /// With the weight dequantized [out, in], which blocks of [`DENSE_MIN_ROWS`] rows take.
    WithDense(Array),
}

impl Layout {
    /// The storage a compiled graph records for this layout.
    pub fn storage(&self, spec: QuantSpec) -> Storage {
        match self {
            Layout::Plain => Storage::Quantized(spec),
            Layout::Padded { out } => Storage::Padded(spec, *out),
            Layout::WithDense(_) => Storage::WithDense(spec),
        }
    }

    /// The arrays a product in this layout takes, in [`Layout::storage`]'s order: the packed
    /// three, then the dense copy when there is one.
    pub fn inputs(&self, packed: [&Array; 3]) -> Vec<Array> {
        let mut arrays: Vec<Array> = packed.into_iter().cloned().collect();
        if let Layout::WithDense(dense) = self {
            arrays.push(dense.clone());
        }
        arrays
    }
}

/// The layout for a packed weight `w` [out, ·] with its scales and biases: the arrays to keep
/// (padded when the layout says so) and the layout. A dense copy is preferred where both apply
/// (a narrow odd width: the router's), since it serves the blocks that would take the tiled
/// kernel at all.
pub fn lay_out(w: Array, scales: Array, biases: Array, spec: QuantSpec) -> Result<([Array; 3], Layout)> {
    let routes = crate::model::routes::current();
    lay_out_as(w, scales, biases, spec, routes.pad_products, routes.dense_products)
}

/// [`lay_out`] with padding and dense copies allowed as given rather than by the switches.
pub fn lay_out_as(
    w: Array,
    scales: Array,
    biases: Array,
    spec: QuantSpec,
    pad: bool,
    dense: bool,
) -> Result<([Array; 3], Layout)> {
    let out = w.shape()[0];
    if out <= NARROW_MAX_OUT && dense {
        let copy = mlx_rs::ops::dequantize(&w, &scales, &biases, spec.group_size, spec.bits)?;
        copy.eval()?;
        return Ok(([w, scales, biases], Layout::WithDense(copy)));
    }
    if out % TILE_N != 0 && pad {
        let extra = TILE_N - out % TILE_N;
        let pad = |a: &Array| -> Result<Array> {
            let zeros = mlx_rs::ops::zeros_dtype(&[extra, a.shape()[1]], a.dtype())?;
            let padded = mlx_rs::ops::concatenate(&[a.clone(), zeros], 0)?;
            padded.eval()?;
            Ok(padded)
        };
        return Ok(([pad(&w)?, pad(&scales)?, pad(&biases)?], Layout::Padded { out }));
    }
    Ok(([w, scales, biases], Layout::Plain))
}

/// `x W^T` for a quantized projection given as its arrays in `storage`'s order (see
/// [`Layout`]).
pub fn served(x: &Array, arrays: &[Array], storage: Storage) -> Result<Array> {
    let shape = x.shape();
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    if let Some((spec, out)) = packed_width(arrays, storage)
        && let Some(y) = invariant_packed(x, arrays, spec, out)
    {
        return y;
    }
    match storage {
        Storage::Quantized(q) => quantized(x, &arrays[0], &arrays[1], &arrays[2], q.group_size, q.bits),
        Storage::WithDense(_) if rows >= DENSE_MIN_ROWS => dense(x, &arrays[3]),
        Storage::WithDense(q) => quantized(x, &arrays[0], &arrays[1], &arrays[2], q.group_size, q.bits),
        Storage::Padded(q, out) => {
            // Contiguous, as readers of the result expect (logits read back to the host, a
            // custom kernel's inputs, which MLX would copy anyway).
            let y = quantized(x, &arrays[0], &arrays[1], &arrays[2], q.group_size, q.bits)?;
            Ok(crate::model::ops::slice_axis(&y, y.ndim() - 1, 0, out)?.contiguous()?)
        }
        Storage::Dense => dense(x, &arrays[0]),
        Storage::Folded => anyhow::bail!("a folded projection has no product of its own"),
    }
}

/// On the invariant route, the first `out` outputs of a step-sized block's product with the
/// packed weight `arrays[..3]` through the row-invariant kernel; `None` where it does not serve.
fn invariant_packed(x: &Array, arrays: &[Array], spec: QuantSpec, out: i32) -> Option<Result<Array>> {
    let shape = x.shape();
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    let serves = crate::model::routes::current().block == crate::model::routes::BlockRoute::Invariant
        && crate::model::cuda::row_invariant::serves_affine(rows, shape[shape.len() - 1], spec, x.dtype());
    serves.then(|| crate::model::cuda::row_invariant::affine_product(x, &arrays[0], &arrays[1], &arrays[2], spec, out))
}

/// A packed weight's quantization and the projection's own output width (a padded weight's
/// first rows), or `None` for a float weight.
fn packed_width(arrays: &[Array], storage: Storage) -> Option<(QuantSpec, i32)> {
    match storage {
        Storage::Quantized(q) | Storage::WithDense(q) => Some((q, arrays[0].shape()[0])),
        Storage::Padded(q, out) => Some((q, out)),
        Storage::Dense | Storage::Folded => None,
    }
}

/// As [`served`], but a product padded at load keeps its padding columns (after the
/// projection's own), for a reader that takes a row stride.
pub fn served_padded(x: &Array, arrays: &[Array], storage: Storage) -> Result<Array> {
    match storage {
        Storage::Padded(q, _) => invariant_packed(x, arrays, q, arrays[0].shape()[0])
            .unwrap_or_else(|| quantized(x, &arrays[0], &arrays[1], &arrays[2], q.group_size, q.bits)),
        _ => served(x, arrays, storage),
    }
}

/// `x W^T` with `W` quantized as `w`, `scales`, `biases`.
pub fn quantized(x: &Array, w: &Array, scales: &Array, biases: &Array, group_size: i32, bits: i32) -> Result<Array> {
    as_rows(x, |rows| {
        let input = rows.shape()[1];
        if rows.shape()[0] > 1 && group_size >= input && Backend::is_cuda() {
            let dense = mlx_rs::ops::dequantize(w, scales, biases, group_size, bits)?;
            return Ok(mlx_rs::ops::matmul(rows, dense.t())?);
        }
        Ok(mlx_rs::ops::quantized_matmul(rows, w, scales, biases, true, group_size, bits)?)
    })
}

/// `x W^T` with a float `W` [out, in].
pub fn dense(x: &Array, weight: &Array) -> Result<Array> {
    let shape = x.shape();
    let rows: i32 = shape[..shape.len() - 1].iter().product();
    if crate::model::routes::current().block == crate::model::routes::BlockRoute::Invariant
        && crate::model::cuda::row_invariant::serves_dense(rows, shape[shape.len() - 1], weight.dtype(), x.dtype())
    {
        return crate::model::cuda::row_invariant::dense_product(x, weight);
    }
    let routes = crate::model::routes::current();
    let least = if routes.prompt_rows { crate::model::routes::PROMPT_ROWS } else { 0 };
    if (routes.pad_float_rows || routes.prompt_rows)
        && (rows % FLOAT_ROW_BLOCK != 0 || rows < least)
        && shape.len() >= 2
    {
        return padded_rows(x, rows, least, |block| Ok(mlx_rs::ops::matmul(block, weight.t())?));
    }
    as_rows(x, |rows| Ok(mlx_rs::ops::matmul(rows, weight.t())?))
}

/// The row count the CPU's float products are padded to a multiple of
/// ([`crate::model::routes::Routes::pad_float_rows`]).
const FLOAT_ROW_BLOCK: i32 = 8;

/// `f` of x's `rows` rows flattened and padded with zero rows to a multiple of
/// [`FLOAT_ROW_BLOCK`] and at least `least` rows, the padding's results dropped and x's leading
/// shape given back.
fn padded_rows(x: &Array, rows: i32, least: i32, f: impl FnOnce(&Array) -> Result<Array>) -> Result<Array> {
    let shape = x.shape();
    let input = shape[shape.len() - 1];
    let flat = x.reshape(&[rows, input])?;
    let pad = (rows + FLOAT_ROW_BLOCK - 1) / FLOAT_ROW_BLOCK * FLOAT_ROW_BLOCK;
    let pad = pad.max(least) - rows;
    let zeros = mlx_rs::ops::zeros_dtype(&[pad, input], x.dtype())?;
    let y = f(&mlx_rs::ops::concatenate(&[&flat, &zeros], 0)?)?;
    with_leading_shape(x, &crate::model::ops::slice_axis(&y, 0, 0, rows)?)
}

/// `y` [rows, out] of x's rows, given x's leading shape: [.., out].
fn with_leading_shape(x: &Array, y: &Array) -> Result<Array> {
    let shape = x.shape();
    let mut out = shape[..shape.len() - 1].to_vec();
    out.push(y.shape()[1]);
    Ok(y.reshape(&out)?)
}

/// `f` over `x` as a matrix of rows [rows, in], its result given `x`'s leading shape back.
fn as_rows(x: &Array, f: impl FnOnce(&Array) -> Result<Array>) -> Result<Array> {
    let shape = x.shape();
    if shape.len() <= 2 || !crate::model::routes::current().flat_products {
        return f(x);
    }
    let input = shape[shape.len() - 1];
    with_leading_shape(x, &f(&x.reshape(&[-1, input])?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(a: &Array) -> Vec<f32> {
        a.as_dtype(mlx_rs::Dtype::Float32).unwrap().as_slice::<f32>().to_vec()
    }

    /// x [.., in] times w [out, in] transposed, in f64 on the host.
    fn reference(x: &[f32], w: &[f32], input: usize) -> Vec<f64> {
        let out = w.len() / input;
        x.chunks(input)
            .flat_map(|row| {
                (0..out)
                    .map(move |o| row.iter().zip(&w[o * input..][..input]).map(|(a, b)| *a as f64 * *b as f64).sum())
            })
            .collect()
    }

    #[test]
    fn rows_keep_the_leading_shape_and_match_a_host_product() {
        let x = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[3, 2, 64], None).unwrap();
        let w = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[128, 64], None).unwrap();
        let y = dense(&x, &w).unwrap();
        assert_eq!(y.shape(), &[3, 2, 128]);
        let err = crate::model::ops::relative_error(&host(&y), &reference(&host(&x), &host(&w), 64));
        assert!(err < 1e-5, "dense product off by {err:e}");
        // One group a row (the fixtures' case) and several.
        for group in [64, 32] {
            let (q, s, b) = mlx_rs::ops::quantize(&w, group, 4).unwrap();
            let yq = quantized(&x, &q, &s, &b, group, 4).unwrap();
            assert_eq!(yq.shape(), &[3, 2, 128]);
            let dequantized = mlx_rs::ops::dequantize(&q, &s, &b, group, 4).unwrap();
            let err = crate::model::ops::relative_error(&host(&yq), &reference(&host(&x), &host(&dequantized), 64));
            assert!(err < 1e-5, "quantized product (group {group}) off by {err:e}");
        }
    }

    /// Both load layouts give the stored weight's product at the projection's width, for blocks
    /// on either side of [`DENSE_MIN_ROWS`]; a wide odd width is padded and a narrow one gets
    /// its copy, whichever is allowed.
    #[test]
    fn load_layouts_give_the_stored_weights_product() {
        let spec = QuantSpec { bits: 4, group_size: 32 };
        for (out, pad, dense, want) in [
            (300, true, false, "padded"),
            (300, true, true, "dense"),
            (4200, true, true, "padded"),
            (4224, true, true, "plain"),
            (300, false, false, "plain"),
        ] {
            let w = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[out, 64], None).unwrap();
            let (q, s, b) = mlx_rs::ops::quantize(&w, spec.group_size, spec.bits).unwrap();
            let exact = host(&mlx_rs::ops::dequantize(&q, &s, &b, spec.group_size, spec.bits).unwrap());
            let ([q, s, b], layout) = lay_out_as(q, s, b, spec, pad, dense).unwrap();
            let kind = match &layout {
                Layout::Plain => "plain",
                Layout::Padded { out: o } => {
                    assert_eq!(*o, out);
                    assert_eq!(q.shape()[0] % TILE_N, 0, "padded to {:?}", q.shape());
                    "padded"
                }
                Layout::WithDense(d) => {
                    assert_eq!(d.shape(), &[out, 64]);
                    "dense"
                }
            };
            assert_eq!(kind, want, "{out} outputs, pad {pad}, dense {dense}");
            let arrays = layout.inputs([&q, &s, &b]);
            for rows in [1, DENSE_MIN_ROWS, 16] {
                let x = mlx_rs::random::uniform::<_, f32>(-1.0, 1.0, &[rows, 64], None).unwrap();
                let y = served(&x, &arrays, layout.storage(spec)).unwrap();
                assert_eq!(y.shape(), &[rows, out]);
                let err = crate::model::ops::relative_error(&host(&y), &reference(&host(&x), &exact, 64));
                assert!(err < 1e-5, "{want} layout, {out} outputs, {rows} rows: off by {err:e}");
            }
        }
    }
}
