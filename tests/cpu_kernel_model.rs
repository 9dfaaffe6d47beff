//! Whole models on the CPU kernel's weight policy (`--weights kernel`, what `auto` picks on an
//! AVX2 CPU): outputs against mlx-lm's references, and the exactness probe, which the kernel's
//! row-independent products let pass on the batched route. Its own test binary: the weight
//! policy a load uses is process-wide.

mod common;

use std::path::{Path, PathBuf};

use cohort::engine::ar;
use cohort::engine::probe::{self, Verdict};
use cohort::model::forward::LanguageModel;
use cohort::model::linear::{LinearRoute, WeightPolicy};
use common::*;
use mlx_rs::Dtype;
use serde_json::Value;

/// Loads take turns: each sets the process-wide policy for its duration.
static LOADS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn load(dir: &Path, policy: WeightPolicy) -> Box<dyn LanguageModel> {
    let _turn = LOADS.lock().unwrap_or_else(|e| e.into_inner());
    cohort::model::load::load_with_policy(dir, Dtype::Float32, policy).unwrap_or_else(|e| panic!("{e:#}"))
}

fn llama(name: &str) -> PathBuf {
    fixture("llama").join(name)
}

fn refs(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(llama(file)).unwrap()).unwrap()
}

#[test]
fn the_kernel_policy_matches_mlx_lm_on_its_own_checkpoint() {
    if !cohort::model::cpu_qmm::simd_available() {
        eprintln!("note: no AVX2/FMA here, the kernel runs its portable route");
    }
    let model = load(&llama("tiny_llama_mlx"), WeightPolicy::Kernel);
    let r = refs("tiny_llama.json");
    for (name, p) in r["mlx_prompts"].as_object().unwrap() {
        let prompt = ids(&p["prompt_ids"]);
        // Chunks of 8 rows: the prompt itself goes through the kernel, not only the decode steps.
        let mut row = model.new_row();
        let (_, logits, _) = model.prefill(&mut row, &prompt, 8, false).unwrap();
        let err = max_rel_err(&to_f32(&logits), &floats(&p["last_logits"]));
        assert!(err <= 1e-4, "{name}: last logits differ from mlx-lm by {err:.2e}");
        let want = ids(&p["greedy_tokens"]);
        let got = ar::greedy(&*model, &prompt, want.len(), 32).unwrap();
        if p["min_top2_gap"].as_f64().unwrap() >= 2e-3 {
            assert_eq!(got, want, "{name}: greedy tokens differ from mlx-lm");
        } else {
            assert_eq!(got[0], want[0], "{name}: first greedy token differs from mlx-lm");
        }
    }
}

#[test]
fn with_the_kernel_the_probe_finds_the_batched_verify_exact() {
    // Every model with MTP weights among the fixtures: a T=2 verify block equals the two-step
    // chain byte for byte without the row-by-row route.
    let dir = tempfile::tempdir().unwrap();
    let tiny = fixture_copy("llama/tiny_llama_mlx", dir.path());
    std::fs::copy(llama("tiny_mtp.safetensors"), tiny.join("mtp.safetensors")).unwrap();
    for model_dir in [tiny, fixture("qwen35_moe_4bit"), fixture("qwen35_dense_8bit")] {
        let model = load(&model_dir, WeightPolicy::Kernel);
        assert!(model.has_mtp(), "{}", model_dir.display());
        let decision = probe::gate(&*model, false).unwrap();
        cohort::model::linear::set_route(LinearRoute::Batched);
        assert_eq!(decision.reports[0].verdict, Verdict::Equal, "{}: {}", model_dir.display(), decision.summary);
        assert!(decision.mtp_allowed && decision.route == LinearRoute::Batched, "{}", decision.summary);
    }
}

#[test]
fn smollm2_on_the_kernel_matches_mlx_lm_and_verifies_exactly_on_the_batched_route() {
    let test = "smollm2_on_the_kernel_matches_mlx_lm_and_verifies_exactly_on_the_batched_route";
    let Some(dir) = smollm2_imported(test) else { return };
    let head = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/smollm2-135m-instruct.mtp.safetensors");
    std::fs::copy(head, dir.path().join("mtp.safetensors")).unwrap();
    let model = load(dir.path(), WeightPolicy::Kernel);
    let r = refs("smollm2.json");
    for (name, p) in r["prompts"].as_object().unwrap() {
        let prompt = ids(&p["prompt_ids"]);
        let mut row = model.new_row();
        let (_, logits, _) = model.prefill(&mut row, &prompt, 32, false).unwrap();
        let all = to_f32(&logits);
        let top: Vec<f32> = ids(&p["last_top32_ids"]).iter().map(|&i| all[i as usize]).collect();
        let err = max_rel_err(&top, &floats(&p["last_top32_logits"]));
        assert!(err <= 1e-4, "{name}: top-32 last logits differ from mlx-lm by {err:.2e}");
        let want = ids(&p["greedy_tokens"]);
        let gaps = floats(&p["top2_gaps"]);
        let n = gaps.iter().position(|&g| (g as f64) < 2e-3).map(|i| i + 1).unwrap_or(want.len());
        let got = ar::greedy(&*model, &prompt, n, 32).unwrap();
        assert_eq!(got, want[..n], "{name}: greedy tokens differ from mlx-lm");
        eprintln!("smollm2/{name} on the kernel: top-32 rel err {err:.1e}, {n} greedy tokens equal");
    }
    // Exact by construction here; on float32 BLAS it depends on the BLAS kernel (~4e-5 on the
    // machine of earlier sessions, which then fell back to row-by-row products).
    let decision = probe::gate(&*model, false).unwrap();
    cohort::model::linear::set_route(LinearRoute::Batched);
    assert_eq!(decision.reports[0].verdict, Verdict::Equal, "{}", decision.summary);
    assert_eq!(decision.route, LinearRoute::Batched, "{}", decision.summary);
}
