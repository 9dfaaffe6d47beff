//! Small array helpers the layers share: slicing by ranges and in-place slice updates, which
//! mlx-rs exposes only through its generic indexing machinery.

use anyhow::{Result, bail};
use mlx_rs::{Array, Dtype};

fn checked(status: i32, what: &str, raw: mlx_sys::mlx_array) -> Result<Array> {
    // SAFETY: `raw` was created by mlx_array_new and filled (or left empty) by the op; on failure
    // it is freed here, on success its ownership moves into the returned Array.
    unsafe {
        if status != 0 {
            mlx_sys::mlx_array_free(raw);
            bail!("MLX {what} failed");
        }
        Ok(Array::from_ptr(raw))
    }
}

/// `a` in a buffer of its own, evaluated: a view keeps the whole buffer it looks into alive,
/// which a kept copy must not. Negated twice: a new buffer, the same bits.
pub fn own_copy(a: &Array) -> mlx_rs::error::Result<Array> {
    let a = mlx_rs::ops::negative(&mlx_rs::ops::negative(a)?)?;
    a.eval()?;
    Ok(a)
}

/// `a[start[0]..stop[0], start[1]..stop[1], ...]` (unit strides; missing trailing axes are whole).
pub fn slice(a: &Array, start: &[i32], stop: &[i32]) -> Result<Array> {
    let shape = a.shape();
    let mut lo = vec![0; shape.len()];
    let mut hi = shape.to_vec();
    lo[..start.len()].copy_from_slice(start);
    hi[..stop.len()].copy_from_slice(stop);
    let strides = vec![1; shape.len()];
    let stream = mlx_rs::Stream::thread_local_or_default();
    // SAFETY: the vectors outlive the call; the op only reads them.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_slice(
            &mut res,
            a.as_ptr(),
            lo.as_ptr(),
            lo.len(),
            hi.as_ptr(),
            hi.len(),
            strides.as_ptr(),
            strides.len(),
            stream.as_ref().as_ptr(),
        );
        checked(status, "slice", res)
    }
}

/// Slice along one axis: `a[.., lo..hi, ..]`.
pub fn slice_axis(a: &Array, axis: usize, lo: i32, hi: i32) -> Result<Array> {
    let mut start = vec![0; axis + 1];
    let mut stop: Vec<i32> = a.shape()[..=axis].to_vec();
    start[axis] = lo;
    stop[axis] = hi;
    slice(a, &start, &stop)
}

/// A copy of `src` with `update` written at `start` (the update's shape gives the extent).
pub fn slice_update(src: &Array, update: &Array, start: &[i32]) -> Result<Array> {
    let ndim = src.shape().len();
    let mut lo = vec![0; ndim];
    lo[..start.len()].copy_from_slice(start);
    let hi: Vec<i32> = lo.iter().zip(update.shape()).map(|(l, n)| l + n).collect();
    let strides = vec![1; ndim];
    let stream = mlx_rs::Stream::thread_local_or_default();
    // SAFETY: as in `slice`.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = mlx_sys::mlx_slice_update(
            &mut res,
            src.as_ptr(),
            update.as_ptr(),
            lo.as_ptr(),
            lo.len(),
            hi.as_ptr(),
            hi.len(),
            strides.as_ptr(),
            strides.len(),
            stream.as_ref().as_ptr(),
        );
        checked(status, "slice_update", res)
    }
}

/// A scalar of `x`'s dtype, for arithmetic that must not promote.
pub fn scalar_like(value: f32, like: &Array) -> Result<Array> {
    Ok(Array::from_f32(value).as_dtype(like.dtype())?)
}

/// Copy an array's values to the host as f32 (row-major, whatever its layout on the device).
pub fn host_f32(a: &Array) -> Result<Vec<f32>> {
    let a = a.as_dtype(mlx_rs::Dtype::Float32)?.flatten(None, None)?.contiguous()?;
    a.eval()?;
    Ok(a.as_slice::<f32>().to_vec())
}

/// Copy token ids (any integer dtype) to the host.
pub fn host_u32(a: &Array) -> Result<Vec<u32>> {
    let a = a.as_dtype(mlx_rs::Dtype::Uint32)?.flatten(None, None)?.contiguous()?;
    a.eval()?;
    Ok(a.as_slice::<u32>().to_vec())
}

/// Bytes one element of `dtype` takes.
pub fn dtype_bytes(dtype: mlx_rs::Dtype) -> usize {
    use mlx_rs::Dtype::*;
    match dtype {
        Bool | Uint8 | Int8 => 1,
        Uint16 | Int16 | Float16 | Bfloat16 => 2,
        Uint32 | Int32 | Float32 => 4,
        Uint64 | Int64 | Float64 | Complex64 => 8,
    }
}

/// Rows of `all` [N, ..] that differ in any bit from the same row computed alone by `alone`
/// (given the row's index): what a row-invariant kernel must keep at 0 (issue 41). A row
/// of another width counts as differing.
pub fn rows_differing(all: &[f32], n: i32, alone: impl Fn(i32) -> Result<Vec<f32>>) -> Result<usize> {
    let width = all.len() / n.max(1) as usize;
    let mut differing = 0;
    for t in 0..n {
        let row = alone(t)?;
        let block = &all[t as usize * width..][..width];
        differing += usize::from(row.len() != width || row.iter().zip(block).any(|(a, b)| a.to_bits() != b.to_bits()));
    }
    Ok(differing)
}

/// Largest |got - want| over the largest |want|: how far a result is from a float64 reference
/// (infinite when the lengths differ, so a misshapen result fails any tolerance).
pub fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs())).max(1e-30);
    let worst = got.iter().zip(want).fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
    if got.len() != want.len() { f64::INFINITY } else { worst / scale }
}

/// Row `b` of a batched array, keeping the batch axis.
pub fn row(a: &Array, b: i32) -> Result<Array> {
    slice_axis(a, 0, b, b + 1)
}

/// Stack rows' optional arrays along axis 0, filling rows without state with zeros of `shape`.
pub fn gather_rows(parts: &[Option<Array>], shape: &[i32], dtype: Dtype) -> Result<Array> {
    if let [Some(only)] = parts {
        return Ok(only.clone()); // a single row needs no gathering
    }
    let rows: Vec<Array> = parts
        .iter()
        .map(|p| match p {
            Some(a) => Ok(a.clone()),
            None => mlx_rs::ops::zeros_dtype(shape, dtype),
        })
        .collect::<Result<_, _>>()?;
    Ok(mlx_rs::ops::concatenate(&rows, 0)?)
}

#[cfg(test)]
mod tests {
    use super::rows_differing;

    /// The invariance count sees a row that differs alone in its last bit, and one of another
    /// width, and nothing where every row matches.
    #[test]
    fn rows_differing_counts_rows_whose_bits_differ_alone() {
        let all = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let same = |t: i32| Ok(all[t as usize * 2..][..2].to_vec());
        assert_eq!(rows_differing(&all, 3, same).unwrap(), 0);
        let nudged = |t: i32| {
            let mut row = all[t as usize * 2..][..2].to_vec();
            if t == 1 {
                row[1] = f32::from_bits(row[1].to_bits() + 1);
            }
            Ok(row)
        };
        assert_eq!(rows_differing(&all, 3, nudged).unwrap(), 1);
        let short = |t: i32| Ok(if t == 2 { vec![5.0] } else { all[t as usize * 2..][..2].to_vec() });
        assert_eq!(rows_differing(&all, 3, short).unwrap(), 1);
    }
}
