//! The headless commands and the server, driven as a user drives them (the binary, real HTTP clients).
//!
//! One test binary for the area (each links MLX once): every file here is a module of it.

#[path = "../common/mod.rs"]
mod common;

mod cli_generate;
mod cli_logs;
mod cli_oneshot;
mod cli_pipes;
mod fuzz_inputs;
mod generate_signals;
mod serve;
