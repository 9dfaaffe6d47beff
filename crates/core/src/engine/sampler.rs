//! Token selection. Greedy is argmax on the device (lowest id on ties). Stochastic sampling
//! follows penalties -> softmax(logits / T) -> top-p -> top-k, with every probability computed in
//! float64 on the host over a candidate set the device selects; one tie rule everywhere: higher
//! score first, then lower id. Each row draws from its own seeded RNG, so a row's output never
//! depends on its neighbours. MTP acceptance (min(1, p/q)) and the residual distribution live
//! here too, over the same processed distributions.

use anyhow::Result;
use mlx_rs::Array;

use crate::model::ops::{host_f32, host_u32, slice_axis};
use crate::platform::rng::Rng;

/// Largest top_k a request may ask for (the device hands at most this many candidates over).
pub const MAX_TOP_K: usize = 1024;
/// Candidates fetched when top_k is off; more are fetched only if top_p needs them.
const DEFAULT_CANDIDATES: usize = 256;
/// Extra candidates so ties at the top-k boundary resolve by the id rule, not by the device.
const TIE_MARGIN: usize = 8;

/// Temperatures below this sample as greedy decoding does: 1/T stays far inside float32's range
/// for any logit a model produces above it.
pub const GREEDY_BELOW: f64 = 1e-20;

/// A request's sampling settings.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplerConfig {
    /// 0 (or anything below [`GREEDY_BELOW`]) = greedy.
    pub temperature: f64,
    /// Nucleus mass in (0, 1]; 1 = off.
    pub top_p: f64,
    /// 0 = off.
    pub top_k: usize,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
}

impl Default for SamplerConfig {
    /// The reference server's defaults.
    fn default() -> Self {
        Self { temperature: 0.6, top_p: 0.95, top_k: 20, presence_penalty: 0.0, frequency_penalty: 0.0 }
    }
}

/// A setting that cannot be used; the message names it.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid sampler setting {setting} = {value}: {reason}")]
pub struct SamplerError {
    pub setting: &'static str,
    pub value: String,
    pub reason: &'static str,
}

impl SamplerConfig {
    pub fn greedy() -> Self {
        Self { temperature: 0.0, top_p: 1.0, top_k: 0, ..Self::default() }
    }

    /// Greedy at 0, and at temperatures so small that 1/T would overflow the float32 scaling
    /// (where sampling tends to the argmax anyway).
    pub fn is_greedy(&self) -> bool {
        self.temperature < GREEDY_BELOW
    }

    pub fn has_penalties(&self) -> bool {
        self.presence_penalty != 0.0 || self.frequency_penalty != 0.0
    }

    /// Refuse settings that are out of range, before any model work.
    pub fn validate(&self) -> Result<(), SamplerError> {
        let err = |setting, value: f64, reason| Err(SamplerError { setting, value: value.to_string(), reason });
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            return err("temperature", self.temperature, "must be a finite number >= 0");
        }
        if !self.top_p.is_finite() || self.top_p <= 0.0 || self.top_p > 1.0 {
            return err("top_p", self.top_p, "must be in (0, 1]");
        }
        if self.top_k > MAX_TOP_K {
            return Err(SamplerError {
                setting: "top_k",
                value: self.top_k.to_string(),
                reason: "above the supported maximum of 1024",
            });
        }
        if !self.presence_penalty.is_finite() {
            return err("presence_penalty", self.presence_penalty, "must be finite");
        }
        if !self.frequency_penalty.is_finite() {
            return err("frequency_penalty", self.frequency_penalty, "must be finite");
        }
        Ok(())
    }
}

/// A processed distribution on a sparse support, ordered by probability (desc) then id (asc).
#[derive(Debug, Clone, PartialEq)]
pub struct Dist {
    pub ids: Vec<u32>,
    pub probs: Vec<f64>,
}

impl Dist {
    pub fn one_hot(id: u32) -> Self {
        Self { ids: vec![id], probs: vec![1.0] }
    }

    pub fn prob(&self, id: u32) -> f64 {
        self.ids.iter().position(|&i| i == id).map(|p| self.probs[p]).unwrap_or(0.0)
    }

    /// The most likely id (first by the tie rule).
    pub fn argmax(&self) -> u32 {
        self.ids[0]
    }

    /// Inverse-CDF draw in the distribution's order.
    pub fn sample(&self, rng: &mut Rng) -> u32 {
        let u = rng.next_f64();
        let mut acc = 0.0;
        for (id, p) in self.ids.iter().zip(&self.probs) {
            acc += p;
            if u < acc {
                return *id;
            }
        }
        *self.ids.last().expect("a distribution has support")
    }

    /// Build from candidate (id, scaled logit) pairs and the log-normaliser over the whole
    /// vocabulary; applies top-p then top-k and renormalises. `complete` says the candidates
    /// are the whole vocabulary (so a top-p shortfall is impossible).
    fn from_candidates(mut cands: Vec<(u32, f64)>, log_norm: f64, cfg: &SamplerConfig) -> Self {
        cands.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut ids = Vec::new();
        let mut probs = Vec::new();
        let mut before = 0.0;
        for (id, s) in cands {
            if before >= cfg.top_p || (cfg.top_k > 0 && ids.len() >= cfg.top_k) {
                break;
            }
            let p = (s - log_norm).exp();
            ids.push(id);
            probs.push(p);
            before += p;
        }
        let total: f64 = probs.iter().sum();
        for p in &mut probs {
            *p /= total;
        }
        Self { ids, probs }
    }
}

/// Accept a draft `d` proposed from `q` against the target `p`: with probability min(1, p/q)
/// (q(d) = 0: accept iff p(d) > 0). Greedy targets accept iff d is p's argmax.
pub fn accept_draft(p: &Dist, q: &Dist, d: u32, greedy: bool, rng: &mut Rng) -> bool {
    if greedy {
        return p.argmax() == d;
    }
    let (pd, qd) = (p.prob(d), q.prob(d));
    if qd == 0.0 {
        return pd > 0.0;
    }
    let ratio = pd / qd;
    ratio >= 1.0 || rng.next_f64() < ratio
}

/// What a verify decides for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The draft is kept (keep = 2); the bonus token comes from position 1.
    Accept(u32),
    /// The draft is dropped (keep = 1); this corrected token replaces it.
    Reject(u32),
}

/// Accept or correct draft `d` (drawn from `q`) against the target `p0`, drawing from the
/// row's RNG in a fixed order: the acceptance test, then (on rejection) the residual.
pub fn decide(p0: &Dist, q: &Dist, d: u32, greedy: bool, rng: &mut Rng) -> Decision {
    if accept_draft(p0, q, d, greedy, rng) {
        Decision::Accept(d)
    } else if greedy {
        Decision::Reject(p0.argmax())
    } else {
        Decision::Reject(residual(p0, q).sample(rng))
    }
}

/// The distribution to sample after a rejection: normalize(max(p - q, 0)), falling back to p
/// when that leaves no mass.
pub fn residual(p: &Dist, q: &Dist) -> Dist {
    let mut pairs: Vec<(u32, f64)> =
        p.ids.iter().zip(&p.probs).map(|(&id, &pp)| (id, (pp - q.prob(id)).max(0.0))).collect();
    let total: f64 = pairs.iter().map(|x| x.1).sum();
    if total <= 0.0 {
        return p.clone();
    }
    pairs.retain(|x| x.1 > 0.0);
    pairs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Dist { ids: pairs.iter().map(|x| x.0).collect(), probs: pairs.iter().map(|x| x.1 / total).collect() }
}

/// Per-row state the sampler needs besides its settings: token counts for penalties.
#[derive(Debug, Clone, Default)]
pub struct PenaltyState {
    counts: std::collections::HashMap<u32, u32>,
}

impl PenaltyState {
    pub fn observe(&mut self, id: u32) {
        *self.counts.entry(id).or_default() += 1;
    }
}

/// Processed distributions for `rows` rows of logits [rows, V] (any float dtype), each with its
/// own settings. Greedy rows get a one-hot at the device argmax. Stochastic rows without
/// penalties copy only a candidate set to the host; rows with penalties copy their full row.
pub fn distributions(logits: &Array, cfgs: &[SamplerConfig], penalties: &[&PenaltyState]) -> Result<Vec<Dist>> {
    let rows = logits.shape()[0] as usize;
    let vocab = logits.shape()[1] as usize;
    assert_eq!(cfgs.len(), rows, "one sampler config per row");
    let logits = logits.as_dtype(mlx_rs::Dtype::Float32)?;
    let mut out: Vec<Option<Dist>> = vec![None; rows];

    let greedy_rows: Vec<usize> = (0..rows).filter(|&r| cfgs[r].is_greedy()).collect();
    if !greedy_rows.is_empty() {
        let ids = host_u32(&mlx_rs::ops::indexing::argmax_axis(&logits, -1, None)?)?;
        for r in greedy_rows {
            out[r] = Some(Dist::one_hot(ids[r]));
        }
    }
    let sparse: Vec<usize> = (0..rows).filter(|&r| !cfgs[r].is_greedy() && !cfgs[r].has_penalties()).collect();
    if !sparse.is_empty() {
        let want =
            sparse.iter().map(|&r| if cfgs[r].top_k > 0 { cfgs[r].top_k } else { DEFAULT_CANDIDATES }).max().unwrap();
        let k = (want + TIE_MARGIN).min(vocab);
        let inv_t: Vec<f32> =
            (0..rows).map(|r| if cfgs[r].is_greedy() { 1.0 } else { (1.0 / cfgs[r].temperature) as f32 }).collect();
        let scaled = logits.multiply(Array::from_slice(&inv_t, &[rows as i32, 1]))?;
        let lse = mlx_rs::ops::logsumexp_axis(&scaled, -1, None)?;
        let part = mlx_rs::ops::argpartition_axis(&scaled, (vocab - k) as i32, -1)?;
        let top_ids = slice_axis(&part, 1, (vocab - k) as i32, vocab as i32)?;
        let top_vals = scaled.take_along_axis(&top_ids, -1)?;
        mlx_rs::transforms::async_eval([&lse, &top_ids, &top_vals])?;
        let (lse_h, ids_h, vals_h) = (host_f32(&lse)?, host_u32(&top_ids)?, host_f32(&top_vals)?);
        for r in sparse {
            let cands: Vec<(u32, f64)> = (0..k).map(|j| (ids_h[r * k + j], vals_h[r * k + j] as f64)).collect();
            let mass: f64 = cands.iter().map(|c| (c.1 - lse_h[r] as f64).exp()).sum();
            let dist = if cfgs[r].top_k == 0 && k < vocab && mass < cfgs[r].top_p {
                // The nucleus reaches past the candidates: take the whole row.
                dense_row(&scaled, r, &cfgs[r], None)?
            } else {
                Dist::from_candidates(cands, lse_h[r] as f64, &cfgs[r])
            };
            out[r] = Some(dist);
        }
    }
    for r in 0..rows {
        if out[r].is_none() {
            let t = cfgs[r].temperature;
            let row = slice_axis(&logits, 0, r as i32, r as i32 + 1)?;
            out[r] = Some(dense_row(&row, 0, &cfgs[r], Some((penalties.get(r).copied(), t)))?);
        }
    }
    Ok(out.into_iter().map(|d| d.expect("every row processed")).collect())
}

/// The full-vocabulary route: penalties (when given, with the temperature to apply after them)
/// then the same processing over every id.
fn dense_row(
    logits: &Array,
    r: usize,
    cfg: &SamplerConfig,
    penalties: Option<(Option<&PenaltyState>, f64)>,
) -> Result<Dist> {
    let row = slice_axis(logits, 0, r as i32, r as i32 + 1)?;
    let mut vals: Vec<f64> = host_f32(&row)?.into_iter().map(|v| v as f64).collect();
    if let Some((pen, t)) = penalties {
        if let Some(pen) = pen {
            for (&id, &count) in &pen.counts {
                if let Some(v) = vals.get_mut(id as usize) {
                    *v -= cfg.presence_penalty + cfg.frequency_penalty * count as f64;
                }
            }
        }
        for v in &mut vals {
            *v /= t;
        }
    }
    let max = vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let log_norm = max + vals.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
    let cands: Vec<(u32, f64)> = vals.into_iter().enumerate().map(|(i, v)| (i as u32, v)).collect();
    Ok(Dist::from_candidates(cands, log_norm, cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_settings_name_the_setting() {
        let bad = [
            (SamplerConfig { temperature: -0.1, ..Default::default() }, "temperature"),
            (SamplerConfig { temperature: f64::NAN, ..Default::default() }, "temperature"),
            (SamplerConfig { top_p: 0.0, ..Default::default() }, "top_p"),
            (SamplerConfig { top_p: 1.5, ..Default::default() }, "top_p"),
            (SamplerConfig { top_k: MAX_TOP_K + 1, ..Default::default() }, "top_k"),
            (SamplerConfig { presence_penalty: f64::INFINITY, ..Default::default() }, "presence_penalty"),
        ];
        for (cfg, name) in bad {
            assert_eq!(cfg.validate().unwrap_err().setting, name);
        }
        assert!(SamplerConfig::default().validate().is_ok());
    }

    #[test]
    fn top_p_keeps_tokens_whose_mass_before_them_is_below_p_and_ties_prefer_lower_ids() {
        // probabilities 0.4, 0.3 (ids 5 and 2 tied), 0.3 ... via equal logits
        let cfg = SamplerConfig { temperature: 1.0, top_p: 0.5, top_k: 0, ..Default::default() };
        let l = [(9u32, 2.0f64.ln()), (5, 1.5f64.ln()), (2, 1.5f64.ln())];
        let norm = 5.0f64.ln();
        let d = Dist::from_candidates(l.to_vec(), norm, &cfg);
        // mass before id 9: 0 < 0.5 keep; before next: 0.4 < 0.5 keep the lower id (2); then 0.7 stop.
        assert_eq!(d.ids, vec![9, 2]);
        assert!((d.probs[0] - 0.4 / 0.7).abs() < 1e-12);
    }

    #[test]
    fn residual_is_positive_part_of_p_minus_q() {
        let p = Dist { ids: vec![1, 2, 3], probs: vec![0.5, 0.3, 0.2] };
        let q = Dist { ids: vec![2, 1], probs: vec![0.6, 0.4] };
        let r = residual(&p, &q);
        // max(p-q,0): id1 0.1, id2 0, id3 0.2 -> normalised 1/3, 2/3
        assert_eq!(r.ids, vec![3, 1]);
        assert!((r.probs[0] - 2.0 / 3.0).abs() < 1e-12);
        let same = residual(&p, &p);
        assert_eq!(same, p, "no residual mass falls back to p");
    }

    /// A temperature so small that 1/T overflows samples as greedy decoding does, instead of
    /// from NaN probabilities.
    #[test]
    fn a_vanishing_temperature_acts_greedy() {
        let logits = Array::from_slice(&[1.0f32, 3.0, 2.0, -1.0], &[1, 4]);
        for temperature in [1e-300, 1e-40, f64::MIN_POSITIVE] {
            let cfg = SamplerConfig { temperature, top_p: 1.0, top_k: 0, ..Default::default() };
            let d = distributions(&logits, &[cfg], &[&PenaltyState::default()]).unwrap().remove(0);
            assert_eq!((d.ids.clone(), d.probs.clone()), (vec![1], vec![1.0]), "temperature {temperature}");
        }
    }
}
