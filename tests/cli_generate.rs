//! `cohort generate` as a script sees it: bad lines fail alone with a message naming the line and
//! the setting, good lines still run, and the exit code says which happened.

mod common;

use std::io::Write;
use std::process::Command;

use common::{cohort_command, fixture, fixture_copy, result_lines};

fn cohort() -> Command {
    cohort_command(&std::env::temp_dir().join("cohort-cli-tests"))
}

#[test]
fn bad_lines_fail_alone_and_the_exit_code_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    let long_prompt: Vec<u32> = vec![5; 5000];
    writeln!(f, r#"{{"id":"ok","prompt":"The boat","max_tokens":5,"temperature":0}}"#).unwrap();
    writeln!(f, "{{not json").unwrap();
    f.write_all(b"{\"id\":\"bad-utf8\",\"prompt\":\"\xff\xfe\"}\n").unwrap();
    writeln!(f, r#"{{"id":"empty","prompt":""}}"#).unwrap();
    writeln!(f, r#"{{"id":"hot","prompt":"x","temperature":-1}}"#).unwrap();
    writeln!(f, r#"{{"id":"topk","prompt":"x","top_k":5000}}"#).unwrap();
    writeln!(f, r#"{{"id":"unknown","prompt":"x","temprature":0.5}}"#).unwrap();
    writeln!(f, "{}", serde_json::json!({"id": "huge", "prompt_ids": long_prompt})).unwrap();
    writeln!(f, r#"{{"id":"budget","prompt":"x","max_tokens":100000}}"#).unwrap();
    writeln!(f, r#"{{"id":"oov","prompt_ids":[1,2,99999]}}"#).unwrap();
    writeln!(f, r#"{{"id":"ok2","prompt":"A heron","max_tokens":4,"temperature":0}}"#).unwrap();
    drop(f);
    let out = cohort().args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let r = result_lines(&out.stdout);
    assert_eq!(r.len(), 11);
    let err = |i: usize| r[i]["error"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r[0]["finish_reason"], "length");
    assert!(err(1).contains("line 2"), "{}", err(1));
    assert!(err(2).contains("line 3") && err(2).contains("UTF-8"), "{}", err(2));
    assert!(err(3).contains("empty"), "{}", err(3));
    assert!(err(4).contains("temperature"), "{}", err(4));
    assert!(err(5).contains("top_k"), "{}", err(5));
    assert!(err(6).contains("temprature"), "{}", err(6));
    assert!(err(7).contains("context window"), "{}", err(7));
    assert!(err(8).contains("max_tokens") && err(8).contains("context window"), "{}", err(8));
    assert!(err(9).contains("99999") && err(9).contains("vocabulary"), "{}", err(9));
    assert_eq!(r[10]["finish_reason"], "length");
    for (i, x) in r.iter().enumerate().skip(1).take(9) {
        assert_eq!(x["finish_reason"], "error", "line {}", i + 1);
    }
}

#[test]
fn a_model_that_cannot_load_exits_1_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\"}\n").unwrap();
    let out = cohort().args(["generate", "-m", "/nonexistent/model", "-i"]).arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model"));
}

#[test]
fn a_tokenizer_that_does_not_fit_the_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture_copy("qwen35_moe_4bit", dir.path());
    // The fixture's tokenizer with 100 more (added) tokens than the model's 512-entry vocabulary.
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("tokenizer.json")).unwrap()).unwrap();
    let added = tok["added_tokens"].as_array_mut().unwrap();
    for i in 0..100 {
        added.push(
            serde_json::json!({"id": 512 + i, "content": format!("<extra_{i}>"), "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true}),
        );
    }
    std::fs::write(model.join("tokenizer.json"), tok.to_string()).unwrap();
    let out = cohort().args(["inspect", "-m"]).arg(&model).output().unwrap();
    assert!(out.status.success(), "inspect only reads the config");
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\"}\n").unwrap();
    let out = cohort().args(["generate", "-m"]).arg(&model).arg("-i").arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tokenizer") && stderr.contains("vocabulary"), "{stderr}");
}

#[test]
fn inspect_reports_the_weight_policy_auto_picks_here() {
    let out = cohort().args(["inspect", "--json", "-m"]).arg(fixture("qwen35_moe_4bit")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu = cohort::engine::runtime::Backend::detect() == cohort::engine::runtime::Backend::Cpu;
    let want = match (cpu, cohort::model::cpu_qmm::simd_available()) {
        (false, _) => "quantized",
        (true, true) => "kernel",
        (true, false) => "dequantize",
    };
    assert_eq!(json["weights_auto"], want, "a small quantized model");
}

/// A float32 model computes in float32 unless TF32 is asked for: `main` turns MLX's TF32 default
/// off before MLX first reads it (on MLX CUDA it moved float32 products by 2.5e-4 to 3e-4), and
/// `cohort device` says which applies.
#[test]
fn float32_matmuls_stay_float32_unless_tf32_is_asked_for() {
    let report = |tf32: Option<&str>| {
        let mut c = cohort();
        c.arg("device");
        match tf32 {
            Some(v) => c.env("MLX_ENABLE_TF32", v),
            None => c.env_remove("MLX_ENABLE_TF32"),
        };
        let out = c.output().unwrap();
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(report(None).contains("float32 matmuls full float32"), "{}", report(None));
    assert!(report(Some("1")).contains("float32 matmuls TF32"), "{}", report(Some("1")));
}
