//! Speculative sampling must preserve the target distribution. On a real (tiny) model, the
//! joint distribution of the first two tokens produced by the MTP decision rule (draft from the
//! MTP head's q, accept with min(1, p/q), else the residual) is compared by chi-square with the
//! target computed exactly here from the model's own logits (softmax and top-k written in this
//! test). The same harness is shown to reject a sampler biased by 2%.

use crate::common;

use std::collections::HashMap;

use cohort::engine::sampler::{Decision, Dist, SamplerConfig, decide, distributions};
use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::forward::{LanguageModel, Logits};
use cohort::model::prefill::read_prompt;
use cohort::platform::rng::Rng;
use common::*;
use mlx_rs::{Array, Dtype};

const TOP_K: usize = 4;
const SAMPLES: usize = 2_000_000;

/// Independent reference: softmax(logits / t), keep the top `k` (ties: lower id), renormalise.
fn reference_topk(logits: &[f32], t: f64, k: usize) -> HashMap<u32, f64> {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    let max = logits[idx[0]] as f64 / t;
    let z: f64 = logits.iter().map(|&l| (l as f64 / t - max).exp()).sum();
    let kept: Vec<(u32, f64)> = idx[..k].iter().map(|&i| (i as u32, (logits[i] as f64 / t - max).exp() / z)).collect();
    let mass: f64 = kept.iter().map(|x| x.1).sum();
    kept.into_iter().map(|(i, p)| (i, p / mass)).collect()
}

struct Setup {
    first: Dist,
    first_ref: HashMap<u32, f64>,
    /// per first token: (target p0, draft q, reference target)
    next: HashMap<u32, (Dist, Dist, HashMap<u32, f64>)>,
}

fn setup() -> Setup {
    let name = "qwen35_moe_4bit";
    let model = Qwen35Model::load(&fixture(name), Dtype::Float32).unwrap();
    let prompt = ids(&reference(name)["prompts"]["short"]["prompt_ids"]);
    let cfg = SamplerConfig { temperature: 1.0, top_p: 1.0, top_k: TOP_K, ..Default::default() };
    let mut row = model.new_row();
    let (hidden_last, logits) = read_prompt(&model, &mut row, &prompt, 32, true, &mut |_| {}).unwrap();
    let flat = |a: &Array| a.reshape(&[1, -1]).unwrap();
    let first = distributions(&flat(&logits), &[cfg], &[&Default::default()]).unwrap().remove(0);
    let first_ref = reference_topk(&to_f32(&logits), 1.0, TOP_K);
    let mut next = HashMap::new();
    for &x0 in &first.ids {
        let mut r = row.clone();
        let tok = Array::from_slice(&[x0 as i32], &[1, 1]);
        let q_logits = model.mtp_forward(&hidden_last, &tok, &mut [&mut r]).unwrap();
        let target = model.forward(&tok, &mut [&mut r], Logits::Last, false).unwrap().logits.unwrap();
        // The random fixture head alone rarely shares the target's top-k; averaging its logits
        // with the target's gives a draft that overlaps partly, which is what the rule must
        // handle (acceptance strictly between 0 and 1).
        let draft = q_logits.add(&target).unwrap().multiply(Array::from_f32(0.5)).unwrap();
        let q = distributions(&flat(&draft), &[cfg], &[&Default::default()]).unwrap().remove(0);
        let p0 = distributions(&flat(&target), &[cfg], &[&Default::default()]).unwrap().remove(0);
        next.insert(x0, (p0, q, reference_topk(&to_f32(&target), 1.0, TOP_K)));
    }
    Setup { first, first_ref, next }
}

/// Chi-square statistic of `SAMPLES` draws of (x0, second) against the reference joint.
fn chi_square(s: &Setup, bias: f64) -> (f64, usize) {
    let mut rng = Rng::new(4200);
    let mut counts: HashMap<(u32, u32), usize> = HashMap::new();
    for _ in 0..SAMPLES {
        let x0 = s.first.sample(&mut rng);
        let (p0, q, _) = &s.next[&x0];
        let d = q.sample(&mut rng);
        let second = match decide(p0, q, d, false, &mut rng) {
            // A deliberately biased sampler keeps some rejected drafts anyway.
            Decision::Reject(c) if bias > 0.0 && rng.next_f64() < bias => {
                let _ = c;
                d
            }
            Decision::Accept(t) | Decision::Reject(t) => t,
        };
        *counts.entry((x0, second)).or_default() += 1;
    }
    let mut chi = 0.0;
    let mut cells = 0;
    for (&x0, &pf) in &s.first_ref {
        for (&t, &pn) in &s.next[&x0].2 {
            let expected = pf * pn * SAMPLES as f64;
            let observed = *counts.get(&(x0, t)).unwrap_or(&0) as f64;
            chi += (observed - expected).powi(2) / expected;
            cells += 1;
        }
    }
    let outside: usize = counts
        .iter()
        .filter(|((x0, t), _)| !s.first_ref.contains_key(x0) || !s.next[x0].2.contains_key(t))
        .map(|(_, c)| c)
        .sum();
    if bias == 0.0 {
        assert_eq!(outside, 0, "samples fell outside the target's support");
    }
    // Mass outside the support is an infinite chi-square term; count it as its size.
    (chi + outside as f64, cells - 1)
}

#[test]
fn mtp_sampling_preserves_the_target_joint_distribution() {
    let s = setup();
    // The production distributions match the reference ones (same support, same probabilities).
    for (id, p) in s.first.ids.iter().zip(&s.first.probs) {
        assert!((p - s.first_ref[id]).abs() < 1e-6, "first-token probability of {id}");
    }
    let accept_rate: f64 = s
        .next
        .values()
        .map(|(p0, q, _)| q.ids.iter().zip(&q.probs).map(|(d, qd)| qd * (p0.prob(*d) / qd).min(1.0)).sum::<f64>())
        .sum::<f64>()
        / s.next.len() as f64;
    assert!(
        accept_rate > 0.05 && accept_rate < 0.95,
        "the fixture's draft must be neither useless nor perfect (acceptance {accept_rate:.2})"
    );
    let (chi, df) = chi_square(&s, 0.0);
    // 99.9th percentile of chi-square(df) is below df + 4.5 sqrt(2 df) for these df.
    let limit = df as f64 + 4.5 * (2.0 * df as f64).sqrt();
    assert!(chi < limit, "chi-square {chi:.1} over {df} degrees of freedom (limit {limit:.1}): MTP sampling is biased");
    let (biased, _) = chi_square(&s, 0.02);
    assert!(biased > limit, "a 2%-biased sampler went undetected (chi-square {biased:.1}, limit {limit:.1})");
}
