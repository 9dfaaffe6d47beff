//! Soak on the default model (SmolLM2-135M-Instruct, imported from its GGUF as setup does; AR
//! cohorts, as the default install runs without an MTP head): the same 400-request soak as
//! tests/soak.rs, with prompts of 1 to 8 tokens and budgets of 1 to 4 so it stays near a minute on
//! a 2-core CPU, where every row's prefill and every B8 step read all 0.54 GB of the dequantized
//! weights. Requests may stop at end-of-sequence, as the TUI's do. Skipped, saying so, when the
//! GGUF is absent.

mod common;
mod soak_driver;

use soak_driver::{SoakSpec, soak};

#[test]
fn four_hundred_requests_on_the_default_model() {
    let dir = common::smollm2_imported("four_hundred_requests_on_the_default_model");
    let spec = SoakSpec {
        requests: 400,
        seed: 2027,
        wave: (4, 32),
        prompt_len: (1, 8),
        token_ids_below: None,
        budget: (1, 4),
        decode_cancel: (2, 3),
        ignore_eos: false,
    };
    soak(dir.path(), &spec);
}
