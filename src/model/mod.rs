//! Model loading and layers: one file per family or layer kind.

pub mod attention;
pub mod cache;
pub mod config;
pub mod cpu_pool;
pub mod cpu_qmm;
pub mod forward;
pub mod gated_delta;
pub mod gdn_check;
pub mod gdn_kernel;
pub mod gguf;
pub mod gguf_import;
pub mod gguf_tokenizer;
pub mod kv_slots;
pub mod linear;
pub mod llama;
pub mod load;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod ops;
pub mod qwen3_5;
pub mod rope_cpu;
pub mod sanitize;
pub mod synth;
pub mod tokenizer;
pub mod weights;
