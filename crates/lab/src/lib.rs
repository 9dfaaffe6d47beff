//! cohort-lab: what measures cohort, kept out of the product binary.
//!
//! - Benchmarks: `bench` (serial against cohort on the sealed B8 lane) and `bench_arrivals`
//!   (requests arriving over time through the continuous lane).
//! - Step timings: `bench_step` (prefill, B1 AR and the B8 cycle's phases against their bandwidth
//!   floors; its folder holds `b8`, `report` and `switches`, the route arms),
//!   `node_costs`, `graph_stats` and the CUDA profiler's windows (`cuda_profiler`).
//! - The device: `device` (matmul, linear and attention timings: `device_timing`,
//!   `attention_timing`; the kernels' checks and timings: `device_invariance`,
//!   `device_moe_timing`) and `probe` (the product's probe on synthetic weights, with
//!   `route_cost`).
//! - Numerical checks: `checks` (float64 references for the Gated DeltaNet and MoE routes) and
//!   `synth` (random weights at a named geometry), which the tests use too.
//!
//! The binary `cohort-lab` runs these beside every command of `cohort` itself.

pub mod attention_timing;
pub mod bench;
pub mod bench_arrivals;
pub mod bench_step;
pub mod checks;
pub mod cuda_profiler;
pub mod device;
mod device_invariance;
mod device_moe_timing;
pub mod device_timing;
pub mod graph_stats;
pub mod node_costs;
pub mod probe;
pub mod route_cost;
pub mod synth;
