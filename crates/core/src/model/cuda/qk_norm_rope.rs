//! An attention layer's query and key RMSNorm and RoPE in one CUDA kernel
//! (`qk_norm_rope.cu`), reading the stacked q/k/v product in place. On the ops route each
//! query and key is a slice of that product's rows: MLX copies it before its RMSNorm and rotates
//! it after, six kernel nodes a layer (0.84 ms of device time a verify with the KV scatters, and
//! ~60 of a verify's ~670 nodes at the real geometry; journal, 2026-12-06 evening).
//!
//! On by default where MLX drives CUDA (`Routes::qk_norm_rope_kernel`; bench-step's
//! `--qk-kernel on,off` times both in one process: docs/benchmarks.md). The lab's
//! `checks::qk_norm_rope_check` holds it to a float64 reference and to giving a row's heads the
//! same bits alone and in a block (`cohort-lab device --check-kernels`, `--check-invariance`,
//! tests/kernels/qk_norm_rope.rs).

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use super::cuda_kernel::{CudaKernel, KernelCell, Launch};
use crate::model::config::RopeSpec;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a CUDA run takes the kernel, asked for or by default; the shapes it cannot hold never.
    /// The real geometry's attention heads.
    const REAL: (Heads, RopeSpec) = (
        Heads { heads: 16, kv_heads: 2, head_dim: 256, eps: 1e-6 },
        RopeSpec { dims: 64, traditional: false, base: 1e7 },
    );

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

    #[test]
    fn a_block_that_does_not_fit_is_refused_by_name() {
        let (h, rope) = REAL;
        let p = Array::zeros::<f32>(&[1, 1, 7]).unwrap();
        let w = Array::zeros::<f32>(&[h.head_dim]).unwrap();
        let err = apply(&p, &w, &w, h, rope, &[0]).unwrap_err().to_string();
        assert!(err.contains("q/k norm and RoPE kernel does not fit"), "{err}");
    }
}
