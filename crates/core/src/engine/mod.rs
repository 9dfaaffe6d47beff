//! The engine: the model-owner thread and everything that touches MLX state.

pub mod api;
/// Plain greedy decoding of one row, the baseline the tests hold every speculative path to.
#[cfg(feature = "testing")]
pub mod ar;
pub mod chat_input;
pub mod cohort;
pub mod construction;
pub mod cycle;
pub mod draft_policy;
pub mod handle;
pub mod intake;
pub mod lane;
pub mod loader;
pub mod owner;
pub mod prepare;
pub mod probe;
pub mod prompt_cache;
pub mod read_planner;
pub mod request;
pub mod row;
pub mod sampler;
pub mod scheduler;
pub mod solo;
pub mod telemetry;
pub mod warm_up;
