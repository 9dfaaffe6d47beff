//! Timings of host attention on host blocks (`cohort-lab device --attention`): the decode-sized
//! blocks the host decode path gives it, over storage of a given length.

use anyhow::Result;
use std::time::Instant;

use cohort_core::model::cpu::attention_cpu::{self, HostBlock, RowKv};

const WARM_UP: usize = 5;

/// One (rows, T, context) case: milliseconds per call, the fastest and the median of the runs.
pub struct AttentionTiming {
    pub rows: usize,
    pub t: usize,
    pub context: usize,
    pub min_ms: f64,
    pub median_ms: f64,
}

/// Time `attend_host_block` for `heads` query heads over `kv_heads` KV heads of `head_dim`, for
/// every (rows, t, context) case: each row's storage holds `context` positions, random.
pub fn time_attention(
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    cases: &[(usize, usize, usize)],
    iters: usize,
) -> Result<Vec<AttentionTiming>> {
    let key = mlx_rs::random::key(5)?;
    let mut out = Vec::new();
    for &(rows, t, context) in cases {
        let shape = [rows as i32, kv_heads as i32, (context + t) as i32, head_dim as i32];
        let keys = mlx_rs::random::normal::<f32>(&shape, None, None, Some(&key))?;
        let values = mlx_rs::random::normal::<f32>(&shape, None, None, Some(&key))?;
        mlx_rs::transforms::eval([&keys, &values])?;
        let stored: Vec<Option<RowKv>> = (0..rows)
            .map(|r| Some(RowKv { keys: keys.clone(), values: values.clone(), slot: r as i32, offset: context as i32 }))
            .collect();
        let host = |n: usize, seed: u32| -> Vec<f32> {
            // A cheap deterministic fill in [-1, 1): the timing does not depend on the values.
            (0..n)
                .map(|i| ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 8) as f32 / 8388608.0 - 1.0)
                .collect()
        };
        let (q, k, v) = (
            host(rows * t * heads * head_dim, 1),
            host(rows * t * kv_heads * head_dim, 2),
            host(rows * t * kv_heads * head_dim, 3),
        );
        let block = HostBlock { q: &q, k: &k, v: &v, rows, t, heads, kv_heads, head_dim };
        let scale = 1.0 / (head_dim as f32).sqrt();
        let mut times = Vec::with_capacity(iters);
        // Untimed runs first: the pool's helpers start, and the storage comes into cache.
        for i in 0..iters + WARM_UP {
            let start = Instant::now();
            std::hint::black_box(attention_cpu::attend_host_block(&block, &stored, scale)?);
            if i >= WARM_UP {
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        let min_ms = times.iter().copied().fold(f64::INFINITY, f64::min);
        out.push(AttentionTiming { rows, t, context, min_ms, median_ms: cohort_core::platform::timing::median(times) });
    }
    Ok(out)
}
