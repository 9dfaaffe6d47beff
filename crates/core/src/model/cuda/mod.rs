//! Cohort's own CUDA kernels: the wrappers that build and launch the kernel bodies beside
//! them (`*.cu`, `*.cuh`, read in with `include_str!`). `cuda_kernel` is the mechanism (mlx-c's CUDA
//! custom-kernel functions, which mlx-rs does not wrap); each other file is one op: the residual
//! add and RMSNorm (`add_norm`), a short query block's cohort attention (`attention_kernel`), the
//! Gated DeltaNet recurrence (`gdn_kernel`), the MoE router and experts (`moe_router`,
//! `moe_experts`), an attention layer's query and key norm and RoPE (`qk_norm_rope`) and the
//! row-invariant products (`row_invariant`). Each says when it serves and
//! which `COHORT_` switch turns it on or off; the layers' ops route stays the route on the CPU and
//! Metal and the fallback. `add_norm`, `attention_kernel`, `qk_norm_rope` and `row_invariant` carry their own
//! `check` against a float64 host reference (`cohort-lab device --check-kernels`,
//! `--check-invariance`); the recurrence's and the MoE kernels' are in [`super::checks`].

pub mod add_norm;
pub mod attention_kernel;
pub mod cuda_kernel;
pub mod gdn_kernel;
pub mod moe_experts;
pub mod moe_router;
pub mod qk_norm_rope;
pub mod row_invariant;
