//! cohort's Qwen3.5 forward against mlx-lm's own outputs on the same checkpoints
//! (tests/fixtures/references, made by tests/fixtures/make_fixtures.py with mlx-lm 0.32.2).

use crate::common;

use cohort::engine::ar;
use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::forward::{LanguageModel, Logits};
use common::*;
use mlx_rs::{Array, Dtype};

const FIXTURES: [&str; 5] =
    ["qwen35_moe_4bit", "qwen35_dense_8bit", "qwen35_dense_bf16", "qwen35_moe_hf", "qwen3_next_4bit"];
const CHUNK: usize = 32;

fn load(name: &str) -> Qwen35Model {
    Qwen35Model::load(&fixture(name), Dtype::Float32).unwrap_or_else(|e| panic!("{name}: {e:#}"))
}

#[test]
fn last_position_logits_match_mlx_lm() {
    for name in FIXTURES {
        let model = load(name);
        let refs = reference(name);
        for (pname, p) in refs["prompts"].as_object().unwrap() {
            let prompt = ids(&p["prompt_ids"]);
            let mut row = model.new_row();
            let (_, logits, _) = model.prefill(&mut row, &prompt, CHUNK, false).unwrap();
            let err = max_rel_err(&to_f32(&logits), &floats(&p["last_logits"]));
            assert!(err <= 1e-4, "{name}/{pname}: last logits differ from mlx-lm by {err:.2e} (relative)");
        }
    }
}

#[test]
fn greedy_tokens_match_mlx_lm_for_64_steps() {
    for name in FIXTURES {
        let model = load(name);
        let refs = reference(name);
        for (pname, p) in refs["prompts"].as_object().unwrap() {
            let prompt = ids(&p["prompt_ids"]);
            let want = ids(&p["greedy_tokens"]);
            let got = ar::greedy(&model, &prompt, want.len(), CHUNK).unwrap();
            assert_eq!(got, want, "{name}/{pname}: greedy continuation differs from mlx-lm");
        }
    }
}

#[test]
fn first_decode_steps_logits_match_mlx_lm() {
    let name = "qwen35_moe_4bit";
    let model = load(name);
    let p = &reference(name)["prompts"]["long"];
    let prompt = ids(&p["prompt_ids"]);
    let greedy = ids(&p["greedy_tokens"]);
    let mut row = model.new_row();
    model.prefill(&mut row, &prompt, CHUNK, false).unwrap();
    for (i, want) in p["step_logits_first4"].as_array().unwrap().iter().enumerate() {
        let tok = Array::from_slice(&[greedy[i] as i32], &[1, 1]);
        let out = model.forward(&tok, &mut [&mut row], Logits::Last, false).unwrap();
        let err = max_rel_err(&to_f32(out.logits.as_ref().unwrap()), &floats(want));
        assert!(err <= 1e-4, "step {i}: logits differ from mlx-lm by {err:.2e}");
    }
}

#[test]
fn batched_rows_of_different_lengths_each_match_their_solo_run() {
    let name = "qwen35_moe_4bit";
    let model = load(name);
    let refs = reference(name);
    let prompts: Vec<Vec<u32>> =
        ["one_token", "short", "long", "chunk_cross", "short", "one_token", "chunk_cross", "long"]
            .iter()
            .map(|k| ids(&refs["prompts"][k]["prompt_ids"]))
            .collect();
    let steps = 16;
    let solo: Vec<Vec<u32>> = prompts.iter().map(|p| ar::greedy(&model, p, steps, CHUNK).unwrap()).collect();
    let mut rows: Vec<_> = prompts.iter().map(|_| model.new_row()).collect();
    let mut next = Vec::new();
    for (row, p) in rows.iter_mut().zip(&prompts) {
        let (_, logits, _) = model.prefill(row, p, CHUNK, false).unwrap();
        next.push(ar::argmax_ids(&logits).unwrap().item_cast::<u32>());
    }
    let mut got: Vec<Vec<u32>> = next.iter().map(|&t| vec![t]).collect();
    for _ in 1..steps {
        let tokens = Array::from_slice(&next.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[8, 1]);
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
        let (committed, physical) = row.attention_offsets().unwrap();
        assert_eq!((committed, physical), (row.len, row.len));
    }
}
