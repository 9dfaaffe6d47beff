//! Held-out evaluation through the engine's own solo MTP cycle: the head file is installed with
//! `LlamaModel::load_with_mtp` and each prompt runs `run_solo` in MTP mode, so the figures are the
//! ones `cohort generate` reports (acceptance = accepted / drafted, tokens per verify cycle).

use std::path::Path;

use anyhow::Result;
use mlx_rs::Dtype;
use serde::Serialize;

use crate::engine::prepare::prepare;
use crate::engine::request::{Prompt, Request};
use crate::engine::row::{CancelFlag, RowRun};
use crate::engine::sampler::SamplerConfig;
use crate::engine::solo::{GenerationMode, run_solo};
use crate::model::families::llama::LlamaModel;
use crate::model::forward::LanguageModel;
use crate::model::routes::WeightPolicy;
use crate::model::routes::{self, Routes};
use crate::model::text::tokenizer::{ChatMessage, TextTokenizer};

/// One sampler's totals over the prompts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Figures {
    pub sampler: String,
    pub mode: String,
    pub prompts: usize,
    pub tokens: usize,
    pub verify_cycles: usize,
    pub accepted: usize,
    pub rejected: usize,
    /// accepted / (accepted + rejected)
    pub acceptance: f64,
    /// committed tokens per verify cycle, (2 * accepted + rejected) / cycles
    pub tokens_per_cycle: f64,
    /// decode tokens (after the first) per decode second, summed over prompts
    pub decode_tok_s: f64,
}

impl Figures {
    fn add(&mut self, run: &RowRun) {
        let s = &run.stats;
        self.prompts += 1;
        self.tokens += run.tokens.len();
        self.verify_cycles += s.verify_cycles;
        self.accepted += s.accepted_drafts;
        self.rejected += s.rejected_drafts;
        self.decode_tok_s += s.decode_s; // summed seconds until `finish`
    }

    fn finish(&mut self) {
        let drafted = self.accepted + self.rejected;
        self.acceptance = if drafted > 0 { self.accepted as f64 / drafted as f64 } else { 0.0 };
        self.tokens_per_cycle = if self.verify_cycles > 0 {
            (2 * self.accepted + self.rejected) as f64 / self.verify_cycles as f64
        } else {
            0.0
        };
        let secs = self.decode_tok_s;
        self.decode_tok_s = if secs > 0.0 { self.tokens.saturating_sub(self.prompts) as f64 / secs } else { 0.0 };
    }
}

/// The target with `head` installed, weights dequantized as the CPU runs them.
pub fn load_with_head(dir: &Path, head: &Path) -> Result<LlamaModel> {
    let routes = Routes { weights: WeightPolicy::Dequantize, ..routes::current() };
    routes::scoped(routes, || LlamaModel::load_with_mtp(dir, Some(head), Dtype::Float32))
}

/// Run every prompt under each sampler in `mode`; prompt i uses seed `seed + i`.
pub fn run_prompts(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    prompts: &[Vec<ChatMessage>],
    samplers: &[(&str, SamplerConfig)],
    mode: GenerationMode,
    max_tokens: usize,
    seed: u64,
) -> Result<Vec<Figures>> {
    let mut out = Vec::new();
    for (name, sampler) in samplers {
        let mut f =
            Figures { sampler: (*name).to_owned(), mode: format!("{mode:?}").to_lowercase(), ..Default::default() };
        for (i, messages) in prompts.iter().enumerate() {
            let req = Request {
                id: format!("eval-{i}"),
                prompt: Prompt::Chat(messages.clone()),
                max_tokens,
                sampler: *sampler,
                seed: seed + i as u64,
                stop: vec![],
                ignore_eos: false,
                mode: None,
            };
            let mut run = prepare(model, tok, &req, CancelFlag::default())?;
            run_solo(model, tok, &mut run, mode, 512, &mut |_| {})?;
            f.add(&run);
        }
        f.finish();
        out.push(f);
    }
    Ok(out)
}

/// The two samplers the report uses: greedy and the engine's default (T 0.6, top-p 0.95, top-k 20).
pub fn samplers(with_default: bool) -> Vec<(&'static str, SamplerConfig)> {
    let mut v = vec![("greedy", SamplerConfig::greedy())];
    if with_default {
        v.push(("default", SamplerConfig::default()));
    }
    v
}
