//! A cohort of greedy MTP rows may take plain steps where those measure faster than drafting
//! (engine/draft_policy.rs). Those steps must change nothing a row emits, and must leave the MTP
//! history exactly as drafting cycles would have left it, so that drafts after them are the
//! drafts of a row that never stopped drafting.

use crate::common;

use cohort::engine::cycle::run_kind;
use cohort::engine::draft_policy::CycleKind;
use cohort::engine::prepare::prepare;
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::{CancelFlag, RowRun};
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::solo::prefill_row;
use cohort::model::forward::LanguageModel;
use cohort::model::layers::cache::{KvCache, RowCache};
use cohort::model::text::tokenizer::{ChatMessage, TextTokenizer};
use cohort::platform::rng::Rng;
use common::*;
use mlx_rs::Dtype;

const TOKENS: usize = 48;

const QUESTIONS: [&str; 4] =
    ["What is a prime number?", "Name three rivers.", "Why is the sky blue?", "Write a haiku."];

/// Four greedy rows on chat prompts, prefilled with their MTP history.
fn rows(model: &dyn LanguageModel, tok: &TextTokenizer) -> (Vec<RowRun>, Vec<RowCache>) {
    rows_of(model, tok, &[0, 1, 2, 3], SamplerConfig::greedy())
}

/// Rows of the questions `which` picks (each seeded by its question), prefilled with their MTP
/// history.
fn rows_of(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    which: &[usize],
    sampler: SamplerConfig,
) -> (Vec<RowRun>, Vec<RowCache>) {
    let mut runs = Vec::new();
    let mut rows = Vec::new();
    for &i in which {
        let q = QUESTIONS[i];
        let req = Request {
            id: format!("r{i}"),
            prompt: Prompt::Chat(vec![ChatMessage::new("user", q)]),
            max_tokens: TOKENS,
            sampler,
            seed: i as u64,
            stop: vec![],
            ignore_eos: true,
            mode: None,
        };
        let mut run = prepare(model, tok, &req, CancelFlag::default()).unwrap();
        let mut row = model.new_row();
        prefill_row(model, tok, &mut run, &mut row, 512, true, &mut |_| {}).unwrap();
        runs.push(run);
        rows.push(row);
    }
    (runs, rows)
}

/// Cycles of the kinds `next` picks until every row has emitted its tokens.
fn decode(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    next: impl FnMut() -> CycleKind,
) -> (Vec<RowRun>, Vec<RowCache>, usize) {
    decode_rows(model, tok, rows(model, tok), next)
}

fn decode_rows(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    (mut runs, mut rows): (Vec<RowRun>, Vec<RowCache>),
    mut next: impl FnMut() -> CycleKind,
) -> (Vec<RowRun>, Vec<RowCache>, usize) {
    let mut plain = 0;
    while runs.iter().any(RowRun::is_active) {
        let kind = next();
        plain += usize::from(kind == CycleKind::Plain);
        run_kind(kind, model, tok, &mut runs, &mut rows).unwrap();
    }
    (runs, rows, plain)
}

fn values(a: &mlx_rs::Array) -> Vec<u32> {
    // A view of the first entries is strided: reshaping copies it out whole.
    let flat = a.as_dtype(Dtype::Float32).unwrap().reshape(&[-1]).unwrap();
    flat.eval().unwrap();
    flat.as_slice::<f32>().iter().map(|x| x.to_bits()).collect()
}

/// Two runs' MTP histories of one row hold the same bits over the positions both wrote (one run
/// may have stopped writing before the other).
fn assert_same_history(a: &KvCache, z: &KvCache, what: &str) {
    let len = a.offset().min(z.offset());
    assert!(len as usize >= TOKENS / 2, "{what}: history of {len} entries");
    let ((ka, va), (kz, vz)) = (a.view_first(len).unwrap(), z.view_first(len).unwrap());
    assert!(values(&ka) == values(&kz), "{what}: MTP history keys differ");
    assert!(values(&va) == values(&vz), "{what}: MTP history values differ");
}

#[test]
fn plain_cycles_emit_what_drafting_emits_and_keep_the_same_mtp_history() {
    let test = "plain_cycles_emit_what_drafting_emits_and_keep_the_same_mtp_history";
    // The default model with its shipped bfloat16 head: its MTP module gives a row the same bits
    // whatever shares its block (the last test here), so the histories can be compared exactly.
    let (_dir, model, tok) = smollm2_loaded(test);

    let (drafting, drafting_rows, _) = decode(&*model, &tok, || CycleKind::Draft);
    // Runs of plain cycles between drafting ones, at random: drafts resume after one plain
    // cycle or several, after an accepted draft (whose history entry is owed) or a rejected one.
    let mut rng = Rng::new(0x9A1);
    let (mixed, mixed_rows, plain) =
        decode(&*model, &tok, || if rng.next_u64().is_multiple_of(3) { CycleKind::Draft } else { CycleKind::Plain });

    assert!(plain > 0);
    let accepted: usize = mixed.iter().map(|r| r.stats.accepted_drafts).sum();
    assert!(accepted > 0, "no draft was accepted between plain cycles: the owed entries never ran");
    for (b, (d, m)) in drafting.iter().zip(&mixed).enumerate() {
        assert_eq!(d.tokens, m.tokens, "row {b}: plain cycles changed the tokens");
        assert_same_history(&drafting_rows[b].mtp, &mixed_rows[b].mtp, &format!("row {b}"));
    }
}

/// The shipped bfloat16 head runs through MLX's float products on the CPU, whose bits for a row
/// depend on how many rows share the call (OpenBLAS computes a block's M mod 8 tail rows with
/// other kernels): a row's MTP history written alone must still be the history it gets in a
/// cohort, or a sampled row's drafts, and so its tokens, would depend on its company.
#[test]
fn the_shipped_head_gives_a_row_the_same_history_and_tokens_alone_and_in_a_cohort() {
    let test = "the_shipped_head_gives_a_row_the_same_history_and_tokens_alone_and_in_a_cohort";
    let (_dir, model, tok) = smollm2_loaded(test);
    // Five rows and then rows alone: blocks of 5, 4, ... and 1 rows, none a multiple of 8. Greedy
    // rows for the history (their tokens never depend on the drafts), sampled ones for what a
    // user sees: a sampled row's tokens follow its drafts.
    let which = [0, 1, 2, 3, 0];
    for sampler in [SamplerConfig::greedy(), SamplerConfig::default()] {
        let cohort = rows_of(&*model, &tok, &which, sampler);
        let (together, together_rows, _) = decode_rows(&*model, &tok, cohort, || CycleKind::Draft);
        for (b, &i) in which.iter().enumerate().take(4) {
            let lone = rows_of(&*model, &tok, &[i], sampler);
            let (alone, alone_rows, _) = decode_rows(&*model, &tok, lone, || CycleKind::Draft);
            assert_eq!(alone[0].tokens, together[b].tokens, "row {b}, {sampler:?}: tokens alone and in a cohort of 5");
            let what = format!("row {b}, {sampler:?}, alone and in a cohort of 5");
            assert_same_history(&alone_rows[0].mtp, &together_rows[b].mtp, &what);
        }
    }
}
