//! The continuous lane: requests join a running cohort at cycle boundaries and leave it the
//! moment they end. Whatever joins or leaves around it, and at whatever cycle it joined, every
//! row must produce what its own solo run produces (a cancelled row: a prefix of it), deliver
//! exactly one result, and deliver it when it ends rather than when its peers do.

use crate::common;

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cohort::engine::draft_policy::DraftPolicy;
use cohort::engine::lane::{Lane, LaneConfig, Pending};
use cohort::engine::prepare::prepare;
use cohort::engine::request::{FinishReason, Prompt, Request, RequestResult};
use cohort::engine::row::{CancelFlag, RowEvent};
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::scheduler::{Numerics, ReadOrder, WidthPolicy};
use cohort::engine::solo::{GenerationMode, run_solo};
use cohort::engine::telemetry::{SharedTelemetry, Telemetry};
use cohort::model::forward::LanguageModel;
use cohort::model::routes::BlockRoute;
use cohort::model::routes::WeightPolicy;
use cohort::model::text::tokenizer::TextTokenizer;
use cohort::platform::rng::Rng;
use common::*;
use mlx_rs::Dtype;

/// Prompt chunks small enough that the fixtures' longer prompts take several cycle boundaries.
const CHUNK: usize = 8;

fn config(mode: GenerationMode, width: WidthPolicy) -> LaneConfig {
    LaneConfig {
        chunk: CHUNK,
        budget: CHUNK,
        mode,
        numerics: Numerics::Throughput,
        batched: BlockRoute::Batched,
        width,
        family: "test".into(),
        packed_prefill: false,
        drafts: DraftPolicy::Measured,
        split_exact: false,
        read_order: ReadOrder::ShortestFirst,
        prompt_cache: Default::default(),
    }
}

fn qwen() -> (Box<dyn LanguageModel>, TextTokenizer, Vec<Vec<u32>>) {
    let name = "qwen35_moe_4bit";
    let model = cohort::model::load::load(&fixture(name), Dtype::Float32).unwrap();
    let tok = TextTokenizer::load(&fixture(name)).unwrap();
    let refs = reference(name);
    let p = |k: &str| ids(&refs["prompts"][k]["prompt_ids"]);
    let prompts = vec![p("one_token"), p("short"), p("long"), p("chunk_cross"), p("long")[100..].to_vec(), vec![7]];
    (model, tok, prompts)
}

/// The default model's family on its CPU kernel (the host decode path), tiny.
fn tiny_llama(dir: &std::path::Path) -> (Box<dyn LanguageModel>, TextTokenizer, Vec<Vec<u32>>) {
    let tiny = fixture_copy("llama/tiny_llama_mlx", dir);
    std::fs::copy(fixture("llama/tiny_mtp.safetensors"), tiny.join("mtp.safetensors")).unwrap();
    let model = cohort::model::load::load_with_policy(&tiny, Dtype::Float32, WeightPolicy::Kernel).unwrap();
    let tok = TextTokenizer::load(&tiny).unwrap();
    let refs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama/tiny_llama.json")).unwrap()).unwrap();
    let p = |k: &str| ids(&refs["mlx_prompts"][k]["prompt_ids"]);
    let prompts = vec![p("one_token"), p("short"), p("chat"), p("long"), vec![7]];
    (model, tok, prompts)
}

fn request(id: &str, prompt: &[u32], max_tokens: usize, sampler: SamplerConfig, seed: u64) -> Request {
    Request {
        id: id.into(),
        prompt: Prompt::Ids(prompt.to_vec()),
        max_tokens,
        sampler,
        seed,
        stop: vec![],
        ignore_eos: true,
        mode: None,
    }
}

/// The pool every scenario draws from: prompts x samplers x budgets.
fn pool(prompts: &[Vec<u32>]) -> Vec<Request> {
    let mut reqs = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        for (s, sampler) in [SamplerConfig::greedy(), SamplerConfig::default()].into_iter().enumerate() {
            for max_tokens in [1, 4, 11] {
                let seed = 4200 + (i * 7 + s) as u64;
                reqs.push(request(&format!("p{i}s{s}m{max_tokens}"), p, max_tokens, sampler, seed));
            }
        }
    }
    reqs
}

fn solo(model: &dyn LanguageModel, tok: &TextTokenizer, r: &Request, mode: GenerationMode) -> Vec<u32> {
    solo_in_chunks(model, tok, r, mode, CHUNK)
}

fn solo_in_chunks(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    r: &Request,
    mode: GenerationMode,
    chunk: usize,
) -> Vec<u32> {
    let mut run = prepare(model, tok, r, CancelFlag::default()).unwrap();
    run_solo(model, tok, &mut run, mode, chunk, &mut |_| {}).unwrap();
    run.tokens
}

/// One request of a scenario: which pool entry, when it arrives and when (if ever) it is
/// cancelled, in lane steps.
struct Entry {
    pool: usize,
    arrives: usize,
    cancel_at: Option<usize>,
}

/// What one request saw: its events in order and the step its result arrived at.
#[derive(Default)]
struct Seen {
    result: Option<RequestResult>,
    done_at: usize,
    dones: usize,
}

/// Run a scenario as the owner thread would: arrivals join at step boundaries (at most `cap`
/// live rows, the rest queue), cancellations flip flags, the lane steps until all is done.
fn run_scenario(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    cfg: &LaneConfig,
    pool: &[Request],
    entries: &[Entry],
    cap: usize,
) -> (Vec<Seen>, Telemetry) {
    let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
    let mut lane = Lane::new(model, tok, cfg.clone()).unwrap();
    let mut queue = VecDeque::new();
    let mut receivers: Vec<Option<mpsc::Receiver<RowEvent>>> = entries.iter().map(|_| None).collect();
    let mut flags: Vec<CancelFlag> = entries.iter().map(|_| CancelFlag::default()).collect();
    let mut seen: Vec<Seen> = entries.iter().map(|_| Seen::default()).collect();
    let last_arrival = entries.iter().map(|e| e.arrives).max().unwrap_or(0);
    for step in 0.. {
        for (i, e) in entries.iter().enumerate() {
            if e.arrives == step {
                let (tx, rx) = mpsc::channel();
                let mut req = pool[e.pool].clone();
                req.id = format!("{i}:{}", req.id);
                flags[i] = CancelFlag::default();
                queue.push_back(Pending { req, cancel: flags[i].clone(), events: tx, arrived: Instant::now() });
                receivers[i] = Some(rx);
            }
            if e.cancel_at == Some(step) {
                flags[i].cancel();
            }
        }
        while lane.live() < cap
            && let Some(p) = queue.pop_front()
        {
            lane.admit(p);
        }
        if lane.is_idle() && queue.is_empty() && step > last_arrival {
            break;
        }
        lane.step(&tel).unwrap();
        for (i, rx) in receivers.iter().enumerate() {
            let Some(rx) = rx else { continue };
            for ev in rx.try_iter() {
                match ev {
                    RowEvent::Done(r) => {
                        seen[i].dones += 1;
                        seen[i].done_at = step;
                        seen[i].result = Some(*r);
                    }
                    RowEvent::Queued { .. } | RowEvent::Prefill { .. } | RowEvent::Delta { .. } => {}
                }
            }
        }
        assert!(step < 10_000, "the lane never went idle");
    }
    let t = tel.lock().unwrap().clone();
    (seen, t)
}

fn random_entries(rng: &mut Rng, pool: usize) -> Vec<Entry> {
    let n = 2 + (rng.next_u64() % 9) as usize;
    (0..n)
        .map(|_| {
            let arrives = (rng.next_u64() % 14) as usize;
            let cancel_at = rng.next_u64().is_multiple_of(5).then(|| arrives + (rng.next_u64() % 8) as usize);
            Entry { pool: (rng.next_u64() % pool as u64) as usize, arrives, cancel_at }
        })
        .collect()
}

/// `scenarios` random scenarios against solo references: finished rows equal their solo run,
/// cancelled rows a prefix of it, each request ends exactly once.
fn randomized(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    prompts: &[Vec<u32>],
    mode: GenerationMode,
    width: WidthPolicy,
    scenarios: u64,
) -> usize {
    randomized_over(model, tok, &pool(prompts), mode, width, scenarios)
}

/// [`randomized`] over the requests of `pool`; every finished row also says the mode it ran in
/// (its own where the lane's mode serves it, else AR).
fn randomized_over(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    pool: &[Request],
    mode: GenerationMode,
    width: WidthPolicy,
    scenarios: u64,
) -> usize {
    randomized_in(model, tok, pool, &config(mode, width), scenarios).0
}

/// [`randomized_over`] with the lane configured as `cfg`; also the telemetry of the last
/// scenario.
fn randomized_in(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    pool: &[Request],
    cfg: &LaneConfig,
    scenarios: u64,
) -> (usize, Vec<Telemetry>) {
    let mode = cfg.mode;
    let want: Vec<Vec<u32>> = pool.iter().map(|r| solo_in_chunks(model, tok, r, mode, cfg.chunk)).collect();
    let mut joined_late = 0;
    let mut reports = Vec::new();
    for s in 0..scenarios {
        let mut rng = Rng::new(0xC0FFEE + s);
        let entries = random_entries(&mut rng, pool.len());
        let cap = 1 + (rng.next_u64() % 8) as usize;
        let (seen, t) = run_scenario(model, tok, cfg, pool, &entries, cap);
        for (i, (e, got)) in entries.iter().zip(&seen).enumerate() {
            let what = format!("scenario {s} (cap {cap}), request {i} ({})", pool[e.pool].id);
            assert_eq!(got.dones, 1, "{what}: {} results", got.dones);
            let r = got.result.as_ref().unwrap();
            let expected = &want[e.pool];
            match r.finish_reason {
                FinishReason::Cancelled => assert_eq!(
                    r.token_ids[..],
                    expected[..r.token_ids.len()],
                    "{what}: a cancelled row's tokens are not a prefix of its solo run"
                ),
                FinishReason::Length => {
                    assert_eq!(&r.token_ids, expected, "{what}: differs from its solo run");
                    assert_eq!(r.stats.mode, Some(mode.serving(pool[e.pool].mode)), "{what}: the mode it ran in");
                }
                other => panic!("{what}: finished {other:?}: {:?}", r.error),
            }
            if e.cancel_at.is_none() {
                assert_eq!(r.finish_reason, FinishReason::Length, "{what}");
            }
            joined_late += usize::from(r.stats.joined_at_cycle > 0);
        }
        assert_eq!(t.active, 0, "scenario {s}: the lane ended with live rows");
        assert_eq!(t.width_now, 0);
        reports.push(t);
    }
    (joined_late, reports)
}

#[test]
fn randomized_arrivals_and_cancellations_leave_every_row_equal_to_its_solo_run() {
    let (model, tok, prompts) = qwen();
    let late = randomized(&*model, &tok, &prompts, GenerationMode::Mtp, WidthPolicy::Packed, 100);
    assert!(late > 50, "only {late} rows joined a running lane: the scenarios did not test joining");
}

#[test]
fn padded_widths_and_plain_decoding_keep_rows_exact_too() {
    let (model, tok, prompts) = qwen();
    randomized(&*model, &tok, &prompts, GenerationMode::Mtp, WidthPolicy::PowerOfTwo, 20);
    randomized(&*model, &tok, &prompts, GenerationMode::Ar, WidthPolicy::Packed, 20);
}

/// Every request of `pool` twice: once asking for AR, once for MTP.
fn in_both_modes(pool: Vec<Request>) -> Vec<Request> {
    let mut both = Vec::new();
    for r in pool {
        for mode in [GenerationMode::Ar, GenerationMode::Mtp] {
            both.push(Request { id: format!("{}{}", r.id, mode.name()), mode: Some(mode), ..r.clone() });
        }
    }
    both
}

/// Issue 40: each pane has its own generation mode, so a lane runs rows of both modes together.
/// In an MTP lane an AR row rides the MTP cycle without drafting (keep = 1): its tokens are its
/// plain-decoding solo run's, and every MTP row's are its MTP solo run's, whoever sits beside
/// them. In an AR lane a row asking for MTP decodes AR, and its result says so.
#[test]
fn rows_of_both_modes_in_one_lane_each_equal_their_own_modes_solo_run() {
    let (model, tok, prompts) = qwen();
    let both = in_both_modes(pool(&prompts));
    for r in &both {
        let plain = Request { mode: None, ..r.clone() };
        let engine = r.mode.unwrap();
        assert_eq!(
            solo(&*model, &tok, r, GenerationMode::Mtp),
            solo(&*model, &tok, &plain, engine),
            "{}: a solo run of its own mode in an MTP engine is that engine mode's run",
            r.id
        );
    }
    randomized_over(&*model, &tok, &both, GenerationMode::Mtp, WidthPolicy::Packed, 40);
    randomized_over(&*model, &tok, &both, GenerationMode::Mtp, WidthPolicy::PowerOfTwo, 10);
    randomized_over(&*model, &tok, &both, GenerationMode::Ar, WidthPolicy::Packed, 10);

    let dir = tempfile::tempdir().unwrap();
    let (model, tok, prompts) = tiny_llama(dir.path());
    randomized_over(&*model, &tok, &in_both_modes(pool(&prompts)), GenerationMode::Mtp, WidthPolicy::Packed, 15);
}

#[test]
fn on_the_host_decode_path_joining_rows_stay_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (model, tok, prompts) = tiny_llama(dir.path());
    for mode in [GenerationMode::Mtp, GenerationMode::Ar] {
        randomized(&*model, &tok, &prompts, mode, WidthPolicy::Packed, 25);
    }
}

/// A short answer beside a long one: the short one's result arrives while the long one still
/// decodes, its follow-up joins the running lane and ends first too, and the width follows.
#[test]
fn a_finished_row_leaves_at_once_and_its_follow_up_joins_the_running_lane() {
    let (model, tok, prompts) = qwen();
    let long = request("long", &prompts[1], 40, SamplerConfig::greedy(), 1);
    let short = request("short", &prompts[3], 3, SamplerConfig::greedy(), 1);
    let pool = vec![long.clone(), short.clone()];
    let entries = [
        Entry { pool: 0, arrives: 0, cancel_at: None },
        Entry { pool: 1, arrives: 0, cancel_at: None },
        Entry { pool: 1, arrives: 8, cancel_at: None },
    ];
    let cfg = config(GenerationMode::Mtp, WidthPolicy::Packed);
    let (seen, t) = run_scenario(&*model, &tok, &cfg, &pool, &entries, 8);
    let (l, s1, s2) = (&seen[0], &seen[1], &seen[2]);
    assert!(s1.done_at < s2.done_at && s2.done_at < l.done_at, "{} {} {}", s1.done_at, s2.done_at, l.done_at);
    let follow = s2.result.as_ref().unwrap();
    assert!(follow.stats.joined_at_cycle > 0, "the follow-up did not join a running lane");
    assert_eq!(follow.token_ids, solo(&*model, &tok, &short, GenerationMode::Mtp));
    assert_eq!(l.result.as_ref().unwrap().token_ids, solo(&*model, &tok, &long, GenerationMode::Mtp));
    // Cycles ran at widths 1 and 2 only: the batch followed the live rows.
    assert!(t.fixed_width_cycles.keys().all(|w| *w <= 2), "{:?}", t.fixed_width_cycles);
    assert!(t.fixed_width_cycles.get(&1).is_some_and(|&n| n > 0), "{:?}", t.fixed_width_cycles);
    assert!(t.joins >= 1 && t.leaves >= 2, "joins {} leaves {}", t.joins, t.leaves);
    assert!(follow.stats.ttft_s > 0.0 && follow.stats.real_width == 2);
}

/// A long prompt is read a budget at a time between the running row's cycles, so the running
/// row keeps streaming while it is read.
#[test]
fn a_long_prompt_is_read_between_cycles() {
    let (model, tok, prompts) = qwen();
    let running = request("running", &prompts[1], 60, SamplerConfig::greedy(), 1);
    let long = request("long", &prompts[2], 2, SamplerConfig::greedy(), 1);
    let chunks = prompts[2].len().div_ceil(CHUNK);
    assert!(chunks >= 4, "the long prompt spans {chunks} chunks");
    let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
    let mut lane = Lane::new(&*model, &tok, config(GenerationMode::Mtp, WidthPolicy::Packed)).unwrap();
    let (tx, rx) = mpsc::channel();
    lane.admit(Pending { req: running, cancel: CancelFlag::default(), events: tx, arrived: Instant::now() });
    while !rx.try_iter().any(|e| matches!(e, RowEvent::Delta { .. })) {
        lane.step(&tel).unwrap();
    }
    let (tx2, rx2) = mpsc::channel();
    lane.admit(Pending { req: long, cancel: CancelFlag::default(), events: tx2, arrived: Instant::now() });
    let tokens_before = tel.lock().unwrap().rows[0].tokens;
    let mut progress = Vec::new();
    for _ in 0..chunks - 1 {
        lane.step(&tel).unwrap();
        progress.extend(
            rx2.try_iter().filter_map(|e| if let RowEvent::Prefill { done, .. } = e { Some(done) } else { None }),
        );
        let t = tel.lock().unwrap().clone();
        assert_eq!(t.rows.len(), 2, "both rows show in the telemetry while one reads");
    }
    let t = tel.lock().unwrap().clone();
    let decoded = t.rows[0].tokens - tokens_before;
    assert!(decoded >= chunks - 1, "the running row decoded {decoded} tokens over {} cycles", chunks - 1);
    assert_eq!(progress, (0..chunks).map(|c| c * CHUNK).collect::<Vec<_>>(), "one chunk a cycle");
}

/// Prompts that wait together are read shortest first: a one-chunk question admitted behind two
/// long prompts draws its first token in the first step. Read in turns instead
/// (`ReadOrder::RoundRobin`), it waits for the long prompts' chunks. Either way every row answers
/// as its solo run does.
#[test]
fn waiting_prompts_are_read_shortest_first_or_in_turns() {
    let (model, tok, prompts) = qwen();
    let reqs = [
        request("long", &prompts[2], 3, SamplerConfig::greedy(), 1),
        request("also long", &prompts[4], 3, SamplerConfig::greedy(), 2),
        request("question", &prompts[1][..CHUNK], 3, SamplerConfig::greedy(), 3),
    ];
    assert!(prompts[2].len() > 2 * CHUNK && prompts[4].len() > 2 * CHUNK);
    for (order, question_first) in [(ReadOrder::ShortestFirst, true), (ReadOrder::RoundRobin, false)] {
        let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
        let cfg = LaneConfig { read_order: order, ..config(GenerationMode::Mtp, WidthPolicy::Packed) };
        let mut lane = Lane::new(&*model, &tok, cfg).unwrap();
        let rxs: Vec<_> = reqs
            .iter()
            .map(|r| {
                let (tx, rx) = mpsc::channel();
                lane.admit(Pending {
                    req: r.clone(),
                    cancel: CancelFlag::default(),
                    events: tx,
                    arrived: Instant::now(),
                });
                rx
            })
            .collect();
        let mut events: Vec<Vec<RowEvent>> = vec![Vec::new(); 3];
        lane.step(&tel).unwrap();
        for (seen, rx) in events.iter_mut().zip(&rxs) {
            seen.extend(rx.try_iter());
        }
        let answered = events[2].iter().any(|e| matches!(e, RowEvent::Delta { .. }));
        assert_eq!(answered, question_first, "{order:?}: the question's first token after one step");
        while !lane.is_idle() {
            lane.step(&tel).unwrap();
        }
        for ((seen, rx), r) in events.iter_mut().zip(&rxs).zip(&reqs) {
            seen.extend(rx.try_iter());
            let Some(RowEvent::Done(result)) = seen.last() else { panic!("{order:?}: {} did not end", r.id) };
            assert_eq!(result.token_ids, solo(&*model, &tok, r, GenerationMode::Mtp), "{order:?}: {}", r.id);
        }
    }
}

/// The GPU's start-up read (engine/warm_up.rs) goes the way a lone request does (`prepare`, then
/// `run_solo`): on the fixture it reads a chunk and more and decodes without error, and with a
/// chunk past the window its prompt is cut to leave room for the answer (on the GPU a failure
/// would only be logged, so it is held here).
#[test]
fn the_start_up_read_runs_as_a_lone_request_does() {
    let (model, tok, _) = qwen();
    cohort::engine::warm_up::warm_long_reads(&*model, &tok, CHUNK, GenerationMode::Mtp).unwrap();
    cohort::engine::warm_up::warm_long_reads(&*model, &tok, 1 << 20, GenerationMode::Mtp).unwrap();
}

/// The default model on the CPU reads waiting prompts several rows to a block (the start-up check
/// finds a packed read exact here): rows that arrive together, join a running lane or are
/// cancelled while reading still equal their solo runs, and reads were packed.
#[test]
fn packed_prompt_reads_keep_every_row_equal_to_its_solo_run() {
    let test = "packed_prompt_reads_keep_every_row_equal_to_its_solo_run";
    let (_dir, model, tok) = smollm2_loaded(test);
    if model.prefill_block(0, 64).is_none() {
        common::skip(test, "this backend reads prompt chunks as they are");
        return;
    }
    assert!(cohort::engine::construction::packed_prompt_check(&*model).unwrap(), "the start-up check");
    let mut rng = Rng::new(0x5EED);
    let prompts: Vec<Vec<u32>> = [23usize, 40, 57, 12, 70]
        .iter()
        .map(|&n| (0..n).map(|_| 17 + (rng.next_u64() % 49_000) as u32).collect())
        .collect();
    let pool: Vec<Request> = prompts
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            [(SamplerConfig::greedy(), 3), (SamplerConfig::default(), 6)]
                .into_iter()
                .map(move |(sampler, max)| request(&format!("p{i}m{max}"), p, max, sampler, 77 + i as u64))
        })
        .collect();
    // Chunks of 32: the 40- to 70-token prompts are read over two or three boundaries, packed
    // beside whatever else is reading then.
    let cfg =
        LaneConfig { chunk: 32, budget: 256, packed_prefill: true, ..config(GenerationMode::Mtp, WidthPolicy::Packed) };
    let (_, reports) = randomized_in(&*model, &tok, &pool, &cfg, 6);
    let packed: u64 = reports.iter().map(|t| t.packed_reads).sum();
    assert!(packed > 0, "no prompt read was packed in any scenario");
}

/// A cohort of greedy MTP rows measures plain cycles against drafting ones and may keep to
/// them, emitting what each row's solo run emits; a cohort with a sampled row (whose tokens
/// depend on its drafts) drafts every cycle, as does a lane told to.
#[test]
fn greedy_cohorts_measure_plain_cycles_and_sampled_ones_always_draft() {
    let dir = tempfile::tempdir().unwrap();
    let (model, tok, prompts) = tiny_llama(dir.path());
    let greedy: Vec<Request> = prompts
        .iter()
        .take(4)
        .enumerate()
        .map(|(i, p)| request(&format!("g{i}"), p, 24, SamplerConfig::greedy(), 9 + i as u64))
        .collect();
    let all_at_once: Vec<Entry> = (0..greedy.len()).map(|pool| Entry { pool, arrives: 0, cancel_at: None }).collect();
    let measured = config(GenerationMode::Mtp, WidthPolicy::Packed);

    let (seen, t) = run_scenario(&*model, &tok, &measured, &greedy, &all_at_once, 8);
    assert!(t.plain_cycles > 0, "a greedy cohort never measured a plain cycle");
    assert!(t.plain_cycles < t.lane_cycles);
    for (r, got) in greedy.iter().zip(&seen) {
        let got = got.result.as_ref().unwrap();
        assert_eq!(got.token_ids, solo(&*model, &tok, r, GenerationMode::Mtp), "{}", r.id);
    }

    let mut with_sampled = greedy.clone();
    with_sampled[1].sampler = SamplerConfig::default();
    let (_, t) = run_scenario(&*model, &tok, &measured, &with_sampled, &all_at_once, 8);
    assert_eq!(t.plain_cycles, 0, "a cohort with a sampled row skipped its drafts");

    let always = LaneConfig { drafts: DraftPolicy::Always, ..measured };
    let (_, t) = run_scenario(&*model, &tok, &always, &greedy, &all_at_once, 8);
    assert_eq!(t.plain_cycles, 0);
}

/// A lone prompt read goes in pieces of about LONE_PIECE_S at the rate the last piece read, so a
/// request arriving meanwhile waits about that long, not a whole LONE_READ piece.
#[test]
fn a_lone_read_goes_in_pieces_sized_by_the_rate_it_reads_at() {
    use cohort::engine::read_planner::{LONE_PIECE_S, LONE_READ, SHARED_READ, lone_piece};
    assert_eq!(lone_piece(None), LONE_READ, "before any piece was read");
    assert_eq!(lone_piece(Some(10_000.0)), LONE_READ, "fast reads keep whole pieces");
    let rate = 400.0;
    let piece = lone_piece(Some(rate));
    assert!(piece > SHARED_READ && piece < LONE_READ && piece.is_multiple_of(16), "{piece}");
    assert!(piece as f64 / rate <= LONE_PIECE_S, "{piece} tokens at {rate} tok/s");
    assert_eq!(lone_piece(Some(50.0)), SHARED_READ, "slow reads stop at the shared piece");
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(lone_piece(Some(bad)), LONE_READ, "rate {bad}");
    }
}
