//! A cohort of greedy MTP rows may take plain steps where those measure faster than drafting
//! (engine/draft_policy.rs). Those steps must change nothing a row emits, and must leave the MTP
//! history exactly as drafting cycles would have left it, so that drafts after them are the
//! drafts of a row that never stopped drafting.

mod common;

use cohort::engine::cycle::run_kind;
use cohort::engine::draft_policy::CycleKind;
use cohort::engine::prepare::prepare;
use cohort::engine::request::{Prompt, Request};
use cohort::engine::row::{CancelFlag, RowRun};
use cohort::engine::sampler::SamplerConfig;
use cohort::engine::solo::prefill_row;
use cohort::model::families::llama::LlamaConfig;
use cohort::model::forward::LanguageModel;
use cohort::model::layers::cache::RowCache;
use cohort::model::layers::linear::WeightPolicy;
use cohort::model::text::tokenizer::{ChatMessage, TextTokenizer};
use cohort::platform::rng::Rng;
use cohort::train::head_file::{self, StoreAs};
use cohort::train::params::HeadDims;
use common::*;
use mlx_rs::Dtype;

const TOKENS: usize = 48;

/// Four greedy rows on chat prompts, prefilled with their MTP history.
fn rows(model: &dyn LanguageModel, tok: &TextTokenizer) -> (Vec<RowRun>, Vec<RowCache>) {
    let questions = ["What is a prime number?", "Name three rivers.", "Why is the sky blue?", "Write a haiku."];
    let mut runs = Vec::new();
    let mut rows = Vec::new();
    for (i, q) in questions.iter().enumerate() {
        let req = Request {
            id: format!("r{i}"),
            prompt: Prompt::Chat(vec![ChatMessage::new("user", q)]),
            max_tokens: TOKENS,
            sampler: SamplerConfig::greedy(),
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
    mut next: impl FnMut() -> CycleKind,
) -> (Vec<RowRun>, Vec<RowCache>, usize) {
    let (mut runs, mut rows) = rows(model, tok);
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

/// The default model with its trained head stored 8-bit, so that the MTP module runs on the CPU
/// kernel, which computes a row the same whatever shares its block. (The shipped bfloat16 head
/// runs through MLX's float products, whose bits for a row depend on how many rows share the
/// call: an entry written for one row alone differs in its last bits from one written beside
/// others, and the comparison below could not be exact.)
fn default_model_with_an_8_bit_head(test: &str) -> Option<tempfile::TempDir> {
    let dir = smollm2_with_head(test)?;
    let head = dir.path().join("mtp.safetensors");
    let cfg = LlamaConfig::load(&dir.path().join("config.json")).unwrap();
    let dims = HeadDims::from_llama(&cfg);
    let params = head_file::load(&head, &dims).unwrap();
    head_file::save(&params, &dims, StoreAs::Q8, &Default::default(), &head).unwrap();
    Some(dir)
}

#[test]
fn plain_cycles_emit_what_drafting_emits_and_keep_the_same_mtp_history() {
    let test = "plain_cycles_emit_what_drafting_emits_and_keep_the_same_mtp_history";
    let Some(dir) = default_model_with_an_8_bit_head(test) else { return };
    let model = cohort::model::load::load_with_policy(dir.path(), Dtype::Float32, WeightPolicy::Kernel).unwrap();
    let tok = TextTokenizer::load(dir.path()).unwrap();

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
        // The history covers the same positions up to where one run stopped writing it.
        let (a, z) = (&drafting_rows[b].mtp, &mixed_rows[b].mtp);
        let len = a.offset().min(z.offset());
        assert!(len as usize >= TOKENS / 2, "row {b}: history of {len} entries");
        let ((ka, va), (kz, vz)) = (a.view_first(len).unwrap(), z.view_first(len).unwrap());
        assert!(values(&ka) == values(&kz), "row {b}: MTP history keys differ");
        assert!(values(&va) == values(&vz), "row {b}: MTP history values differ");
    }
}
