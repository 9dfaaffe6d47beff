//! The split-read check: before the prompt cache serves a prefix as exact, the engine reads a
//! synthetic prompt whole and again in pieces (the first piece as a cached prefix would have
//! been read, the rest resumed from it, at several split points of awkward lengths) and compares
//! the two bit for bit: the last position's logits and hidden state, every attention layer's
//! keys and values, every Gated DeltaNet tail and recurrent state, and the MTP history. Equal at
//! every split: a resumed read gives the bits of a fresh one, and reuse is exact. Otherwise the
//! route's products or attention depend on where a read starts, and reuse would change answers.

use anyhow::Result;
use mlx_rs::Array;

use crate::model::forward::LanguageModel;
use crate::model::layers::cache::{LayerState, RowCache};
use crate::model::ops::host_f32;
use crate::model::prefill::{read_prompt, resume_prompt};
use crate::platform::rng::Rng;

/// Length of the synthetic prompt, and where it is split (a tiny head, an odd middle, a tail of
/// a few tokens).
const PROMPT: usize = 83;
const SPLITS: [usize; 3] = [5, 37, 78];

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SplitCheck {
    /// Every split read equal to the whole read, bit for bit.
    pub exact: bool,
    /// The first difference found, when not exact.
    pub difference: Option<String>,
}

/// Read a synthetic prompt whole in chunks of `chunk`, and split at each of [`SPLITS`] (then
/// resumed in chunks of `chunk`), comparing every piece of state.
pub fn split_read_check(model: &dyn LanguageModel, chunk: usize) -> Result<SplitCheck> {
    let vocab = model.vocab_size() as u64;
    let mut rng = Rng::new(0x5B117);
    let prompt: Vec<u32> = (0..PROMPT).map(|_| (rng.next_u64() % vocab) as u32).collect();
    let mtp = model.has_mtp();
    let mut whole = model.new_row();
    let (hidden, logits) = read_prompt(model, &mut whole, &prompt, chunk, mtp, &mut |_| {})?;
    let want = state_of(&whole, &hidden, &logits)?;
    for split in SPLITS {
        let mut row = model.new_row();
        let (carry, _) = read_prompt(model, &mut row, &prompt[..split], chunk, mtp, &mut |_| {})?;
        let (hidden, logits) = resume_prompt(model, &mut row, &prompt[split..], chunk, mtp, Some(carry), &mut |_| {})?;
        let got = state_of(&row, &hidden, &logits)?;
        if let Some(what) = first_difference(&want, &got) {
            let difference = format!("a read split at {split} of {PROMPT} tokens differs in {what}");
            return Ok(SplitCheck { exact: false, difference: Some(difference) });
        }
    }
    Ok(SplitCheck { exact: true, difference: None })
}

/// Every piece of a row's state as named host vectors, the last hidden state and logits last.
pub fn state_of(row: &RowCache, hidden: &Array, logits: &Array) -> Result<Vec<(String, Vec<f32>)>> {
    let mut out = Vec::new();
    for (i, layer) in row.layers.iter().enumerate() {
        match layer {
            LayerState::Attention(kv) => {
                if let Some((k, v)) = kv.committed() {
                    out.push((format!("layer {i}'s keys"), host_f32(&k)?));
                    out.push((format!("layer {i}'s values"), host_f32(&v)?));
                }
            }
            LayerState::GatedDelta(s) => {
                if let Some(c) = s.conv()? {
                    out.push((format!("layer {i}'s conv tail"), host_f32(&c)?));
                }
                if let Some(m) = s.ssm()? {
                    out.push((format!("layer {i}'s recurrent state"), host_f32(&m)?));
                }
            }
        }
    }
    if let Some((k, v)) = row.mtp.committed() {
        out.push(("the MTP history's keys".into(), host_f32(&k)?));
        out.push(("the MTP history's values".into(), host_f32(&v)?));
    }
    out.push(("the last hidden state".into(), host_f32(hidden)?));
    out.push(("the last logits".into(), host_f32(logits)?));
    Ok(out)
}

/// The name of the first piece of state that differs, bit for bit, between two rows' states.
pub fn first_difference(want: &[(String, Vec<f32>)], got: &[(String, Vec<f32>)]) -> Option<String> {
    if want.len() != got.len() {
        return Some(format!("its pieces of state ({} against {})", got.len(), want.len()));
    }
    want.iter().zip(got).find_map(|((name, a), (_, b))| {
        let same = a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        (!same).then(|| name.clone())
    })
}
