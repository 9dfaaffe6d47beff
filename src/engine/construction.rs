//! The construction check: before a batched cohort route serves anyone, its B8 verify block is
//! compared with each row's B1 block on synthetic rows. The rows' mathematics is separable, so
//! any difference is reduction order; it must stay under a stated bound or the route is refused.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use super::cohort::FIXED_WIDTH;
use super::sampler::Rng;
use super::scheduler::Numerics;
use super::telemetry::ConstructionCheck;
use crate::model::forward::{LanguageModel, Logits};
use crate::model::kv_slots;
use crate::model::linear;
use crate::model::ops::{host_f32, slice_axis};

/// Bound on |B8 - B1| relative to the largest logit: float32 rounding (observed ~1e-6) is far
/// below 1e-4; bf16 differences of a few ulps are allowed at 2^-6.
fn bound_for(dtype: Dtype) -> f32 {
    if dtype == Dtype::Float32 { 1e-4 } else { 1.0 / 64.0 }
}

pub fn construction_check(model: &dyn LanguageModel, numerics: Numerics, route: &str) -> Result<ConstructionCheck> {
    let (max_abs, scale) = linear::with_route(numerics.linear_route(), || compare(model))?;
    let bound = bound_for(model.dtype()) * scale.max(1.0);
    Ok(ConstructionCheck { route: route.to_owned(), max_abs_diff: max_abs, bound, passed: max_abs <= bound })
}

fn compare(model: &dyn LanguageModel) -> Result<(f32, f32)> {
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
    // Packed as a cohort packs its rows, so the check covers the cohort's batched attention too.
    let mut batch = rows.clone();
    kv_slots::pack(&mut batch)?;
    let mut refs: Vec<_> = batch.iter_mut().collect();
    let b8 = model.forward(&Array::from_slice(&verify, &[FIXED_WIDTH as i32, 2]), &mut refs, Logits::All, true)?;
    let b8 = b8.logits.unwrap();
    let (mut max_abs, mut scale) = (0f32, 0f32);
    for (b, row) in rows.iter_mut().enumerate() {
        let b1 =
            model.forward(&Array::from_slice(&verify[2 * b..2 * b + 2], &[1, 2]), &mut [row], Logits::All, true)?;
        let got = host_f32(&slice_axis(&b8, 0, b as i32, b as i32 + 1)?)?;
        let want = host_f32(b1.logits.as_ref().unwrap())?;
        for (g, w) in got.iter().zip(&want) {
            max_abs = max_abs.max((g - w).abs());
            scale = scale.max(w.abs());
        }
    }
    Ok((max_abs, scale))
}
