//! RoPE on the host (`model::cpu::rope_host`, where `model::layers::rope` routes the CPU backend)
//! against a float64 reference written here and against MLX's own `fast::rope` / `rope_dynamic`.

use crate::common;

use cohort::model::config::RopeSpec;
use cohort::model::layers::rope::{mlx_rope, rope};
use mlx_rs::Array;

fn block(shape: &[i32], seed: u64) -> Array {
    let key = mlx_rs::random::key(seed).unwrap();
    let a = mlx_rs::random::normal::<f32>(shape, None, None, Some(&key)).unwrap();
    a.eval().unwrap();
    a
}

/// Rotate [B, H, T, D] from the definition, in float64.
fn reference(x: &[f32], shape: &[i32], spec: RopeSpec, offsets: &[i32]) -> Vec<f64> {
    let (b, h, t, d) = (shape[0] as usize, shape[1] as usize, shape[2] as usize, shape[3] as usize);
    let half = spec.dims as usize / 2;
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for bi in 0..b {
        let offset = offsets[if offsets.len() == 1 { 0 } else { bi }] as usize;
        for hi in 0..h {
            for ti in 0..t {
                let base = ((bi * h + hi) * t + ti) * d;
                for i in 0..half {
                    let theta = (offset + ti) as f64 * (spec.base as f64).powf(-2.0 * i as f64 / spec.dims as f64);
                    let (p, q) = if spec.traditional { (2 * i, 2 * i + 1) } else { (i, i + half) };
                    let (x1, x2) = (x[base + p] as f64, x[base + q] as f64);
                    out[base + p] = x1 * theta.cos() - x2 * theta.sin();
                    out[base + q] = x1 * theta.sin() + x2 * theta.cos();
                }
            }
        }
    }
    out
}

fn max_abs(got: &[f32], want: &[f64]) -> f64 {
    got.iter().zip(want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max)
}

#[test]
fn host_rope_matches_a_float64_reference_far_into_the_context() {
    for (traditional, dims) in [(false, 32), (true, 32), (false, 16)] {
        let spec = RopeSpec { dims, traditional, base: 10_000.0 };
        let shape = [3, 2, 4, 32];
        let a = block(&shape, 1);
        let offsets = [0, 517, 6_000];
        let got = common::to_f32(&rope(&a, spec, &offsets).unwrap());
        let want = reference(&common::to_f32(&a), &shape, spec, &offsets);
        let err = max_abs(&got, &want);
        assert!(err < 2e-6, "traditional {traditional}, dims {dims}: off by {err:.2e}");
    }
}

#[test]
fn host_rope_agrees_with_mlx_fast_rope() {
    // MLX rounds its angles in float32 (an error of ~ulp(position) radians: 3e-5 at position 300),
    // so the two part by about that; the float64 reference above pins which one is right.
    for (traditional, dims, base) in [(false, 64, 10_000.0), (true, 64, 500_000.0), (false, 16, 10_000_000.0)] {
        let spec = RopeSpec { dims, traditional, base };
        let a = block(&[1, 9, 3, 64], 2);
        for offset in [0, 1, 37, 300] {
            let err = common::max_rel_err(
                &common::to_f32(&rope(&a, spec, &[offset]).unwrap()),
                &common::to_f32(&mlx_rope(&a, spec, &[offset]).unwrap()),
            );
            assert!(err < 5e-5, "{spec:?} at offset {offset}: relative difference {err:.2e}");
        }
        let rows = block(&[4, 3, 2, 64], 3);
        let offsets = [5, 0, 120, 33];
        let err = common::max_rel_err(
            &common::to_f32(&rope(&rows, spec, &offsets).unwrap()),
            &common::to_f32(&mlx_rope(&rows, spec, &offsets).unwrap()),
        );
        assert!(err < 5e-5, "{spec:?}, per-row offsets: relative difference {err:.2e}");
    }
}

#[test]
fn host_rope_reads_strided_views_in_logical_order() {
    // The layers hand RoPE a transposed view ([B, T, H, D] -> [B, H, T, D]) and row slices.
    let spec = RopeSpec { dims: 32, traditional: false, base: 10_000.0 };
    let a = block(&[2, 5, 3, 32], 4);
    let view = a.transpose_axes(&[0, 2, 1, 3]).unwrap();
    let copy = view.contiguous().unwrap();
    assert_eq!(
        common::to_f32(&rope(&view, spec, &[7, 11]).unwrap()),
        common::to_f32(&rope(&copy, spec, &[7, 11]).unwrap())
    );
    let second = cohort::model::ops::slice_axis(&view, 0, 1, 2).unwrap();
    assert_eq!(
        common::to_f32(&rope(&second, spec, &[11]).unwrap()),
        common::to_f32(&cohort::model::ops::slice_axis(&rope(&copy, spec, &[7, 11]).unwrap(), 0, 1, 2).unwrap())
    );
}

#[test]
fn bad_rope_arguments_are_refused() {
    let a = block(&[2, 1, 1, 8], 5);
    let spec = RopeSpec { dims: 8, traditional: false, base: 10_000.0 };
    assert!(format!("{:#}", rope(&a, spec, &[1, 2, 3]).unwrap_err()).contains("3 RoPE offsets for 2 rows"));
    assert!(format!("{:#}", rope(&a, RopeSpec { dims: 12, ..spec }, &[0]).unwrap_err()).contains("12 of 8"));
    assert!(format!("{:#}", rope(&a, spec, &[-1]).unwrap_err()).contains("negative"));
}
