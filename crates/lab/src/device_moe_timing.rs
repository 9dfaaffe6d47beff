//! `cohort-lab device --time-invariance`'s MoE table: the expert kernels (up and down) at the real
//! Qwen3.6-35B-A3B geometry, with the up kernel scalar and on the tensor cores, at the token
//! counts a step presents. What the tensor cores save scales with the tokens an expert holds, and
//! that is the routing's doing, so every count runs under two routings: experts drawn at random
//! for each token (a router's spread: about 100 distinct experts for 16 tokens) and every token on
//! the same eight (the tensor-core kernel's best case). A step's wall-clock time cannot separate
//! the up kernel from the rest; this can, in a minute of device time.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use crate::checks::moe_check::with_up_mma;
use crate::device_invariance::{QUEUED, per_product};
use cohort_core::model::config::QuantSpec;
use cohort_core::model::cuda::moe_experts::{ExpertWeights, apply};
use cohort_core::platform::rng::Rng;

const HIDDEN: i32 = 2048;
const EXPERTS: i32 = 256;
const TOP_K: i32 = 8;
const INTER: i32 = 512;
const SHARED: i32 = 512;
const SPEC: QuantSpec = QuantSpec { bits: 4, group_size: 64 };

/// How the timed block's tokens are routed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Routing {
    /// Eight distinct experts drawn at random for each token.
    Spread,
    /// Every token on experts 0 to 7.
    Same,
}

impl Routing {
    /// The [tokens, TOP_K] expert ids, token-major.
    fn ids(self, tokens: i32, seed: u64) -> Vec<u32> {
        let mut rng = Rng::new(seed);
        let mut ids = Vec::new();
        for _ in 0..tokens {
            let mut row: Vec<u32> = Vec::new();
            while row.len() < TOP_K as usize {
                let e = match self {
                    Routing::Spread => (rng.next_u64() % EXPERTS as u64) as u32,
                    Routing::Same => row.len() as u32,
                };
                if !row.contains(&e) {
                    row.push(e);
                }
            }
            ids.extend(row);
        }
        ids
    }
}

fn distinct(ids: &[u32]) -> usize {
    let mut seen = ids.to_vec();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

/// Random weights at the real geometry, quantized on the device (about 0.6 GiB at 4 bits).
fn real_weights(dtype: Dtype) -> Result<ExpertWeights> {
    let key = mlx_rs::random::key(17)?;
    let matrix = |shape: &[i32]| -> Result<[Array; 3]> {
        let dense = mlx_rs::random::normal::<f32>(shape, None, None, Some(&key))?.as_dtype(dtype)?;
        let (w, s, b) = mlx_rs::ops::quantize(&dense, SPEC.group_size, SPEC.bits)?;
        mlx_rs::transforms::eval([&w, &s, &b])?;
        Ok([w, s, b])
    };
    Ok(ExpertWeights {
        gate_up: matrix(&[EXPERTS, 2 * INTER, HIDDEN])?,
        down: matrix(&[EXPERTS, HIDDEN, INTER])?,
        shared_gate_up: matrix(&[2 * SHARED, HIDDEN])?,
        shared_down: matrix(&[HIDDEN, SHARED])?,
        spec: SPEC,
    })
}

/// Print the table (CUDA only).
pub(super) fn time() -> Result<()> {
    anyhow::ensure!(
        cohort_core::platform::backend::Backend::is_cuda(),
        "the MoE expert kernels run only where MLX drives CUDA (this backend: {:?})",
        cohort_core::platform::backend::Backend::detect()
    );
    let dtype = Dtype::Bfloat16;
    let w = real_weights(dtype)?;
    println!(
        "\nMoE expert kernels (up and down), {EXPERTS} experts of {INTER} top-{TOP_K}, hidden {HIDDEN}, 4-bit g64, \
         bf16: us a block, {QUEUED} queued, median of 5"
    );
    println!("| tokens | routing | distinct experts | scalar up kernel | tensor-core up kernel |");
    println!("| --- | --- | --- | --- | --- |");
    let key = mlx_rs::random::key(19)?;
    for tokens in [1, 2, 8, 16] {
        let x = mlx_rs::random::normal::<f32>(&[tokens, HIDDEN], None, None, Some(&key))?.as_dtype(dtype)?;
        let scores = mlx_rs::random::uniform::<_, f32>(0.5, 1.0, &[tokens, TOP_K], Some(&key))?;
        let gate = mlx_rs::random::normal::<f32>(&[tokens, EXPERTS + 1], None, None, Some(&key))?.as_dtype(dtype)?;
        mlx_rs::transforms::eval([&x, &scores, &gate])?;
        for routing in [Routing::Spread, Routing::Same] {
            let host = routing.ids(tokens, 23 + tokens as u64);
            let ids = Array::from_slice(&host, &[tokens, TOP_K]);
            let block = || apply(&x, &ids, &scores, &gate, &w);
            let scalar = with_up_mma(false, || per_product(&block))?;
            let mma = with_up_mma(true, || per_product(&block))?;
            println!(
                "| {tokens} | {routing:?} | {} | {scalar:.1} | {mma:.1} ({:.2}x) |",
                distinct(&host),
                mma / scalar
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_token_gets_eight_distinct_experts_in_range() {
        for routing in [Routing::Spread, Routing::Same] {
            let ids = routing.ids(16, 5);
            assert_eq!(ids.len(), 16 * TOP_K as usize);
            for row in ids.chunks(TOP_K as usize) {
                assert_eq!(distinct(row), TOP_K as usize, "{routing:?}: {row:?}");
                assert!(row.iter().all(|&e| e < EXPERTS as u32), "{routing:?}: {row:?}");
            }
        }
    }

    /// Spread routing puts 16 tokens on about 256 x (1 - (1 - 8/256)^16) = 100 experts, as a
    /// router's spread does; Same puts them all on eight.
    #[test]
    fn the_routings_hold_the_tokens_an_expert_the_table_claims() {
        assert_eq!(distinct(&Routing::Same.ids(16, 5)), 8);
        let spread = distinct(&Routing::Spread.ids(16, 5));
        assert!((85..=115).contains(&spread), "{spread} distinct experts");
        assert_eq!(distinct(&Routing::Spread.ids(1, 5)), 8);
    }
}
