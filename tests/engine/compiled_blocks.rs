//! The compiled MoE block and Gated DeltaNet mixer (crates/core/src/model/layers/compiled.rs) against mlx-lm's own
//! outputs on the Qwen3.5-family fixtures (tests/fixtures/references, mlx-lm 0.32.2): forced on,
//! they must serve (plans get compiled, the verify's capturing mixer among them) and give
//! mlx-lm's logits and greedy tokens, by AR and by greedy MTP (whose T=2 verify and per-position
//! state capture run through the compiled mixer), as the plain route does in
//! tests/models/qwen35_reference.rs and tests/engine/mtp_solo.rs. Each case runs under its own `Routes` value.

use crate::common;

use cohort::engine::ar;
use cohort::engine::prepare::prepare;
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::CancelFlag;
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::solo::{GenerationMode, run_solo};
use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::forward::LanguageModel;
use cohort::model::layers::compiled::compiled_here;
use cohort::model::layers::gated_delta::GdnPlan;
use cohort::model::layers::moe_graph::{Plan as MoePlan, Stacking};
use cohort::model::routes::{self, Routes};
use cohort::model::storage::Storage;
use cohort::model::text::tokenizer::TextTokenizer;
use common::*;
use mlx_rs::Dtype;

/// Fixtures with an MTP layer, whose greedy MTP run must give mlx-lm's greedy tokens too.
const WITH_MTP: [&str; 3] = ["qwen35_moe_4bit", "qwen35_dense_8bit", "qwen35_dense_bf16"];

#[test]
fn compiled_blocks_match_mlx_lm_on_every_qwen35_fixture() {
    let base = routes::current();
    let compiled = Routes { compile_moe: true, compile_gdn: true, ..base };
    let fixtures = ["qwen35_moe_4bit", "qwen35_moe_hf", "qwen3_next_4bit", "qwen35_dense_8bit", "qwen35_dense_bf16"];
    for (i, name) in fixtures.into_iter().enumerate() {
        // Every other fixture with the projections that share an input stacked into one product
        // each, as the CUDA backend loads them (the mixer's four, attention's q/k/v, the MoE
        // block's expert gate/up, shared expert gate/up, router and shared expert gate): the
        // 4-bit MoE, qwen3_next's regrouped projections, bf16.
        let stacked = i % 2 == 0;
        // The others with gather_qmm building its own rows (bench-step's `--moe-rows built`).
        // The quantized fixtures with one of CUDA's load layouts forced (crates/core/src/model/layers/product.rs):
        // odd widths padded with zero rows (1), narrow products with a dense copy (2); the float
        // ones have nothing to lay out (0).
        let layout = match name {
            "qwen35_moe_4bit" | "qwen35_dense_8bit" => 1,
            "qwen3_next_4bit" => 2,
            _ => 0,
        };
        let _in_force = routes::enter(Routes {
            stack_projections: stacked,
            moe_built_rows: !stacked,
            pad_products: layout == 1,
            dense_products: layout == 2,
            ..compiled
        });
        let before = (compiled_here::<GdnPlan>(), compiled_here::<MoePlan>());
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
            if WITH_MTP.contains(&name) {
                let tok = TextTokenizer::load(&fixture(name)).unwrap();
                let sampler = SamplerConfig::greedy();
                let req = Request {
                    id: "t".into(),
                    prompt: Prompt::Ids(prompt.clone()),
                    max_tokens: 48,
                    sampler,
                    seed: 0,
                    stop: vec![],
                    ignore_eos: true,
                    mode: None,
                };
                let mut run = prepare(&model, &tok, &req, CancelFlag::default()).unwrap();
                run_solo(&model, &tok, &mut run, GenerationMode::Mtp, 32, &mut |_| {}).unwrap();
                assert!(run.stats.verify_cycles > 0, "{name}/{pname}: MTP ran no verify cycle");
                assert_eq!(run.tokens, want[..48].to_vec(), "{name}/{pname}: greedy MTP differs from mlx-lm");
            }
        }
        let (mixers, moes) = (compiled_here::<GdnPlan>(), compiled_here::<MoePlan>());
        assert!(
            mixers.iter().any(|p| p.fused_in == stacked),
            "{name}: the compiled mixer (input projections stacked: {stacked}) never served"
        );
        if name.contains("moe") || name.contains("next") {
            let all_stacked = Stacking { router_gate: stacked, gate_up: stacked, shared_gate_up: stacked };
            assert!(
                moes.iter().any(|p| Stacking::of(&p.storage) == all_stacked),
                "{name}: the compiled MoE block (stacked: {stacked}) never served"
            );
        }
        // The plans this fixture traced took its layout, and only it.
        let new_mixers = mixers.iter().filter(|p| !before.0.contains(p)).flat_map(|p| p.storage.to_vec());
        let new_moes = moes.iter().filter(|p| !before.1.contains(p)).flat_map(|p| p.storage.to_vec());
        let new: Vec<Storage> = new_mixers.chain(new_moes).collect();
        let padded = new.iter().filter(|s| matches!(s, Storage::Padded(..))).count();
        let dense = new.iter().filter(|s| matches!(s, Storage::WithDense(_))).count();
        let took = [(padded, dense) == (0, 0), padded > 0 && dense == 0, dense > 0 && padded == 0];
        assert!(took[layout], "{name}: layout {layout} forced, the plans have {padded} padded and {dense} dense");
        if WITH_MTP.contains(&name) {
            assert!(
                mixers.iter().any(|p| p.capture),
                "{name}: no verify ran through the compiled mixer with state capture"
            );
        }
    }
    // The plain route over stacked projections, as prefill chunks of more than a step's rows
    // run on the CUDA backend.
    let plain = Routes { compile_moe: false, compile_gdn: false, stack_projections: true, ..base };
    for (j, name) in ["qwen35_moe_4bit", "qwen3_next_4bit", "qwen35_dense_bf16"].into_iter().enumerate() {
        let _in_force = routes::enter(Routes { pad_products: j == 1, dense_products: j == 0, ..plain });
        let model = Qwen35Model::load(&fixture(name), Dtype::Float32).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        for (pname, p) in reference(name)["prompts"].as_object().unwrap() {
            let prompt = ids(&p["prompt_ids"]);
            let mut row = model.new_row();
            let (_, logits, _) = model.prefill(&mut row, &prompt, 32, false).unwrap();
            let err = max_rel_err(&to_f32(&logits), &floats(&p["last_logits"]));
            assert!(err <= 1e-4, "{name}/{pname}, plain ops, stacked: last logits differ from mlx-lm by {err:.2e}");
            let want = ids(&p["greedy_tokens"]);
            let got = ar::greedy(&model, &prompt, want.len(), 32).unwrap();
            assert_eq!(got, want, "{name}/{pname}, plain ops, stacked: greedy continuation differs from mlx-lm");
        }
    }
}
