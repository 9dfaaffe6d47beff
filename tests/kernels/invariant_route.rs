//! The invariant block route (issue 41): cohort's row-invariant kernels serve every product and
//! short-block attention of a step-sized block on CUDA, so a verify block equals the chain of
//! single steps it stands for and a cohort row equals the row alone, in bf16 too. The kernels
//! need MLX's CUDA backend (their tests are ignored elsewhere, and fail on a wrong backend when
//! run on purpose); elsewhere the route must serve exactly what the batched route serves. Its own test
//! binary: the route is process-wide.

use crate::common;

use cohort::engine::probe::{self, Verdict};
use cohort::model::config::QuantSpec;
use cohort::model::forward::{LanguageModel, Logits};
use cohort::model::routes;
use cohort::model::routes::BlockRoute;
use cohort_lab::checks::attention_check::{self, Shape};
use cohort_lab::checks::row_invariant_check;
use common::*;
use mlx_rs::{Array, Dtype};

fn tolerance(dtype: Dtype) -> f64 {
    if dtype == Dtype::Float32 { 1e-5 } else { 1e-2 }
}

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn every_row_of_a_product_block_is_the_row_alone_and_near_float64() {
    require_cuda("the row-invariant product kernel");
    // The default model's 4-bit projections and 8-bit tied head, a width past one warp's
    // channels per block, and float weights (bits 0).
    for (input, out, bits, group_size) in [
        (576, 192, 4, 32),
        (1536, 576, 4, 32),
        (576, 49_152, 8, 32),
        (64, 520, 4, 64),
        (64, 520, 0, 0),
        (576, 49_152, 0, 0),
    ] {
        for dtype in [Dtype::Bfloat16, Dtype::Float32, Dtype::Float16] {
            // 40: three tiles of 16, the last part-filled (a prompt read's piece).
            for rows in [2, 9, 16, 40] {
                let spec = (bits > 0).then_some(QuantSpec { bits, group_size });
                let r = row_invariant_check::check(rows, input, out, spec, dtype, rows as u64).unwrap();
                let what = format!("{input}->{out} {bits}-bit g{group_size} {dtype:?} x{rows}");
                assert_eq!(r.rows_differing, 0, "{what}: rows differ from the same rows alone");
                assert!(r.relative_error <= tolerance(dtype), "{what}: relative error {:.2e}", r.relative_error);
            }
        }
    }
}

#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn a_verify_blocks_attention_is_the_single_steps_and_the_lone_rows() {
    require_cuda("the short-block attention kernel");
    let small = Shape { heads: 9, kv_heads: 3, head_dim: 64, queries: 2, capacity: 300 };
    // A prompt read's piece on the invariant route: sixteen queries, launched two at a time.
    let piece = Shape { queries: 16, ..small };
    let real_piece = Shape { queries: 16, ..Shape::REAL_LONG };
    for s in [small, Shape::REAL, Shape::REAL_LONG, piece, real_piece] {
        for dtype in [Dtype::Bfloat16, Dtype::Float32] {
            // Around the first segment's end too: a verify there splits where its steps need not.
            let last = s.capacity - s.queries - 1;
            let offsets = [0, 1, 17, 63, 64, 150, last, last.min(1023)];
            let differing = attention_check::check_invariance(s, &offsets, dtype, 3).unwrap();
            assert_eq!(differing, 0, "{s:?} {dtype:?}");
        }
    }
}

/// SmolLM2 in bf16 on CUDA: MLX's own products make the verify block differ from the chain; the
/// gate must find the invariant route Equal and keep MTP on it.
#[ignore = "needs MLX's CUDA backend: scripts/gpu/exact.sh tests runs it (--include-ignored)"]
#[test]
fn the_gate_keeps_mtp_exact_on_the_invariant_route_in_bf16() {
    require_cuda("the invariant route");
    let dir = smollm2_with_head("the_gate_keeps_mtp_exact_on_the_invariant_route_in_bf16");
    let model = cohort::model::families::llama::LlamaModel::load(dir.path(), Dtype::Bfloat16).unwrap();
    let decision = probe::gate(&model, false).unwrap();
    assert!(decision.mtp_allowed, "{}", decision.summary);
    let kept = decision.reports.last().unwrap();
    assert_eq!(kept.verdict, Verdict::Equal, "{}", decision.summary);
    assert!(matches!(decision.route, BlockRoute::Batched | BlockRoute::Invariant), "{}", decision.summary);
}

/// Where the kernels do not serve (any backend but CUDA, or a block they do not hold), the
/// invariant route is the batched route: the same logits bit for bit, for a verify block of
/// several rows and for prefill.
#[test]
fn without_its_kernels_the_invariant_route_serves_what_the_batched_route_serves() {
    if cohort::platform::backend::Backend::is_cuda() {
        common::skip(
            "without_its_kernels_the_invariant_route_serves_what_the_batched_route_serves",
            "on CUDA the invariant route's kernels serve (the tests above hold them)",
        );
        return;
    }
    let dir = fixture("llama").join("tiny_llama_mlx");
    let model = cohort::model::families::llama::LlamaModel::load(&dir, Dtype::Float32).unwrap();
    let run = |route: BlockRoute| -> Vec<u32> {
        routes::with_block(route, || {
            let mut rows: Vec<_> = (0..3).map(|_| model.new_row()).collect();
            for (i, row) in rows.iter_mut().enumerate() {
                let prompt: Vec<u32> = (0..5 + 3 * i as u32).map(|t| (t * 37 + 11) % 512).collect();
                model.prefill(row, &prompt, 64, false).unwrap();
            }
            let tokens = Array::from_slice(&[3, 4, 100, 200, 7, 9], &[3, 2]);
            let mut refs: Vec<_> = rows.iter_mut().collect();
            let logits = model.forward(&tokens, &mut refs, Logits::All, true).unwrap().logits.unwrap();
            cohort::model::ops::host_f32(&logits).unwrap().iter().map(|x| x.to_bits()).collect()
        })
    };
    assert_eq!(run(BlockRoute::Invariant), run(BlockRoute::Batched));
}

/// The route cost timer gives each route its verify and step medians at the asked width, and
/// leaves the thread on the routes it found.
#[test]
fn route_costs_are_timed_for_every_route_in_turns() {
    let dir = fixture("llama").join("tiny_llama_mlx");
    let model = cohort::model::families::llama::LlamaModel::load(&dir, Dtype::Float32).unwrap();
    let timed = [BlockRoute::Batched, BlockRoute::Invariant];
    let costs = routes::with_block(BlockRoute::RowByRow, || {
        let costs = cohort_lab::route_cost::time_routes(&model, &timed, 3, 2).unwrap();
        assert_eq!(routes::current().block, BlockRoute::RowByRow);
        costs
    });
    assert_eq!(costs.iter().map(|c| c.route).collect::<Vec<_>>(), timed);
    for c in &costs {
        assert_eq!(c.width, 3);
        assert!(c.verify_ms > 0.0 && c.step_ms > 0.0, "{c:?}");
    }
}
