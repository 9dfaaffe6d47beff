//! The engine: the model-owner thread and everything that touches MLX state.

pub mod ar;
pub mod prepare;
pub mod request;
pub mod row;
pub mod solo;
pub mod sampler;
pub mod runtime;
