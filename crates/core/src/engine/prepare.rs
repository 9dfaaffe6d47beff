//! Turning a request into a row: tokenise (through the chat template when asked), check the
//! context window, and refuse what cannot run before any model work.

use anyhow::{Result, bail};

use super::request::{Prompt, Request};
use super::row::{CancelFlag, RowRun};
use crate::model::forward::LanguageModel;
use crate::model::text::tokenizer::TextTokenizer;

/// Room a verify block may write past the last emitted token.
pub const VERIFY_SLACK: usize = 2;

pub fn prompt_ids(tok: &TextTokenizer, prompt: &Prompt) -> Result<Vec<u32>> {
    let ids = match prompt {
        Prompt::Text(t) => tok.encode(t)?,
        Prompt::Ids(ids) => ids.clone(),
        Prompt::Chat(messages) => tok.encode(&tok.apply_chat_template(messages, true)?)?,
    };
    if ids.is_empty() {
        bail!("the prompt encodes to no tokens");
    }
    Ok(ids)
}

/// What a prompt is checked against before it is queued: the model's vocabulary and window.
#[derive(Debug, Clone, Copy)]
pub struct PromptLimits {
    pub vocab: u32,
    pub window: usize,
}

impl PromptLimits {
    pub fn of(model: &dyn LanguageModel) -> Self {
        Self { vocab: model.vocab_size() as u32, window: model.max_context() as usize }
    }
}

/// The prompt's token ids, or why the request cannot run whatever the engine holds: sampler
/// values, token ids outside the vocabulary, a prompt and `max_tokens` over the window. Checked
/// where the request comes in ([`super::intake`]) and again when it gets a row.
pub fn checked_prompt(tok: &TextTokenizer, limits: PromptLimits, req: &Request) -> Result<(Vec<u32>, usize)> {
    req.sampler.validate()?;
    let PromptLimits { vocab, window } = limits;
    // A prompt whose bytes alone put it over the window is refused before it is tokenized (a
    // 20 MB line took 20 s and 2.8 GB to refuse).
    if let Some(bytes) = req.prompt.text_bytes()
        && let Some(fewest) = tok.fewest_tokens(bytes).filter(|&n| n >= window)
    {
        bail!("the prompt is {bytes} bytes, at least {fewest} tokens: over the context window of {window}");
    }
    let ids = prompt_ids(tok, &req.prompt)?;
    if let Some(bad) = ids.iter().find(|&&i| i >= vocab) {
        bail!("prompt token id {bad} is outside the model's vocabulary of {vocab}");
    }
    if ids.len() >= window {
        bail!("the prompt has {} tokens, over the context window of {window}", ids.len());
    }
    // Checked: a huge max_tokens must not wrap around into a small total.
    let total = ids.len().checked_add(req.max_tokens).and_then(|n| n.checked_add(VERIFY_SLACK));
    let Some(total) = total.filter(|&n| n <= window) else {
        let room = window.saturating_sub(ids.len() + VERIFY_SLACK);
        if room == 0 {
            // No max_tokens fits: the prompt itself is what must give.
            bail!(
                "the prompt has {} tokens, which leaves no room for an answer in the context window of {window} ({VERIFY_SLACK} positions go to drafting): shorten the prompt to at most {} tokens",
                ids.len(),
                window - VERIFY_SLACK - 1
            );
        }
        bail!(
            "prompt ({} tokens) + max_tokens ({}) exceeds the context window of {window}; lower max_tokens to at most {room}",
            ids.len(),
            req.max_tokens,
        );
    };
    Ok((ids, total))
}

/// Build the row for `req`, or say why it cannot run.
pub fn prepare(model: &dyn LanguageModel, tok: &TextTokenizer, req: &Request, cancel: CancelFlag) -> Result<RowRun> {
    let (ids, total) = checked_prompt(tok, PromptLimits::of(model), req)?;
    let step = crate::model::layers::cache::KV_STEP as usize; // KV buffers grow in whole steps
    let positions = total.div_ceil(step) * step;
    crate::platform::memory::ensure_fits(
        (positions * model.kv_bytes_per_position()) as u64,
        &format!("the KV cache of this request ({} prompt tokens + max_tokens {})", ids.len(), req.max_tokens),
    )?;
    let mut eos = model.eos_ids();
    for id in tok.eos_ids() {
        if !eos.contains(id) {
            eos.push(*id);
        }
    }
    Ok(RowRun::new(req, ids, eos, cancel))
}
