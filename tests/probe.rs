//! The exactness gate (its own test binary: it flips process-wide switches).

mod common;

use cohort::model::qwen3_5::Qwen35Model;
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
    assert_eq!(forced.reports.len(), 2, "the exact route is tried before declining");
    assert!(forced.reports.iter().all(|r| r.verdict == Verdict::Diverges));
    assert!(forced.summary.contains("MTP declined"), "{}", forced.summary);
    assert!(allowed.unwrap().mtp_allowed, "COHORT_MTP_ALLOW_INEXACT keeps MTP");
}
