//! The engine through its handle, as the TUI and `generate` use it: a request sent while others
//! decode joins them and leaves when it ends, sealed cohorts form from requests that arrive
//! together, a faulted cycle poisons only the rows it ran, and the engine then serves new
//! requests without a restart.

use crate::common;

use cohort::config::model_args::ModelArgs;
use cohort::engine::handle::{EngineHandle, Submission};
use cohort::engine::owner::EngineSetup;
use cohort::engine::request::{FinishReason, Prompt, Request, RequestResult};
use cohort::engine::row::RowEvent;
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::scheduler::{Numerics, Preset};
use common::*;

fn engine(numerics: Numerics) -> EngineHandle {
    engine_with(Preset::Throughput, numerics)
}

fn engine_with(preset: Preset, numerics: Numerics) -> EngineHandle {
    let args = ModelArgs { model: Some(fixture("qwen35_moe_4bit").display().to_string()), dtype: None, weights: None };
    args.start_engine(EngineSetup {
        scheduler: preset.config(),
        numerics,
        mode: None,
        serial: false,
        allow_inexact: false,
    })
    .unwrap()
}

fn request(i: usize, max_tokens: usize) -> Request {
    Request {
        id: format!("q{i}"),
        prompt: Prompt::Ids(vec![(10 + 7 * i) as u32; 1 + i]),
        max_tokens,
        sampler: SamplerConfig::greedy(),
        seed: 4200 + i as u64,
        stop: vec![],
        ignore_eos: true,
        mode: None,
    }
}

fn wait(sub: &Submission) -> (RequestResult, usize) {
    let mut deltas = 0;
    loop {
        match sub.events.recv().expect("a Done event") {
            RowEvent::Done(r) => return (*r, deltas),
            RowEvent::Delta { .. } => deltas += 1,
            RowEvent::Queued { .. } | RowEvent::Prefill { .. } => {}
        }
    }
}

#[test]
fn a_request_sent_while_another_decodes_joins_it_and_ends_first() {
    let engine = engine(Numerics::Throughput);
    let c = engine.info.construction.as_ref().expect("a construction check");
    assert!(c.passed && c.widths == (1..=8).collect::<Vec<_>>(), "{c:?}");
    let long = engine.submit(request(0, 300));
    loop {
        if let RowEvent::Delta { .. } = long.events.recv().unwrap() {
            break;
        }
    }
    let short = engine.submit(request(1, 4));
    let (r, _) = wait(&short);
    assert_eq!(r.finish_reason, FinishReason::Length, "{:?}", r.error);
    assert!(r.stats.joined_at_cycle > 0 && r.stats.real_width == 2, "{:?}", r.stats);
    assert!(r.stats.ttft_s > 0.0 && r.stats.ttft_s < 5.0, "{:?}", r.stats);
    // The long row is still decoding when the short one's result arrives.
    let t = engine.snapshot();
    assert_eq!(t.active, 1, "{:?}", t.rows);
    assert!(long.events.try_iter().all(|e| !matches!(e, RowEvent::Done(_))));
    let (l, _) = wait(&long);
    assert_eq!(l.token_ids.len(), 300);
    let t = engine.snapshot();
    assert!(t.fixed_width_cycles[&2] > 0 && t.fixed_width_cycles[&1] > 0, "{:?}", t.fixed_width_cycles);
    assert!(t.last_route.contains("b1") || t.last_route.contains("d1"), "{}", t.last_route);
}

#[test]
fn eight_requests_released_together_form_one_sealed_cohort_and_stream() {
    let engine = engine_with(Preset::Sealed, Numerics::Throughput);
    assert!(engine.info.construction.as_ref().is_some_and(|c| c.passed), "{:?}", engine.info.construction);
    let subs: Vec<Submission> = (0..8).map(|i| engine.submit(request(i, 16))).collect();
    for sub in &subs {
        let (r, deltas) = wait(sub);
        assert_eq!(r.finish_reason, FinishReason::Length, "{}: {:?}", r.id, r.error);
        assert_eq!(r.token_ids.len(), 16);
        assert_eq!(r.stats.real_width, 8);
        assert!(r.stats.route.contains("b8_t2"), "{}", r.stats.route);
        assert!(deltas > 0, "{}: no streamed deltas", r.id);
    }
    let t = engine.snapshot();
    assert_eq!((t.pending, t.active), (0, 0));
    assert_eq!(t.real_width_histogram.get(&8), Some(&1));
    assert!(t.verify_cycles > 0 && t.fixed_width_cycles[&8] > 0);
}

#[test]
fn b1_exact_cohorts_equal_balanced_and_throughput_rows() {
    let mut outputs = Vec::new();
    for numerics in [Numerics::B1Exact, Numerics::Balanced, Numerics::Throughput] {
        let engine = engine(numerics);
        let subs: Vec<Submission> = (0..4).map(|i| engine.submit(request(i, 12))).collect();
        let toks: Vec<Vec<u32>> = subs.iter().map(|s| wait(s).0.token_ids).collect();
        outputs.push(toks);
    }
    assert_eq!(outputs[0], outputs[1], "balanced differs from b1-exact");
    assert_eq!(outputs[0], outputs[2], "throughput differs from b1-exact on the f32 fixture");
}

#[test]
fn a_faulted_cycle_poisons_its_cohort_then_the_engine_recovers() {
    for preset in [Preset::Sealed, Preset::Throughput] {
        let engine = engine_with(preset, Numerics::Throughput);
        engine.inject_fault_at_cycle(2);
        let subs: Vec<Submission> = (0..8).map(|i| engine.submit(request(i, 10))).collect();
        let mut failed = 0;
        for sub in &subs {
            let (r, _) = wait(sub);
            // Sealed: the whole cohort ran the faulted cycle. Continuous: the rows live in the
            // lane at the fault fail; a request admitted after it runs normally.
            if preset == Preset::Sealed || r.finish_reason == FinishReason::Error {
                assert_eq!(r.finish_reason, FinishReason::Error, "{preset:?}");
                let msg = r.error.unwrap();
                assert!(msg.contains("poisoned") && msg.contains("injected fault"), "{msg}");
                failed += 1;
            } else {
                assert_eq!(r.finish_reason, FinishReason::Length, "{preset:?}: {:?}", r.error);
            }
        }
        assert!(failed > 0, "{preset:?}: no row failed");
        let t = engine.snapshot();
        assert_eq!(t.poisoned, 1);
        assert!(t.last_error.as_deref().unwrap_or("").contains("injected fault"));
        // The next requests run normally.
        let subs: Vec<Submission> = (0..3).map(|i| engine.submit(request(i, 6))).collect();
        for sub in &subs {
            let (r, _) = wait(sub);
            assert_eq!(r.finish_reason, FinishReason::Length, "{:?}", r.error);
        }
        let t = engine.snapshot();
        assert_eq!((t.pending, t.active), (0, 0), "{preset:?}");
    }
}

#[test]
fn cancel_by_id_while_queued_or_decoding() {
    let engine = engine(Numerics::Throughput);
    let long = engine.submit(request(0, 400));
    let queued: Vec<Submission> = (1..4).map(|i| engine.submit(request(i, 8))).collect();
    engine.cancel("q2");
    // Let q0 stream a little, then cancel it mid-decode.
    let mut seen = 0;
    let r0 = loop {
        match long.events.recv().unwrap() {
            RowEvent::Delta { .. } => {
                seen += 1;
                if seen == 3 {
                    engine.cancel("q0");
                }
            }
            RowEvent::Done(r) => break *r,
            RowEvent::Queued { .. } | RowEvent::Prefill { .. } => {}
        }
    };
    assert_eq!(r0.finish_reason, FinishReason::Cancelled);
    assert!(!r0.token_ids.is_empty() && r0.token_ids.len() < 400);
    for sub in &queued {
        let (r, _) = wait(sub);
        let want = if r.id == "q2" { FinishReason::Cancelled } else { FinishReason::Length };
        assert_eq!(r.finish_reason, want, "{}", r.id);
    }
}

#[test]
fn bad_requests_fail_alone() {
    let engine = engine(Numerics::Throughput);
    let mut bad = request(0, 10);
    bad.max_tokens = 10_000; // beyond the fixture's 4096-position window
    let mut bad_sampler = request(1, 10);
    bad_sampler.sampler.top_p = 0.0;
    let subs =
        [engine.submit(bad), engine.submit(bad_sampler), engine.submit(request(2, 10)), engine.submit(request(3, 10))];
    let results: Vec<RequestResult> = subs.iter().map(|s| wait(s).0).collect();
    assert!(results[0].error.as_deref().unwrap().contains("context window"));
    assert!(results[1].error.as_deref().unwrap().contains("top_p"));
    assert_eq!(results[2].finish_reason, FinishReason::Length);
    assert_eq!(results[3].finish_reason, FinishReason::Length);
}

#[test]
fn a_long_prompt_reports_prefill_progress_chunk_by_chunk() {
    let args = ModelArgs { model: Some(fixture("qwen35_moe_4bit").display().to_string()), dtype: None, weights: None };
    let mut scheduler = Preset::Solo.config();
    scheduler.prefill_chunk = 64;
    let engine = args
        .start_engine(EngineSetup {
            scheduler,
            numerics: Numerics::Throughput,
            mode: None,
            serial: false,
            allow_inexact: false,
        })
        .unwrap();
    let mut req = request(0, 2);
    req.prompt = Prompt::Ids((0..200).map(|i| (3 + i % 50) as u32).collect());
    let sub = engine.submit(req);
    let mut progress = Vec::new();
    loop {
        match sub.events.recv().expect("a Done event") {
            RowEvent::Prefill { done, total, .. } => progress.push((done, total)),
            RowEvent::Done(r) => {
                assert_eq!(r.finish_reason, FinishReason::Length, "{:?}", r.error);
                break;
            }
            RowEvent::Queued { .. } | RowEvent::Delta { .. } => {}
        }
    }
    // 200 tokens in chunks of 64: announced at 0, then after each chunk but the last.
    assert_eq!(progress, vec![(0, 200), (64, 200), (128, 200), (192, 200)]);
}

/// A budget so large that prompt + budget would wrap around is refused as over the context
/// window, not let through as a small number.
#[test]
fn a_budget_that_would_wrap_is_refused_naming_the_window() {
    use cohort::engine::prepare::prepare;
    use cohort::engine::row::CancelFlag;
    let dir = fixture("qwen35_moe_4bit");
    let model = cohort::model::load::load(&dir, mlx_rs::Dtype::Float32).unwrap();
    let tok = cohort::model::text::tokenizer::TextTokenizer::load(&dir).unwrap();
    for max_tokens in [usize::MAX, usize::MAX - 1, usize::MAX / 2 + 1] {
        let mut req = request(0, 10);
        req.max_tokens = max_tokens;
        let err = prepare(&*model, &tok, &req, CancelFlag::default()).err().expect("a wrapping budget is refused");
        assert!(format!("{err:#}").contains("context window"), "{err:#}");
    }
}

/// A long-running server submits without end: the handle must not keep a cancel flag for every
/// request it ever took, only for those still running.
#[test]
fn the_handle_forgets_requests_that_ended() {
    let engine = engine(Numerics::Throughput);
    for round in 0..3 {
        let subs: Vec<Submission> = (0..8).map(|i| engine.submit(request(round * 8 + i, 2))).collect();
        for sub in &subs {
            wait(sub);
        }
    }
    // A valid prompt, so the request is decoding when it is cancelled (request(100, ..) would ask for
    // token 710 of a 512-token vocabulary and end in an error or a cancel, whichever came first).
    let running = engine.submit(Request { id: "long".into(), ..request(3, 200) });
    loop {
        match running.events.recv().expect("events until the first token") {
            RowEvent::Delta { .. } => break,
            RowEvent::Done(r) => panic!("ended before its first token: {:?}", r.error),
            RowEvent::Queued { .. } | RowEvent::Prefill { .. } => {}
        }
    }
    assert!(engine.tracked() <= 1 + 8, "{} cancel flags kept after 24 ended requests", engine.tracked());
    engine.cancel("long");
    let (r, _) = wait(&running);
    assert_eq!(
        r.finish_reason,
        FinishReason::Cancelled,
        "a running request can still be cancelled by id: {:?}",
        r.error
    );
}

/// A model that loads but cannot run a forward pass (a device lost after load): every call fails.
struct Unrunnable(cohort::model::families::llama::LlamaModel);

impl cohort::model::forward::LanguageModel for Unrunnable {
    fn new_row(&self) -> cohort::model::layers::cache::RowCache {
        self.0.new_row()
    }
    fn forward(
        &self,
        _: &mlx_rs::Array,
        _: &mut [&mut cohort::model::layers::cache::RowCache],
        _: cohort::model::forward::Logits,
        _: bool,
    ) -> anyhow::Result<cohort::model::forward::ForwardOutput> {
        anyhow::bail!("the device was lost")
    }
    fn mtp_forward(
        &self,
        _: &mlx_rs::Array,
        _: &mlx_rs::Array,
        _: &mut [&mut cohort::model::layers::cache::RowCache],
    ) -> anyhow::Result<mlx_rs::Array> {
        anyhow::bail!("the device was lost")
    }
    fn mtp_history(
        &self,
        _: &mlx_rs::Array,
        _: &mlx_rs::Array,
        _: &mut [&mut cohort::model::layers::cache::RowCache],
    ) -> anyhow::Result<()> {
        anyhow::bail!("the device was lost")
    }
    fn head_logits(&self, _: &mlx_rs::Array) -> anyhow::Result<mlx_rs::Array> {
        anyhow::bail!("the device was lost")
    }
    fn has_mtp(&self) -> bool {
        false
    }
    fn vocab_size(&self) -> i32 {
        self.0.vocab_size()
    }
    fn max_context(&self) -> i32 {
        self.0.max_context()
    }
    fn kv_bytes_per_position(&self) -> usize {
        self.0.kv_bytes_per_position()
    }
    fn eos_ids(&self) -> Vec<u32> {
        self.0.eos_ids()
    }
    fn dtype(&self) -> mlx_rs::Dtype {
        self.0.dtype()
    }
    fn routes(&self) -> cohort::model::routes::Routes {
        self.0.routes()
    }
}

/// A continuous engine whose lane cannot start fails its start with the reason, so a server
/// reports the model as failed (503, /health "failed", exit 1) instead of taking requests and
/// answering each with an internal error.
#[test]
fn an_engine_whose_lane_cannot_start_fails_its_start() {
    use cohort::model::forward::LanguageModel;
    let dir = fixture("llama").join("tiny_llama_mlx");
    let start = EngineHandle::start(
        move || {
            let model = cohort::model::families::llama::LlamaModel::load(&dir, mlx_rs::Dtype::Float32)?;
            assert!(model.vocab_size() > 0);
            Ok(cohort::engine::loader::Loaded {
                model: Box::new(Unrunnable(model)),
                tokenizer: cohort::model::text::tokenizer::TextTokenizer::load(&dir)?,
                family: "llama".into(),
                dir,
            })
        },
        EngineSetup {
            scheduler: Preset::Throughput.config(),
            numerics: Numerics::Throughput,
            mode: None,
            serial: false,
            allow_inexact: false,
        },
    );
    let err = match start {
        Ok(_) => panic!("the engine started though its lane cannot"),
        Err(e) => format!("{e:#}"),
    };
    // The first thing that reads a prompt at start-up fails: the split-read check, which decides
    // how the lane reads prompts and whether its prompt cache is exact.
    assert!(err.contains("the split-read check failed to run") && err.contains("the device was lost"), "{err}");
}

/// Issue 40 (the stale inspector): on a one-row-at-a-time engine (the latency preset), while the
/// first request decodes and two more wait, the telemetry the inspector draws is the current
/// one: the decoding row is in `rows` (a single-pane run shows in the rows panel), the two
/// waiting requests are `pending` and `queued`, the lane's cycle count grows between two looks,
/// and the route is the running row's, one row wide (before: the previous cohort's route, `pending 0` while a
/// pane was visibly queued, single-pane runs never in the rows panel).
#[test]
fn a_one_row_engine_reports_its_running_row_and_queue_while_it_decodes() {
    use cohort::engine::telemetry::{RowState, Telemetry};
    use std::time::{Duration, Instant};
    let engine = engine_with(Preset::Latency, Numerics::Throughput);
    let long = engine.submit(request(0, 160));
    let waiting: Vec<Submission> = (1..3).map(|i| engine.submit(request(i, 2))).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    // A look at the telemetry while q0 decodes with q1 and q2 behind it.
    let look = || -> Telemetry {
        loop {
            let t = engine.snapshot();
            // Decoding and past its first cycle (admitted, no cycle run yet, there is no route).
            let decoding = t.rows.iter().any(|r| r.id == "q0" && r.state == RowState::Decoding && r.tokens > 0);
            if decoding && t.pending == 2 {
                return t;
            }
            assert!(Instant::now() < deadline, "q0 never seen decoding with two queued: {t:?}");
            assert!(t.rows.iter().all(|r| r.id == "q0"), "another row ran before q0 ended: {:?}", t.rows);
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let first = look();
    assert_eq!(first.rows.len(), 1, "one row at a time: {:?}", first.rows);
    assert_eq!(first.queued, vec!["q1".to_owned(), "q2".to_owned()], "{first:?}");
    let one_row = |route: &str| route.contains("b1") || route.contains("d1");
    assert!(one_row(&first.last_route), "not the running row's route: {first:?}");
    let second = loop {
        let t = look();
        if t.lane_cycles > first.lane_cycles {
            break t;
        }
    };
    assert_eq!(second.queued.len(), 2, "{second:?}");
    assert!(one_row(&second.last_route), "{second:?}");
    let (r, _) = wait(&long);
    assert_eq!(r.finish_reason, FinishReason::Length, "{:?}", r.error);
    for sub in &waiting {
        let (r, _) = wait(sub);
        assert_eq!(r.finish_reason, FinishReason::Length, "{:?}", r.error);
    }
    let t = engine.snapshot();
    assert_eq!((t.pending, t.active, t.queued.len()), (0, 0, 0), "{t:?}");
}

/// A request the engine takes hears at once that it is queued, with its prompt's size, while
/// another holds the only row (a server sends a stream's headers on it); one it cannot run is
/// refused then, not when a row frees (issue 58, item 4).
#[test]
fn a_request_hears_it_is_queued_and_a_refusal_needs_no_free_row() {
    use std::time::Duration;
    let engine = engine_with(Preset::Latency, Numerics::Throughput);
    let long = engine.submit(request(0, 4000));
    loop {
        match long.events.recv().expect("q0's events") {
            RowEvent::Delta { .. } => break,
            RowEvent::Done(r) => panic!("q0 ended before the check: {r:?}"),
            _ => {}
        }
    }
    let queued = engine.submit(request(1, 2));
    match queued.events.recv_timeout(Duration::from_secs(5)) {
        Ok(RowEvent::Queued { id, prompt_tokens }) => assert_eq!((id.as_str(), prompt_tokens), ("q1", 2)),
        other => panic!("not told it was queued: {other:?}"),
    }
    let mut bad = request(2, 2);
    bad.sampler.top_p = 0.0;
    let refused = engine.submit(bad);
    match refused.events.recv_timeout(Duration::from_secs(5)) {
        Ok(RowEvent::Done(r)) => assert!(r.refused && r.error.as_deref().unwrap_or("").contains("top_p"), "{r:?}"),
        other => panic!("not refused at once: {other:?}"),
    }
    assert!(long.events.try_iter().all(|e| !matches!(e, RowEvent::Done(_))), "q0 ended: the check meant nothing");
    engine.cancel("q0");
    assert_eq!(wait(&long).0.finish_reason, FinishReason::Cancelled);
    assert_eq!(wait(&queued).0.finish_reason, FinishReason::Length);
}

/// Issue 58: a prompt that leaves no room for an answer (8,190 tokens in an 8,192 window) was told
/// to "lower max_tokens to at most 0", which no request can do. It is told to shorten the prompt,
/// by how much; a prompt that leaves room is still told the largest max_tokens that fits.
#[test]
fn a_prompt_that_leaves_no_room_for_an_answer_is_told_to_shorten_the_prompt() {
    use cohort::engine::prepare::{VERIFY_SLACK, prepare};
    use cohort::engine::row::CancelFlag;
    let dir = fixture("qwen35_moe_4bit");
    let model = cohort::model::load::load(&dir, mlx_rs::Dtype::Float32).unwrap();
    let tok = cohort::model::text::tokenizer::TextTokenizer::load(&dir).unwrap();
    let window = model.max_context() as usize;
    let refusal = |prompt: usize, max_tokens: usize| {
        let mut req = request(0, max_tokens);
        req.prompt = Prompt::Ids(vec![10; prompt]);
        format!("{:#}", prepare(&*model, &tok, &req, CancelFlag::default()).err().expect("refused"))
    };
    for prompt in [window - VERIFY_SLACK, window - 1] {
        let e = refusal(prompt, 1);
        assert!(!e.contains("at most 0") && e.contains("shorten the prompt"), "{prompt} tokens: {e}");
        assert!(e.contains(&format!("at most {} tokens", window - VERIFY_SLACK - 1)), "{prompt} tokens: {e}");
    }
    let e = refusal(window - VERIFY_SLACK - 10, 100);
    assert!(e.contains("lower max_tokens to at most 10"), "{e}");
}
