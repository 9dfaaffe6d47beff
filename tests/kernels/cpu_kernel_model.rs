//! Whole models on the CPU kernel's weight policy (`--weights kernel`, what `auto` picks on an
//! AVX2 CPU): outputs against mlx-lm's references, and the exactness probe, which the kernel's
//! row-independent products let pass on the batched route. On MLX's CPU backend the Llama
//! family's decode-sized blocks take the host decode path (`model::families::llama`'s `host.rs`); each test
//! says which route it checks. Its own test binary: the weight policy a load uses and the host
//! path switch are process-wide, so tests take turns.

use crate::common;

use std::path::{Path, PathBuf};

use cohort::engine::ar;
use cohort::engine::probe::{self, Verdict};
use cohort::model::families::llama::host_blocks_served;
use cohort::model::forward::LanguageModel;
use cohort::model::routes::BlockRoute;
use cohort::model::routes::WeightPolicy;
use cohort::model::routes::{self, Routes};
use common::*;
use mlx_rs::Dtype;
use serde_json::Value;

/// Tests take turns: the host path's served counter is process-wide (the engine's owner thread
/// counts into it too), so a test that expects it to stay still runs alone.
static TURNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURNS.lock().unwrap_or_else(|e| e.into_inner())
}

fn load(dir: &Path, policy: WeightPolicy) -> Box<dyn LanguageModel> {
    cohort::model::load::load_with_policy(dir, Dtype::Float32, policy).unwrap_or_else(|e| panic!("{e:#}"))
}

/// Whether this machine's backend gives the Llama family the host decode path at all.
fn host_path_here() -> bool {
    cohort::platform::backend::Backend::detect() == cohort::platform::backend::Backend::Cpu
        && std::env::var("COHORT_HOST_LAYERS").map(|v| v != "0").unwrap_or(true)
}

fn llama(name: &str) -> PathBuf {
    fixture("llama").join(name)
}

fn refs(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(llama(file)).unwrap()).unwrap()
}

#[test]
fn the_kernel_policy_matches_mlx_lm_on_its_own_checkpoint_on_both_decode_routes() {
    let _turn = turn();
    if !cohort::model::cpu::cpu_qmm::simd_available() {
        eprintln!("note: no AVX2/FMA here, the kernel runs its portable route");
    }
    // The host decode path, then MLX ops between the kernel's products (the route Qwen models
    // and `COHORT_HOST_LAYERS=0` take).
    for host in [true, false] {
        let was = routes::current();
        let before = host_blocks_served();
        routes::scoped(Routes { host_layers: host && was.host_layers, ..was }, matches_mlx_lm_on_tiny);
        let served = host_blocks_served() - before;
        if host && host_path_here() {
            assert!(served > 0, "the host decode path served no block");
        } else {
            assert_eq!(served, 0, "the host decode path served {served} blocks while off");
        }
    }
}

fn matches_mlx_lm_on_tiny() {
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
    let _turn = turn();
    // Every model with MTP weights among the fixtures: a T=2 verify block equals the two-step
    // chain byte for byte without the row-by-row route.
    let dir = tempfile::tempdir().unwrap();
    let tiny = fixture_copy("llama/tiny_llama_mlx", dir.path());
    std::fs::copy(llama("tiny_mtp.safetensors"), tiny.join("mtp.safetensors")).unwrap();
    for model_dir in [tiny, fixture("qwen35_moe_4bit"), fixture("qwen35_dense_8bit")] {
        let model = load(&model_dir, WeightPolicy::Kernel);
        assert!(model.has_mtp(), "{}", model_dir.display());
        let decision = probe::gate(&*model, false).unwrap();
        assert_eq!(decision.reports[0].verdict, Verdict::Equal, "{}: {}", model_dir.display(), decision.summary);
        assert!(decision.mtp_allowed && decision.route == BlockRoute::Batched, "{}", decision.summary);
    }
}

#[test]
fn smollm2_on_the_kernel_matches_mlx_lm_and_verifies_exactly_on_the_batched_route() {
    let _turn = turn();
    let test = "smollm2_on_the_kernel_matches_mlx_lm_and_verifies_exactly_on_the_batched_route";
    let dir = smollm2_with_head(test);
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
    assert_eq!(decision.reports[0].verdict, Verdict::Equal, "{}", decision.summary);
    assert_eq!(decision.route, BlockRoute::Batched, "{}", decision.summary);
}

#[test]
fn on_the_host_path_every_cohort_row_equals_its_solo_run() {
    use cohort::engine::cohort::{CohortConfig, run_cohort};
    use cohort::engine::prepare::prepare;
    use cohort::engine::request::{Prompt, Request};
    use cohort::engine::row::CancelFlag;
    use cohort::engine::sampler::SamplerConfig;
    use cohort::engine::solo::{GenerationMode, run_solo};
    use cohort::engine::telemetry::{SharedTelemetry, Telemetry};

    let _turn = turn();
    let dir = tempfile::tempdir().unwrap();
    let tiny = fixture_copy("llama/tiny_llama_mlx", dir.path());
    std::fs::copy(llama("tiny_mtp.safetensors"), tiny.join("mtp.safetensors")).unwrap();
    let model = load(&tiny, WeightPolicy::Kernel);
    let tok = cohort::model::text::tokenizer::TextTokenizer::load(&tiny).unwrap();
    let r = refs("tiny_llama.json");
    let p = |k: &str| ids(&r["mlx_prompts"][k]["prompt_ids"]);
    // Rows of different lengths; a long one whose prefill runs in MLX chunks before decoding on
    // the host, and a one-token prompt whose MTP history starts empty.
    let prompts = [p("one_token"), p("short"), p("chat"), p("long"), p("short")[4..].to_vec(), vec![7]];
    let before = host_blocks_served();
    for mode in [GenerationMode::Mtp, GenerationMode::Ar] {
        for sampler in [SamplerConfig::greedy(), SamplerConfig::default()] {
            let reqs: Vec<Request> = prompts
                .iter()
                .enumerate()
                .map(|(i, ids)| Request {
                    id: format!("r{i}"),
                    prompt: Prompt::Ids(ids.clone()),
                    max_tokens: 12 + 3 * i,
                    sampler,
                    seed: 77 + i as u64,
                    stop: vec![],
                    ignore_eos: true,
                    mode: None,
                })
                .collect();
            let mut runs: Vec<_> =
                reqs.iter().map(|q| prepare(&*model, &tok, q, CancelFlag::default()).unwrap()).collect();
            let tel: SharedTelemetry = std::sync::Arc::new(std::sync::Mutex::new(Telemetry::default()));
            let cfg = CohortConfig { chunk: 32, route_id: "test".into(), mode };
            run_cohort(&*model, &tok, &mut runs, &cfg, &tel, &mut |_| {}).unwrap();
            for (i, (q, run)) in reqs.iter().zip(&runs).enumerate() {
                let mut alone = prepare(&*model, &tok, q, CancelFlag::default()).unwrap();
                run_solo(&*model, &tok, &mut alone, mode, 32, &mut |_| {}).unwrap();
                assert_eq!(
                    run.tokens, alone.tokens,
                    "row {i} ({mode:?}, {sampler:?}): cohort differs from its solo run"
                );
                assert_eq!(run.tokens.len(), q.max_tokens, "row {i} ({mode:?})");
            }
        }
    }
    if host_path_here() {
        assert!(host_blocks_served() > before, "the host decode path served no block");
    }
}
