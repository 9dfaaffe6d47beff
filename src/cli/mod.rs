//! Headless commands: everything the TUI does, checkable from scripts.

pub mod app;
pub mod device;
pub mod generate;
pub mod import;
pub mod inspect;
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
