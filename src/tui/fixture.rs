//! Scripted app states for view snapshots and the frame bench: requests are "answered" by
//! feeding the app the same row events the engine would send, with fixed timestamps, so frames
//! are identical run after run. No engine, no terminal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::action::{Action, EngineSummary};
use super::app::App;
use crate::config::keymap::{Command, Keymap};
use crate::config::profile::Settings;
use crate::config::theme::Theme;
use crate::engine::api::RowEvent;
use crate::engine::api::{ConstructionCheck, FinalizeScope, RowTelemetry, Telemetry};
use crate::engine::api::{FinishReason, RequestResult, Stats};
use crate::platform::backend::MemoryStats;

pub const SESSION: &str = "20260101-120000";
pub const ROUTE: &str = "qwen35_mtp_batch_b8_t2_m16_throughput";
/// Milliseconds between scripted tokens (about 67 tokens/s, the fixture model's B8 speed).
const TOKEN_MS: u64 = 15;

pub const CODE_ANSWER: &str = "Here is a loop in Rust:\n```rust\nfor i in 0..3 {\n    println!(\"{i}\");\n}\n```\nIt prints **three** lines; see `println!`.";
pub const PROSE_ANSWER: &str = "The cohort seals up to eight rows and decodes them in lockstep. Each cycle drafts one token per row with the MTP head, then verifies two positions at once:\n- accepted drafts commit two tokens\n- rejected ones commit the corrected token";
pub const PARTIAL_ANSWER: &str = "Counting slowly: one, two, three, four, five,";

pub fn settings(panes: usize) -> Settings {
    Settings {
        profile: "throughput".into(),
        origin: "config/throughput.toml (built in)".into(),
        model: Some("tests/fixtures/qwen35_moe_4bit".into()),
        panes,
        max_tokens: 512,
        ..Settings::default()
    }
}

/// An app with `panes` panes, the named built-in theme, and a loaded engine.
/// The shipped profiles as the profile picker lists them (no files behind them).
pub fn shipped_profiles() -> Vec<crate::config::profile::ProfileEntry> {
    crate::config::profile::SHIPPED
        .iter()
        .map(|(name, _)| crate::config::profile::ProfileEntry { name: (*name).into(), path: None, description: None })
        .collect()
}

pub fn app(panes: usize, theme: &str) -> App {
    let mut app = App::new(settings(panes), Theme::builtin(theme), Keymap::default(), SESSION);
    app.update(Action::EngineReady(Box::new(EngineSummary {
        model: "qwen35_moe_4bit".into(),
        mode: "mtp".into(),
        numerics: "throughput".into(),
        weights: "kernel".into(),
        probe: Some("MTP exactness probe: Equal on the batched route".into()),
        max_context: 4096,
        load_s: 1.5,
        counter: None,
    })));
    app.notice = None;
    app
}

/// Send `prompt` from pane `index`, stream `answer` word by word, and finish it with `finish`
/// (None: still decoding). A failed answer streams nothing and carries `error`.
pub fn play(app: &mut App, index: usize, prompt: &str, answer: &str, finish: Option<FinishReason>, t0: Instant) {
    let focus = app.focus;
    app.focus = index;
    app.panes[index].input.set(prompt);
    app.update(Action::Command(Command::Send));
    app.focus = focus;
    let pane = app.panes[index].id;
    let id = app.panes[index].in_flight.as_ref().expect("just sent").id.clone();
    let row = |event| Action::Row { pane, event, at: t0 };
    app.update(row(RowEvent::Prefill { id: id.clone(), done: 20, total: 20 }));
    let mut tokens = 0;
    if finish != Some(FinishReason::Error) {
        for chunk in answer.split_inclusive(' ') {
            let at = t0 + Duration::from_millis(TOKEN_MS * tokens as u64);
            app.update(Action::Row {
                pane,
                event: RowEvent::Delta { id: id.clone(), text: chunk.into(), ids: vec![tokens] },
                at,
            });
            tokens += 1;
        }
    }
    let Some(reason) = finish else { return };
    let stats = Stats {
        prompt_tokens: 20,
        completion_tokens: tokens as usize,
        route: ROUTE.into(),
        decode_s: TOKEN_MS as f64 / 1000.0 * tokens as f64,
        decode_tok_s: 1000.0 / TOKEN_MS as f64,
        real_width: 8,
        ..Stats::default()
    };
    let result = RequestResult {
        id,
        token_ids: (0..tokens).collect(),
        text: if reason == FinishReason::Error { String::new() } else { answer.into() },
        finish_reason: reason,
        stats: if reason == FinishReason::Error { Stats::default() } else { stats },
        error: (reason == FinishReason::Error)
            .then(|| "the cohort lane was poisoned: injected fault at cycle 3".into()),
        refused: false,
    };
    app.update(row(RowEvent::Done(Box::new(result))));
}

/// Telemetry for a width-8 cohort whose rows are the panes' newest requests.
pub fn telemetry(app: &App) -> Telemetry {
    let rows = app
        .panes
        .iter()
        .filter_map(|p| p.turns.last().map(|t| (p, t)))
        .enumerate()
        .map(|(i, (pane, turn))| {
            let tokens = pane.in_flight.as_ref().map(|f| f.tokens).unwrap_or(turn.answer.split(' ').count());
            let committed = 20 + tokens as i32;
            RowTelemetry {
                id: turn.request_id.clone(),
                state: pane.state,
                committed_offset: committed,
                physical_offset: committed,
                mtp_committed_offset: committed - 1,
                mtp_physical_offset: committed - 1,
                tokens,
                accepted: tokens / 4,
                rejected: tokens - tokens / 4,
                recent_accepts: (0..tokens.min(64)).map(|k| u8::from((k + i) % 4 == 0)).collect(),
                tokens_per_cycle: 1.0 + 0.25 * ((i % 4) as f64 / 3.0),
                prefill_done: 20,
                prefill_total: 20,
                slot: Some(i),
                ..Default::default()
            }
        })
        .collect();
    Telemetry {
        pending: 0,
        active: 8,
        last_real_width: 8,
        real_width_histogram: BTreeMap::from([(1, 1), (8, 3)]),
        fixed_width_cycles: BTreeMap::from([(8, 1200)]),
        verify_cycles: 1200,
        accepted_drafts: 300,
        rejected_drafts: 900,
        solo_runs: 1,
        cohorts: 3,
        last_route: ROUTE.into(),
        last_error: None,
        finalize_scope: FinalizeScope::CohortOwnerAfterDecode,
        poisoned: 0,
        probe_verdict: Some("MTP exactness probe: Equal on the batched route".into()),
        construction_check: Some(ConstructionCheck {
            route: ROUTE.into(),
            widths: vec![8],
            max_abs_diff: 0.0,
            bound: 0.01,
            passed: true,
        }),
        rows,
        memory: MemoryStats { active: 1_288_490_189, peak: 2_147_483_648, cache: 314_572_800 },
        last_queue_wait_s: 0.0123,
        prompt_cache: crate::engine::api::CacheStats {
            reuse: crate::engine::api::Reuse::Exact,
            budget_bytes: 1 << 30,
            bytes_held: 96 << 20,
            entries: 6,
            hits: 14,
            misses: 4,
            tokens_reused: 8_412,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Feed `samples` telemetry snapshots whose memory rises and falls (fills the sparkline).
pub fn feed_telemetry(app: &mut App, samples: usize) {
    for k in 0..samples {
        let mut t = telemetry(app);
        t.memory.active = 1_000_000_000 + (k % 16) * 40_000_000;
        app.update(Action::Telemetry(Box::new(t)));
    }
}

/// The four-pane scene most snapshots use: a finished code answer, one decoding, one cancelled,
/// one failed.
pub fn mixed(panes: usize, theme: &str) -> App {
    let t0 = Instant::now();
    let mut app = app(panes, theme);
    let script: [(&str, &str, Option<FinishReason>); 4] = [
        ("Write a loop in Rust", CODE_ANSWER, Some(FinishReason::Stop)),
        ("How does the cohort decode?", PROSE_ANSWER, None),
        ("Count to a hundred", PARTIAL_ANSWER, Some(FinishReason::Cancelled)),
        ("Say hello", "", Some(FinishReason::Error)),
    ];
    for i in 0..panes {
        let (prompt, answer, finish) = script[i % script.len()];
        play(&mut app, i, prompt, answer, finish, t0);
    }
    feed_telemetry(&mut app, 32);
    app
}
