//! The lab's probe: random weights at a named geometry, and the routes' costs.

use crate::common;

use common::*;

/// `cohort-lab probe --synthetic` probes random weights at a named geometry with no model folder and
/// no tokenizer (issue 41: the real geometry's route, probed on the GPU machine), and reports the
/// construction check of the route it keeps. On the CPU both are exact.
#[test]
fn the_probe_runs_on_a_synthetic_model_and_reports_its_construction_check() {
    let out = std::process::Command::new(common::cohort_bin())
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

    let bad =
        std::process::Command::new(common::cohort_bin()).args(["probe", "--synthetic", "qwen9"]).output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown synthetic geometry \"qwen9\""));
}

/// `cohort-lab probe --time-routes N` reserved N timings per route up front: 10^9 aborted the process
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
            .arg(common::cohort_bin())
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
