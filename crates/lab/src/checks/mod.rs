//! Float64 references for kernels and routes whose check is not beside them: the Gated DeltaNet
//! recurrence, fused CUDA kernel or plain-ops loop (`gdn_check`), and the MoE block's stacked
//! and narrow products, router and experts kernels (`moe_check`), each written here from the
//! definition on random inputs of a given geometry, on whatever backend runs. Used by `cohort
//! device --check-kernels` and the tests. (`add_norm`, `attention_kernel` and `row_invariant`
//! in `cohort_core::model::cuda` carry their own `check`.)

pub mod gdn_check;
pub mod moe_check;
