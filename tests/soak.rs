//! Soak on the `qwen35_moe_4bit` fixture (MTP cohorts): 400 requests in waves of 4 to 32, prompts
//! of 1 to 120 tokens, budgets of 2 to 31 tokens, random cancellations at every point; the rules
//! are in tests/soak_driver. Figures go to docs/reliability.md.

mod common;
mod soak_driver;

use common::*;
use soak_driver::{SoakSpec, soak};

#[test]
fn four_hundred_requests_in_waves_with_random_cancellations() {
    let spec = SoakSpec {
        requests: 400,
        seed: 2026,
        wave: (4, 32),
        prompt_len: (1, 120),
        token_ids_below: Some(500),
        budget: (2, 31),
        decode_cancel: (1, 12),
        ignore_eos: true,
    };
    soak(&fixture("qwen35_moe_4bit"), &spec);
}
