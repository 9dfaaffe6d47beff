//! cohort: chat with a local LLM in up to eight panes, each pane one row of a batched
//! depth-one MTP cohort engine running on MLX.
//!
//! This crate is what a user runs: `tui` is state in, frame out, with its profiles, themes and
//! keymaps (`tui::config`); `cli` holds the headless commands; `server` and `client` speak the
//! OpenAI-compatible HTTP API. Everything that owns an MLX array is in `cohort-core` (re-exported
//! here as `engine`, `model`, `platform` and `train`), and the measurement code in `cohort-lab`.

pub use cohort_core::{engine, model, platform, train};

pub mod cli;
pub mod client;
pub mod server;
pub mod tui;
