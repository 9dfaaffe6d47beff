//! cohort: chat with a local LLM in up to eight panes, each pane one row of a batched
//! depth-one MTP cohort engine running on MLX.
//!
//! This crate is what a user runs: `tui` is state in, frame out; `cli` holds the headless
//! commands; `server` and `client` speak the OpenAI-compatible HTTP API; `config` is the settings
//! all of them read (profiles, themes, keymaps, the model and prompt-cache arguments). Everything that owns an MLX array is in `cohort-core` (re-exported
//! here as `engine`, `model`, `platform` and `train`), and the measurement code in `cohort-lab`.

pub use cohort_core::{engine, model, platform, train};

pub mod cli;
pub mod client;
pub mod config;
pub mod server;
pub mod tui;
