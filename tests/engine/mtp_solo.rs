//! Solo MTP against plain decoding on the same model: greedy MTP must emit exactly the AR
//! tokens, and after any mix of accepted and rejected drafts the row's state must equal a fresh
//! prefill of the committed tokens.

use crate::common;

use cohort::engine::prepare::prepare;
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::{CancelFlag, RowRun};
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::solo::{GenerationMode, run_solo};
use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::forward::LanguageModel;
use cohort::model::text::tokenizer::TextTokenizer;
use common::*;
use mlx_rs::Dtype;

const FIXTURES: [&str; 3] = ["qwen35_moe_4bit", "qwen35_dense_8bit", "qwen35_dense_bf16"];

fn request(ids: Vec<u32>, sampler: SamplerConfig, seed: u64, max_tokens: usize) -> Request {
    Request {
        id: "t".into(),
        prompt: Prompt::Ids(ids),
        max_tokens,
        sampler,
        seed,
        stop: vec![],
        ignore_eos: true,
        mode: None,
    }
}

fn generate(model: &dyn LanguageModel, tok: &TextTokenizer, req: &Request, mode: GenerationMode) -> RowRun {
    let mut run = prepare(model, tok, req, CancelFlag::default()).unwrap();
    run_solo(model, tok, &mut run, mode, 32, &mut |_| {}).unwrap();
    run
}

#[test]
fn greedy_mtp_equals_greedy_ar_on_every_fixture_and_prompt() {
    for name in FIXTURES {
        let model = Qwen35Model::load(&fixture(name), Dtype::Float32).unwrap();
        let tok = TextTokenizer::load(&fixture(name)).unwrap();
        let refs = reference(name);
        for (pname, p) in refs["prompts"].as_object().unwrap() {
            let req = request(ids(&p["prompt_ids"]), SamplerConfig::greedy(), 0, 48);
            let ar = generate(&model, &tok, &req, GenerationMode::Ar);
            let mtp = generate(&model, &tok, &req, GenerationMode::Mtp);
            assert_eq!(ar.tokens, ids(&p["greedy_tokens"])[..48].to_vec(), "{name}/{pname}: AR differs from mlx-lm");
            assert_eq!(mtp.tokens, ar.tokens, "{name}/{pname}: greedy MTP differs from AR");
            let s = &mtp.stats;
            assert!(s.verify_cycles > 0, "{name}/{pname}: MTP ran no verify cycle");
            assert_eq!(s.accepted_drafts + s.rejected_drafts, s.verify_cycles);
        }
    }
}

#[test]
fn same_seed_same_output_when_sampling() {
    let name = "qwen35_moe_4bit";
    let model = Qwen35Model::load(&fixture(name), Dtype::Float32).unwrap();
    let tok = TextTokenizer::load(&fixture(name)).unwrap();
    let prompt = ids(&reference(name)["prompts"]["short"]["prompt_ids"]);
    let sampler = SamplerConfig { temperature: 0.8, top_p: 0.95, top_k: 40, ..Default::default() };
    for mode in [GenerationMode::Ar, GenerationMode::Mtp] {
        let a = generate(&model, &tok, &request(prompt.clone(), sampler, 7, 40), mode);
        let b = generate(&model, &tok, &request(prompt.clone(), sampler, 7, 40), mode);
        let c = generate(&model, &tok, &request(prompt.clone(), sampler, 8, 40), mode);
        assert_eq!(a.tokens, b.tokens, "{mode:?}: same seed, different output");
        assert_ne!(a.tokens, c.tokens, "{mode:?}: different seeds gave identical 40-token outputs");
    }
}

fn assert_close(a: &mlx_rs::Array, b: &mlx_rs::Array, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    let err = max_rel_err(&to_f32(a), &to_f32(b));
    assert!(err <= 1e-5, "{what}: differs from a fresh prefill by {err:.2e}");
}

/// After MTP decoding, the row must hold exactly what a fresh prefill of its committed tokens
/// holds: offsets, KV contents, conv tails and recurrent states.
fn assert_row_matches_fresh_prefill(model: &Qwen35Model, row: &cohort::model::layers::cache::RowCache, run: &RowRun) {
    use cohort::model::layers::cache::LayerState;
    let mut committed = run.prompt_ids.clone();
    committed.extend_from_slice(&run.tokens[..run.tokens.len() - 1]); // the last token is the un-fed primary
    assert_eq!(row.len as usize, committed.len(), "committed length");
    let mut fresh = model.new_row();
    model.prefill(&mut fresh, &committed, 32, false).unwrap();
    for (i, (a, b)) in row.layers.iter().zip(&fresh.layers).enumerate() {
        match (a, b) {
            (LayerState::Attention(x), LayerState::Attention(y)) => {
                assert_eq!(
                    (x.offset(), x.physical()),
                    (y.offset(), y.offset()),
                    "layer {i}: committed/physical offsets"
                );
                let ((xk, xv), (yk, yv)) = (x.committed().unwrap(), y.committed().unwrap());
                assert_close(&xk, &yk, &format!("layer {i} keys"));
                assert_close(&xv, &yv, &format!("layer {i} values"));
            }
            (LayerState::GatedDelta(x), LayerState::GatedDelta(y)) => {
                let (xc, yc) = (x.conv().unwrap().unwrap(), y.conv().unwrap().unwrap());
                let (xs, ys) = (x.ssm().unwrap().unwrap(), y.ssm().unwrap().unwrap());
                assert_close(&xc, &yc, &format!("layer {i} conv tail"));
                assert_close(&xs, &ys, &format!("layer {i} recurrent state"));
            }
            _ => panic!("layer {i}: kinds differ"),
        }
    }
    let pending = usize::from(run.pending_mtp.is_some());
    assert_eq!(
        row.mtp.offset() as usize + pending,
        committed.len() - 1,
        "MTP history holds one entry per committed transition"
    );
    assert_eq!(row.mtp.physical(), row.mtp.offset());
}

#[test]
fn accepted_and_rejected_drafts_leave_the_state_of_a_fresh_prefill() {
    use cohort::engine::solo::run_solo_on;
    for name in ["qwen35_moe_4bit", "qwen35_dense_8bit"] {
        let model = Qwen35Model::load(&fixture(name), Dtype::Float32).unwrap();
        let tok = TextTokenizer::load(&fixture(name)).unwrap();
        let p = &reference(name)["prompts"]["chunk_cross"];
        let truth = ids(&p["greedy_tokens"]);
        let req = request(ids(&p["prompt_ids"]), SamplerConfig::greedy(), 0, 40);
        // Scripted drafts: right, right, wrong, right, wrong, ... so keep = 2 and keep = 1 alternate.
        // Cycle c proposes the token after its primary; track the position the primary will have.
        for pattern in [&[true, true, false][..], &[true][..], &[false][..]] {
            let mut run = prepare(&model, &tok, &req, CancelFlag::default()).unwrap();
            let mut script = std::collections::VecDeque::new();
            let (mut pos, mut c) = (0usize, 0usize); // pos = index of the cycle's primary in `truth`
            while pos + 1 < truth.len() {
                let right = pattern[c % pattern.len()];
                script.push_back(if right { truth[pos + 1] } else { (truth[pos + 1] + 1) % 512 });
                pos += if right { 2 } else { 1 };
                c += 1;
            }
            run.draft_script = Some(script);
            let mut row = model.new_row();
            run_solo_on(&model, &tok, &mut run, &mut row, GenerationMode::Mtp, 32, &mut |_| {}).unwrap();
            assert_eq!(run.tokens, truth[..40].to_vec(), "{name} {pattern:?}: output differs from greedy AR");
            let s = &run.stats;
            if pattern.contains(&true) {
                assert!(s.accepted_drafts > 0, "{name} {pattern:?}: no draft accepted");
            }
            if pattern.contains(&false) {
                assert!(s.rejected_drafts > 0, "{name} {pattern:?}: no draft rejected");
            }
            assert_row_matches_fresh_prefill(&model, &row, &run);
        }
    }
}
