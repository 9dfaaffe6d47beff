//! An attention layer's query and key RMSNorm and RoPE in one CUDA kernel
//! (`qk_norm_rope.cu`), reading the stacked q/k/v product in place. On the ops route each
//! query and key is a slice of that product's rows: MLX copies it before its RMSNorm and rotates
//! it after, six kernel nodes a layer (0.84 ms of device time a verify with the KV scatters, and
//! ~60 of a verify's ~670 nodes at the real geometry; journal, 2026-12-06 evening).
//!
//! On by default where MLX drives CUDA (`Routes::qk_norm_rope_kernel`; bench-step's
//! `--qk-kernel on,off` times both in one process: docs/benchmarks.md). [`check`] holds it to a
//! float64 reference, [`rows_differing`] to giving a row's heads the same bits alone and in a
//! block (`cohort-lab device --check-kernels`, `--check-invariance`, tests/kernels/qk_norm_rope.rs).

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};
use crate::model::layers::attention::RopeSpec;
use crate::model::layers::linear::split_widths;
use crate::model::layers::rope;
use crate::model::ops::{host_f32, relative_error, rows_differing as differing_rows, slice_axis};
use crate::platform::rng::Rng;

const SOURCE: &str = include_str!("qk_norm_rope.cu");
const HEADER: (&str, &str) = ("round_to.cuh", include_str!("round_to.cuh"));

/// Warps a block: one (row, position, head) each.
const WARPS: i32 = 4;

fn kernel() -> Result<&'static CudaKernel> {
    static KERNEL: KernelCell = KernelCell::new();
    KERNEL.get_or_build(|| {
        CudaKernel::new(
            "cohort_qk_norm_rope",
            "qk_norm_rope.cu",
            &["p", "qw", "kw", "offsets"],
            &["qo", "ko"],
            SOURCE,
            Some(HEADER),
        )
    })
}

/// An attention layer's head layout and its norms' epsilon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Heads {
    pub heads: i32,
    pub kv_heads: i32,
    pub head_dim: i32,
    pub eps: f32,
}

impl Heads {
    /// Columns of the stacked product: each query head with its gate, then the keys and values.
    pub fn width(&self) -> i32 {
        2 * self.heads * self.head_dim + 2 * self.kv_heads * self.head_dim
    }
}

/// Whether the kernel takes this layer's block: the route asks for it (on for CUDA), MLX
/// drives CUDA, the product is [B, T, width or more (padded)] in a float dtype, and the heads and the rotated
/// half are whole warps of channels, rotated the non-traditional way.
pub fn serves(p: &Array, heads: Heads, rope: RopeSpec) -> bool {
    crate::model::routes::current().qk_norm_rope_kernel
        && crate::platform::backend::Backend::is_cuda()
        && fits(p, heads, rope)
}

fn fits(p: &Array, h: Heads, rope: RopeSpec) -> bool {
    let half = rope.dims / 2;
    p.ndim() == 3
        && p.shape()[2] >= h.width()
        && matches!(p.dtype(), Dtype::Float32 | Dtype::Bfloat16 | Dtype::Float16)
        && !rope.traditional
        && h.head_dim % 32 == 0
        && half % 32 == 0
        && half > 0
        && 2 * half <= h.head_dim
        && h.heads > 0
        && h.kv_heads > 0
}

/// Row b's queries [B, NH, T, HD] and keys [B, NKV, T, HD] from the stacked product `p` [B, T,
/// width], each head normed by its weight (`q_w`, `k_w` [HD]) and rotated at position
/// `offsets[b] + t`.
pub fn apply(p: &Array, q_w: &Array, k_w: &Array, h: Heads, rope: RopeSpec, offsets: &[i32]) -> Result<(Array, Array)> {
    if !fits(p, h, rope) {
        bail!("the q/k norm and RoPE kernel does not fit {:?} ({:?}) with {h:?} and {rope:?}", p.shape(), p.dtype());
    }
    let (b, t) = (p.shape()[0], p.shape()[1]);
    if offsets.len() != b as usize || offsets.iter().any(|&o| o < 0 || o.checked_add(t).is_none()) {
        bail!("the q/k norm and RoPE kernel's offsets {offsets:?} do not fit {b} rows of {t} positions");
    }
    if q_w.shape() != [h.head_dim] || k_w.shape() != [h.head_dim] {
        bail!("q/k norm weights {:?}, {:?} for heads of {}", q_w.shape(), k_w.shape(), h.head_dim);
    }
    let (q_w, k_w) = (q_w.as_dtype(p.dtype())?, k_w.as_dtype(p.dtype())?);
    let items = b * t * (h.heads + h.kv_heads);
    let offsets = Array::from_slice(offsets, &[b]);
    let launch = Launch {
        outputs: vec![(vec![b, h.heads, t, h.head_dim], p.dtype()), (vec![b, h.kv_heads, t, h.head_dim], p.dtype())],
        grid: [32, (items + WARPS - 1) / WARPS * WARPS, 1],
        threads: [32, WARPS, 1],
        ints: &[
            ("N", p.shape()[2]),
            ("NH", h.heads),
            ("NKV", h.kv_heads),
            ("HD", h.head_dim),
            ("HALF", rope.dims / 2),
            ("EPS_BITS", h.eps.to_bits() as i32),
            ("BASE_BITS", rope.base.to_bits() as i32),
            ("WARPS", WARPS),
        ],
        bools: &[],
    };
    let mut out = kernel()?.apply(&[p, &q_w, &k_w, &offsets], &launch)?;
    let k = out.pop().expect("two outputs");
    let q = out.pop().expect("two outputs");
    Ok((q, k))
}

/// The real geometry's attention heads (16 queries and 2 keys of 256, a quarter of each rotated
/// at base 10^7) for the checks.
pub const REAL: (Heads, RopeSpec) =
    (Heads { heads: 16, kv_heads: 2, head_dim: 256, eps: 1e-6 }, RopeSpec { dims: 64, traditional: false, base: 1e7 });

struct Inputs {
    p: Array,
    q_w: Array,
    k_w: Array,
}

fn inputs(b: i32, t: i32, h: Heads, dtype: Dtype, seed: u64) -> Result<Inputs> {
    let mut rng = Rng::new(seed);
    let mut random = |shape: &[i32], lo: f32, hi: f32| -> Result<Array> {
        let count: i32 = shape.iter().product();
        let v: Vec<f32> = (0..count).map(|_| lo + (hi - lo) * rng.next_f64() as f32).collect();
        let a = Array::from_slice(&v, shape).as_dtype(dtype)?;
        a.eval()?;
        Ok(a)
    };
    Ok(Inputs {
        p: random(&[b, t, h.width()], -3.0, 3.0)?,
        q_w: random(&[h.head_dim], 0.5, 1.5)?,
        k_w: random(&[h.head_dim], 0.5, 1.5)?,
    })
}

/// The same queries and keys through the model's ops route: the product's slices normed by MLX's
/// RMSNorm, then rotated by the layers' RoPE (any backend).
fn by_ops(p: &Array, q_w: &Array, k_w: &Array, h: Heads, rope: RopeSpec, offsets: &[i32]) -> Result<(Array, Array)> {
    let (b, t) = (p.shape()[0], p.shape()[1]);
    let (nh, nkv, hd) = (h.heads, h.kv_heads, h.head_dim);
    let parts = split_widths(p, &[2 * nh * hd, nkv * hd, nkv * hd])?;
    let halves = mlx_rs::ops::split_equal(&parts[0].reshape(&[b, t, nh, 2 * hd])?, 2, -1)?;
    let q = mlx_rs::fast::rms_norm(&halves[0], Some(q_w), h.eps)?.transpose_axes(&[0, 2, 1, 3])?;
    let k = mlx_rs::fast::rms_norm(&parts[1].reshape(&[b, t, nkv, hd])?, Some(k_w), h.eps)?
        .transpose_axes(&[0, 2, 1, 3])?;
    Ok((rope::rope(&q, rope, offsets)?, rope::rope(&k, rope, offsets)?))
}

/// Random product rows for rows at `offsets` (t positions each) in `dtype` through the kernel
/// (`kernel`, CUDA only) or the model's ops route, against a float64 RMSNorm and RoPE of the same
/// rounded inputs: the relative error of the queries and of the keys, each to the reference's
/// largest magnitude.
pub fn check(offsets: &[i32], t: i32, dtype: Dtype, kernel: bool, seed: u64) -> Result<(f64, f64)> {
    let (h, rope) = REAL;
    let b = offsets.len() as i32;
    let Inputs { p, q_w, k_w } = inputs(b, t, h, dtype, seed)?;
    let (q, k) =
        if kernel { apply(&p, &q_w, &k_w, h, rope, offsets)? } else { by_ops(&p, &q_w, &k_w, h, rope, offsets)? };
    let (ps, qws, kws) = (host_f32(&p)?, host_f32(&q_w)?, host_f32(&k_w)?);
    let d = h.head_dim as usize;
    let half = rope.dims as usize / 2;
    let reference = |query: bool| -> Vec<f64> {
        let count = if query { h.heads } else { h.kv_heads } as usize;
        let w = if query { &qws } else { &kws };
        let mut out = vec![0f64; b as usize * count * t as usize * d];
        for (row, &offset) in offsets.iter().enumerate() {
            for ti in 0..t as usize {
                let at = (row * t as usize + ti) * h.width() as usize;
                for head in 0..count {
                    let start = at + if query { head * 2 * d } else { 2 * h.heads as usize * d + head * d };
                    let x: Vec<f64> = ps[start..start + d].iter().map(|&v| v as f64).collect();
                    let scale = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / d as f64 + h.eps as f64).sqrt();
                    let mut y: Vec<f64> = x.iter().zip(w.iter()).map(|(v, &wi)| v * scale * wi as f64).collect();
                    let position = (offset as usize + ti) as f64;
                    for i in 0..half {
                        let theta = position * (rope.base as f64).powf(-(i as f64) / half as f64);
                        let (x1, x2) = (y[i], y[i + half]);
                        y[i] = x1 * theta.cos() - x2 * theta.sin();
                        y[i + half] = x1 * theta.sin() + x2 * theta.cos();
                    }
                    let dst = ((row * count + head) * t as usize + ti) * d;
                    out[dst..dst + d].copy_from_slice(&y);
                }
            }
        }
        out
    };
    Ok((relative_error(&host_f32(&q)?, &reference(true)), relative_error(&host_f32(&k)?, &reference(false))))
}

/// Rows of a block of `offsets.len()` rows of `t` positions whose queries or keys differ in any
/// bit from the same row run alone, or a position from the same position run as a one-position
/// step (CUDA only).
pub fn rows_differing(offsets: &[i32], t: i32, dtype: Dtype, seed: u64) -> Result<usize> {
    let (h, rope) = REAL;
    let b = offsets.len() as i32;
    let Inputs { p, q_w, k_w } = inputs(b, t, h, dtype, seed)?;
    let both = |p: &Array, at: &[i32]| -> Result<Vec<f32>> {
        let (q, k) = apply(p, &q_w, &k_w, h, rope, at)?;
        let (q, k) = (q.transpose_axes(&[0, 2, 1, 3])?, k.transpose_axes(&[0, 2, 1, 3])?);
        let rows = q.shape()[0] * q.shape()[1];
        let joined = mlx_rs::ops::concatenate(
            &[q.reshape(&[rows, h.heads * h.head_dim])?, k.reshape(&[rows, h.kv_heads * h.head_dim])?],
            1,
        )?;
        host_f32(&joined)
    };
    let block = both(&p, offsets)?;
    // Each (row, position) of the block against the same row alone, then against that position
    // alone as a step at its own offset.
    let alone = differing_rows(&block, b * t, |i| {
        let (row, ti) = (i / t, i % t);
        let one = slice_axis(&slice_axis(&p, 0, row, row + 1)?, 1, ti, ti + 1)?;
        both(&one, &[offsets[row as usize] + ti])
    })?;
    let whole_rows = differing_rows(&block, b * t, |i| {
        let (row, ti) = (i / t, i % t);
        let lone = both(&slice_axis(&p, 0, row, row + 1)?, &offsets[row as usize..=row as usize])?;
        let per = lone.len() / t as usize;
        Ok(lone[ti as usize * per..(ti as usize + 1) * per].to_vec())
    })?;
    Ok(alone + whole_rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a CUDA run takes the kernel, asked for or by default; the shapes it cannot hold never.
    #[test]
    fn the_kernel_takes_only_what_it_fits() {
        let (h, rope) = REAL;
        let p = Array::zeros::<f32>(&[2, 2, h.width()]).unwrap().as_dtype(Dtype::Bfloat16).unwrap();
        assert!(fits(&p, h, rope));
        assert!(!fits(&p, h, RopeSpec { traditional: true, ..rope }));
        assert!(!fits(&p, h, RopeSpec { dims: 48, ..rope }));
        assert!(!fits(&p, Heads { head_dim: 80, ..h }, rope), "heads of whole warps");
        assert!(!fits(&p, Heads { heads: 17, ..h }, rope), "a product narrower than its heads");
        let routes = crate::model::routes::Routes { qk_norm_rope_kernel: true, ..crate::model::routes::current() };
        let cuda = crate::platform::backend::Backend::is_cuda();
        assert_eq!(crate::model::routes::scoped(routes, || serves(&p, h, rope)), cuda);
        assert_eq!(serves(&p, h, rope), cuda, "on by default where MLX drives CUDA, and only there");
    }

    /// The float64 reference against the model's own ops route (MLX's RMSNorm, the layers' RoPE),
    /// so the kernel's check on the GPU rests on a checked reference: the heads' columns, the
    /// rotary pairs and the angles.
    #[test]
    fn the_reference_matches_the_ops_route() {
        for (offsets, t) in [(vec![37], 1), (vec![3, 93, 183], 2)] {
            let (q, k) = check(&offsets, t, Dtype::Float32, false, 29).unwrap();
            assert!(q <= 1e-5 && k <= 1e-5, "offsets {offsets:?} x {t}: queries {q:e}, keys {k:e}");
        }
    }

    #[test]
    fn a_block_that_does_not_fit_is_refused_by_name() {
        let (h, rope) = REAL;
        let p = Array::zeros::<f32>(&[1, 1, 7]).unwrap();
        let w = Array::zeros::<f32>(&[h.head_dim]).unwrap();
        let err = apply(&p, &w, &w, h, rope, &[0]).unwrap_err().to_string();
        assert!(err.contains("q/k norm and RoPE kernel does not fit"), "{err}");
    }
}
