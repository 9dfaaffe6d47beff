//! The attention layers' q/k norm and RoPE kernel (crates/core/src/model/cuda/qk_norm_rope.cu)
//! against a float64 reference of RMSNorm and RoPE (crates/lab/src/checks/qk_norm_rope_check.rs;
//! the first test holds that reference to the model's ops route on any backend), against itself
//! row by row, and inside the model against the ops route it replaces. The kernel needs MLX's
//! CUDA backend: those tests are ignored elsewhere, and fail on a wrong backend when run on
//! purpose (`--include-ignored`).

use crate::common;

use common::require_cuda;

use cohort_lab::checks::qk_norm_rope_check::{check, rows_differing};
use mlx_rs::Dtype;

/// The float64 reference against the model's own ops route (MLX's RMSNorm, the layers' RoPE),
/// so the kernel's check on the GPU rests on a checked reference: the heads' columns, the
/// rotary pairs and the angles.
#[test]
fn the_reference_matches_the_ops_route() {
    for (offsets, t) in [(vec![37], 1), (vec![3, 93, 183], 2)] {
        let (q, k) = check(&offsets, t, Dtype::Float32, false, 29).unwrap();
        assert!(q <= 1e-5 && k <= 1e-5, "offsets {offsets:?} x {t}: queries {q:e}, keys {k:e}");
    }
}

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_kernel_matches_the_float64_reference() {
    require_cuda("the q/k norm and RoPE kernel");
    let verify: Vec<i32> = (0..8).map(|r| 3 + 90 * r).collect();
    for (offsets, t) in [(vec![37], 1), (verify, 2), (vec![0], 64)] {
        // float32's angle is position x frequency in float32, hence its looser bound.
        for (dtype, tolerance) in [(Dtype::Float32, 1e-4), (Dtype::Bfloat16, 1e-2)] {
            let (q, k) = check(&offsets, t, dtype, true, 29).unwrap();
            assert!(q <= tolerance && k <= tolerance, "{offsets:?} x {t} ({dtype:?}): queries {q:e}, keys {k:e}");
        }
    }
}

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn a_rows_heads_are_the_same_alone_in_a_block_and_as_a_step() {
    require_cuda("the q/k norm and RoPE kernel");
    let offsets: Vec<i32> = (0..8).map(|r| 3 + 90 * r).collect();
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        assert_eq!(rows_differing(&offsets, 2, dtype, 47).unwrap(), 0, "{dtype:?}");
    }
}

/// The kernel inside the model against the ops route: a four-layer model at the real geometry
/// (its fourth layer is full attention; random weights, float32), a 40-token prefill and a
/// two-token block, each way; the logits must agree. This covers what the float64 check cannot:
/// which columns of the stacked product the layer hands the kernel, the gates and values beside
/// it, and the rows' positions.
#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_kernel_gives_the_ops_routes_logits_in_the_model() {
    use cohort::model::forward::{LanguageModel, Logits};
    use cohort::model::routes;
    require_cuda("the q/k norm and RoPE kernel");
    let cfg = cohort_lab::synth::geometry("qwen36-35b-a3b", Some(4), Some(512)).unwrap();
    let mut weights = cohort_lab::synth::make_weights(&cfg, Dtype::Float32, 9).unwrap();
    let model = cohort::model::families::qwen3_5::Qwen35Model::from_weights(cfg, &mut weights, Dtype::Float32).unwrap();
    let prompt: Vec<u32> = (0..40).map(|i| (i * 31 + 7) % 512).collect();
    let run = |on: bool| -> Vec<Vec<f32>> {
        routes::scoped(routes::Routes { qk_norm_rope_kernel: on, ..routes::current() }, || {
            let mut row = model.new_row();
            let (_, prefill_logits, _) = model.prefill(&mut row, &prompt, 40, false).unwrap();
            let block = mlx_rs::Array::from_slice(&[7i32, 11], &[1, 2]);
            let out = model.forward(&block, &mut [&mut row], Logits::All, false).unwrap();
            vec![common::to_f32(&prefill_logits), common::to_f32(out.logits.as_ref().unwrap())]
        })
    };
    let (kernel, ops) = (run(true), run(false));
    for (what, (k, o)) in ["prefill", "two-token block"].iter().zip(kernel.iter().zip(&ops)) {
        let err = common::max_rel_err(k, o);
        assert!(err <= 1e-3, "{what}: with the kernel the logits differ from the ops route's by {err:.2e}");
    }
}
