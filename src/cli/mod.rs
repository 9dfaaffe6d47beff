//! Headless commands: everything the TUI does, checkable from scripts.

pub mod bench;
pub mod bench_arrivals;
#[cfg(feature = "lab")]
mod bench_b8;
#[cfg(feature = "lab")]
pub mod bench_step;
#[cfg(feature = "lab")]
mod bench_step_report;
#[cfg(feature = "lab")]
mod bench_switches;
pub mod cache_args;
pub mod device;
mod device_invariance;
mod device_moe_timing;
pub mod device_timing;
pub mod generate;
pub mod import;
pub mod inspect;
pub mod model_args;
#[cfg(feature = "lab")]
pub mod node_costs;
pub mod oneshot;
pub mod probe;
mod results_file;
pub mod serve;
pub mod stdout;
pub mod train;

/// Exit codes of headless commands (documented in docs/configuration.md).
pub mod exit {
    /// Everything ran and every request finished without an error.
    pub const OK: u8 = 0;
    /// The command could not run (bad arguments, unreadable input, a model that will not load).
    pub const FATAL: u8 = 1;
    /// The command ran, but some requests ended with `finish_reason: "error"` (bad lines,
    /// bad settings, prompts over the context window); their results say why.
    pub const SOME_FAILED: u8 = 2;
}
