//! RoPE for every backend ([`rope`]): on the host for MLX's CPU backend
//! ([`crate::model::cpu::rope_host`], which MLX's own CPU fallback graph is ~30x slower than),
//! MLX's own `fast::rope` elsewhere ([`mlx_rope`]).

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use crate::model::config::RopeSpec;
use crate::model::cpu::rope_host;

/// Rotate `a` [B, heads, T, head_dim]: position of (b, t) is `offsets[b] + t` (one offset for
/// every row when `offsets` has one entry). MLX's fast RoPE where the host route does not apply.
pub fn rope(a: &Array, spec: RopeSpec, offsets: &[i32]) -> Result<Array> {
    if applies(a) { rope_host::rope_array(a, spec, offsets) } else { mlx_rope(a, spec, offsets) }
}

/// The host route serves float32 blocks on MLX's CPU backend (`Routes::host_rope`).
fn applies(a: &Array) -> bool {
    crate::model::routes::current().host_rope && a.dtype() == Dtype::Float32
}

/// MLX's own RoPE (a GPU kernel on CUDA and Metal; the reference in tests).
pub fn mlx_rope(a: &Array, spec: RopeSpec, offsets: &[i32]) -> Result<Array> {
    let RopeSpec { dims, traditional, base } = spec;
    Ok(match offsets {
        [o] => mlx_rs::fast::rope(a, dims, traditional, base, 1.0, *o, None)?,
        _ => {
            let per_row = Array::from_slice(offsets, &[offsets.len() as i32]);
            mlx_rs::fast::rope_dynamic(a, dims, traditional, base, 1.0, &per_row, None)?
        }
    })
}
