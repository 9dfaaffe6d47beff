//! The Gated DeltaNet recurrence routes against a float64 reference written from the delta rule
//! (crates/lab/src/checks/gdn_check.rs), on random inputs at the real Qwen3.6 linear-attention geometry. The
//! plain-ops route runs everywhere; the fused CUDA kernel only where the loaded MLX drives CUDA
//! (on the GPU machine the same check runs as `cohort-lab device --check-kernels`).

use crate::common;

use common::require_cuda;

use cohort_lab::checks::gdn_check::{Geometry, Route, check, real_geometries};
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

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_fused_kernel_matches_the_reference_at_real_sizes() {
    require_cuda("the fused kernel");
    for (name, geo) in real_geometries() {
        let r = check(Route::Kernel, geo, Dtype::Bfloat16, 3).unwrap();
        assert!(r.worst() <= TOLERANCE, "{name}: {r:?}");
    }
}

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_fused_front_matches_the_reference_at_real_sizes() {
    require_cuda("the fused front");
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        for (name, geo) in real_geometries() {
            let r = cohort_lab::checks::gdn_check::check_fused(geo, 4, dtype, 9).unwrap();
            let gated = cohort_lab::checks::gdn_check::gated_tolerance(dtype);
            assert!(r.within(TOLERANCE, gated), "{name} ({dtype:?}): {r:?}");
            assert_eq!(r.gated.is_some(), geo.positions <= 16, "{name}: the norm folds into short blocks only");
        }
    }
}

/// The fused front inside the model, against the ops front the CPU tests hold to mlx-lm: a
/// stacked fixture without MoE (so nothing but the mixer's front differs) prefilled, then a
/// T=2 verify with per-position states, once each way; logits, carried tails and states, and
/// the captured states must agree. This ties the kernel's reading of the stacked layout
/// ([qkv | z | b | a]) to the ops route's, which the float64 check (written from the same
/// reading) cannot.
#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_fused_front_gives_the_ops_fronts_logits_and_states_in_the_model() {
    use cohort::model::families::qwen3_5::Qwen35Model;
    use cohort::model::forward::{LanguageModel, Logits};
    use cohort::model::routes::{self, Routes};
    require_cuda("the fused front");
    let stacked = Routes { stack_projections: true, ..routes::current() };
    let model =
        routes::scoped(stacked, || Qwen35Model::load(&common::fixture("qwen35_dense_bf16"), Dtype::Float32)).unwrap();
    let prompt: Vec<u32> = (0..37).map(|i| (i * 31 + 7) % 200).collect();
    // `fused`: the fused front; `norm`: the gated norm folded into it (reading the stacked
    // product with its load padding, where CUDA's load layouts pad it).
    let run = |fused: bool, norm: bool| -> Vec<Vec<f32>> {
        let _in_force = routes::enter(Routes { gdn_fused_front: fused, gdn_fused_norm: norm, ..stacked });
        let mut row = model.new_row();
        model.prefill(&mut row, &prompt, 16, false).unwrap();
        let tokens = mlx_rs::Array::from_slice(&[3i32, 11], &[1, 2]);
        let out = model.forward(&tokens, &mut [&mut row], Logits::All, true).unwrap();
        let mut parts = vec![common::to_f32(out.logits.as_ref().unwrap())];
        let own =
            |s: &cohort::model::layers::cache::GdnState| [s.conv().unwrap(), s.ssm().unwrap()].into_iter().flatten();
        for layer in &row.layers {
            if let cohort::model::layers::cache::LayerState::GatedDelta(s) = layer {
                parts.extend(own(s).map(|a| common::to_f32(&a)));
            }
        }
        for states in out.captures.iter().flatten().flatten().flatten() {
            parts.extend(own(states).map(|a| common::to_f32(&a)));
        }
        parts
    };
    let ops = run(false, false);
    for (what, fused) in [("the fused front", run(true, false)), ("the fused front and norm", run(true, true))] {
        assert_eq!(fused.len(), ops.len(), "{what} left different state from the ops front");
        assert!(fused.len() > 3, "no mixer state was compared");
        for (i, (f, o)) in fused.iter().zip(&ops).enumerate() {
            let err = common::max_rel_err(f, o);
            assert!(err <= 1e-4, "part {i} (0: logits) differs between {what} and the ops front by {err:.2e}");
        }
    }
}
