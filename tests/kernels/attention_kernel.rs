//! The short-block cohort attention kernel (crates/core/src/model/cuda/attention_short.cu, its
//! check in crates/lab/src/checks/attention_check.rs)
//! against a float64 attention over the same rounded inputs. The kernel needs MLX's CUDA backend;
//! the reference is checked against MLX's masked SDPA, as the cohort attends without the kernel,
//! on whatever backend runs, so the device check rests on a checked reference.

use crate::common;

use common::require_cuda;

use cohort_lab::checks::attention_check::{Shape, check};
use mlx_rs::Dtype;

fn tolerance(dtype: Dtype) -> f64 {
    if dtype == Dtype::Float32 { 1e-5 } else { 1e-2 }
}

/// Rows at the buffer's start, in its middle and at its end (the last row's block fills it).
fn offsets(s: Shape) -> Vec<i32> {
    vec![0, 5, s.capacity / 2 + 3, s.capacity - s.queries]
}

#[test]
fn the_reference_matches_mlx_masked_sdpa() {
    let small = Shape { heads: 4, kv_heads: 2, head_dim: 64, queries: 2, capacity: 24 };
    let real_heads = Shape { capacity: 48, ..Shape::REAL };
    for (s, dtype) in [
        (small, Dtype::Float32),
        (Shape { queries: 1, ..small }, Dtype::Float32),
        (real_heads, Dtype::Float32),
        (real_heads, Dtype::Bfloat16),
    ] {
        let err = check(s, &offsets(s), dtype, false, 5).unwrap();
        assert!(err <= tolerance(dtype), "{s:?} {dtype:?}: relative error {err:.2e}");
    }
}

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_kernel_matches_the_reference() {
    require_cuda("the short-block attention kernel");
    let small = Shape { heads: 4, kv_heads: 4, head_dim: 32, queries: 2, capacity: 20 };
    for s in [Shape::REAL, Shape { queries: 1, ..Shape::REAL }, small, Shape { head_dim: 512, queries: 1, ..small }] {
        for dtype in [Dtype::Bfloat16, Dtype::Float32, Dtype::Float16] {
            let err = check(s, &offsets(s), dtype, true, 7).unwrap();
            assert!(err <= tolerance(dtype), "{s:?} {dtype:?}: relative error {err:.2e}");
        }
    }
}
