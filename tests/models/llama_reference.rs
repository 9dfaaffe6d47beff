//! cohort's Llama forward against mlx-lm's outputs (tests/fixtures/llama, made by
//! make_llama_fixtures.py with mlx-lm 0.32.2):
//! - tiny_llama.gguf (written by llama.cpp's gguf-py, Q/K permuted as llama.cpp's converter
//!   does) imported by cohort, against mlx-lm's llama on the same weights in HF layout;
//! - tiny_llama_mlx/ (saved and quantized by mlx-lm itself), against mlx-lm;
//! - the generic MTP head (tiny_mtp.safetensors) against the same head run with mlx-lm classes;
//! - SmolLM2-135M-Instruct (when its GGUF is present): cohort's import, greedy tokens equal
//!   mlx-lm's on the same imported directory.

use crate::common;

use std::path::PathBuf;

use cohort::engine::ar;
use cohort::model::families::llama::{LanguageModel, LlamaModel, Logits};
use cohort::model::formats::gguf_import::import_gguf;
use common::*;
use mlx_rs::{Array, Dtype};
use serde_json::Value;

const CHUNK: usize = 32;
/// Below this top-1/top-2 logit gap in the reference, float reassociation may flip the argmax.
const NEAR_TIE: f64 = 2e-3;

fn llama_fixture(name: &str) -> PathBuf {
    fixture("llama").join(name)
}

fn refs(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(llama_fixture(name)).unwrap()).unwrap()
}

fn import_tiny() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    import_gguf(&llama_fixture("tiny_llama.gguf"), dir.path()).unwrap();
    dir
}

fn load(dir: &std::path::Path) -> LlamaModel {
    LlamaModel::load(dir, Dtype::Float32).unwrap_or_else(|e| panic!("{}: {e:#}", dir.display()))
}

/// Greedy tokens must equal the reference up to its first near-tie (where a flip is noise);
/// returns how many were compared.
fn assert_greedy(got: &[u32], p: &Value, what: &str) -> usize {
    let want = ids(&p["greedy_tokens"]);
    let gaps = p.get("top2_gaps").map(floats);
    let n = match &gaps {
        Some(g) => g.iter().position(|&x| (x as f64) < NEAR_TIE).map(|i| i + 1).unwrap_or(want.len()),
        None => want.len(),
    };
    assert_eq!(&got[..n], &want[..n], "{what}: greedy tokens differ from mlx-lm");
    n
}

#[test]
fn imported_tiny_gguf_matches_mlx_lm() {
    let dir = import_tiny();
    let model = load(dir.path());
    assert!(!model.has_mtp());
    assert_eq!((model.cfg.rope_theta, model.cfg.vocab_size, model.cfg.eos_token_ids.clone()), (50000.0, 512, vec![2]));
    let r = refs("tiny_llama.json");
    for (name, p) in r["prompts"].as_object().unwrap() {
        let prompt = ids(&p["prompt_ids"]);
        let mut row = model.new_row();
        let (_, logits, _) = model.prefill(&mut row, &prompt, CHUNK, false).unwrap();
        let err = max_rel_err(&to_f32(&logits), &floats(&p["last_logits"]));
        assert!(err <= 1e-4, "{name}: last logits differ from mlx-lm by {err:.2e} (relative)");
        let greedy = ids(&p["greedy_tokens"]);
        for (i, want) in p["step_logits_first4"].as_array().unwrap().iter().enumerate() {
            let tok = Array::from_slice(&[greedy[i] as i32], &[1, 1]);
            let out = model.forward(&tok, &mut [&mut row], Logits::Last, false).unwrap();
            let err = max_rel_err(&to_f32(out.logits.as_ref().unwrap()), &floats(want));
            assert!(err <= 1e-4, "{name} step {i}: logits differ from mlx-lm by {err:.2e}");
        }
        let got = ar::greedy(&model, &prompt, greedy.len(), CHUNK).unwrap();
        let n = assert_greedy(&got, p, name);
        eprintln!("tiny/{name}: logits rel err {err:.1e}, {n}/64 greedy tokens compared");
    }
}

#[test]
fn wrong_qk_layout_would_not_match() {
    // The same imported model with RoPE in the interleaved layout (as if the rows had been left
    // permuted, or permuted the other way) must miss mlx-lm: the tests above can tell.
    let dir = import_tiny();
    let cfg_path = dir.path().join("config.json");
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path).unwrap()).unwrap();
    cfg["rope_traditional"] = Value::Bool(true);
    std::fs::write(&cfg_path, cfg.to_string()).unwrap();
    let model = load(dir.path());
    let p = &refs("tiny_llama.json")["prompts"]["long"];
    let mut row = model.new_row();
    let (_, logits, _) = model.prefill(&mut row, &ids(&p["prompt_ids"]), CHUNK, false).unwrap();
    let err = max_rel_err(&to_f32(&logits), &floats(&p["last_logits"]));
    assert!(err > 1e-2, "a wrong RoPE layout should be visible, got rel err {err:.2e}");
}

#[test]
fn mlx_lm_checkpoint_matches_mlx_lm() {
    // mlx-lm's own 4-bit g64 quantization and save: independent of the GGUF importer.
    let model = load(&llama_fixture("tiny_llama_mlx"));
    let r = refs("tiny_llama.json");
    for (name, p) in r["mlx_prompts"].as_object().unwrap() {
        let prompt = ids(&p["prompt_ids"]);
        let mut row = model.new_row();
        let (_, logits, _) = model.prefill(&mut row, &prompt, CHUNK, false).unwrap();
        let err = max_rel_err(&to_f32(&logits), &floats(&p["last_logits"]));
        assert!(err <= 1e-4, "{name}: last logits differ from mlx-lm by {err:.2e}");
        let want = ids(&p["greedy_tokens"]);
        let got = ar::greedy(&model, &prompt, want.len(), CHUNK).unwrap();
        if p["min_top2_gap"].as_f64().unwrap() >= NEAR_TIE {
            assert_eq!(got, want, "{name}: greedy tokens differ from mlx-lm");
        } else {
            assert_eq!(got[0], want[0], "{name}: first greedy token differs from mlx-lm");
        }
    }
}

#[test]
fn batched_rows_of_different_lengths_each_match_their_solo_run() {
    let dir = import_tiny();
    let model = load(dir.path());
    let r = refs("tiny_llama.json");
    let prompts: Vec<Vec<u32>> = ["one_token", "short", "long", "chat", "short", "one_token"]
        .iter()
        .map(|k| ids(&r["prompts"][k]["prompt_ids"]))
        .collect();
    let steps = 12;
    let solo: Vec<Vec<u32>> = prompts.iter().map(|p| ar::greedy(&model, p, steps, CHUNK).unwrap()).collect();
    let mut rows: Vec<_> = prompts.iter().map(|_| model.new_row()).collect();
    let mut next = Vec::new();
    for (row, p) in rows.iter_mut().zip(&prompts) {
        let (_, logits, _) = model.prefill(row, p, CHUNK, false).unwrap();
        next.push(ar::argmax_ids(&logits).unwrap().item_cast::<u32>());
    }
    let mut got: Vec<Vec<u32>> = next.iter().map(|&t| vec![t]).collect();
    let b = prompts.len() as i32;
    for _ in 1..steps {
        let tokens = Array::from_slice(&next.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[b, 1]);
        let mut refs: Vec<_> = rows.iter_mut().collect();
        let out = model.forward(&tokens, &mut refs, Logits::Last, false).unwrap();
        let ids = ar::argmax_ids(out.logits.as_ref().unwrap()).unwrap().flatten(None, None).unwrap();
        ids.eval().unwrap();
        next = ids.as_slice::<u32>().to_vec();
        for (g, t) in got.iter_mut().zip(&next) {
            g.push(*t);
        }
    }
    for (i, (g, s)) in got.iter().zip(&solo).enumerate() {
        assert_eq!(g, s, "row {i}: batched tokens differ from its solo run");
    }
    for (row, p) in rows.iter().zip(&prompts) {
        assert_eq!(row.len as usize, p.len() + steps - 1);
        assert_eq!(row.attention_offsets().unwrap(), (row.len, row.len));
    }
}

#[test]
fn generic_mtp_head_matches_its_mlx_lm_reference() {
    let dir = import_tiny();
    let r = refs("tiny_llama.json");
    // Both ways of providing the head: a given path, and mtp.safetensors beside the model.
    let given =
        LlamaModel::load_with_mtp(dir.path(), Some(&llama_fixture("tiny_mtp.safetensors")), Dtype::Float32).unwrap();
    std::fs::copy(llama_fixture("tiny_mtp.safetensors"), dir.path().join("mtp.safetensors")).unwrap();
    let beside = load(dir.path());
    for model in [&given, &beside] {
        assert!(model.has_mtp());
        for (name, want) in r["mtp_reference"].as_object().unwrap() {
            let p = &r["prompts"][name];
            let prompt = ids(&p["prompt_ids"]);
            let greedy = ids(&p["greedy_tokens"]);
            let mut row = model.new_row();
            let (_, _, hidden) = model.prefill(&mut row, &prompt, CHUNK, true).unwrap();
            let hidden = hidden.unwrap();
            let n = prompt.len() as i32;
            let mut shifted: Vec<i32> = prompt[1..].iter().map(|&x| x as i32).collect();
            shifted.push(greedy[0] as i32);
            let l0 = model.mtp_forward(&hidden, &Array::from_slice(&shifted, &[1, n]), &mut [&mut row]).unwrap();
            let l0 = cohort::model::ops::slice_axis(&l0, 1, n - 1, n).unwrap();
            let err = max_rel_err(&to_f32(&l0), &floats(&want["step0_logits"]));
            assert!(err <= 1e-4, "{name}: MTP step 0 differs by {err:.2e}");
            assert_eq!(ar::argmax_ids(&l0).unwrap().item_cast::<u32>(), want["step0_argmax"].as_u64().unwrap() as u32);
            let out = model
                .forward(&Array::from_slice(&[greedy[0] as i32], &[1, 1]), &mut [&mut row], Logits::Last, false)
                .unwrap();
            let l1 = model
                .mtp_forward(&out.hidden, &Array::from_slice(&[greedy[1] as i32], &[1, 1]), &mut [&mut row])
                .unwrap();
            let err = max_rel_err(&to_f32(&l1), &floats(&want["step1_logits"]));
            assert!(err <= 1e-4, "{name}: MTP step 1 differs by {err:.2e}");
            assert_eq!(row.mtp.offset(), n + 1);
        }
    }
}

#[test]
fn smollm2_greedy_tokens_match_mlx_lm() {
    let t0 = std::time::Instant::now();
    let dir = smollm2_imported("smollm2_greedy_tokens_match_mlx_lm");
    let model = load(dir.path());
    eprintln!("smollm2: imported and loaded in {:.1?}", t0.elapsed());
    let r = refs("smollm2.json");
    for (name, p) in r["prompts"].as_object().unwrap() {
        assert_eq!(p["raw_gguf_traditional_rope_tokens_match"], true, "fixture: the permutation cross-check failed");
        let t = std::time::Instant::now();
        let prompt = ids(&p["prompt_ids"]);
        let mut row = model.new_row();
        let (_, logits, _) = model.prefill(&mut row, &prompt, CHUNK, false).unwrap();
        let all = to_f32(&logits);
        let top: Vec<f32> = ids(&p["last_top32_ids"]).iter().map(|&i| all[i as usize]).collect();
        let err = max_rel_err(&top, &floats(&p["last_top32_logits"]));
        assert!(err <= 1e-4, "{name}: top-32 last logits differ from mlx-lm by {err:.2e}");
        let got = ar::greedy(&model, &prompt, 64, CHUNK).unwrap();
        let n = assert_greedy(&got, p, name);
        eprintln!("smollm2/{name}: top-32 logits rel err {err:.1e}, {n}/64 greedy tokens equal ({:.1?})", t.elapsed());
    }
}

#[test]
fn smollm2_answers_the_capital_of_france() {
    let dir = smollm2_imported("smollm2_answers_the_capital_of_france");
    let model = load(dir.path());
    let tok = tokenizers::Tokenizer::from_file(dir.path().join("tokenizer.json")).unwrap();
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("tokenizer_config.json")).unwrap()).unwrap();
    let mut env = minijinja::Environment::new();
    env.add_template("chat", cfg["chat_template"].as_str().unwrap()).unwrap();
    let prompt = env
        .get_template("chat")
        .unwrap()
        .render(minijinja::context! {
            messages => serde_json::json!([{"role": "user", "content": "What is the capital of France?"}]),
            add_generation_prompt => true
        })
        .unwrap();
    let ids = tok.encode(prompt.as_str(), false).unwrap().get_ids().to_vec();
    let out = ar::greedy(&model, &ids, 32, CHUNK).unwrap();
    let end = out.iter().position(|t| model.cfg.eos_token_ids.contains(t)).unwrap_or(out.len());
    let answer = tok.decode(&out[..end], true).unwrap();
    eprintln!("SmolLM2, greedy: {answer:?}");
    assert!(answer.contains("Paris"), "{answer:?}");
}
