//! The residual sum and RMSNorm kernel (crates/core/src/model/cuda/add_rms_norm.cu, its check in
//! crates/lab/src/checks/add_norm_check.rs) against a
//! float64 reference of the sum and its norm over the same rounded inputs, and against MLX's own
//! add and rms_norm. The kernel needs MLX's CUDA backend; its reference is checked against MLX's
//! ops on whatever backend runs, so the device check rests on a checked reference.

use crate::common;

use common::require_cuda;

use cohort::model::cuda::add_norm;
use cohort::model::routes::{self, Routes};
use cohort_lab::checks::add_norm_check::check;
use mlx_rs::{Array, Dtype};

fn tolerance(dtype: Dtype) -> f64 {
    if dtype == Dtype::Float32 { 1e-5 } else { 1e-2 }
}

#[test]
fn the_reference_matches_mlx_add_and_rms_norm() {
    for (n, d, dtype) in [(3, 64, Dtype::Float32), (2, 2048, Dtype::Float32), (2, 2048, Dtype::Bfloat16)] {
        let r = check(n, d, dtype, false, 3).unwrap();
        let tol = tolerance(dtype);
        assert!(r.sum <= tol && r.normed <= tol, "{n} x {d} {dtype:?}: {r:?}");
        assert_eq!(r.against_ops, 0.0, "the ops route against itself");
    }
}

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_kernel_matches_the_reference_and_mlx() {
    require_cuda("the add-norm kernel");
    // The fixtures' width, the real one, one past a whole block (masked columns) and the widest.
    for d in [64, 2048, 2049, add_norm::MAX_WIDTH] {
        for n in [1, 16, 300] {
            for dtype in [Dtype::Bfloat16, Dtype::Float32, Dtype::Float16] {
                let r = check(n, d, dtype, true, 9).unwrap();
                let tol = tolerance(dtype);
                assert!(r.sum <= tol && r.normed <= tol && r.against_ops <= tol, "{n} x {d} {dtype:?}: {r:?}");
            }
        }
    }
}

#[test]
fn the_kernel_serves_only_one_dtype_and_a_row_it_holds() {
    let a = |shape: &[i32], dtype: Dtype| Array::zeros::<f32>(shape).unwrap().as_dtype(dtype).unwrap();
    let on = Routes { add_norm_kernel: true, ..routes::current() };
    let _in_force = routes::enter(on);
    let (x, w) = (a(&[2, 64], Dtype::Bfloat16), a(&[64], Dtype::Bfloat16));
    assert!(add_norm::serves(&x, &x, &w));
    assert!(!add_norm::serves(&x, &a(&[2, 64], Dtype::Float32), &w), "mixed dtypes");
    assert!(!add_norm::serves(&x, &a(&[1, 64], Dtype::Bfloat16), &w), "a broadcast sum");
    assert!(!add_norm::serves(&x, &x, &a(&[32], Dtype::Bfloat16)), "a weight of another width");
    let wide = add_norm::MAX_WIDTH + 1;
    let xw = a(&[1, wide], Dtype::Bfloat16);
    assert!(!add_norm::serves(&xw, &xw, &a(&[wide], Dtype::Bfloat16)), "wider than a block holds");
    routes::scoped(Routes { add_norm_kernel: false, ..on }, || {
        assert!(!add_norm::serves(&x, &x, &w), "switched off");
    });
}
