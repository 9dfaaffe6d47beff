//! The model families, their files and formats (GGUF, chat templates, bad input), the references against mlx-lm, training the MTP head, the runtime and its switches.
//!
//! One test binary for the area (each links MLX once): every file here is a module of it.

#[path = "../common/mod.rs"]
mod common;

mod bad_model;
mod bad_model_files;
mod chat_template;
mod gguf;
mod llama_reference;
mod qwen35_reference;
mod runtime;
mod source_layout;
mod switches;
mod train_mtp;
