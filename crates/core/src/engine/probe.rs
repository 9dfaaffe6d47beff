//! The exactness probe: is a T=2 verify block bit-identical to the two single-token steps it
//! stands for? Greedy MTP is lossless only if it is, so this is measured when a model with MTP
//! weights loads, not assumed. Three synthetic draws on throwaway rows compare the block's
//! logits (LM head included) with the chain's, byte for byte.

use std::time::Instant;

use anyhow::Result;
use mlx_rs::Array;

use crate::model::forward::{LanguageModel, Logits};
use crate::model::ops::slice_axis;
use crate::model::routes::BlockRoute;
use crate::model::routes::with_block;
use crate::platform::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Verdict {
    /// Byte-identical logits on every draw.
    Equal,
    /// Not identical, but every position's argmax agrees and the largest difference is tiny.
    Localized,
    /// The block and the chain disagree on a token or by more than a rounding error.
    Diverges,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeReport {
    pub verdict: Verdict,
    pub max_abs_diff: f32,
    pub differing_logits: usize,
    pub compared_logits: usize,
    pub route: BlockRoute,
    pub block_ms: f64,
    pub chain_ms: f64,
}

const DRAWS: u64 = 3;

#[cfg(feature = "testing")]
thread_local! {
    /// Test hook: perturb the block's logits so the probe sees a divergence on every route (on
    /// the thread that asked, so no other test's probe sees it).
    static FORCE_DIVERGE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(feature = "testing")]
pub fn force_divergence_for_tests(on: bool) {
    FORCE_DIVERGE.set(on);
}

fn forced_divergence() -> bool {
    #[cfg(feature = "testing")]
    return FORCE_DIVERGE.get();
    #[cfg(not(feature = "testing"))]
    false
}
/// Beyond this (relative to the logits' scale) a difference is not rounding.
const LOCALIZED_BOUND: f32 = 1e-3;

/// Run the probe on the current block route.
pub fn probe(model: &dyn LanguageModel) -> Result<ProbeReport> {
    let vocab = model.vocab_size() as u32;
    let (mut max_abs, mut differing, mut compared, mut argmax_agree) = (0f32, 0usize, 0usize, true);
    let (mut block_s, mut chain_s) = (0f64, 0f64);
    let mut scale = 0f32;
    for draw in 0..DRAWS {
        let mut rng = Rng::new(0xC0_4047 + draw);
        let len = 5 + 7 * draw as usize;
        let prompt: Vec<u32> = (0..len).map(|_| (rng.next_u64() % vocab as u64) as u32).collect();
        let (x0, x1) = ((rng.next_u64() % vocab as u64) as i32, (rng.next_u64() % vocab as u64) as i32);
        let mut block_row = model.new_row();
        crate::model::routes::batched(|| model.prefill(&mut block_row, &prompt, 64, false))?;
        let mut chain_row = block_row.clone();

        let t = Instant::now();
        let block = model.forward(&Array::from_slice(&[x0, x1], &[1, 2]), &mut [&mut block_row], Logits::All, true)?;
        let mut block_logits = block.logits.unwrap();
        if forced_divergence() {
            block_logits = block_logits.add(Array::from_f32(0.5))?;
        }
        block_logits.eval()?;
        // The first draw pays for compiling the route's kernels: its time is not the route's.
        if draw > 0 {
            block_s += t.elapsed().as_secs_f64();
        }

        let t = Instant::now();
        let l0 = model
            .forward(&Array::from_slice(&[x0], &[1, 1]), &mut [&mut chain_row], Logits::Last, false)?
            .logits
            .unwrap();
        let l1 = model
            .forward(&Array::from_slice(&[x1], &[1, 1]), &mut [&mut chain_row], Logits::Last, false)?
            .logits
            .unwrap();
        let chain_logits = mlx_rs::ops::concatenate(&[l0, l1], 1)?;
        chain_logits.eval()?;
        if draw > 0 {
            chain_s += t.elapsed().as_secs_f64();
        }

        for pos in 0..2 {
            let a = host(&slice_axis(&block_logits, 1, pos, pos + 1)?)?;
            let b = host(&slice_axis(&chain_logits, 1, pos, pos + 1)?)?;
            compared += a.len();
            for (x, y) in a.iter().zip(&b) {
                scale = scale.max(y.abs());
                if x.to_bits() != y.to_bits() {
                    differing += 1;
                    max_abs = max_abs.max((x - y).abs());
                }
            }
            argmax_agree &= argmax(&a) == argmax(&b);
        }
    }
    let verdict = if differing == 0 {
        Verdict::Equal
    } else if argmax_agree && max_abs <= LOCALIZED_BOUND * scale.max(1.0) {
        Verdict::Localized
    } else {
        Verdict::Diverges
    };
    Ok(ProbeReport {
        verdict,
        max_abs_diff: max_abs,
        differing_logits: differing,
        compared_logits: compared,
        route: crate::model::routes::current().block,
        block_ms: block_s * 1e3 / (DRAWS - 1) as f64,
        chain_ms: chain_s * 1e3 / (DRAWS - 1) as f64,
    })
}

fn host(a: &Array) -> Result<Vec<f32>> {
    let a = a.as_dtype(mlx_rs::Dtype::Float32)?.flatten(None, None)?.contiguous()?;
    a.eval()?;
    Ok(a.as_slice::<f32>().to_vec())
}

fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

/// What the gate decided.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GateDecision {
    pub mtp_allowed: bool,
    pub route: BlockRoute,
    pub reports: Vec<ProbeReport>,
    /// One line saying what was traded.
    pub summary: String,
}

impl GateDecision {
    /// The route a batched cohort's products take: the invariant route where the gate kept it,
    /// else MLX's batched products (the row-by-row route serves B1 verifies only; a throughput
    /// cohort stays batched and the construction check bounds it).
    pub fn batched_route(&self) -> BlockRoute {
        if self.route == BlockRoute::Invariant { BlockRoute::Invariant } else { BlockRoute::Batched }
    }
}

/// `COHORT_MTP_ALLOW_INEXACT=1` keeps MTP on the fast batched route whatever the probe finds
/// (it still runs and reports the difference).
pub fn allow_inexact() -> bool {
    // Read once: start-up has checked the value (switches::check_environment).
    static ALLOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOW.get_or_init(|| std::env::var("COHORT_MTP_ALLOW_INEXACT").is_ok_and(|v| v == "1"))
}

/// Probe the fast route. On any difference: with `allow_inexact` (COHORT_MTP_ALLOW_INEXACT=1)
/// keep MTP on the fast route and say by how much it differs; otherwise, where cohort's
/// row-invariant kernels serve (CUDA), probe the invariant route and keep it if it is
/// byte-identical, else retry with the row-by-row route and keep that if it is byte-identical,
/// else decline MTP.
pub fn gate(model: &dyn LanguageModel, allow_inexact: bool) -> Result<GateDecision> {
    let fast = with_block(BlockRoute::Batched, || probe(model))?;
    if fast.verdict == Verdict::Equal {
        let summary = format!(
            "MTP exactness probe: Equal on the batched route (block {:.2} ms, chain {:.2} ms)",
            fast.block_ms, fast.chain_ms
        );
        return Ok(GateDecision { mtp_allowed: true, route: BlockRoute::Batched, reports: vec![fast], summary });
    }
    if allow_inexact {
        // The user trades exactness for speed: the row-by-row route would read every weight once
        // per verified position (on the CPU, 1.4x slower MTP than this route; docs/benchmarks.md).
        let summary = format!(
            "MTP exactness probe: batched route {:?} (max |diff| {:.3e}); COHORT_MTP_ALLOW_INEXACT=1 keeps MTP on it",
            fast.verdict, fast.max_abs_diff
        );
        return Ok(GateDecision { mtp_allowed: true, route: BlockRoute::Batched, reports: vec![fast], summary });
    }
    let cost = |exact: &ProbeReport| {
        if fast.block_ms > 0.0 { (exact.block_ms / fast.block_ms - 1.0) * 100.0 } else { 0.0 }
    };
    let mut reports = vec![fast.clone()];
    if crate::platform::backend::Backend::is_cuda() {
        let invariant = with_block(BlockRoute::Invariant, || probe(model))?;
        if invariant.verdict == Verdict::Equal {
            let summary = format!(
                "MTP exactness probe: batched route {:?} (max |diff| {:.3e}); invariant route Equal, kept at {:+.0}% verify time",
                fast.verdict,
                fast.max_abs_diff,
                cost(&invariant)
            );
            reports.push(invariant);
            return Ok(GateDecision { mtp_allowed: true, route: BlockRoute::Invariant, reports, summary });
        }
        reports.push(invariant);
    }
    let exact = with_block(BlockRoute::RowByRow, || probe(model))?;
    if exact.verdict == Verdict::Equal {
        let summary = format!(
            "MTP exactness probe: batched route {:?} (max |diff| {:.3e}); row-by-row route Equal, kept at {:+.0}% verify time",
            fast.verdict,
            fast.max_abs_diff,
            cost(&exact)
        );
        reports.push(exact);
        return Ok(GateDecision { mtp_allowed: true, route: BlockRoute::RowByRow, reports, summary });
    }
    let summary = format!(
        "MTP exactness probe: {:?} on every route; MTP declined, plain decoding (set COHORT_MTP_ALLOW_INEXACT=1 to override)",
        exact.verdict
    );
    reports.push(exact);
    Ok(GateDecision { mtp_allowed: false, route: BlockRoute::Batched, reports, summary })
}
