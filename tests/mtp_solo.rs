//! Solo MTP against plain decoding on the same model: greedy MTP must emit exactly the AR
//! tokens, and after any mix of accepted and rejected drafts the row's state must equal a fresh
//! prefill of the committed tokens.

mod common;

use cohort::engine::prepare::prepare;
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::{CancelFlag, RowRun};
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::solo::{GenerationMode, run_solo};
use cohort::model::forward::LanguageModel;
use cohort::model::qwen3_5::Qwen35Model;
use cohort::model::tokenizer::TextTokenizer;
use common::*;
use mlx_rs::Dtype;

const FIXTURES: [&str; 3] = ["qwen35_moe_4bit", "qwen35_dense_8bit", "qwen35_dense_bf16"];

fn request(ids: Vec<u32>, sampler: SamplerConfig, seed: u64, max_tokens: usize) -> Request {
    Request { id: "t".into(), prompt: Prompt::Ids(ids), max_tokens, sampler, seed, stop: vec![], ignore_eos: true }
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
