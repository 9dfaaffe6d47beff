//! What a block route costs at the steps a cohort serves: a packed B-row verify block (T=2,
//! every position's logits) and a B-row single-token step, timed on each route in turn (A B A B
//! ...) in one process, so the exact route's price is read against the fast one's on the same
//! machine at the same moment (issue 41: the invariant route against MLX's batched products).

use std::time::Instant;

use anyhow::Result;
use mlx_rs::Array;

use cohort_core::model::forward::{LanguageModel, Logits};
use cohort_core::model::layers::cache::RowCache;
use cohort_core::model::routes::BlockRoute;
use cohort_core::platform::rng::Rng;
use cohort_core::platform::timing::median;

/// One route's median times.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RouteCost {
    pub route: BlockRoute,
    pub width: usize,
    /// A packed verify block of `width` rows x 2 positions, all logits, evaluated.
    pub verify_ms: f64,
    /// A packed single-token step of `width` rows, last logits, evaluated.
    pub step_ms: f64,
    /// When the verify's and the step's graphs had been built and handed to the device: where
    /// these are close to the totals the host bounds the route, not the kernels.
    pub verify_handed_ms: f64,
    pub step_handed_ms: f64,
}

/// One timed forward: (total, handed to the device) in ms.
type Timing = (f64, f64);

/// Median times of each of `routes` over `reps` turns (after one untimed turn each, which pays
/// for kernel compiles), on `width` rows holding random prompts.
pub fn time_routes(
    model: &dyn LanguageModel,
    routes: &[BlockRoute],
    width: usize,
    reps: usize,
) -> Result<Vec<RouteCost>> {
    let reps = reps.max(1);
    let vocab = model.vocab_size() as u64;
    let mut rng = Rng::new(0xC057);
    let mut rows = Vec::with_capacity(width);
    for b in 0..width {
        let prompt: Vec<u32> = (0..8 + 9 * b).map(|_| (rng.next_u64() % vocab) as u32).collect();
        let mut row = model.new_row();
        cohort_core::model::routes::batched(|| model.prefill(&mut row, &prompt, 64, false))?;
        rows.push(row);
    }
    let tokens: Vec<i32> = (0..2 * width).map(|_| (rng.next_u64() % vocab) as i32).collect();
    let verify_tokens = Array::from_slice(&tokens, &[width as i32, 2]);
    let step_tokens = Array::from_slice(&tokens[..width], &[width as i32, 1]);
    let time = |route: BlockRoute, tokens: &Array, logits: Logits| -> Result<Timing> {
        let mut batch = rows.clone();
        RowCache::pack(&mut batch)?;
        let mut refs: Vec<_> = batch.iter_mut().collect();
        cohort_core::model::routes::with_block(route, || {
            let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            let out = model.forward(tokens, &mut refs, logits, true)?;
            let logits = out.logits.expect("logits were asked for");
            mlx_rs::transforms::async_eval([&logits])?;
            let handed = ms(t);
            logits.eval()?;
            Ok((ms(t), handed))
        })
    };
    let mut verify: Vec<Vec<Timing>> = vec![Vec::with_capacity(reps); routes.len()];
    let mut step: Vec<Vec<Timing>> = vec![Vec::with_capacity(reps); routes.len()];
    for turn in 0..=reps {
        for (i, &route) in routes.iter().enumerate() {
            let (v, s) = (time(route, &verify_tokens, Logits::All)?, time(route, &step_tokens, Logits::Last)?);
            if turn > 0 {
                verify[i].push(v);
                step[i].push(s);
            }
        }
    }
    let medians = |t: &[Timing]| (median(t.iter().map(|x| x.0).collect()), median(t.iter().map(|x| x.1).collect()));
    Ok(routes
        .iter()
        .enumerate()
        .map(|(i, &route)| {
            let ((verify_ms, verify_handed_ms), (step_ms, step_handed_ms)) = (medians(&verify[i]), medians(&step[i]));
            RouteCost { route, width, verify_ms, step_ms, verify_handed_ms, step_handed_ms }
        })
        .collect())
}
