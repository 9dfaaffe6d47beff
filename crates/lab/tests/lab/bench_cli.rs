//! `cohort-lab bench` refuses what it cannot measure before the model loads, and never reports a
//! run whose requests failed as a measurement.

use crate::common;

use common::{cohort_command, fixture};

fn bench(home: &std::path::Path, args: &[&str]) -> std::process::Output {
    cohort_command(home)
        .args(["bench", "-m"])
        .arg(fixture("qwen35_moe_4bit"))
        .args(["--sampler", "greedy"])
        .args(args)
        .output()
        .unwrap()
}

/// `--rounds 0` panicked ("index out of bounds" taking the median of no round, exit 101).
#[test]
fn zero_rounds_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("r.json");
    let out = bench(dir.path(), &["--rounds", "0", "--max-tokens", "4", "--receipt", receipt.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--rounds") && !stderr.contains("panicked"), "{stderr}");
}

/// A receipt that cannot be written was found out only after every round had run, and the
/// measurement was lost; it is refused before the model loads.
#[test]
fn an_unwritable_receipt_is_refused_before_any_round() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("missing/parent/r.json");
    let out = bench(dir.path(), &["--rounds", "1", "--max-tokens", "4", "--receipt", receipt.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("missing/parent/r.json"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ratio"), "rounds ran first: {stderr}");
}

/// Requests the engine refuses (here a max_tokens past the context window) were counted as
/// rounds of 0 tok/s, a NaN ratio, exit 0. The bench stops on the first failed request, saying
/// why; a run that can measure still writes its receipt.
#[test]
fn failed_requests_fail_the_bench_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let receipt = dir.path().join("r.json");
    let out = bench(
        dir.path(),
        &["--rounds", "1", "--max-tokens", "18446744073709551615", "--receipt", receipt.to_str().unwrap()],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("context window"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("NaN"), "{}", String::from_utf8_lossy(&out.stdout));

    let out = bench(dir.path(), &["--rounds", "1", "--max-tokens", "4", "--receipt", receipt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&receipt).unwrap()).unwrap();
    assert_eq!(written["runs"].as_array().unwrap().len(), 2, "{written}");
}
