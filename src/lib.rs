//! cohort: chat with a local LLM in up to eight panes, each pane one row of a batched
//! depth-one MTP cohort engine running on MLX.
//!
//! Layout: `engine` owns every MLX array (one model-owner thread, the scheduler, the solo and
//! cohort paths); `model` holds loading and one file per layer kind or family; `tui` is state in,
//! frame out, with its profiles, themes and keymaps (`tui::config`); `platform` is what all of them stand on
//! (backend, memory, rng, paths, logging, timing) and imports none of them.

pub mod cli;
pub mod client;
pub mod engine;
pub mod model;
pub mod platform;
pub mod server;
pub mod train;
pub mod tui;
