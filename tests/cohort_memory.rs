//! Memory across cohorts and in the continuous lane (its own test binary, so no other test
//! shares MLX's allocator; the tests here take turns through ALLOCATOR).

mod common;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cohort::engine::cohort::{CohortConfig, run_cohort};
use cohort::engine::draft_policy::DraftPolicy;
use cohort::engine::lane::{Lane, LaneConfig, Pending};
use cohort::engine::prepare::prepare;
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::{CancelFlag, RowEvent};
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::scheduler::{Numerics, ReadOrder, WidthPolicy};
use cohort::engine::solo::GenerationMode;
use cohort::engine::telemetry::{SharedTelemetry, Telemetry};
use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::text::tokenizer::TextTokenizer;
use common::*;
use mlx_rs::Dtype;

const NAME: &str = "qwen35_moe_4bit";

/// MLX's active memory is one figure for the whole process: one test reads it at a time.
static ALLOCATOR: Mutex<()> = Mutex::new(());

fn active_after_clearing() -> i64 {
    mlx_rs::memory::clear_cache().unwrap();
    mlx_rs::memory::active_memory().unwrap() as i64
}

#[test]
fn twenty_cohorts_in_a_row_do_not_grow_memory() {
    let _turn = ALLOCATOR.lock().unwrap_or_else(|e| e.into_inner());
    let model = Qwen35Model::load(&fixture(NAME), Dtype::Float32).unwrap();
    let tok = TextTokenizer::load(&fixture(NAME)).unwrap();
    let refs = reference(NAME);
    let prompts: Vec<Vec<u32>> =
        ["one_token", "short", "long", "chunk_cross", "short", "long", "chunk_cross", "one_token"]
            .iter()
            .map(|k| ids(&refs["prompts"][k]["prompt_ids"]))
            .collect();
    let reqs: Vec<Request> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| Request {
            id: format!("r{i}"),
            prompt: Prompt::Ids(p.clone()),
            max_tokens: 12,
            sampler: SamplerConfig::greedy(),
            seed: 0,
            stop: vec![],
            ignore_eos: true,
            mode: None,
        })
        .collect();
    let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
    let mut readings = Vec::new();
    for _ in 0..20 {
        let mut rs: Vec<_> = reqs.iter().map(|r| prepare(&model, &tok, r, CancelFlag::default()).unwrap()).collect();
        run_cohort(
            &model,
            &tok,
            &mut rs,
            &CohortConfig { chunk: 32, route_id: "t".into(), mode: GenerationMode::Mtp },
            &tel,
            &mut |_| {},
        )
        .unwrap();
        drop(rs);
        mlx_rs::memory::clear_cache().unwrap();
        readings.push(mlx_rs::memory::active_memory().unwrap());
    }
    let base = readings[0];
    let max = *readings.iter().max().unwrap();
    assert!(max <= base + 16 * 1024, "active memory grew from {base} to {max} bytes over 20 cohorts: {readings:?}");
}

/// The soak reads memory the moment the engine reports itself idle (its results are in and the
/// telemetry shows no live row). So by the time the lane publishes "idle", it must already have
/// let go of its rows' KV: the same memory it holds once the step that emptied it returns.
#[test]
fn a_lane_that_reports_itself_idle_has_already_let_go_of_its_rows() {
    let _turn = ALLOCATOR.lock().unwrap_or_else(|e| e.into_inner());
    let model = Qwen35Model::load(&fixture(NAME), Dtype::Float32).unwrap();
    let tok = TextTokenizer::load(&fixture(NAME)).unwrap();
    let refs = reference(NAME);
    let cfg = LaneConfig {
        chunk: 32,
        budget: 512,
        mode: GenerationMode::Mtp,
        numerics: Numerics::Throughput,
        batched: cohort::model::routes::BlockRoute::Batched,
        width: WidthPolicy::Packed,
        family: "test".into(),
        packed_prefill: false,
        drafts: DraftPolicy::Measured,
        split_exact: false,
        read_order: ReadOrder::ShortestFirst,
        prompt_cache: Default::default(),
    };
    let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
    let mut lane = Lane::new(&model, &tok, cfg).unwrap();
    let mut rows = Vec::new();
    for (i, k) in ["short", "long", "chunk_cross"].into_iter().enumerate() {
        let (tx, rx) = mpsc::channel();
        let cancel = CancelFlag::default();
        let req = Request {
            id: format!("r{i}"),
            prompt: Prompt::Ids(ids(&refs["prompts"][k]["prompt_ids"])),
            max_tokens: 400,
            sampler: SamplerConfig::greedy(),
            seed: 0,
            stop: vec![],
            ignore_eos: true,
            mode: None,
        };
        lane.admit(Pending { req, cancel: cancel.clone(), events: tx, arrived: Instant::now() });
        rows.push((cancel, rx));
    }
    for _ in 0..4 {
        lane.step(&tel).unwrap();
    }
    assert_eq!(tel.lock().unwrap().width_now, 3, "all three rows decode together");
    for (cancel, _) in &rows {
        cancel.cancel();
    }
    // Hold the telemetry while the lane ends its rows: the step stops at its first publish, and
    // memory is read there, as a reader woken by that publish would read it.
    let (locked_tx, locked_rx) = mpsc::channel();
    let held_at_publish = std::thread::scope(|s| {
        let watched = tel.clone();
        let reader = s.spawn(move || {
            let guard = watched.lock().unwrap();
            locked_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(400));
            let held = active_after_clearing();
            drop(guard);
            held
        });
        locked_rx.recv().unwrap();
        lane.step(&tel).unwrap();
        reader.join().unwrap()
    });
    let t = tel.lock().unwrap().clone();
    assert_eq!((t.active, t.width_now), (0, 0), "the lane is idle");
    for (_, rx) in &rows {
        assert!(rx.try_iter().any(|e| matches!(e, RowEvent::Done(_))), "every row has its result");
    }
    let idle = active_after_clearing();
    assert!(
        held_at_publish <= idle + 16 * 1024,
        "the lane published itself idle holding {held_at_publish} bytes, {} more than idle",
        held_at_publish - idle
    );
}
