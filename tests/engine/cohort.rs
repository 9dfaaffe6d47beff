//! The B8 cohort: rows decode together without sharing context. Every row must produce what its
//! own solo run produces, cancellation must leave survivors untouched, offsets must stay what
//! was committed, and memory must not grow from cohort to cohort.

use crate::common;

use std::sync::{Arc, Mutex};

use cohort::engine::cohort::{CohortConfig, run_cohort};
use cohort::engine::prepare::prepare;
use cohort::engine::request::{FinishReason, Prompt, Request};
use cohort::engine::row::{CancelFlag, RowEvent, RowRun};
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::solo::{GenerationMode, run_solo};
use cohort::engine::telemetry::{SharedTelemetry, Telemetry};
use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::text::tokenizer::TextTokenizer;
use common::*;
use mlx_rs::Dtype;

const NAME: &str = "qwen35_moe_4bit";

fn setup() -> (Qwen35Model, TextTokenizer, Vec<Vec<u32>>) {
    let model = Qwen35Model::load(&fixture(NAME), Dtype::Float32).unwrap();
    let tok = TextTokenizer::load(&fixture(NAME)).unwrap();
    let refs = reference(NAME);
    let p = |k: &str| ids(&refs["prompts"][k]["prompt_ids"]);
    let prompts = vec![
        p("one_token"),
        p("short"),
        p("long"),
        p("chunk_cross"),
        p("short")[3..].to_vec(),
        vec![7],
        p("chunk_cross")[10..].to_vec(),
        p("long")[100..].to_vec(),
    ];
    (model, tok, prompts)
}

fn req(i: usize, ids: &[u32], sampler: SamplerConfig, max_tokens: usize) -> Request {
    Request {
        id: format!("r{i}"),
        prompt: Prompt::Ids(ids.to_vec()),
        max_tokens,
        sampler,
        seed: 4200 + i as u64,
        stop: vec![],
        ignore_eos: true,
        mode: None,
    }
}

fn runs(model: &Qwen35Model, tok: &TextTokenizer, reqs: &[Request]) -> Vec<RowRun> {
    reqs.iter().map(|r| prepare(model, tok, r, CancelFlag::default()).unwrap()).collect()
}

fn solo(model: &Qwen35Model, tok: &TextTokenizer, r: &Request) -> Vec<u32> {
    let mut run = prepare(model, tok, r, CancelFlag::default()).unwrap();
    run_solo(model, tok, &mut run, GenerationMode::Mtp, 32, &mut |_| {}).unwrap();
    run.tokens
}

fn cohort(
    model: &Qwen35Model,
    tok: &TextTokenizer,
    runs: &mut [RowRun],
    events: &mut dyn FnMut(RowEvent),
) -> SharedTelemetry {
    let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
    let cfg = CohortConfig { chunk: 32, route_id: "test".into(), mode: GenerationMode::Mtp };
    run_cohort(model, tok, runs, &cfg, &tel, events).unwrap();
    tel
}

#[test]
fn every_row_in_a_cohort_equals_its_solo_run() {
    let (model, tok, prompts) = setup();
    for sampler in [SamplerConfig::greedy(), SamplerConfig::default()] {
        let reqs: Vec<Request> = prompts.iter().enumerate().map(|(i, p)| req(i, p, sampler, 24 + 3 * i)).collect();
        let mut rs = runs(&model, &tok, &reqs);
        let tel = cohort(&model, &tok, &mut rs, &mut |_| {});
        for (i, (r, run)) in reqs.iter().zip(&rs).enumerate() {
            assert_eq!(
                run.tokens,
                solo(&model, &tok, r),
                "row {i} ({sampler:?}): cohort output differs from its solo run"
            );
            assert_eq!(run.finish.as_ref().unwrap().0, FinishReason::Length);
        }
        let t = tel.lock().unwrap();
        assert_eq!(t.active, 0);
        assert!(t.fixed_width_cycles[&8] > 0, "cycles ran at physical width 8");
        for (row, run) in t.rows.iter().zip(&rs) {
            let committed = (run.prompt_ids.len() + run.tokens.len()) as i32;
            assert!(
                row.committed_offset == committed - 1 || row.committed_offset == committed,
                "row {}: committed offset {} for {committed} tokens",
                row.id,
                row.committed_offset
            );
            assert_eq!(
                row.physical_offset, row.committed_offset,
                "row {}: physical offset is not what was committed",
                row.id
            );
            assert_eq!(row.mtp_physical_offset, row.mtp_committed_offset);
        }
    }
}

#[test]
fn cancelling_rows_mid_decode_leaves_the_others_identical() {
    let (model, tok, prompts) = setup();
    let reqs: Vec<Request> = prompts.iter().enumerate().map(|(i, p)| req(i, p, SamplerConfig::greedy(), 30)).collect();
    let mut baseline = runs(&model, &tok, &reqs);
    cohort(&model, &tok, &mut baseline, &mut |_| {});

    let mut rs = runs(&model, &tok, &reqs);
    let flags: Vec<CancelFlag> = rs.iter().map(|r| r.cancel.clone()).collect();
    let mut seen = [0usize; 8];
    let tel = cohort(&model, &tok, &mut rs, &mut |ev| {
        if let RowEvent::Delta { id, ids, .. } = ev {
            let i: usize = id[1..].parse().unwrap();
            seen[i] += ids.len();
            if (i == 1 || i == 6) && seen[i] >= 5 {
                flags[i].cancel();
            }
        }
    });
    for i in 0..8 {
        if i == 1 || i == 6 {
            assert_eq!(rs[i].finish.as_ref().unwrap().0, FinishReason::Cancelled, "row {i}");
            assert!(rs[i].tokens.len() >= 5 && rs[i].tokens.len() < 30, "row {i} kept its partial output");
            assert_eq!(rs[i].tokens[..], baseline[i].tokens[..rs[i].tokens.len()], "row {i}'s partial output");
        } else {
            assert_eq!(rs[i].tokens, baseline[i].tokens, "surviving row {i} changed");
        }
    }
    assert_eq!(tel.lock().unwrap().active, 0);
}

#[test]
fn rows_cancelled_before_prefill_and_at_the_merge_boundary_are_inert() {
    let (model, tok, prompts) = setup();
    let reqs: Vec<Request> =
        prompts.iter().take(4).enumerate().map(|(i, p)| req(i, p, SamplerConfig::greedy(), 20)).collect();
    let mut rs = runs(&model, &tok, &reqs);
    rs[0].cancel.cancel(); // queued
    let boundary = rs[2].cancel.clone();
    cohort(&model, &tok, &mut rs, &mut |ev| {
        // Row 2's first token arrives at the end of its prefill: cancel at the boundary.
        if let RowEvent::Delta { id, .. } = &ev
            && id == "r2"
        {
            boundary.cancel();
        }
    });
    assert_eq!(rs[0].finish.as_ref().unwrap().0, FinishReason::Cancelled);
    assert!(rs[0].tokens.is_empty());
    assert_eq!(rs[2].finish.as_ref().unwrap().0, FinishReason::Cancelled);
    assert!(rs[2].tokens.len() <= 1);
    for i in [1, 3] {
        assert_eq!(rs[i].tokens, solo(&model, &tok, &reqs[i]), "row {i}");
    }
}

#[test]
fn budgets_stops_and_one_token_prompts_end_rows_mid_cohort() {
    let (model, tok, prompts) = setup();
    let mut reqs: Vec<Request> =
        (0..8).map(|i| req(i, &[(i * 37 % 500) as u32], SamplerConfig::greedy(), 1 + 5 * i)).collect();
    // A stop string taken from row 3's own solo output ends it early.
    let solo3 = {
        let mut run = prepare(&model, &tok, &reqs[3], CancelFlag::default()).unwrap();
        run_solo(&model, &tok, &mut run, GenerationMode::Mtp, 32, &mut |_| {}).unwrap();
        run
    };
    let stop: String = solo3.text.chars().skip(4).take(3).collect();
    reqs[3].stop = vec![stop.clone()];
    reqs[5].prompt = Prompt::Ids(prompts[2].clone());
    let mut rs = runs(&model, &tok, &reqs);
    cohort(&model, &tok, &mut rs, &mut |_| {});
    for (i, run) in rs.iter().enumerate() {
        if i == 3 {
            assert_eq!(run.finish.as_ref().unwrap().0, FinishReason::Stop);
            assert!(
                !run.text.contains(&stop) && solo3.text.starts_with(&run.text),
                "row 3 text {:?} stop {stop:?}",
                run.text
            );
        } else {
            assert_eq!(run.tokens.len(), 1 + 5 * i, "row {i} budget");
            assert_eq!(run.tokens, solo(&model, &tok, &reqs[i]), "row {i}");
        }
    }
}

#[test]
fn an_injected_cycle_fault_fails_the_cohort_cleanly() {
    let (model, tok, prompts) = setup();
    let reqs: Vec<Request> = prompts.iter().enumerate().map(|(i, p)| req(i, p, SamplerConfig::greedy(), 20)).collect();
    let mut rs = runs(&model, &tok, &reqs);
    let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
    cohort::engine::cohort::inject_fault_at_cycle(3);
    let err = run_cohort(
        &model,
        &tok,
        &mut rs,
        &CohortConfig { chunk: 32, route_id: "t".into(), mode: GenerationMode::Mtp },
        &tel,
        &mut |_| {},
    );
    cohort::engine::cohort::inject_fault_at_cycle(0);
    let msg = format!("{:#}", err.unwrap_err());
    assert!(msg.contains("injected fault"), "{msg}");
}

#[test]
fn an_ar_cohort_gives_every_row_its_solo_ar_output() {
    let (model, tok, prompts) = setup();
    for sampler in [SamplerConfig::greedy(), SamplerConfig::default()] {
        let reqs: Vec<Request> = prompts.iter().enumerate().map(|(i, p)| req(i, p, sampler, 10 + 2 * i)).collect();
        let mut rs = runs(&model, &tok, &reqs);
        let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
        let cfg = CohortConfig { chunk: 32, route_id: "ar".into(), mode: GenerationMode::Ar };
        run_cohort(&model, &tok, &mut rs, &cfg, &tel, &mut |_| {}).unwrap();
        for (i, (r, run)) in reqs.iter().zip(&rs).enumerate() {
            let mut alone = prepare(&model, &tok, r, CancelFlag::default()).unwrap();
            run_solo(&model, &tok, &mut alone, GenerationMode::Ar, 32, &mut |_| {}).unwrap();
            assert_eq!(run.tokens, alone.tokens, "row {i}: AR cohort output differs from its solo AR run");
            assert_eq!(run.stats.verify_cycles, 0);
        }
        assert!(tel.lock().unwrap().fixed_width_cycles[&8] > 0);
    }
}

/// Issue 40: a sealed MTP cohort of rows asking for both modes. Each AR row rides the cohort's
/// MTP cycles without a draft and equals its plain-decoding solo run; each MTP row equals its
/// MTP solo run; the telemetry and results say which mode each row ran. In an AR cohort a row
/// asking for MTP decodes AR and says so.
#[test]
fn a_cohort_of_both_modes_gives_each_row_its_own_modes_solo_output() {
    let (model, tok, prompts) = setup();
    let mode_of = |i: usize| if i.is_multiple_of(2) { GenerationMode::Ar } else { GenerationMode::Mtp };
    for sampler in [SamplerConfig::greedy(), SamplerConfig::default()] {
        let reqs: Vec<Request> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| Request { mode: Some(mode_of(i)), ..req(i, p, sampler, 12 + 2 * i) })
            .collect();
        for engine in [GenerationMode::Mtp, GenerationMode::Ar] {
            let mut rs = runs(&model, &tok, &reqs);
            let tel: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
            let cfg = CohortConfig { chunk: 32, route_id: "mixed".into(), mode: engine };
            run_cohort(&model, &tok, &mut rs, &cfg, &tel, &mut |_| {}).unwrap();
            for (i, (r, run)) in reqs.iter().zip(rs.iter_mut()).enumerate() {
                let ran = engine.serving(Some(mode_of(i)));
                let plain = Request { mode: None, ..r.clone() };
                let mut alone = prepare(&model, &tok, &plain, CancelFlag::default()).unwrap();
                run_solo(&model, &tok, &mut alone, ran, 32, &mut |_| {}).unwrap();
                let what = format!("row {i} asking {:?} in an {engine:?} cohort ({sampler:?})", mode_of(i));
                assert_eq!(run.tokens, alone.tokens, "{what}: differs from its solo {ran:?} run");
                assert_eq!(run.result(&tok).stats.mode, Some(ran), "{what}");
                assert_eq!(tel.lock().unwrap().rows[i].mode, Some(ran), "{what}");
                if ran == GenerationMode::Ar {
                    assert_eq!((run.stats.verify_cycles, run.stats.accepted_drafts), (0, 0), "{what}: drafted");
                }
            }
            assert!(tel.lock().unwrap().fixed_width_cycles[&8] > 0);
        }
    }
}
