//! A finished row's own state as the cache entry of its prompt and answer.
//!
//! Where a decode step computes each row exactly as a prompt read does (on the CPU, the Llama
//! family's host path runs blocks of every size on cohort's kernel, one arithmetic per row), the
//! state a row reaches by decoding its answer is the state a fresh read of the prompt and the
//! answer reaches. The lane then keeps the row's own state when it ends, reading only the tokens
//! it drew but never fed (the last one), and the conversation's next turn resumes after the
//! answer at once: nothing is read back. [`decode_read_check`] decides at start-up whether that
//! holds here; where it does not, answers are read back as before (engine/lane.rs, `Settle`).

use anyhow::{Context, Result};
use mlx_rs::Array;

use super::Snapshot;
use super::check::{first_difference, state_of};
use crate::engine::request::{GenerationMode, Prompt, Request};
use crate::engine::row::{CancelFlag, RowRun};
use crate::engine::sampler::SamplerConfig;
use crate::engine::solo::run_solo_on;
use crate::model::forward::LanguageModel;
use crate::model::layers::cache::RowCache;
use crate::model::prefill::{read_prompt, resume_prompt};
use crate::model::text::tokenizer::TextTokenizer;
use crate::platform::rng::Rng;

/// The entry a fresh read of `run`'s prompt and answer would leave, made from `row`, the state
/// the run decoded into: the history entry an accepted draft still owes is written, the MTP
/// history is cut back to the entries a read writes (a draft step may have written the next),
/// and the token drawn but not fed is read as a prompt's last piece; where the answer's last
/// token was fed (an accepted draft was the budget's last token), the last position's logits come
/// from the head, as a read's do. `mtp`: the engine keeps MTP histories (its rows' prompts are
/// read with them). None when the row's state does not line up with its tokens: an AR row in an
/// MTP lane writes no history as it decodes, so its answer is read back instead.
pub fn settle_decoded(
    model: &dyn LanguageModel,
    run: &RowRun,
    mut row: RowCache,
    chunk: usize,
    mtp: bool,
) -> Result<Option<(Vec<u32>, Snapshot)>> {
    let tokens: Vec<u32> = [run.prompt_ids.as_slice(), run.tokens.as_slice()].concat();
    let fed = usize::try_from(row.len).context("a row with a negative length")?;
    let Some(carry) = run.hidden_last.clone() else { return Ok(None) };
    if fed < run.prompt_ids.len() || fed > tokens.len() {
        return Ok(None);
    }
    row.unpack();
    if mtp {
        if let Some((hidden, draft)) = &run.pending_mtp {
            let draft = Array::from_slice(&[*draft as i32], &[1, 1]);
            model.mtp_history(hidden, &draft, &mut [&mut row])?;
        }
        // A read of `fed` tokens leaves entries for all but the last (its pair is the next token).
        let (kept, wanted) = (row.mtp.offset(), fed as i32 - 1);
        if kept < wanted {
            return Ok(None);
        }
        row.mtp.trim(kept - wanted)?;
    }
    if fed == tokens.len() {
        // Nothing is written after the unpacking, so the row would keep views of the cohort's
        // buffers.
        row.detach()?;
        let logits = crate::model::routes::reading_prompt(|| model.head_logits(&carry))?;
        return Ok(Some((tokens, Snapshot::new(row, &carry, &logits)?)));
    }
    // The read writes every layer (and the history), so the row's buffers are its own after it.
    let (hidden, logits) = resume_prompt(model, &mut row, &tokens[fed..], chunk, mtp, Some(carry), &mut |_| {})?;
    Ok(Some((tokens, Snapshot::new(row, &hidden, &logits)?)))
}

/// What the decode check found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DecodeCheck {
    /// Every decoded answer's entry equal to a fresh read, bit for bit.
    pub exact: bool,
    /// The first difference found, when not exact.
    pub difference: Option<String>,
}

/// Prompt length of the check's runs, and their answers' lengths (two: a budget that ends on an
/// accepted draft leaves no token unfed, one that ends on a bonus token leaves one).
const PROMPT: usize = 41;
const ANSWERS: [usize; 2] = [9, 10];

/// Decode short answers to a synthetic prompt in the engine's mode (`mode`; greedy and sampled
/// rows), make each finished row's entry with [`settle_decoded`], and compare it with a fresh
/// read of the prompt and answer: every piece of state, the last hidden state and the logits, bit
/// for bit. (Rows of the other mode in an MTP lane write their histories through the same MTP
/// module calls; tests/engine/prompt_cache.rs runs both kinds through a warm lane against fresh runs.)
pub fn decode_read_check(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    chunk: usize,
    mode: GenerationMode,
) -> Result<DecodeCheck> {
    let vocab = model.vocab_size() as u64;
    let mut rng = Rng::new(0xDEC0DE);
    let prompt: Vec<u32> = (0..PROMPT).map(|_| (rng.next_u64() % vocab) as u32).collect();
    let mtp = mode == GenerationMode::Mtp && model.has_mtp();
    let row_mode = if mtp { GenerationMode::Mtp } else { GenerationMode::Ar };
    for (sampler, max_tokens) in
        [SamplerConfig::greedy(), SamplerConfig::default()].into_iter().flat_map(|s| ANSWERS.map(|n| (s, n)))
    {
        let req = Request {
            id: "decode-check".into(),
            prompt: Prompt::Ids(prompt.clone()),
            max_tokens,
            sampler,
            seed: 7,
            stop: Vec::new(),
            ignore_eos: true,
            mode: Some(row_mode),
        };
        let mut run = RowRun::new(&req, prompt.clone(), Vec::new(), CancelFlag::default());
        let mut row = model.new_row();
        run_solo_on(model, tok, &mut run, &mut row, row_mode, chunk, &mut |_| {})?;
        let what =
            format!("a {} {} row's answer", if sampler.is_greedy() { "greedy" } else { "sampled" }, row_mode.name());
        let Some((tokens, snap)) = settle_decoded(model, &run, row, chunk, mtp)? else {
            return Ok(DecodeCheck { exact: false, difference: Some(format!("{what} left no state to keep")) });
        };
        let mut fresh = model.new_row();
        let (hidden, logits) = read_prompt(model, &mut fresh, &tokens, chunk, mtp, &mut |_| {})?;
        let want = state_of(&fresh, &hidden, &logits)?;
        let got = state_of(&snap.row, &snap.hidden, &snap.logits)?;
        if let Some(piece) = first_difference(&want, &got) {
            let difference = format!("{what}, decoded, differs from a fresh read in {piece}");
            return Ok(DecodeCheck { exact: false, difference: Some(difference) });
        }
    }
    Ok(DecodeCheck { exact: true, difference: None })
}
