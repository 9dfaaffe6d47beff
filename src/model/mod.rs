//! Model loading and layers: one file per family or layer kind.

pub mod attention;
pub mod cache;
pub mod checks;
pub mod compiled;
pub mod config;
pub mod cpu;
pub mod cuda;
pub mod families;
pub mod formats;
pub mod forward;
pub mod gated_delta;
pub mod gdn_batch;
pub mod kv_slots;
pub mod linear;
pub mod load;
pub mod mlp;
pub mod moe;
pub mod moe_graph;
pub mod norm;
pub mod ops;
pub mod product;
pub mod rope_cpu;
pub mod switches;
pub mod synth;
pub mod text;
