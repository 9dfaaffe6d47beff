//! RoPE on the host, for MLX's CPU backend: a block read in place ([`rope_array`]) and the host
//! decode path's buffers rotated in place ([`rope_host`]), both from one cached cos/sin table
//! computed in float64, so both give a position the same bits.
//!
//! MLX has no CPU kernel for `fast::rope` (its `RoPE::eval_cpu` is not implemented), so each call
//! runs a fallback graph of ~15 small ops: 133 us to rotate one 9-head query on this machine, two
//! calls per attention layer, about a quarter of a B1 decode step once the projections ran on
//! the CPU kernel. Here a rotation takes a few microseconds.

use std::sync::{Arc, Mutex};

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

use crate::model::config::RopeSpec;

/// Rotate the float32 block `a` [B, heads, T, head_dim] on the host: position of (b, t) is
/// `offsets[b] + t` (one offset for every row when `offsets` has one entry). The block is read in
/// place at any strides; the result is a new contiguous array.
pub fn rope_array(a: &Array, spec: RopeSpec, offsets: &[i32]) -> Result<Array> {
    if a.dtype() != Dtype::Float32 {
        bail!("host RoPE takes float32 blocks, not {:?}", a.dtype());
    }
    let shape = a.shape().to_vec();
    if shape.len() != 4 {
        bail!("RoPE takes [B, heads, T, head_dim], got {shape:?}");
    }
    let (b, h, t, d) = (shape[0] as usize, shape[1] as usize, shape[2] as usize, shape[3] as usize);
    if offsets.len() != 1 && offsets.len() != b {
        bail!("{} RoPE offsets for {b} rows", offsets.len());
    }
    let table = checked_table(spec, d, offsets, t)?;
    a.eval()?;
    let strides = a.strides().to_vec();
    // SAFETY: `a` is evaluated float32, so its data pointer (offset included) addresses every
    // element at the strides MLX reports; nothing writes it while this borrow lives.
    let src = unsafe { mlx_sys::mlx_array_data_float32(a.as_ptr()) };
    if src.is_null() {
        bail!("RoPE: the block has no data");
    }
    let half = spec.dims as usize / 2;
    let mut out = vec![0f32; b * h * t * d];
    for (row, chunk) in out.chunks_exact_mut(h * t * d).enumerate() {
        let offset = offsets[if offsets.len() == 1 { 0 } else { row }] as usize;
        for (head, plane) in chunk.chunks_exact_mut(t * d).enumerate() {
            for (ti, v) in plane.chunks_exact_mut(d).enumerate() {
                let at = row * strides[0] + head * strides[1] + ti * strides[2];
                for (j, x) in v.iter_mut().enumerate() {
                    // SAFETY: (row, head, ti, j) is inside the shape, so `at + j * stride` is an element.
                    *x = unsafe { *src.add(at + j * strides[3]) };
                }
                rotate(v, table.at(offset + ti), half, spec.traditional);
            }
        }
    }
    Ok(Array::from_slice(&out, &shape))
}

/// Rotate, in place, a host block `x` laid out [B, T, heads, head_dim] (row-major): position of
/// (b, t) is `offsets[b] + t`. The same arithmetic as [`rope_array`], for the host decode path.
pub fn rope_host(
    x: &mut [f32],
    t: usize,
    heads: usize,
    head_dim: usize,
    spec: RopeSpec,
    offsets: &[i32],
) -> Result<()> {
    let d = head_dim;
    let table = checked_table(spec, d, offsets, t)?;
    if t == 0 || x.len() != offsets.len() * t * heads * d {
        bail!("RoPE: {} values are not {} rows of [{t}, {heads}, {d}]", x.len(), offsets.len());
    }
    for (row, block) in x.chunks_exact_mut(t * heads * d).enumerate() {
        for (ti, position) in block.chunks_exact_mut(heads * d).enumerate() {
            let angle = table.at(offsets[row] as usize + ti);
            for v in position.chunks_exact_mut(d) {
                rotate(v, angle, spec.dims as usize / 2, spec.traditional);
            }
        }
    }
    Ok(())
}

/// The angles for `t` positions past each of `offsets`, once `spec` is checked against heads of
/// `d` and the offsets are checked to be positions.
fn checked_table(spec: RopeSpec, d: usize, offsets: &[i32], t: usize) -> Result<Arc<Table>> {
    let dims = spec.dims as usize;
    if dims == 0 || !dims.is_multiple_of(2) || dims > d {
        bail!("RoPE over {dims} of {d} dimensions");
    }
    if offsets.iter().any(|&o| o < 0) {
        bail!("negative RoPE offset in {offsets:?}");
    }
    Ok(angles(spec, offsets.iter().max().copied().unwrap_or(0) as usize + t))
}

/// One head vector rotated by one position's angles.
fn rotate(v: &mut [f32], (cos, sin): (&[f32], &[f32]), half: usize, traditional: bool) {
    for i in 0..half {
        let (p, q) = if traditional { (2 * i, 2 * i + 1) } else { (i, i + half) };
        let (x1, x2) = (v[p], v[q]);
        v[p] = x1 * cos[i] - x2 * sin[i];
        v[q] = x1 * sin[i] + x2 * cos[i];
    }
}

/// cos and sin of `position * base^(-2i/dims)` for i < dims/2, positions 0..len.
struct Table {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Table {
    fn len(&self) -> usize {
        self.cos.len() / self.half
    }

    fn at(&self, position: usize) -> (&[f32], &[f32]) {
        let r = position * self.half..(position + 1) * self.half;
        (&self.cos[r.clone()], &self.sin[r])
    }
}

/// The table for `spec` covering at least `len` positions (grown in steps of 1024, kept per spec).
fn angles(spec: RopeSpec, len: usize) -> Arc<Table> {
    type Key = (i32, u32);
    static TABLES: Mutex<Vec<(Key, Arc<Table>)>> = Mutex::new(Vec::new());
    let key = (spec.dims, spec.base.to_bits());
    let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, t)) = tables.iter().find(|(k, t)| *k == key && t.len() >= len) {
        return t.clone();
    }
    let half = spec.dims as usize / 2;
    let positions = len.div_ceil(1024) * 1024;
    let inv: Vec<f64> = (0..half).map(|i| (spec.base as f64).powf(-2.0 * i as f64 / spec.dims as f64)).collect();
    let (mut cos, mut sin) = (Vec::with_capacity(positions * half), Vec::with_capacity(positions * half));
    for p in 0..positions {
        for f in &inv {
            let (s, c) = (p as f64 * f).sin_cos();
            cos.push(c as f32);
            sin.push(s as f32);
        }
    }
    let table = Arc::new(Table { half, cos, sin });
    tables.retain(|(k, _)| *k != key);
    tables.push((key, table.clone()));
    table
}
