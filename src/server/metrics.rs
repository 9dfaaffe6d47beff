//! `/metrics` in the Prometheus (OpenMetrics) text format, through `prometheus-client`. Per-request
//! figures are recorded as each request ends; the engine's own counters and gauges (cycles by
//! width, drafts, queue, memory) are read from its telemetry at each scrape.

use std::sync::Mutex;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::api::{Endpoint, finish_reason};
use crate::engine::api::RequestResult;
use crate::engine::api::Telemetry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Status {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    endpoint: &'static str,
    /// stop, length, cancelled, error, refused, or disconnected (the client left first).
    outcome: &'static str,
}

pub struct Metrics {
    registry: Registry,
    requests: Family<Outcome, Counter>,
    /// Every HTTP response by status, those refused before a request reached the engine (400,
    /// 401, 404, 405, 413, 503) included.
    responses: Family<Status, Counter>,
    prompt_tokens: Counter,
    completion_tokens: Counter,
    queue_wait: Histogram,
    ttft: Histogram,
    /// What the engine collector reports at the next scrape.
    engine: std::sync::Arc<Mutex<EngineView>>,
    scrape: Mutex<()>,
}

#[derive(Debug, Default, Clone)]
struct EngineView {
    telemetry: Telemetry,
    server: ServerView,
    ready: bool,
}

/// The server's side of a scrape: requests and connections it holds.
#[derive(Debug, Clone, Default)]
pub struct ServerView {
    pub in_flight: usize,
    pub connections_open: usize,
    pub connections_max: usize,
    pub connections_shed: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("cohort");
        let requests = Family::<Outcome, Counter>::default();
        registry.register("requests", "Requests ended, by endpoint and outcome", requests.clone());
        let responses = Family::<Status, Counter>::default();
        registry.register("http_responses", "HTTP responses sent, by status", responses.clone());
        let prompt_tokens = Counter::default();
        registry.register("prompt_tokens", "Prompt tokens of ended requests", prompt_tokens.clone());
        let completion_tokens = Counter::default();
        registry.register("completion_tokens", "Tokens generated for ended requests", completion_tokens.clone());
        let queue_wait = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register("queue_wait_seconds", "Arrival to admission into the lane", queue_wait.clone());
        let ttft = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register("time_to_first_token_seconds", "Arrival to the first token", ttft.clone());
        let engine = std::sync::Arc::new(Mutex::new(EngineView::default()));
        registry.register_collector(Box::new(EngineCollector(engine.clone())));
        Self {
            registry,
            requests,
            responses,
            prompt_tokens,
            completion_tokens,
            queue_wait,
            ttft,
            engine,
            scrape: Mutex::new(()),
        }
    }
}

impl Metrics {
    /// An HTTP response went out with `status`.
    pub fn count_response(&self, status: u16) {
        self.responses.get_or_create(&Status { status }).inc();
    }

    /// A request ended (`gone`: its client had left before its result).
    pub fn record(&self, endpoint: Endpoint, r: &RequestResult, gone: bool) {
        let outcome = if r.refused {
            "refused"
        } else if gone {
            "disconnected"
        } else {
            finish_reason(r.finish_reason)
        };
        self.requests.get_or_create(&Outcome { endpoint: endpoint.name(), outcome }).inc();
        self.prompt_tokens.inc_by(r.stats.prompt_tokens as u64);
        self.completion_tokens.inc_by(r.stats.completion_tokens as u64);
        if !r.refused && r.stats.completion_tokens > 0 {
            self.queue_wait.observe(r.stats.queue_wait_s);
            self.ttft.observe(r.stats.ttft_s);
        }
    }

    /// The text exposition, with the engine as `telemetry` shows it now.
    pub fn render(&self, telemetry: Option<Telemetry>, server: ServerView) -> String {
        let _one_at_a_time = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        {
            let mut view = self.engine.lock().unwrap_or_else(|e| e.into_inner());
            view.ready = telemetry.is_some();
            view.telemetry = telemetry.unwrap_or_default();
            view.server = server;
        }
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Width {
    width: u64,
}

#[derive(Debug)]
struct EngineCollector(std::sync::Arc<Mutex<EngineView>>);

impl Collector for EngineCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let view = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let t = &view.telemetry;
        let pc = &t.prompt_cache;
        let counters: [(&str, &str, u64); 18] = [
            (
                "http_connections_shed",
                "Idle connections closed to make room for new ones (--max-connections)",
                view.server.connections_shed,
            ),
            ("engine_cycles", "Decode cycles the lane has run", t.lane_cycles),
            (
                "plain_cycles",
                "Cycles of greedy MTP rows that took plain steps because those measured faster",
                t.plain_cycles,
            ),
            ("prompt_reads_packed", "Prompt reads that took several rows' chunks in one block", t.packed_reads),
            ("draft_tokens_accepted", "MTP drafts the verify step accepted", t.accepted_drafts as u64),
            ("draft_tokens_rejected", "MTP drafts the verify step rejected", t.rejected_drafts as u64),
            ("lane_joins", "Rows that joined a lane while others decoded", t.joins as u64),
            ("lane_leaves", "Rows that left a lane while others decoded on", t.leaves as u64),
            ("engine_poisoned", "Cycles that failed and failed their lane's rows", t.poisoned as u64),
            ("verify_cycles", "Verify (or plain decode) cycles", t.verify_cycles as u64),
            ("prompt_cache_hits", "Prompts that resumed from a cached prefix", pc.hits),
            ("prompt_cache_misses", "Prompts that found no cached prefix", pc.misses),
            ("prompt_cache_tokens_reused", "Prompt tokens resumed from the cache instead of read", pc.tokens_reused),
            ("prompt_cache_evictions", "Cached prefixes let go to stay within the budget", pc.evictions),
            ("prompt_cache_answers_kept", "Answers kept as their rows decoded them", pc.answers_kept),
            ("prompt_cache_answers_read_back", "Answers read back into the cache while idle", pc.settled),
            (
                "prompt_cache_handed_over",
                "Answers' entries handed over to the next turns that extended them",
                pc.handed_over,
            ),
            (
                "prompt_cache_cut_back",
                "Prompts that resumed from an entry cut back to the part they share with it",
                pc.cut_back,
            ),
        ];
        for (name, help, value) in counters {
            let c = ConstCounter::new(value);
            c.encode(encoder.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        let gauges: [(&str, &str, i64); 14] = [
            ("ready", "1 once the model has loaded", i64::from(view.ready)),
            ("requests_in_flight", "Requests the server holds (decoding or waiting)", view.server.in_flight as i64),
            ("http_connections_open", "Connections the server holds", view.server.connections_open as i64),
            (
                "http_connections_max",
                "Connections held at most (--max-connections)",
                view.server.connections_max as i64,
            ),
            ("queue_depth", "Requests waiting for a row", t.pending as i64),
            ("active_rows", "Rows reading their prompt or decoding", t.active as i64),
            ("lane_width", "Physical width of the lane's latest cycle (0 when idle)", t.width_now as i64),
            ("memory_active_bytes", "MLX active memory", t.memory.active as i64),
            ("memory_peak_bytes", "MLX peak memory", t.memory.peak as i64),
            ("memory_cache_bytes", "MLX buffer cache", t.memory.cache as i64),
            ("prompt_cache_bytes", "Bytes of row state the prompt cache holds", pc.bytes_held as i64),
            ("prompt_cache_budget_bytes", "Bytes the prompt cache may hold", pc.budget_bytes as i64),
            ("prompt_cache_entries", "Cached prefixes held", pc.entries as i64),
            (
                "prompt_cache_exact",
                "1 where a cached prefix gives the bits of a fresh read, 0 where inexact or off",
                i64::from(pc.reuse == crate::engine::api::Reuse::Exact),
            ),
        ];
        for (name, help, value) in gauges {
            let g = ConstGauge::new(value);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let mut family = encoder.encode_descriptor(
            "cycles_by_width",
            "Cycles run at each physical width",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (&width, &n) in &t.fixed_width_cycles {
            let c = ConstCounter::new(n as u64);
            c.encode(family.encode_family(&Width { width: width as u64 })?)?;
        }
        Ok(())
    }
}
