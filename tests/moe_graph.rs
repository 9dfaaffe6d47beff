//! The compiled MoE block (src/model/moe_graph.rs) against mlx-lm's own outputs on the MoE
//! fixtures (tests/fixtures/references, mlx-lm 0.32.2): forced on, it must serve (a plan is
//! compiled) and give mlx-lm's logits and greedy tokens, as the plain route does in
//! tests/qwen35_reference.rs. One test, so the process-wide switch is never raced.

mod common;

use cohort::engine::ar;
use cohort::model::forward::LanguageModel;
use cohort::model::moe_graph;
use cohort::model::qwen3_5::Qwen35Model;
use common::*;
use mlx_rs::Dtype;

#[test]
fn compiled_moe_block_matches_mlx_lm_on_every_moe_fixture() {
    moe_graph::set_enabled(Some(true));
    for name in ["qwen35_moe_4bit", "qwen35_moe_hf", "qwen3_next_4bit"] {
        let model = Qwen35Model::load(&fixture(name), Dtype::Float32).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let refs = reference(name);
        for (pname, p) in refs["prompts"].as_object().unwrap() {
            let prompt = ids(&p["prompt_ids"]);
            let mut row = model.new_row();
            let (_, logits, _) = model.prefill(&mut row, &prompt, 32, false).unwrap();
            let err = max_rel_err(&to_f32(&logits), &floats(&p["last_logits"]));
            assert!(err <= 1e-4, "{name}/{pname}: last logits differ from mlx-lm by {err:.2e} (relative)");
            let want = ids(&p["greedy_tokens"]);
            let got = ar::greedy(&model, &prompt, want.len(), 32).unwrap();
            assert_eq!(got, want, "{name}/{pname}: greedy continuation differs from mlx-lm");
        }
        assert!(moe_graph::compiled_here() > 0, "{name}: the compiled block never served");
    }
    moe_graph::set_enabled(None);
}
