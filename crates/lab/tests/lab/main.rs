//! The lab's commands through the `cohort-lab` binary: the benchmarks refuse what they cannot
//! measure, the step timings refuse routes the backend lacks, the probe runs on synthetic weights.
//!
//! One test binary for the lab (it links MLX once); the shared helpers are the root's.

#[path = "../../../../tests/common/mod.rs"]
mod common;

mod bench_cli;
mod bench_step_cli;
mod matmul_oom;
mod probe_cli;
