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

/// `cohort probe --synthetic` probes random weights at a named geometry with no model folder and
/// no tokenizer (issue 41: the real geometry's route, probed on the GPU machine), and reports the
/// construction check of the route it keeps. On the CPU both are exact.
#[test]
fn the_probe_runs_on_a_synthetic_model_and_reports_its_construction_check() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["probe", "--synthetic", "qwen35-moe-small", "--json"])
        .env("COHORT_HOME", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mtp_allowed"], true, "{v}");
    assert_eq!(v["reports"][0]["verdict"], "Equal", "{v}");
    assert_eq!(v["construction"]["passed"], true, "{v}");
    assert_eq!(v["construction"]["max_abs_diff"], 0.0, "{v}");
    assert_eq!(v["construction"]["widths"], serde_json::json!([2, 3, 4, 5, 6, 7, 8]), "{v}");
    // And whether a prompt read split anywhere gives a whole read's bits (the prompt cache).
    assert_eq!(v["split_read"]["exact"], true, "{v}");

    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["probe", "--synthetic", "qwen9"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown synthetic geometry \"qwen9\""));
}

/// `cohort probe --time-routes N` reserved N timings per route up front: 10^9 aborted the process
/// ("memory allocation of 16000000000 bytes failed"), 2^64 - 1 panicked ("capacity overflow"),
/// and 0 printed times measured from no turn at all. N is refused outside 1-10,000, naming the
/// flag, before the model loads.
#[test]
fn a_time_routes_count_out_of_range_is_refused_naming_the_flag() {
    for n in ["0", "1000000000", "18446744073709551615"] {
        let home = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v 4000000 && exec "$@""#)
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_cohort"))
            .env("COHORT_HOME", home.path())
            .args(["probe", "-m"])
            .arg(fixture("qwen35_moe_4bit"))
            .args(["--time-routes", n])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--time-routes {n}: {stderr}");
        assert!(stderr.contains("--time-routes") && stderr.contains("1..=10000"), "--time-routes {n}: {stderr}");
    }
}
