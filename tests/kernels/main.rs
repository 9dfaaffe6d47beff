//! The CPU and CUDA kernels and the host paths, each against a float64 reference or against itself row by row.
//!
//! One test binary for the area (each links MLX once): every file here is a module of it.

#[path = "../common/mod.rs"]
mod common;

mod add_norm;
mod attention_cpu;
mod attention_kernel;
mod cpu_kernel_model;
mod cpu_qmm;
mod gdn_kernel;
mod host_ops;
mod invariant_route;
mod kv_slots;
mod moe_router;
mod qk_norm_rope;
mod rope_cpu;
