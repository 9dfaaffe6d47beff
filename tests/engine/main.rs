//! The engine: solo MTP, cohorts, the continuous lane, the prompt cache, the exactness gate, the handle; every row against its solo run.
//!
//! One test binary for the area (each links MLX once): every file here is a module of it.

#[path = "../common/mod.rs"]
mod common;

mod cohort;
mod compiled_blocks;
mod engine_handle;
mod hand_over;
mod lane;
mod mtp_distribution;
mod mtp_solo;
mod packed_prefill;
mod phase_timing;
mod plain_cycles;
mod probe;
mod prompt_cache;
