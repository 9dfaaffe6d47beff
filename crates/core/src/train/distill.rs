//! Running the frozen target: answering chat prompts with its own continuations (batched decode,
//! greedy or sampled), then one teacher-forced pass per batch of sequences that records, for every
//! position, the final-norm hidden state, the target's argmax next token and (for the KL
//! objective) its top-k next-token distribution. Training then runs only the small head.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use mlx_rs::{Array, Dtype};

use super::progress::Progress;
use crate::engine::sampler::{PenaltyState, SamplerConfig, distributions};
use crate::model::forward::{LanguageModel, Logits};
use crate::model::layers::cache::RowCache;
use crate::model::ops::{host_u32, slice_axis};
use crate::platform::rng::Rng;

/// Every distilled sequence, concatenated along positions.
pub struct Distilled {
    /// [N, H] float32: the target's final-norm hidden state at each position.
    pub hidden: Array,
    /// [N]: the tokens.
    pub ids: Vec<u32>,
    /// [N]: the target's argmax next token after each position.
    pub argmax: Vec<u32>,
    /// [N, K] int32 and [N, K] float32: the target's top-k next tokens and their probabilities
    /// (renormalised over the k), when the KL objective asked for them.
    pub topk: Option<(Array, Array)>,
    /// (first position, length) of each sequence.
    pub seqs: Vec<(usize, usize)>,
}

impl Distilled {
    pub fn positions(&self) -> usize {
        self.ids.len()
    }

    /// Save as one safetensors file (hidden states stay float32: they are the head's input).
    pub fn save(&self, path: &Path, meta: &str) -> Result<()> {
        let n = self.ids.len() as i32;
        let ids = Array::from_slice(&self.ids.iter().map(|&x| x as i32).collect::<Vec<_>>(), &[n]);
        let am = Array::from_slice(&self.argmax.iter().map(|&x| x as i32).collect::<Vec<_>>(), &[n]);
        let flat: Vec<i32> = self.seqs.iter().flat_map(|&(s, l)| [s as i32, l as i32]).collect();
        let seqs = Array::from_slice(&flat, &[self.seqs.len() as i32, 2]);
        let mut tensors: Vec<(&str, &Array)> =
            vec![("hidden", &self.hidden), ("ids", &ids), ("argmax", &am), ("seqs", &seqs)];
        if let Some((ti, tp)) = &self.topk {
            tensors.push(("topk_ids", ti));
            tensors.push(("topk_p", tp));
        }
        let metadata = std::collections::HashMap::from([("settings".to_owned(), meta.to_owned())]);
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        Array::save_safetensors(tensors, &metadata, path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(())
    }

    /// Append another distillation (made by the same target) after this one.
    pub fn merge(mut self, other: Distilled) -> Result<Self> {
        let base = self.ids.len();
        self.hidden = mlx_rs::ops::concatenate(&[&self.hidden, &other.hidden], 0)?;
        self.ids.extend(other.ids);
        self.argmax.extend(other.argmax);
        self.topk = match (self.topk, other.topk) {
            (Some((a, b)), Some((c, d))) if a.shape()[1] == c.shape()[1] => {
                Some((mlx_rs::ops::concatenate(&[a, c], 0)?, mlx_rs::ops::concatenate(&[b, d], 0)?))
            }
            _ => None,
        };
        self.seqs.extend(other.seqs.into_iter().map(|(s, n)| (s + base, n)));
        // Evaluate every concatenation now: left lazy, each batch's slice would redo it.
        let mut arrays = vec![&self.hidden];
        if let Some((a, b)) = &self.topk {
            arrays.extend([a, b]);
        }
        mlx_rs::transforms::eval(arrays)?;
        Ok(self)
    }

    /// Load a cache written by `save`; refuses one made with other settings (`meta` None: any).
    pub fn load(path: &Path, meta: Option<&str>) -> Result<Self> {
        let (mut t, m) = Array::load_safetensors_with_metadata(path)
            .map_err(|e| anyhow::anyhow!("{}: cannot load distillation cache: {e}", path.display()))?;
        let found = m.get("settings").map(String::as_str).unwrap_or("");
        if let Some(meta) = meta
            && found != meta
        {
            bail!(
                "{} was made with other settings ({found}); this run needs ({meta}): delete it or give another --cache",
                path.display()
            );
        }
        let mut take = |k: &str| t.remove(k).with_context(|| format!("{}: no tensor \"{k}\"", path.display()));
        let hidden = take("hidden")?;
        let ids = host_u32(&take("ids")?)?;
        let argmax = host_u32(&take("argmax")?)?;
        let s = host_u32(&take("seqs")?)?;
        let seqs = s.chunks(2).map(|c| (c[0] as usize, c[1] as usize)).collect();
        let topk = match (take("topk_ids"), take("topk_p")) {
            (Ok(a), Ok(b)) => Some((a, b)),
            _ => None,
        };
        Ok(Self { hidden, ids, argmax, topk, seqs })
    }
}

fn token_array(rows: &[u32]) -> Array {
    Array::from_slice(&rows.iter().map(|&t| t as i32).collect::<Vec<_>>(), &[rows.len() as i32, 1])
}

/// Answer each prompt (already rendered to ids) with the target's own continuation: at most
/// `max_new` tokens, stopping at an end-of-sequence id; `batch` rows decode together. Returns
/// prompt + answer per prompt. Row r samples with `Rng::new(seed + r)`, so answers are
/// reproducible whatever the batching.
#[allow(clippy::too_many_arguments)]
pub fn answer(
    model: &dyn LanguageModel,
    prompts: &[Vec<u32>],
    max_new: &[usize],
    eos: &[u32],
    sampler: SamplerConfig,
    seed: u64,
    batch: usize,
    progress: &mut Progress,
) -> Result<Vec<Vec<u32>>> {
    let mut out = Vec::with_capacity(prompts.len());
    let t0 = Instant::now();
    let mut generated = 0usize;
    for (bi, chunk) in prompts.chunks(batch.max(1)).enumerate() {
        let base = bi * batch.max(1);
        let mut rows: Vec<RowCache> = chunk.iter().map(|_| model.new_row()).collect();
        let mut seqs: Vec<Vec<u32>> = chunk.to_vec();
        let mut rngs: Vec<Rng> = (0..chunk.len()).map(|r| Rng::new(seed.wrapping_add((base + r) as u64))).collect();
        let pens = PenaltyState::default();
        let mut last = Vec::with_capacity(chunk.len());
        for (r, ids) in chunk.iter().enumerate() {
            let (_, logits, _) = model.prefill(&mut rows[r], ids, 512, false)?;
            let v = *logits.shape().last().unwrap();
            let d = distributions(&logits.reshape(&[1, v])?, &[sampler], &[&pens])?;
            let tok = if sampler.is_greedy() { d[0].argmax() } else { d[0].sample(&mut rngs[r]) };
            last.push(tok);
        }
        let mut active: Vec<usize> = Vec::new();
        for r in 0..chunk.len() {
            seqs[r].push(last[r]);
            generated += 1;
            if !eos.contains(&last[r]) && max_new[base + r] > 1 {
                active.push(r);
            }
        }
        // The whole chunk steps together with its KV packed, so attention is one op a layer;
        // finished rows ride along on their last token and their outputs are dropped.
        let buffers = RowCache::pack(&mut rows)?;
        let cfgs = vec![sampler; chunk.len()];
        let penalties = vec![&pens; chunk.len()];
        while !active.is_empty() {
            let mut refs: Vec<&mut RowCache> = rows.iter_mut().collect();
            let o = model.forward(&token_array(&last), &mut refs, Logits::Last, false)?;
            let logits = o.logits.context("no logits")?;
            let v = *logits.shape().last().unwrap();
            let dists = distributions(&logits.reshape(&[chunk.len() as i32, v])?, &cfgs, &penalties)?;
            buffers.eval_with(rows.iter().flat_map(|r| r.arrays()))?;
            let mut still = Vec::with_capacity(active.len());
            for &r in &active {
                let tok = if sampler.is_greedy() { dists[r].argmax() } else { dists[r].sample(&mut rngs[r]) };
                last[r] = tok;
                seqs[r].push(tok);
                generated += 1;
                if !eos.contains(&tok) && seqs[r].len() - chunk[r].len() < max_new[base + r] {
                    still.push(r);
                }
            }
            active = still;
            let rate = generated as f64 / t0.elapsed().as_secs_f64().max(1e-9);
            progress.update(out.len() + chunk.len() - active.len(), &format!("{generated} tokens, {rate:.0} tok/s"));
        }
        out.extend(seqs);
    }
    Ok(out)
}

/// Teacher-force `seqs` through the target in batches of about `batch_tokens` positions and
/// record hidden states, argmax labels and (when `topk` > 0) top-k distributions.
pub fn distill(
    model: &dyn LanguageModel,
    seqs: &[Vec<u32>],
    batch_tokens: usize,
    topk: usize,
    progress: &mut Progress,
) -> Result<Distilled> {
    // Similar lengths together, so padding stays small.
    let mut order: Vec<usize> = (0..seqs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(seqs[i].len()));
    let mut hiddens = Vec::new();
    let mut topk_ids = Vec::new();
    let mut topk_ps = Vec::new();
    let (mut ids, mut argmax, mut spans) = (Vec::new(), Vec::new(), Vec::new());
    let t0 = Instant::now();
    let mut done_tokens = 0usize;
    let mut i = 0;
    while i < order.len() {
        let t = seqs[order[i]].len();
        let b = (batch_tokens / t.max(1)).max(1).min(order.len() - i);
        let group = &order[i..i + b];
        i += b;
        let mut flat = Vec::with_capacity(b * t);
        for &g in group {
            let s = &seqs[g];
            flat.extend(s.iter().map(|&x| x as i32));
            flat.extend(std::iter::repeat_n(0, t - s.len())); // padding after a causal prefix changes nothing before it
        }
        let tokens = Array::from_slice(&flat, &[b as i32, t as i32]);
        let mut rows: Vec<RowCache> = group.iter().map(|_| model.new_row()).collect();
        let mut refs: Vec<&mut RowCache> = rows.iter_mut().collect();
        let out = model.forward(&tokens, &mut refs, Logits::All, false)?;
        let logits = out.logits.context("no logits")?.as_dtype(Dtype::Float32)?;
        let am = mlx_rs::ops::indexing::argmax_axis(&logits, -1, None)?;
        let hidden = out.hidden.as_dtype(Dtype::Float32)?;
        let (ti, tp) = if topk > 0 {
            let v = *logits.shape().last().unwrap();
            let lse = mlx_rs::ops::logsumexp_axis(&logits, -1, true)?;
            let part = mlx_rs::ops::argpartition_axis(&logits, v - topk as i32, -1)?;
            let top = slice_axis(&part, 2, v - topk as i32, v)?;
            let lp = logits.take_along_axis(&top, -1)?.subtract(&lse)?;
            let p = mlx_rs::ops::exp(&lp)?;
            let p = p.divide(p.sum_axis(-1, true)?)?;
            (Some(top.as_dtype(Dtype::Int32)?), Some(p))
        } else {
            (None, None)
        };
        let mut to_eval = vec![&am, &hidden];
        to_eval.extend(ti.iter().chain(tp.iter()));
        mlx_rs::transforms::eval(to_eval)?;
        let am_h = host_u32(&am)?;
        for (r, &g) in group.iter().enumerate() {
            let n = seqs[g].len();
            spans.push((ids.len(), n));
            ids.extend_from_slice(&seqs[g]);
            argmax.extend_from_slice(&am_h[r * t..r * t + n]);
            let row = |a: &Array| -> Result<Array> {
                let x = slice_axis(a, 0, r as i32, r as i32 + 1)?;
                let x = slice_axis(&x, 1, 0, n as i32)?;
                let mut shape = x.shape()[1..].to_vec();
                shape[0] = n as i32;
                Ok(x.reshape(&shape)?)
            };
            hiddens.push(row(&hidden)?);
            if let (Some(ti), Some(tp)) = (&ti, &tp) {
                topk_ids.push(row(ti)?);
                topk_ps.push(row(tp)?);
            }
            done_tokens += n;
        }
        let rate = done_tokens as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        progress.update(spans.len(), &format!("{done_tokens} positions, {rate:.0} tok/s"));
    }
    let hidden = mlx_rs::ops::concatenate(&hiddens, 0)?;
    let topk = if topk > 0 {
        Some((mlx_rs::ops::concatenate(&topk_ids, 0)?, mlx_rs::ops::concatenate(&topk_ps, 0)?))
    } else {
        None
    };
    let mut all = vec![&hidden];
    if let Some((a, b)) = &topk {
        all.push(a);
        all.push(b);
    }
    mlx_rs::transforms::eval(all)?;
    Ok(Distilled { hidden, ids, argmax, topk, seqs: spans })
}
