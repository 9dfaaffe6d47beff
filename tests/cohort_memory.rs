//! Memory across cohorts (its own test binary, so no other test shares MLX's allocator).

mod common;

use std::sync::{Arc, Mutex};

use cohort::engine::cohort::{CohortConfig, run_cohort};
use cohort::engine::prepare::prepare;
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::CancelFlag;
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::solo::GenerationMode;
use cohort::engine::telemetry::{SharedTelemetry, Telemetry};
use cohort::model::qwen3_5::Qwen35Model;
use cohort::model::tokenizer::TextTokenizer;
use common::*;
use mlx_rs::Dtype;

const NAME: &str = "qwen35_moe_4bit";

#[test]
fn twenty_cohorts_in_a_row_do_not_grow_memory() {
    let model = Qwen35Model::load(&fixture(NAME), Dtype::Float32).unwrap();
    let tok = TextTokenizer::load(&fixture(NAME)).unwrap();
    let refs = reference(NAME);
    let prompts: Vec<Vec<u32>> =
        ["one_token", "short", "long", "chunk_cross", "short", "long", "chunk_cross", "one_token"]
            .iter()
            .map(|k| ids(&refs["prompts"][k]["prompt_ids"]))
            .collect();
    let reqs: Vec<Request> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| Request {
            id: format!("r{i}"),
            prompt: Prompt::Ids(p.clone()),
            max_tokens: 12,
            sampler: SamplerConfig::greedy(),
            seed: 0,
            stop: vec![],
            ignore_eos: true,
        })
        .collect();
    let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
    let mut readings = Vec::new();
    for _ in 0..20 {
        let mut rs: Vec<_> = reqs.iter().map(|r| prepare(&model, &tok, r, CancelFlag::default()).unwrap()).collect();
        run_cohort(
            &model,
            &tok,
            &mut rs,
            &CohortConfig { chunk: 32, route_id: "t".into(), mode: GenerationMode::Mtp },
            &tel,
            &mut |_| {},
        )
        .unwrap();
        drop(rs);
        mlx_rs::memory::clear_cache().unwrap();
        readings.push(mlx_rs::memory::active_memory().unwrap());
    }
    let base = readings[0];
    let max = *readings.iter().max().unwrap();
    assert!(max <= base + 16 * 1024, "active memory grew from {base} to {max} bytes over 20 cohorts: {readings:?}");
}
