//! Scheduling settings, chosen by preset or profile: how rows are admitted (continuously at
//! cycle boundaries, or sealed into cohorts as the reference system does), how many decode at
//! once, how prompts are chunked and how much prompt a cycle may prefill, in which order, and
//! which numerics route a cohort takes. The decisions made from them each step are the read
//! planner's ([`super::read_planner`]: what a step reads) and the draft chooser's
//! ([`super::draft_policy`]: whether a cycle drafts); the lane carries them out.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Batching presets (max active / decode batch max / batch wait / prefill chunk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    Solo,
    Latency,
    Agent,
    Throughput,
    /// The reference system's lane: pending requests are sealed into a fixed-width B8 cohort that
    /// runs to its end before anything else is admitted (`cohort-lab bench` measures it).
    Sealed,
}

/// How requests reach the decoding rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Admission {
    /// A request takes a free row at the next cycle boundary and leaves the moment it ends; the
    /// physical width follows the live rows.
    #[default]
    Continuous,
    /// Requests are sealed into a cohort of fixed physical width that runs until its last row
    /// ends.
    Sealed,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfig {
    /// Requests decoding at once (a cohort's real width at most).
    pub max_active: usize,
    /// Rows sealed into one cohort.
    pub decode_batch_max: usize,
    /// How long the first pending request waits for others before its cohort is sealed.
    pub batch_wait_ms: u64,
    /// Prompt tokens per prefill chunk.
    pub prefill_chunk: usize,
    /// Prompt tokens a continuous lane may prefill between two decode cycles (whole chunks, at
    /// least one), so running rows keep streaming while a long prompt is read.
    pub prefill_budget: usize,
    pub admission: Admission,
    /// How a continuous lane's physical batch follows its live rows.
    pub width: WidthPolicy,
    /// Whether a lane's greedy MTP cohorts may take plain steps where those measure faster.
    #[serde(default)]
    pub drafts: super::draft_policy::DraftPolicy,
    /// What the prompt cache may serve, and its byte budget.
    #[serde(default)]
    pub prompt_cache: super::prompt_cache::CacheConfig,
    /// Which waiting prompt a step reads first.
    #[serde(default)]
    pub read_order: ReadOrder,
}

/// Which waiting prompt a lane's step reads first, where several wait (`cohort-lab bench --arrivals`
/// measures both: docs/benchmarks.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ReadOrder {
    /// The one with the fewest tokens left to read: a short question never waits behind a
    /// paste, and the mean wait is the least any order gives.
    #[default]
    ShortestFirst,
    /// Each in turn, a piece at a time, in the order they arrived.
    RoundRobin,
}

/// The physical width a continuous lane runs at for `n` live rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WidthPolicy {
    /// Exactly the live rows: no work on padding (the CPU, where a cycle's cost follows its rows).
    #[default]
    Packed,
    /// The smallest of 1, 2, 4 and 8 that holds them, padded with inert rows: a backend that plans
    /// or compiles per shape meets four shapes instead of eight.
    PowerOfTwo,
}

impl WidthPolicy {
    pub fn physical(self, live: usize) -> usize {
        match self {
            WidthPolicy::Packed => live,
            WidthPolicy::PowerOfTwo => live.next_power_of_two(),
        }
    }

    /// Physical widths a lane of at most `most` live rows can run at (what the construction check
    /// must cover).
    pub fn widths(self, most: usize) -> Vec<usize> {
        let mut w: Vec<usize> = (1..=most).map(|n| self.physical(n)).collect();
        w.dedup();
        w
    }
}

impl Preset {
    pub fn config(self) -> SchedulerConfig {
        let (max_active, decode_batch_max, batch_wait_ms, prefill_chunk) = match self {
            Preset::Solo => (1, 1, 0, 1024),
            Preset::Latency => (1, 1, 0, 1024),
            Preset::Agent => (4, 4, 50, 2048),
            Preset::Throughput | Preset::Sealed => (8, 8, 20, 2048),
        };
        let admission = if self == Preset::Sealed { Admission::Sealed } else { Admission::Continuous };
        // Packed on every backend until a GPU run shows that fixed shapes pay (docs/benchmarks.md).
        let width = WidthPolicy::Packed;
        // On the CPU, chunks of up to 512 attend on the host (model::cpu::attention_cpu), where a
        // query costs only the positions it sees: a ~300-token prompt prefills fastest in one
        // chunk, and longer ones gain nothing from longer chunks (docs/benchmarks.md). MLX's
        // masked SDPA serves anything longer, and a 1,917-token prompt prefilled at 97 tok/s in
        // one chunk of 2048 against 154 in chunks of 256. GPUs keep long chunks (fewer launches).
        let prefill_chunk = if crate::platform::backend::Backend::detect() == crate::platform::backend::Backend::Cpu {
            CPU_PREFILL_CHUNK
        } else {
            prefill_chunk
        };
        // One chunk per cycle: on the CPU a 512-token chunk of the default model takes about
        // 1.5 s, so a longer prompt is read while the running rows keep their pace.
        SchedulerConfig {
            max_active,
            decode_batch_max,
            batch_wait_ms,
            prefill_chunk,
            prefill_budget: prefill_chunk,
            admission,
            width,
            drafts: super::draft_policy::DraftPolicy::Measured,
            prompt_cache: super::prompt_cache::CacheConfig::default(),
            read_order: ReadOrder::default(),
        }
    }
}

/// Prompt tokens per prefill chunk on the CPU backend, whatever the preset (at most
/// [`crate::model::cpu::attention_cpu::MAX_QUERIES`], so every chunk attends on the host).
pub const CPU_PREFILL_CHUNK: usize = 512;

impl SchedulerConfig {
    pub fn batch_wait(&self) -> Duration {
        Duration::from_millis(self.batch_wait_ms)
    }

    /// The width a cohort is sealed at (at most the engine's fixed width).
    pub fn seal_width(&self) -> usize {
        self.decode_batch_max.min(self.max_active).clamp(1, super::cohort::FIXED_WIDTH)
    }

    /// The most rows a continuous lane decodes at once.
    pub fn lane_width(&self) -> usize {
        self.max_active.clamp(1, super::cohort::FIXED_WIDTH)
    }
}

/// How a cohort computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Numerics {
    /// The fastest B8 route: every projection batched over the rows.
    #[default]
    Throughput,
    /// B8 lockstep with each row's projections computed alone (bit-identical matmuls to B1),
    /// the rest batched.
    Balanced,
    /// Eight unchanged solo runs one after another: bit-identical to B1.
    #[value(name = "b1-exact")]
    B1Exact,
}

impl Numerics {
    /// How a cohort of this mode runs its projections: balanced row by row (bit-identical to
    /// B1), the others batched over the rows on `batched`, the batched route the exactness gate
    /// chose at load (MLX's products, or the row-invariant kernels where those are exact and
    /// MLX's are not).
    pub fn block_route(self, batched: crate::model::routes::BlockRoute) -> crate::model::routes::BlockRoute {
        use crate::model::routes::BlockRoute;
        if self == Numerics::Balanced { BlockRoute::RowByRow } else { batched }
    }

    /// The route id a sealed B8 cohort of this mode reports.
    pub fn route_id(self, family: &str) -> String {
        self.route_id_at(family, super::cohort::FIXED_WIDTH)
    }

    /// The route id of an MTP cycle of this mode at physical width `width`.
    pub fn route_id_at(self, family: &str, width: usize) -> String {
        let m = 2 * width;
        match self {
            Numerics::Throughput => format!("{family}_mtp_batch_b{width}_t2_m{m}_throughput"),
            Numerics::Balanced => format!("{family}_mtp_batch_b{width}_t2_rowwise_balanced"),
            Numerics::B1Exact => format!("{family}_mtp_batch_b1_exact_serial"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::backend as runtime;

    #[test]
    fn presets_match_the_reference_table() {
        let chunk = if runtime::Backend::detect() == runtime::Backend::Cpu { CPU_PREFILL_CHUNK } else { 2048 };
        assert_eq!(
            Preset::Throughput.config(),
            SchedulerConfig {
                max_active: 8,
                decode_batch_max: 8,
                batch_wait_ms: 20,
                prefill_chunk: chunk,
                prefill_budget: chunk,
                admission: Admission::Continuous,
                width: WidthPolicy::Packed,
                drafts: crate::engine::draft_policy::DraftPolicy::Measured,
                prompt_cache: crate::engine::prompt_cache::CacheConfig::default(),
                read_order: ReadOrder::ShortestFirst,
            }
        );
        assert_eq!(Preset::Sealed.config().admission, Admission::Sealed);
        assert_eq!(Preset::Sealed.config().seal_width(), 8);
        assert_eq!(Preset::Agent.config().seal_width(), 4);
        assert_eq!(WidthPolicy::Packed.widths(8), (1..=8).collect::<Vec<_>>());
        assert_eq!(WidthPolicy::PowerOfTwo.widths(8), vec![1, 2, 4, 8]);
        assert_eq!(WidthPolicy::PowerOfTwo.physical(5), 8);
        assert_eq!(Preset::Solo.config().seal_width(), 1);
    }
}
