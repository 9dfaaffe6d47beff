//! The Gated DeltaNet recurrence routes against a float64 reference written from the delta rule
//! (src/model/gdn_check.rs), on random inputs at the real Qwen3.6 linear-attention geometry. The
//! plain-ops route runs everywhere; the fused CUDA kernel only where the loaded MLX drives CUDA
//! (on the GPU machine the same check runs as `cohort device --check-kernels`).

use cohort::engine::runtime::Backend;
use cohort::model::gdn_check::{Geometry, Route, check, real_geometries};
use mlx_rs::Dtype;

const TOLERANCE: f64 = 1e-4;

#[test]
fn the_ops_route_matches_the_reference_with_capture() {
    // Small enough for the CPU test run, with grouped heads (value head h reads key head h / 2).
    let geo =
        Geometry { rows: 3, positions: 5, key_heads: 2, value_heads: 4, key_dim: 32, value_dim: 16, capture: true };
    let r = check(Route::Ops, geo, Dtype::Float32, 7).unwrap();
    assert!(r.worst() <= TOLERANCE, "{r:?}");
    assert!(r.per_position.is_some());
}

#[test]
fn the_ops_route_matches_the_reference_at_the_real_step_geometry() {
    let (name, geo) = real_geometries().into_iter().find(|(_, g)| g.positions == 1).unwrap();
    let r = check(Route::Ops, geo, Dtype::Float32, 5).unwrap();
    assert!(r.worst() <= TOLERANCE, "{name}: {r:?}");
}

#[test]
fn the_fused_kernel_matches_the_reference_at_real_sizes() {
    if Backend::detect() != Backend::Cuda {
        eprintln!("skipped: the fused kernel needs MLX's CUDA backend (this MLX drives {:?})", Backend::detect());
        return;
    }
    for (name, geo) in real_geometries() {
        let r = check(Route::Kernel, geo, Dtype::Bfloat16, 3).unwrap();
        assert!(r.worst() <= TOLERANCE, "{name}: {r:?}");
    }
}

#[test]
fn the_fused_front_matches_the_reference_at_real_sizes() {
    if Backend::detect() != Backend::Cuda {
        eprintln!("skipped: the fused front needs MLX's CUDA backend (this MLX drives {:?})", Backend::detect());
        return;
    }
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        for (name, geo) in real_geometries() {
            let r = cohort::model::gdn_check::check_fused(geo, 4, dtype, 9).unwrap();
            assert!(r.recurrence.worst() <= TOLERANCE && r.conv_in_exact, "{name} ({dtype:?}): {r:?}");
        }
    }
}
