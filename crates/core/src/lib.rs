//! cohort-core: everything that owns an MLX array, and nothing that draws, serves or measures.
//!
//! `engine` owns every MLX array (one model-owner thread, the scheduler, the solo and cohort
//! paths, the prompt cache); `model` holds loading, the families, the shared layers, the CPU
//! host paths (`model::cpu`) and the CUDA kernels beside their wrappers (`model::cuda`);
//! `train` fits an MTP head for a model that ships none; `platform` is what all of them stand on
//! (backend, memory, rng, paths, logging, timing) and imports none of them. Nothing here imports
//! the terminal, the server or the lab: those crates import this one.

pub mod engine;
pub mod model;
pub mod platform;
pub mod train;
