//! The construction check: before a batched cohort route serves anyone, its verify block at every
//! physical width the scheduler may run (8 for sealed cohorts; each width a continuous lane can
//! reach) is compared with each row's B1 block on synthetic rows. The rows' mathematics is
//! separable, so any difference is reduction order; it must stay under a stated bound at every
//! width or the route is refused.

use anyhow::{Context, Result};
use mlx_rs::{Array, Dtype};

use super::cohort::FIXED_WIDTH;
use super::scheduler::Numerics;
use super::telemetry::ConstructionCheck;
use crate::model::forward::{LanguageModel, Logits};
use crate::model::layers::cache::RowCache;
use crate::model::ops::{host_f32, slice_axis};
use crate::platform::rng::Rng;

/// Bound on |B8 - B1| relative to the largest logit: float32 rounding (observed ~1e-6) is far
/// below 1e-4; bf16 differences of a few ulps are allowed at 2^-6.
fn bound_for(dtype: Dtype) -> f32 {
    if dtype == Dtype::Float32 { 1e-4 } else { 1.0 / 64.0 }
}

pub fn construction_check(
    model: &dyn LanguageModel,
    numerics: Numerics,
    batched: crate::model::routes::BlockRoute,
    route: &str,
    widths: &[usize],
) -> Result<ConstructionCheck> {
    let (max_abs, scale) = crate::model::routes::with_block(numerics.block_route(batched), || compare(model, widths))?;
    let bound = bound_for(model.dtype()) * scale.max(1.0);
    Ok(ConstructionCheck {
        route: route.to_owned(),
        widths: widths.to_vec(),
        max_abs_diff: max_abs,
        bound,
        passed: max_abs <= bound,
    })
}

fn compare(model: &dyn LanguageModel, widths: &[usize]) -> Result<(f32, f32)> {
    let vocab = model.vocab_size() as u64;
    let mut rng = Rng::new(0xB8);
    let mut rows = Vec::with_capacity(FIXED_WIDTH);
    let mut verify = Vec::with_capacity(2 * FIXED_WIDTH);
    for b in 0..FIXED_WIDTH {
        let len = 1 + 5 * b;
        let prompt: Vec<u32> = (0..len).map(|_| (rng.next_u64() % vocab) as u32).collect();
        let mut row = model.new_row();
        model.prefill(&mut row, &prompt, 64, false)?;
        rows.push(row);
        verify.extend([(rng.next_u64() % vocab) as i32, (rng.next_u64() % vocab) as i32]);
    }
    let mut b1 = Vec::with_capacity(FIXED_WIDTH);
    for (b, row) in rows.iter().enumerate() {
        let mut row = row.clone();
        let out = model.forward(
            &Array::from_slice(&verify[2 * b..2 * b + 2], &[1, 2]),
            &mut [&mut row],
            Logits::All,
            true,
        )?;
        b1.push(host_f32(out.logits.as_ref().unwrap())?);
    }
    let (mut max_abs, mut scale) = (0f32, 0f32);
    for &width in widths.iter().filter(|&&w| (2..=FIXED_WIDTH).contains(&w)) {
        // Packed as a cohort packs its rows, so the check covers the cohort's batched attention too.
        let mut batch = rows[..width].to_vec();
        RowCache::pack(&mut batch)?;
        let mut refs: Vec<_> = batch.iter_mut().collect();
        let tokens = Array::from_slice(&verify[..2 * width], &[width as i32, 2]);
        let out = model.forward(&tokens, &mut refs, Logits::All, true)?;
        let logits = out.logits.unwrap();
        for (b, want) in b1.iter().enumerate().take(width) {
            let got = host_f32(&slice_axis(&logits, 0, b as i32, b as i32 + 1)?)?;
            for (g, w) in got.iter().zip(want) {
                max_abs = max_abs.max((g - w).abs());
                scale = scale.max(w.abs());
            }
        }
    }
    Ok((max_abs, scale))
}

/// What [`check_batched`] kept.
pub struct BatchedChoice {
    pub check: ConstructionCheck,
    /// The route batched cycles take (the one the check passed on, or the one it refused).
    pub route: crate::model::routes::BlockRoute,
    /// Said when the check moved the cohort to the invariant route.
    pub note: Option<String>,
}

/// The construction check on `batched` (the route the exactness gate kept), and where MLX's own
/// products are over the bound at some width while cohort's row-invariant kernels serve (CUDA),
/// the invariant route probed and checked in its place: a cohort that would otherwise run as
/// b1-exact serial runs batched and exact. (The gate's probe sees one row; on an H200 MLX's
/// products passed it and still gave B8 rows 2.15 away from B1, issue 41.)
pub fn check_batched(
    model: &dyn LanguageModel,
    numerics: Numerics,
    batched: crate::model::routes::BlockRoute,
    route: &str,
    widths: &[usize],
) -> Result<BatchedChoice> {
    let check = construction_check(model, numerics, batched, route, widths)?;
    let retry = !check.passed
        && batched == crate::model::routes::BlockRoute::Batched
        && numerics == Numerics::Throughput
        && crate::platform::backend::Backend::is_cuda();
    if !retry {
        return Ok(BatchedChoice { check, route: batched, note: None });
    }
    let probed =
        crate::model::routes::with_block(crate::model::routes::BlockRoute::Invariant, || super::probe::probe(model))?;
    if probed.verdict != super::probe::Verdict::Equal {
        return Ok(BatchedChoice { check, route: batched, note: None });
    }
    let invariant = construction_check(model, numerics, crate::model::routes::BlockRoute::Invariant, route, widths)?;
    if !invariant.passed {
        return Ok(BatchedChoice { check, route: batched, note: None });
    }
    let note = format!(
        "batched cohort over its bound (max |B - B1| {:.3e} > {:.3e}); invariant route Equal and exact at widths {:?}: kept",
        check.max_abs_diff, check.bound, widths
    );
    Ok(BatchedChoice { check: invariant, route: crate::model::routes::BlockRoute::Invariant, note: Some(note) })
}

/// Whether waiting prompts may be read several rows to a block: the model pads its chunks
/// ([`LanguageModel::prefill_block`]) and, on synthetic prompts of three lengths, a packed read
/// gives every row the bits of its hidden states and logits read alone. A machine whose BLAS
/// behaves otherwise reads prompts one at a time, as exactly as before.
pub fn packed_prompt_check(model: &dyn LanguageModel) -> Result<bool> {
    let lens = [21usize, 38, 29];
    if lens.iter().any(|&n| model.prefill_block(0, n).is_none()) {
        return Ok(false);
    }
    let vocab = model.vocab_size() as u64;
    let mut rng = Rng::new(0x9AC);
    let prompts: Vec<Vec<u32>> =
        lens.iter().map(|&n| (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect()).collect();
    let mut rows: Vec<_> = prompts.iter().map(|_| model.new_row()).collect();
    let parts: Vec<&[u32]> = prompts.iter().map(Vec::as_slice).collect();
    let packed = {
        let mut refs: Vec<_> = rows.iter_mut().collect();
        crate::model::prefill::read_chunks(model, &mut refs, &parts, &[true; 3])?
    };
    let same = |a: &Array, b: &Array| -> Result<bool> {
        let (a, b) = (host_f32(a)?, host_f32(b)?);
        Ok(a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()))
    };
    let logits = |o: &crate::model::forward::ForwardOutput| o.logits.clone().context("a last chunk without logits");
    for (prompt, packed) in prompts.iter().zip(&packed) {
        let lone = crate::model::forward::prefill_chunk(model, &mut model.new_row(), prompt, true)?;
        if !same(&lone.hidden, &packed.hidden)? || !same(&logits(&lone)?, &logits(packed)?)? {
            return Ok(false);
        }
    }
    Ok(true)
}
