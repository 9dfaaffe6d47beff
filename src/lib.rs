//! cohort: chat with a local LLM in up to eight panes, each pane one row of a batched
//! depth-one MTP cohort engine running on MLX.
//!
//! Layout: `engine` owns every MLX array (one model-owner thread, the scheduler, the solo and
//! cohort paths); `model` holds loading and one file per layer kind or family; `tui` is state in,
//! frame out; `config` holds profiles, themes, keymaps and paths.

pub mod cli;
pub mod client;
pub mod config;
pub mod engine;
pub mod logging;
pub mod model;
pub mod server;
pub mod train;
pub mod tui;
