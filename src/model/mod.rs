//! Model loading and layers: one file per family or layer kind.

pub mod attention;
pub mod cache;
pub mod config;
pub mod gated_delta;
pub mod linear;
pub mod mlp;
pub mod moe;
pub mod norm;
pub mod ops;
pub mod qwen3_5;
pub mod sanitize;
pub mod weights;
