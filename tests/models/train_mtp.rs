//! The MTP-head trainer on the tiny Llama fixture: the functional training forward is the
//! inference `mtp_forward`, a short run converges, checkpoints resume exactly, saved heads load
//! through the engine's loader and mean the same thing, and a head for another model is refused
//! with the offending tensor named.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cohort::model::families::llama::LlamaModel;
use cohort::model::forward::LanguageModel;
use cohort::train::eval::load_with_head;
use cohort::train::frozen::{self, Frozen};
use cohort::train::functional::head_logits;
use cohort::train::head_file::{self, StoreAs};
use cohort::train::loss::Objective;
use cohort::train::params::{self, HeadDims, Params};
use cohort::train::trainer::{self, Init, TrainConfig};
use common::*;
use mlx_rs::{Array, Dtype};

fn tiny() -> PathBuf {
    fixture("llama").join("tiny_llama_mlx")
}

fn setup() -> (HeadDims, Frozen, params::TargetLayer) {
    let (cfg, frozen, top) = frozen::load(&tiny()).unwrap();
    (HeadDims::from_llama(&cfg), frozen, top)
}

fn random_inputs(dims: &HeadDims, b: i32, t: i32, seed: u64) -> (Array, Array) {
    let key = mlx_rs::random::key(seed).unwrap();
    let hidden = mlx_rs::random::normal::<f32>(&[b, t, dims.hidden], None, None, &key).unwrap();
    let tokens = mlx_rs::random::randint::<_, i32>(0, dims.vocab, &[b, t], &key).unwrap();
    (hidden, tokens)
}

fn save_f32(p: &Params, dims: &HeadDims, path: &Path) {
    head_file::save(p, dims, StoreAs::F32, &HashMap::new(), path).unwrap();
}

/// Inference logits for each row on its own fresh MTP history, stacked.
fn inference_logits(model: &LlamaModel, hidden: &Array, tokens: &Array) -> Array {
    let b = hidden.shape()[0];
    let rows: Vec<Array> = (0..b)
        .map(|i| {
            let h = cohort::model::ops::slice_axis(hidden, 0, i, i + 1).unwrap();
            let t = cohort::model::ops::slice_axis(tokens, 0, i, i + 1).unwrap();
            model.mtp_forward(&h, &t, &mut [&mut model.new_row()]).unwrap()
        })
        .collect();
    mlx_rs::ops::concatenate(&rows, 0).unwrap()
}

#[test]
fn functional_forward_equals_inference_mtp_forward() {
    let (dims, frozen, top) = setup();
    let dir = tempfile::tempdir().unwrap();
    for (name, p) in
        [("random", params::init_random(&dims, 7).unwrap()), ("target", params::init_from_target(&dims, &top).unwrap())]
    {
        let path = dir.path().join(format!("{name}.safetensors"));
        save_f32(&p, &dims, &path);
        let model = load_with_head(&tiny(), &path).unwrap();
        let (hidden, tokens) = random_inputs(&dims, 3, 9, 1);
        let want = inference_logits(&model, &hidden, &tokens);
        let got = head_logits(&p, &dims, &frozen, &hidden, &tokens).unwrap();
        assert_eq!(got.shape(), want.shape());
        let err = max_rel_err(&to_f32(&got), &to_f32(&want));
        assert!(err <= 1e-5, "{name} init: training forward differs from mtp_forward by {err:.2e}");

        // The history built step by step (prompt pairs, then one draft) gives the same last logits
        // as the training pass over the whole sequence.
        let h0 = cohort::model::ops::slice_axis(&hidden, 0, 0, 1).unwrap();
        let t0 = cohort::model::ops::slice_axis(&tokens, 0, 0, 1).unwrap();
        let mut row = model.new_row();
        let part = |a: &Array, lo, hi| cohort::model::ops::slice_axis(a, 1, lo, hi).unwrap();
        model.mtp_forward(&part(&h0, 0, 8), &part(&t0, 0, 8), &mut [&mut row]).unwrap();
        let last = model.mtp_forward(&part(&h0, 8, 9), &part(&t0, 8, 9), &mut [&mut row]).unwrap();
        let full = cohort::model::ops::slice_axis(&got, 0, 0, 1).unwrap();
        let err = max_rel_err(&to_f32(&last), &to_f32(&part(&full, 8, 9)));
        assert!(err <= 1e-5, "{name} init: incremental history differs by {err:.2e}");
    }
}

#[test]
fn saved_heads_load_through_the_engine_and_mean_the_same() {
    let (dims, frozen, _) = setup();
    let p = params::init_random(&dims, 3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (hidden, tokens) = random_inputs(&dims, 2, 6, 5);
    let want = to_f32(&head_logits(&p, &dims, &frozen, &hidden, &tokens).unwrap());
    // Tolerances: f32 is exact; bf16 and 8-bit storage round the weights.
    for (store, tol) in [(StoreAs::F32, 1e-5), (StoreAs::Bf16, 3e-2), (StoreAs::Q8, 3e-2)] {
        let path = dir.path().join(format!("{store:?}.safetensors"));
        head_file::save(&p, &dims, store, &HashMap::new(), &path).unwrap();
        let back = head_file::load(&path, &dims).unwrap();
        if store == StoreAs::F32 {
            for (k, v) in &p {
                assert_eq!(to_f32(v), to_f32(&back[k]), "{k} changed in a float32 round trip");
            }
        }
        let reread = to_f32(&head_logits(&back, &dims, &frozen, &hidden, &tokens).unwrap());
        let err = max_rel_err(&reread, &want);
        assert!(err <= tol, "{store:?}: reloaded head differs by {err:.2e}");
        let model = load_with_head(&tiny(), &path).unwrap();
        assert!(model.has_mtp());
        let engine = to_f32(&inference_logits(&model, &hidden, &tokens));
        let err = max_rel_err(&engine, &want);
        assert!(err <= tol, "{store:?}: the engine's view of the saved head differs by {err:.2e}");
    }
}

#[test]
fn a_head_for_another_model_is_refused_naming_the_tensor() {
    let (dims, _, _) = setup();
    let other = HeadDims { inter: dims.inter * 2, ..dims };
    let p = params::init_random(&other, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.safetensors");
    save_f32(&p, &other, &path);
    let err = format!("{:#}", head_file::load(&path, &dims).unwrap_err());
    assert!(err.contains("mtp.layers.0.mlp.gate_proj.weight") && err.contains("shape"), "trainer: {err}");
    let err = format!("{:#}", LlamaModel::load_with_mtp(&tiny(), Some(&path), Dtype::Float32).err().unwrap());
    assert!(err.contains("mtp.layers.0.mlp.gate_proj.weight"), "engine: {err}");

    // A missing tensor is named too.
    let mut partial = params::init_random(&dims, 1).unwrap();
    partial.remove(params::FINAL_NORM);
    let err = format!("{:#}", params::check(&partial, &dims, "test").unwrap_err());
    assert!(err.contains("mtp.norm.weight") && err.contains("missing"), "{err}");
}

fn write_data(dir: &Path) -> Vec<PathBuf> {
    let text = dir.join("text.txt");
    let mut lines = String::new();
    for i in 0..40 {
        lines += &format!(
            "The quick brown fox {i} jumps over the lazy dog, and the dog sleeps in the sun by the river number {}.\n",
            i * 7 % 13
        );
    }
    std::fs::write(&text, lines).unwrap();
    let chat = dir.join("prompts.jsonl");
    std::fs::write(&chat, "{\"prompt\": \"Tell me about foxes.\"}\n{\"prompt\": \"What is a river?\"}\n").unwrap();
    vec![text, chat]
}

fn config(dir: &Path, steps: usize) -> TrainConfig {
    TrainConfig {
        model_dir: tiny(),
        out: dir.join("head.safetensors"),
        data: write_data(dir),
        steps,
        stop_at: None,
        seq_len: 32,
        batch: 4,
        lr: 3e-3,
        weight_decay: 0.0,
        warmup: 5,
        clip: 1.0,
        resume: None,
        seed: 11,
        objective: Objective::Ce,
        topk: 8,
        feature_weight: 0.0,
        init: Init::Random,
        init_head: None,
        text_tokens: 1024,
        chat_prompts: 2,
        chat_skip: 0,
        answer_tokens: 12,
        sampled_fraction: 0.5,
        gen_batch: 2,
        distill_tokens: 256,
        cache: Some(dir.join("cache.safetensors")),
        extra_data: vec![],
        checkpoint_dir: dir.join("ckpt"),
        checkpoint_every: 0,
        eval: None,
        eval_prompts: 0,
        eval_tokens: 8,
        eval_every: 1000,
        eval_ar: false,
        store: StoreAs::F32,
        report: None,
    }
}

#[test]
fn a_short_run_converges_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let full = trainer::run(&config(dir.path(), 60)).unwrap();
    // Stated target: cross-entropy on the tiny target's own predictions falls at least 3x in
    // 60 steps from this seed.
    assert!(
        full.final_train_loss * 3.0 <= full.first_loss,
        "loss {:.3} -> {:.3}: did not fall 3x",
        full.first_loss,
        full.final_train_loss
    );
    assert!(full.positions > 0 && full.sequences > 2);
    let dims = setup().0;
    let full_head = head_file::load(&dir.path().join("head.safetensors"), &dims).unwrap();

    // The same 60-step schedule stopped at 30 with a checkpoint, then resumed: the same head as
    // the uninterrupted run (data from the cache, per-step batches, saved optimizer moments), up
    // to the last-bit differences of MLX's threaded CPU reductions (a wrong resume is off by >1e-2).
    let mut first = config(dir.path(), 60);
    first.stop_at = Some(30);
    first.checkpoint_every = 30;
    first.out = dir.path().join("half.safetensors");
    first.checkpoint_dir = dir.path().join("ckpt");
    assert_eq!(trainer::run(&first).unwrap().steps, 30);
    let mut second = config(dir.path(), 60);
    second.resume = Some(dir.path().join("ckpt"));
    second.out = dir.path().join("resumed.safetensors");
    second.checkpoint_dir = dir.path().join("ckpt");
    trainer::run(&second).unwrap();
    let resumed = head_file::load(&second.out, &dims).unwrap();
    for (k, v) in &full_head {
        let err = max_rel_err(&to_f32(&resumed[k]), &to_f32(v));
        assert!(err <= 1e-4, "{k}: resumed run differs from the uninterrupted one by {err:.2e}");
    }

    // A checkpoint is refused by a run with other settings.
    let mut other = config(dir.path(), 61);
    other.resume = Some(dir.path().join("ckpt"));
    let err = format!("{:#}", trainer::run(&other).err().unwrap());
    assert!(err.contains("other settings"), "{err}");
}

#[test]
fn kl_objective_trains_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 40);
    cfg.objective = Objective::Kl;
    let s = trainer::run(&cfg).unwrap();
    assert!(s.final_train_loss < s.first_loss * 0.6, "kl loss {:.3} -> {:.3}", s.first_loss, s.final_train_loss);
}

#[test]
fn the_shipped_smollm2_head_fits_smollm2() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/smollm2-135m-instruct.mtp.safetensors");
    let bytes = std::fs::metadata(&path).unwrap().len();
    assert!(bytes <= 10_000_000, "{} is {bytes} bytes, over the 10 MB budget", path.display());
    // SmolLM2-135M-Instruct's geometry (config.json of the imported model).
    let cfg = cohort::model::families::llama::LlamaConfig::from_json(&serde_json::json!({
        "model_type": "llama", "hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536,
        "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "rms_norm_eps": 1e-5,
        "vocab_size": 49152, "rope_theta": 100000.0, "tie_word_embeddings": true
    }))
    .unwrap();
    let p = head_file::load(&path, &HeadDims::from_llama(&cfg)).unwrap();
    for (k, v) in &p {
        assert!(to_f32(v).iter().all(|x| x.is_finite()), "{k} holds a non-finite value");
    }
}

#[test]
fn evaluate_only_writes_its_figures_to_the_report_too() {
    let dir = tempfile::tempdir().unwrap();
    let prompts = dir.path().join("heldout.jsonl");
    std::fs::write(&prompts, "{\"prompt\": \"Tell me about foxes.\"}\n").unwrap();
    let report = dir.path().join("report.json");
    let out = cohort_command(dir.path())
        .args(["train-mtp", "--evaluate-only", "-m"])
        .arg(tiny())
        .arg("--out")
        .arg(fixture("llama").join("tiny_mtp.safetensors"))
        .arg("--eval")
        .arg(&prompts)
        .args(["--eval-prompts", "1", "--eval-tokens", "6", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(written, printed, "the report must hold what was printed");
    let figures = written.as_array().unwrap();
    assert_eq!(figures[0]["mode"], "mtp");
    assert!(figures[0]["tokens"].as_u64().unwrap() > 0, "{written}");
}
