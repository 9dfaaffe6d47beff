//! A GPU's first long prompt read, paid before the engine reports ready.
//!
//! On MLX's GPU backends the first long prompt a process reads loads the kernels that prompt
//! reads and long-context decode steps take (compiled or read from MLX's kernel cache): on an
//! H200, 5.0 s of a 2,109-token paste's first read, against 0.22 s for the next paste in the same
//! process; a question sent meanwhile from another pane waited 2.2-3.4 s behind it. The engine
//! reads one synthetic prompt of a chunk and more, and decodes a few tokens after it, while it
//! loads instead. The CPU has no such first cost (its kernels are compiled in), so it skips this.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::prepare::{VERIFY_SLACK, prepare};
use super::request::{GenerationMode, Prompt, Request};
use super::row::CancelFlag;
use super::sampler::SamplerConfig;
use super::solo::run_solo;
use crate::model::forward::LanguageModel;
use crate::model::text::tokenizer::TextTokenizer;
use crate::platform::backend::Backend;
use crate::platform::rng::Rng;

/// Tokens past the chunk: the read then resumes once, as a long paste's does.
const PAST_CHUNK: usize = 53;
/// Tokens decoded after the read (an MTP row drafts and verifies at least once).
const DECODED: usize = 4;

/// Whether this backend pays a first-read cost worth moving to start-up.
pub fn wanted() -> bool {
    !Backend::is_cpu()
}

/// Read a synthetic prompt of `chunk` + [`PAST_CHUNK`] tokens (within the model's window) and
/// decode a few tokens after it, as a request in `mode` would; returns how long it took. Nothing
/// it leaves is kept.
pub fn warm_long_reads(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    chunk: usize,
    mode: GenerationMode,
) -> Result<Duration> {
    let started = Instant::now();
    let window = usize::try_from(model.max_context()).unwrap_or(usize::MAX);
    let len = chunk.saturating_add(PAST_CHUNK).min(window.saturating_sub(DECODED + VERIFY_SLACK + 1)).max(1);
    let vocab = model.vocab_size().max(1) as u64;
    let mut rng = Rng::new(0x3A47);
    let prompt: Vec<u32> = (0..len).map(|_| (rng.next_u64() % vocab) as u32).collect();
    let req = Request {
        id: "warm-up".into(),
        prompt: Prompt::Ids(prompt),
        max_tokens: DECODED,
        sampler: SamplerConfig::greedy(),
        seed: 0,
        stop: Vec::new(),
        ignore_eos: true,
        mode: Some(mode),
    };
    // The way a request is served alone: checked and built by `prepare`, run by `run_solo`.
    let mut run = prepare(model, tok, &req, CancelFlag::default())?;
    run_solo(model, tok, &mut run, mode, chunk, &mut |_| {})?;
    Ok(started.elapsed())
}
