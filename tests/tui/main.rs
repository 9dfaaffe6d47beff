//! The TUI: state, views (TestBackend snapshots), configuration, transcripts, and end to end in tmux.
//!
//! One test binary for the area (each links MLX once): every file here is a module of it.

#[path = "../common/mod.rs"]
mod common;

mod tui_attach;
mod tui_bench;
mod tui_config;
mod tui_e2e;
mod tui_errors;
mod tui_state;
mod tui_transcript;
mod tui_views;
mod tui_window;
