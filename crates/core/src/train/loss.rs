//! The two distillation objectives over a batch of head logits [B, T, V]:
//! - `ce`: cross-entropy on the target's argmax token (what a greedy verify accepts);
//! - `kl`: cross-entropy to the target's top-k distribution (renormalised), i.e. KL(p || q) up to
//!   a constant on that support, which is what sampled acceptance min(1, p/q) rewards.
//!
//! Both average over unmasked positions and also return how many argmax predictions match.
//! An optional auxiliary (`feature`) regresses the head's final-norm state onto the target's
//! own final-norm state at t+1 (EAGLE's feature loss): the logits are that state times the
//! shared LM head, so matching it matches the whole distribution, and it supervises H numbers per
//! position instead of one label, which matters when distilled positions are scarce.

use anyhow::Result;
use mlx_rs::Array;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    Ce,
    Kl,
}

/// What a batch supervises, all [B, T] (or [B, T, K], [B, T, H]).
#[derive(Clone)]
pub struct Targets {
    pub labels: Array,
    pub mask: Array,
    pub topk: Option<(Array, Array)>,
    /// The target's final-norm hidden state at t+1, for the feature loss.
    pub next_hidden: Option<Array>,
}

/// Relative squared error of the head's states against the target's next states over unmasked
/// positions: sum |s - h|^2 / sum |h|^2 (0 = exact, 1 = predicting zeros).
pub fn feature_loss(states: &Array, next_hidden: &Array, mask: &Array) -> Result<Array> {
    let m = mask.expand_dims(-1)?;
    let err = states.subtract(next_hidden)?.square()?.multiply(&m)?.sum(None)?;
    let norm = next_hidden.square()?.multiply(&m)?.sum(None)?;
    Ok(err.divide(mlx_rs::ops::maximum(&norm, Array::from_f32(1e-6))?)?)
}

/// (mean loss, matching argmax count, unmasked count) as scalars.
pub fn loss(logits: &Array, t: &Targets, objective: Objective) -> Result<(Array, Array, Array)> {
    let lse = mlx_rs::ops::logsumexp_axis(logits, -1, None)?;
    let per = match (objective, &t.topk) {
        (Objective::Kl, Some((ids, p))) => {
            let picked = logits.take_along_axis(ids, -1)?;
            lse.subtract(picked.multiply(p)?.sum_axis(-1, None)?)?
        }
        _ => {
            let picked = logits.take_along_axis(t.labels.expand_dims(-1)?, -1)?.squeeze_axes(&[-1])?;
            lse.subtract(picked)?
        }
    };
    let count = t.mask.sum(None)?;
    let mean = per.multiply(&t.mask)?.sum(None)?.divide(mlx_rs::ops::maximum(&count, Array::from_f32(1.0))?)?;
    let pred = mlx_rs::ops::indexing::argmax_axis(logits, -1, None)?.as_dtype(t.labels.dtype())?;
    let hits = pred.eq(&t.labels)?.as_dtype(mlx_rs::Dtype::Float32)?.multiply(&t.mask)?.sum(None)?;
    Ok((mean, hits, count))
}
