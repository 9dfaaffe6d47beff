//! The model: from a checkpoint on disk to logits, in folders by layer of the design.
//!
//! - [`load`] finds a model and picks its family by `config.json`'s `model_type`; [`config`]
//!   reads `config.json` (the Qwen3.5 family's geometry and the quantization every family
//!   shares); [`forward`] is what every family offers the engine ([`forward::LanguageModel`]).
//! - [`families`]: Llama and Qwen3.5 / Qwen3.6, each with what only it needs.
//! - [`layers`]: the layers and row-owned state the families are built from.
//! - [`cpu`]: host kernels for MLX's CPU backend. [`cuda`]: the CUDA kernel wrappers.
//! - [`formats`]: safetensors, GGUF and bounded reads of a model directory's files. [`text`]:
//!   the tokenizer and chat template.
//! - [`ops`]: small array helpers; [`switches`]: every environment switch.
//!
//! The float64 references for kernels and routes and the synthetic checkpoints live in the lab
//! crate (`crates/lab`), which measures this one.

pub mod config;
pub mod cpu;
pub mod cuda;
pub mod families;
pub mod formats;
pub mod forward;
pub mod layers;
pub mod load;
pub mod ops;
pub mod prefill;
pub mod routes;
pub mod storage;
pub mod switches;
pub mod text;
