//! Plain autoregressive decoding of one row: the baseline every speculative path must match.

use anyhow::Result;
use mlx_rs::Array;

use crate::model::forward::{LanguageModel, Logits};

/// Greedy argmax over the last axis on the device (MLX picks the lowest id on ties).
pub fn argmax_ids(logits: &Array) -> Result<Array> {
    Ok(mlx_rs::ops::indexing::argmax_axis(logits, -1, None)?)
}

/// Prefill `prompt` (in chunks of `chunk`) and decode `max_tokens` greedily; returns the ids.
/// Only the chosen id crosses to the host each step.
pub fn greedy(model: &dyn LanguageModel, prompt: &[u32], max_tokens: usize, chunk: usize) -> Result<Vec<u32>> {
    let mut row = model.new_row();
    let (_, logits, _) = model.prefill(&mut row, prompt, chunk, false)?;
    let mut next = argmax_ids(&logits)?; // [1, 1]
    let mut out = Vec::with_capacity(max_tokens);
    while out.len() < max_tokens {
        next.eval()?;
        out.push(next.item_cast::<u32>());
        if out.len() == max_tokens {
            break;
        }
        let step = model.forward(&next, &mut [&mut row], Logits::Last, false)?;
        next = argmax_ids(step.logits.as_ref().unwrap())?;
        let mut arrays = row.arrays();
        arrays.push(&next);
        mlx_rs::transforms::async_eval(arrays)?;
    }
    Ok(out)
}
