//! The engine as its clients see it. The TUI, the server and the client import this module and
//! nothing else of the engine (tests/models/source_layout.rs holds them to it), so what a client
//! may rely on is listed here and the rest of `engine/` can change behind it.
//!
//! - Starting and driving it: [`EngineSetup`] and [`SchedulerConfig`] (with [`Preset`],
//!   [`Numerics`], [`CacheConfig`] and its policies), then [`EngineHandle`], whose submissions
//!   stream [`RowEvent`]s and end in a [`RequestResult`]; [`EngineInfo`] says what loaded.
//! - The request contract: [`Request`], [`Prompt`], [`SamplerConfig`], [`GenerationMode`], the
//!   chat input shared by the server and `generate` ([`MessageIn`], [`chat_messages`], ...), and
//!   results' [`FinishReason`] and [`Stats`].
//! - What the inspector and `/metrics` show: [`Telemetry`] and its rows.
//! - Facts a client sizes itself by: [`COHORT_WIDTH`] (the panes one engine decodes together)
//!   and [`VERIFY_SLACK`] (room a verify writes past the last token).

pub use super::chat_input::{MessageIn, Stop, chat_messages, stop_sequences};
pub use super::cohort::FIXED_WIDTH as COHORT_WIDTH;
pub use super::handle::{EngineHandle, Submission};
pub use super::owner::{EngineInfo, EngineSetup};
pub use super::prepare::{VERIFY_SLACK, prompt_ids};
pub use super::prompt_cache::persist::FILE_NAME as PROMPT_CACHE_FILE;
pub use super::prompt_cache::{AnswerPolicy, CacheConfig, CacheStats, Reuse, ReusePolicy};
pub use super::request::{DEFAULT_MAX_TOKENS, FinishReason, GenerationMode, Prompt, Request, RequestResult, Stats};
pub use super::row::{CancelFlag, CancelRegistry, RowEvent};
pub use super::sampler::{MAX_TOP_K, SamplerConfig};
pub use super::scheduler::{Numerics, Preset, SchedulerConfig};
pub use super::telemetry::{ConstructionCheck, FinalizeScope, RECENT, RowState, RowTelemetry, Telemetry};
