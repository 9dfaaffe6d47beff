//! Scheduling policy: how long to wait for company, how many rows a cohort seals, how prompts
//! are chunked, and which numerics route a cohort takes.

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
}

impl Preset {
    pub fn config(self) -> SchedulerConfig {
        let (max_active, decode_batch_max, batch_wait_ms, prefill_chunk) = match self {
            Preset::Solo => (1, 1, 0, 1024),
            Preset::Latency => (1, 1, 0, 1024),
            Preset::Agent => (4, 4, 50, 2048),
            Preset::Throughput => (8, 8, 20, 2048),
        };
        // On the CPU, chunks of up to 512 attend on the host (model::attention_cpu), where a
        // query costs only the positions it sees: a ~300-token prompt prefills fastest in one
        // chunk, and longer ones gain nothing from longer chunks (docs/benchmarks.md). MLX's
        // masked SDPA serves anything longer, and a 1,917-token prompt prefilled at 97 tok/s in
        // one chunk of 2048 against 154 in chunks of 256. GPUs keep long chunks (fewer launches).
        let prefill_chunk = if super::runtime::Backend::detect() == super::runtime::Backend::Cpu {
            CPU_PREFILL_CHUNK
        } else {
            prefill_chunk
        };
        SchedulerConfig { max_active, decode_batch_max, batch_wait_ms, prefill_chunk }
    }
}

/// Prompt tokens per prefill chunk on the CPU backend, whatever the preset (at most
/// [`crate::model::attention_cpu::MAX_QUERIES`], so every chunk attends on the host).
pub const CPU_PREFILL_CHUNK: usize = 512;

impl SchedulerConfig {
    pub fn batch_wait(&self) -> Duration {
        Duration::from_millis(self.batch_wait_ms)
    }

    /// The width a cohort is sealed at (at most the engine's fixed width).
    pub fn seal_width(&self) -> usize {
        self.decode_batch_max.min(self.max_active).clamp(1, super::cohort::FIXED_WIDTH)
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
    /// B1), the others batched over the rows.
    pub fn linear_route(self) -> crate::model::linear::LinearRoute {
        use crate::model::linear::LinearRoute;
        if self == Numerics::Balanced { LinearRoute::RowByRow } else { LinearRoute::Batched }
    }

    /// The route id a cohort of this mode reports.
    pub fn route_id(self, family: &str) -> String {
        match self {
            Numerics::Throughput => format!("{family}_mtp_batch_b8_t2_m16_throughput"),
            Numerics::Balanced => format!("{family}_mtp_batch_b8_t2_rowwise_balanced"),
            Numerics::B1Exact => format!("{family}_mtp_batch_b1_exact_serial"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::runtime;

    #[test]
    fn presets_match_the_reference_table() {
        assert_eq!(
            Preset::Throughput.config(),
            SchedulerConfig {
                max_active: 8,
                decode_batch_max: 8,
                batch_wait_ms: 20,
                prefill_chunk: if runtime::Backend::detect() == runtime::Backend::Cpu {
                    CPU_PREFILL_CHUNK
                } else {
                    2048
                }
            }
        );
        assert_eq!(Preset::Agent.config().seal_width(), 4);
        assert_eq!(Preset::Solo.config().seal_width(), 1);
    }
}
