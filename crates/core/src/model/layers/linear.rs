//! Linear layers and embeddings, dense or affine-quantized, exactly as mlx-lm stores them.

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};

use super::product::Layout;
use crate::model::config::QuantSpec;
use crate::model::cpu::cpu_qmm::PackedMatrix;
use crate::model::formats::weights::Weights;
use crate::model::routes::WeightPolicy;

/// Blocks of at most this many rows go through the CPU kernel on MLX's route (a family without a
/// host path: the Qwen3.5 hybrids): B1 steps and verifies, drafts and an AR cohort's steps; prompt
/// reads there take the float32 copy ([`crate::model::routes::Routes::prompt_rows`]). (On every
/// block, the Qwen3.5 fixture's 400-request soak held ~80 KB a cache entry more than the cache
/// counted, cause not found; the Llama host path takes the kernel for every block.)
pub const CPU_KERNEL_MAX_ROWS: i32 = 8;

/// Dequantize a packed tensor (any leading dims) to float32 when the policy asks for it.
pub fn maybe_dequantize(weight: &Array, scales: &Array, biases: &Array, spec: QuantSpec) -> Result<Option<Array>> {
    if crate::model::routes::current().weights == WeightPolicy::Quantized {
        return Ok(None);
    }
    let dense =
        mlx_rs::ops::dequantize(weight, scales, biases, spec.group_size, spec.bits)?.as_dtype(Dtype::Float32)?;
    dense.eval()?;
    Ok(Some(dense))
}

/// A bias-free linear layer `y = x W^T`.
pub enum Linear {
    /// Weight stored [out, in].
    Dense { weight: Array },
    /// Packed uint32 weight [out, in*bits/32] with per-group scales and biases [out, in/group],
    /// laid out for the backend's kernels ([`Layout`]: padded rows or a dense copy on CUDA).
    Quantized { weight: Array, scales: Array, biases: Array, spec: QuantSpec, layout: Layout },
    /// The CPU kernel's codes for small blocks and the float32 copy [out, in] for large ones
    /// ([`WeightPolicy::Kernel`]).
    CpuPacked { dense: Array, packed: Box<PackedMatrix>, spec: QuantSpec },
}

impl Linear {
    /// Load `{prefix}.weight` (and `.scales`/`.biases` when the module is quantized), checking
    /// that it maps `input` features to `output`.
    pub fn load(w: &mut Weights, prefix: &str, input: i32, output: i32, spec: Option<QuantSpec>) -> Result<Self> {
        let wname = format!("{prefix}.weight");
        if w.contains(&format!("{prefix}.scales")) {
            let spec = stored_spec(w, prefix, input, spec)?;
            let weight = w.take_shaped(&wname, &[output, input * spec.bits / 32])?;
            if weight.dtype() != Dtype::Uint32 {
                bail!("tensor \"{wname}\" in {} is {:?}, expected packed uint32", w.origin_of(&wname), weight.dtype());
            }
            let groups = input / spec.group_size;
            let scales = w.take_shaped(&format!("{prefix}.scales"), &[output, groups])?;
            let biases = w.take_shaped(&format!("{prefix}.biases"), &[output, groups])?;
            if let Some(dense) = maybe_dequantize(&weight, &scales, &biases, spec)? {
                if crate::model::routes::current().weights == WeightPolicy::Kernel && PackedMatrix::supports(spec) {
                    let packed = PackedMatrix::from_mlx(&weight, &scales, &biases, spec)
                        .with_context(|| format!("packing {wname} for the CPU kernel"))?;
                    return Ok(Linear::CpuPacked { dense, packed: Box::new(packed), spec });
                }
                return Ok(Linear::Dense { weight: dense });
            }
            let ([weight, scales, biases], layout) = super::product::lay_out(weight, scales, biases, spec)?;
            Ok(Linear::Quantized { weight, scales, biases, spec, layout })
        } else {
            let weight = w.take_shaped(&wname, &[output, input])?;
            Ok(Linear::Dense { weight })
        }
    }

    /// A float32 weight [out, in] quantized by MLX and packed for the CPU kernel (benchmarks).
    pub fn cpu_packed_from(weight: &Array, spec: QuantSpec) -> Result<Self> {
        let (codes, scales, biases) = mlx_rs::ops::quantize(weight, spec.group_size, spec.bits)?;
        let packed = PackedMatrix::from_mlx(&codes, &scales, &biases, spec)?;
        let dense = mlx_rs::ops::dequantize(&codes, &scales, &biases, spec.group_size, spec.bits)?;
        dense.eval()?;
        Ok(Linear::CpuPacked { dense, packed: Box::new(packed), spec })
    }

    /// The weight as a compiled graph takes it (`compiled.rs`); `None` for the CPU kernel's
    /// storage, which only the plain route applies.
    pub fn graph_inputs(&self) -> Option<(crate::model::storage::Storage, Vec<Array>)> {
        use crate::model::storage::Storage;
        match self {
            Linear::Dense { weight } => Some((Storage::Dense, vec![weight.clone()])),
            Linear::Quantized { weight, scales, biases, spec, layout } => {
                Some((layout.storage(*spec), layout.inputs([weight, scales, biases])))
            }
            Linear::CpuPacked { .. } => None,
        }
    }

    pub fn forward(&self, x: &Array) -> Result<Array> {
        let shape = x.shape();
        let rows: i32 = shape[..shape.len() - 1].iter().product();
        if let Linear::CpuPacked { packed, .. } = self
            && rows <= CPU_KERNEL_MAX_ROWS
            && x.dtype() == Dtype::Float32
            && !crate::model::routes::current().prompt_rows
        {
            // Row-independent by construction, so both routes take it as it is.
            return cpu_kernel_product(packed, x, rows);
        }
        if rows > 1 && crate::model::routes::current().block == crate::model::routes::BlockRoute::RowByRow {
            let flat = x.reshape(&[rows, shape[shape.len() - 1]])?;
            let outs = (0..rows)
                .map(|r| self.forward_batched(&crate::model::ops::slice_axis(&flat, 0, r, r + 1)?))
                .collect::<Result<Vec<_>>>()?;
            let y = mlx_rs::ops::concatenate(&outs, 0)?;
            let mut out_shape = shape[..shape.len() - 1].to_vec();
            out_shape.push(y.shape()[1]);
            return Ok(y.reshape(&out_shape)?);
        }
        self.forward_batched(x)
    }

    fn forward_batched(&self, x: &Array) -> Result<Array> {
        Ok(match self {
            Linear::Dense { weight } | Linear::CpuPacked { dense: weight, .. } => super::product::dense(x, weight)?,
            Linear::Quantized { .. } => {
                let (storage, arrays) = self.graph_inputs().expect("a quantized layer has graph inputs");
                super::product::served(x, &arrays, storage)?
            }
        })
    }

    /// The full-precision weight [out, in] (dequantized when stored quantized).
    pub fn dense_weight(&self) -> Result<Array> {
        Ok(match self {
            Linear::Dense { weight } | Linear::CpuPacked { dense: weight, .. } => weight.clone(),
            Linear::Quantized { layout: Layout::WithDense(dense), .. } => dense.clone(),
            Linear::Quantized { weight, scales, biases, spec, layout } => {
                let full = mlx_rs::ops::dequantize(weight, scales, biases, spec.group_size, spec.bits)?;
                match layout {
                    Layout::Padded { out } => crate::model::ops::slice_axis(&full, 0, 0, *out)?,
                    _ => full,
                }
            }
        })
    }

    /// Bytes the layer's parameters occupy.
    pub fn nbytes(&self) -> usize {
        match self {
            Linear::Dense { weight } => weight.nbytes(),
            Linear::Quantized { weight, scales, biases, layout, .. } => {
                let copy = if let Layout::WithDense(dense) = layout { dense.nbytes() } else { 0 };
                weight.nbytes() + scales.nbytes() + biases.nbytes() + copy
            }
            Linear::CpuPacked { dense, packed, .. } => dense.nbytes() + packed.nbytes(),
        }
    }

    pub fn quant(&self) -> Option<QuantSpec> {
        match self {
            Linear::Dense { .. } => None,
            Linear::Quantized { spec, .. } | Linear::CpuPacked { spec, .. } => Some(*spec),
        }
    }
}

/// `x W^T` through the CPU kernel: the block is evaluated, read in place, and the product comes
/// back as a new array of x's leading shape.
fn cpu_kernel_product(packed: &PackedMatrix, x: &Array, rows: i32) -> Result<Array> {
    let shape = x.shape();
    let x = match x.try_as_slice::<f32>() {
        Ok(_) => x.clone(),
        Err(_) => x.contiguous()?,
    };
    let data = x.try_as_slice::<f32>().context("reading a block for the CPU kernel")?;
    let y = packed.matmul(data, rows as usize);
    let mut out_shape = shape[..shape.len() - 1].to_vec();
    out_shape.push(packed.out_features() as i32);
    Ok(Array::from_slice(&y, &out_shape))
}

/// Token embeddings; the same storage serves a tied LM head.
pub struct Embedding {
    pub table: Linear,
}

impl Embedding {
    pub fn load(w: &mut Weights, prefix: &str, vocab: i32, hidden: i32, spec: Option<QuantSpec>) -> Result<Self> {
        Ok(Self { table: Linear::load(w, prefix, hidden, vocab, spec)? })
    }

    /// Rows for `ids` (any shape) -> ids.shape + [hidden], in `dtype`.
    pub fn forward(&self, ids: &Array, dtype: Dtype) -> Result<Array> {
        let flat = ids.flatten(None, None)?;
        let rows = match &self.table {
            Linear::Dense { weight } | Linear::CpuPacked { dense: weight, .. } => weight.take_axis(&flat, 0)?,
            Linear::Quantized { weight, scales, biases, spec, .. } => {
                let b = biases.take_axis(&flat, 0)?;
                mlx_rs::ops::dequantize(
                    weight.take_axis(&flat, 0)?,
                    scales.take_axis(&flat, 0)?,
                    &b,
                    spec.group_size,
                    spec.bits,
                )?
            }
        };
        let mut shape = ids.shape().to_vec();
        shape.push(rows.shape()[1]);
        Ok(rows.reshape(&shape)?.as_dtype(dtype)?)
    }

    /// Logits through the tied table: `x E^T`.
    pub fn as_linear(&self, x: &Array) -> Result<Array> {
        self.table.forward(x)
    }
}

/// Stack the output rows of `{prefix}.{part}` for each of `parts` (all mapping `input` features)
/// into one module stored as `{prefix}.{fused}`, so a block that applies them to the same input
/// takes one product and splits it: on MLX's CUDA backend each product is a kernel whose launch
/// costs host time whatever its size (docs/benchmarks.md). Output rows are the second-to-last
/// axis of every tensor, so this stacks plain projections ([out, in]) and stacked experts
/// ([E, out, in]) alike. Rows are independent in every product route, so each output is computed
/// as before. Only when every part has the same storage (all float, or all packed with one bit
/// width and group size) and none has a bias; returns whether it fused.
pub fn fuse_outputs(
    w: &mut Weights,
    prefix: &str,
    parts: &[&str],
    fused: &str,
    input: i32,
    quant: &dyn Fn(&str) -> Option<QuantSpec>,
) -> Result<bool> {
    let names: Vec<String> = parts.iter().map(|p| format!("{prefix}.{p}")).collect();
    let packed = names.iter().filter(|n| w.contains(&format!("{n}.scales"))).count();
    let whole = names.iter().all(|n| w.contains(&format!("{n}.weight")) && !w.contains(&format!("{n}.bias")));
    if !whole || (packed != 0 && packed != names.len()) {
        return Ok(false);
    }
    let suffixes: &[&str] = if packed == 0 {
        &["weight"]
    } else {
        let specs = names.iter().map(|n| stored_spec(w, n, input, quant(n))).collect::<Result<Vec<_>>>()?;
        if specs.iter().any(|s| *s != specs[0]) {
            return Ok(false);
        }
        &["weight", "scales", "biases"]
    };
    for suffix in suffixes {
        let arrays = names.iter().map(|n| w.take(&format!("{n}.{suffix}"))).collect::<Result<Vec<_>>>()?;
        let stacked = mlx_rs::ops::concatenate(&arrays, -2)?;
        stacked.eval()?;
        w.insert(format!("{prefix}.{fused}.{suffix}"), stacked);
    }
    Ok(true)
}

/// `x` split along its last axis into pieces of the given widths (views of one product).
pub fn split_widths(x: &Array, widths: &[i32]) -> Result<Vec<Array>> {
    let mut at = Vec::with_capacity(widths.len().saturating_sub(1));
    let mut end = 0;
    for w in &widths[..widths.len().saturating_sub(1)] {
        end += w;
        at.push(end);
    }
    let parts = mlx_rs::ops::split_at_indices(x, &at, -1)?;
    let total: i32 = widths.iter().sum();
    if x.shape().last() != Some(&total) || parts.len() != widths.len() {
        bail!("a stacked product of width {:?} does not split into {widths:?}", x.shape().last());
    }
    Ok(parts)
}

/// The quantization a stored module actually has, read from its tensors (bits from the packed
/// width, group size from the scales, given the module's input width) and checked against what
/// the config says when it says anything.
pub fn stored_spec(w: &Weights, prefix: &str, input: i32, config: Option<QuantSpec>) -> Result<QuantSpec> {
    let wname = format!("{prefix}.weight");
    let weight = w
        .get(&wname)
        .with_context(|| format!("tensor \"{wname}\" is missing from the checkpoint in {}", w.dir().display()))?;
    let scales = w.get(&format!("{prefix}.scales")).context("scales")?;
    let packed = *weight.shape().last().unwrap_or(&0);
    let groups = *scales.shape().last().unwrap_or(&0);
    let origin = w.origin_of(&wname);
    if input <= 0 || packed <= 0 || groups <= 0 || (packed * 32) % input != 0 || input % groups != 0 {
        bail!("{prefix} in {origin}: packed width {packed} and {groups} scale groups do not fit an input of {input}");
    }
    let found = QuantSpec { bits: packed * 32 / input, group_size: input / groups };
    if let Some(cfg) = config
        && cfg != found
    {
        bail!(
            "{prefix} in {origin}: config gives {}-bit group {}, the stored tensors are {}-bit group {}",
            cfg.bits,
            cfg.group_size,
            found.bits,
            found.group_size
        );
    }
    Ok(found)
}
