//! The model families, each implementing [`super::forward::LanguageModel`] and owning what only it
//! needs: Llama (`llama`, with its host decode path for MLX's CPU backend in `llama/host.rs`) and
//! Qwen3.5 / Qwen3.6 (`qwen3_5`, with the conversion of HF-original checkpoints in
//! `qwen3_5/sanitize.rs`). [`super::load`] picks one by `config.json`'s `model_type`.

pub mod llama;
pub mod qwen3_5;
