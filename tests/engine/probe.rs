//! The exactness gate.

use crate::common;

use cohort::model::families::qwen3_5::Qwen35Model;
use common::*;
use mlx_rs::Dtype;

#[test]
fn a_probe_forced_to_diverge_declines_mtp_and_says_so() {
    use cohort::engine::probe::{self, Verdict};
    let model = Qwen35Model::load(&fixture("qwen35_moe_4bit"), Dtype::Float32).unwrap();
    let honest = probe::gate(&model, false).unwrap();
    assert!(honest.mtp_allowed, "{}", honest.summary);
    assert_eq!(honest.reports[0].verdict, Verdict::Equal);
    probe::force_divergence_for_tests(true);
    let forced = probe::gate(&model, false);
    let allowed = probe::gate(&model, true);
    probe::force_divergence_for_tests(false);
    let forced = forced.unwrap();
    assert!(!forced.mtp_allowed);
    // Batched, then the row-by-row route (and on CUDA the invariant route between them).
    assert!(forced.reports.len() >= 2, "the exact routes are tried before declining");
    assert!(forced.reports.iter().all(|r| r.verdict == Verdict::Diverges));
    assert!(forced.summary.contains("MTP declined"), "{}", forced.summary);
    assert!(allowed.unwrap().mtp_allowed, "COHORT_MTP_ALLOW_INEXACT keeps MTP");
}

#[test]
fn allowing_inexact_mtp_keeps_the_batched_route_even_where_row_by_row_is_exact() {
    use cohort::engine::probe::{self, Verdict};
    use cohort::model::routes::BlockRoute;
    let test = "allowing_inexact_mtp_keeps_the_batched_route_even_where_row_by_row_is_exact";
    let dir = smollm2_with_head(test);
    let model = cohort::model::families::llama::LlamaModel::load(dir.path(), Dtype::Float32).unwrap();
    let exact = probe::gate(&model, false).unwrap();
    let fast = probe::gate(&model, true).unwrap();
    assert!(fast.mtp_allowed && fast.route == BlockRoute::Batched, "{}", fast.summary);
    assert_eq!(fast.reports.len(), 1, "no row-by-row retry once inexact MTP is allowed");
    if exact.reports[0].verdict == Verdict::Equal {
        // Exact batched (cohort's own kernel on this CPU): both keep it, and nothing was traded.
        assert!(exact.mtp_allowed && exact.route == BlockRoute::Batched, "{}", exact.summary);
        assert!(!fast.summary.contains("COHORT_MTP_ALLOW_INEXACT=1 keeps MTP"), "{}", fast.summary);
    } else {
        // SmolLM2 in float32 on OpenBLAS: the batched T=2 block differs from the chain by ~4e-5.
        assert!(exact.mtp_allowed && exact.route == BlockRoute::RowByRow, "{}", exact.summary);
        assert!(fast.summary.contains("COHORT_MTP_ALLOW_INEXACT=1 keeps MTP"), "{}", fast.summary);
    }
}
