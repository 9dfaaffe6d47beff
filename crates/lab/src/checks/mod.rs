//! Every kernel's check, one file a kernel family: float64 references written here from the
//! definition on random inputs of a given geometry, and invariance checks (a row of a block bit
//! for bit what it gives alone or as a step). The Gated DeltaNet recurrence, fused CUDA kernel or
//! plain-ops loop (`gdn_check`); the MoE block's products, router and expert kernels
//! (`moe_check`); the invariant route's products (`row_invariant_check`); the short-block
//! attention kernel (`attention_check`); the q/k norm and RoPE kernel (`qk_norm_rope_check`);
//! the residual sum and norm kernel (`add_norm_check`). [`harness`] runs a list of them and
//! reports each as passed, failed or skipped where this backend cannot run it. Used by `cohort-lab
//! device --check-kernels` and `--check-invariance`, and by the tests.

pub mod add_norm_check;
pub mod attention_check;
pub mod gdn_check;
pub mod harness;
pub mod moe_check;
pub mod qk_norm_rope_check;
pub mod row_invariant_check;
