//! The host decode path's element-wise pieces (`model::cpu::host_ops`) against float64 definitions
//! written here: RMSNorm over rows, SwiGLU's `silu(gate) * up`, residual adds, token ids.

use cohort::model::cpu::host_ops::{add_assign, rms_norm, silu_mul, to_host, token_ids};
use mlx_rs::Array;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 6.0 - 3.0) as f32
        })
        .collect()
}

#[test]
fn rms_norm_matches_its_definition_row_by_row() {
    // Widths with and without a tail past the last 8 lanes; rows of very different scale.
    for d in [8usize, 64, 576, 13] {
        let mut x = values(3 * d, d as u64);
        for v in &mut x[d..2 * d] {
            *v *= 1e-3;
        }
        let w = values(d, 7);
        let eps = 1e-5f32;
        let got = rms_norm(&x, &w, eps);
        for (r, (row, out)) in x.chunks(d).zip(got.chunks(d)).enumerate() {
            let ms: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
            let inv = 1.0 / (ms + eps as f64).sqrt();
            for (i, (&v, &o)) in row.iter().zip(out).enumerate() {
                let want = v as f64 * inv * w[i] as f64;
                let err = (o as f64 - want).abs() / want.abs().max(1e-6);
                assert!(err < 2e-6, "width {d}, row {r}, element {i}: {o} against {want} ({err:.1e})");
            }
        }
    }
}

#[test]
fn silu_mul_and_add_match_their_definitions() {
    let (mut g, u) = (values(1000, 1), values(1000, 2));
    let g0 = g.clone();
    silu_mul(&mut g, &u);
    for i in 0..g.len() {
        let x = g0[i] as f64;
        let want = x / (1.0 + (-x).exp()) * u[i] as f64;
        assert!((g[i] as f64 - want).abs() < 1e-6 * want.abs().max(1.0), "{i}: {} against {want}", g[i]);
    }
    let mut a = values(17, 3);
    let a0 = a.clone();
    add_assign(&mut a, &u[..17]);
    assert!(a.iter().zip(&a0).zip(&u).all(|((s, x), y)| *s == x + y));
}

#[test]
fn host_copies_follow_logical_order_and_ids_any_integer_dtype() {
    let a = Array::from_slice(&[1f32, 2., 3., 4., 5., 6.], &[2, 3]);
    assert_eq!(to_host(&a.transpose_axes(&[1, 0]).unwrap()).unwrap(), vec![1., 4., 2., 5., 3., 6.]);
    let ids = Array::from_slice(&[3u32, 9, 1, 0], &[2, 2]);
    assert_eq!(token_ids(&ids).unwrap(), vec![3, 9, 1, 0]);
    assert_eq!(token_ids(&ids.transpose_axes(&[1, 0]).unwrap()).unwrap(), vec![3, 1, 9, 0]);
}
