//! The engine: the model-owner thread and everything that touches MLX state.

pub mod ar;
pub mod runtime;
