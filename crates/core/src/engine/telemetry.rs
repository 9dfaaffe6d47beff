//! What the engine reports: one snapshot the inspector, `generate` and tests read. The owner
//! thread writes it; readers take a copy and never block the owner for long.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::platform::backend::MemoryStats;

/// Where the owner last finalised MLX state (cleared caches, released arrays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FinalizeScope {
    /// Nothing has needed finalising yet.
    #[default]
    NotRequiredBeforeAdmission,
    /// After a cohort's decode, on the owner thread.
    CohortOwnerAfterDecode,
    /// A cohort's finalisation failed; the lane was poisoned.
    CohortOwnerFinalizeFailed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    #[default]
    Idle,
    Queued,
    Prefill,
    Decoding,
    Done,
    Cancelled,
    Error,
}

/// One row of the current (or last) cohort.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct RowTelemetry {
    pub id: String,
    pub state: RowState,
    pub committed_offset: i32,
    pub physical_offset: i32,
    pub mtp_committed_offset: i32,
    pub mtp_physical_offset: i32,
    pub tokens: usize,
    pub accepted: usize,
    pub rejected: usize,
    /// 1 = accepted, 0 = rejected, most recent last (bounded).
    pub recent_accepts: Vec<u8>,
    pub tokens_per_cycle: f64,
    pub prefill_done: usize,
    pub prefill_total: usize,
    /// Arrival to admission (seconds).
    pub admission_wait_s: f64,
    /// The lane's cycle count when the row began decoding.
    pub joined_at_cycle: u64,
    /// The row's slot in the physical batch (None while it reads its prompt).
    pub slot: Option<usize>,
    /// The mode the row decodes in (its own, or AR where the engine has no MTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::engine::request::GenerationMode>,
}

/// The construction check of a batched route against B1 references.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct ConstructionCheck {
    pub route: String,
    /// The physical widths compared with B1.
    pub widths: Vec<usize>,
    pub max_abs_diff: f32,
    pub bound: f32,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Telemetry {
    pub pending: usize,
    pub active: usize,
    pub last_real_width: usize,
    /// Real widths of sealed cohorts (1 = solo runs).
    pub real_width_histogram: BTreeMap<usize, usize>,
    /// Cycles run at each physical width.
    pub fixed_width_cycles: BTreeMap<usize, usize>,
    pub verify_cycles: usize,
    pub accepted_drafts: usize,
    pub rejected_drafts: usize,
    pub solo_runs: usize,
    pub cohorts: usize,
    pub last_route: String,
    pub last_error: Option<String>,
    pub finalize_scope: FinalizeScope,
    pub poisoned: usize,
    pub probe_verdict: Option<String>,
    pub construction_check: Option<ConstructionCheck>,
    pub rows: Vec<RowTelemetry>,
    pub memory: MemoryStats,
    pub last_queue_wait_s: f64,
    /// Ids of the requests waiting for a row, oldest first.
    pub queued: Vec<String>,
    /// Decode cycles the continuous lane has run.
    pub lane_cycles: u64,
    /// Prompt reads that took several rows' chunks in one block.
    pub packed_reads: u64,
    /// Cycles of greedy MTP rows that took plain steps because those measured faster.
    #[serde(default)]
    pub plain_cycles: u64,
    /// Rows that joined a running lane / left it while others decoded on.
    pub joins: usize,
    pub leaves: usize,
    /// The physical width of the lane's latest cycle (0 when idle).
    pub width_now: usize,
    /// The prompt cache: how it serves, what it holds, hits, tokens reused, evictions.
    #[serde(default)]
    pub prompt_cache: super::prompt_cache::CacheStats,
}

pub type SharedTelemetry = Arc<Mutex<Telemetry>>;

/// Recent-acceptance window kept per row (for the inspector's sparkline).
pub const RECENT: usize = 64;

pub fn push_recent(v: &mut Vec<u8>, accepted: bool) {
    v.push(u8::from(accepted));
    if v.len() > RECENT {
        v.remove(0);
    }
}
