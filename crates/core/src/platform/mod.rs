//! What everything else stands on: which backend MLX drives and what the runtime reports, the
//! memory the machine has, the random number generator, where cohort keeps its files, logging,
//! and the timing conventions every measurement uses. Imports nothing from the rest of cohort.

pub mod backend;
pub mod blas;
pub mod logging;
pub mod memory;
pub mod paths;
pub mod rng;
pub mod timing;
