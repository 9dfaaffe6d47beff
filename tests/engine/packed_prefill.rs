//! Several rows' prompt chunks read in one packed block give every row exactly the state and the
//! logits it gets from its chunk read alone, on the default model as the CPU engine loads it.
//! Compared bit for bit: hidden states, the last position's logits, and every layer's keys and
//! values. Skipped (with a message) where the default model's GGUF is absent or the backend does
//! not pad prompt chunks.

use crate::common;

use cohort::model::forward::{LanguageModel, prefill_chunk};
use cohort::model::layers::cache::{LayerState, RowCache};
use cohort::model::prefill::read_chunks;
use cohort::model::routes::WeightPolicy;
use common::{smollm2_imported, to_f32};
use mlx_rs::{Array, Dtype};

/// Positions where `a` and `b` differ (a length mismatch counts as differing everywhere).
fn differing(a: &Array, b: &Array) -> usize {
    let (a, b) = (to_f32(a), to_f32(b));
    if a.len() != b.len() {
        return a.len().max(b.len());
    }
    a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count()
}

/// Keys and values of every layer, up to the row's offset, against another row's.
fn kv_differing(a: &RowCache, b: &RowCache) -> usize {
    assert_eq!(a.len, b.len, "rows of different lengths");
    let mut n = 0;
    for (la, lb) in a.layers.iter().zip(&b.layers) {
        let (LayerState::Attention(ka), LayerState::Attention(kb)) = (la, lb) else { panic!("not a Llama row") };
        assert_eq!((ka.offset(), ka.physical()), (kb.offset(), kb.physical()));
        let ((k1, v1), (k2, v2)) = (ka.view().unwrap(), kb.view().unwrap());
        n += differing(&k1, &k2) + differing(&v1, &v2);
    }
    n
}

fn prompt(len: usize, seed: u32) -> Vec<u32> {
    (0..len as u32).map(|i| (i * 7919 + seed * 104_729) % 49_000 + 17).collect()
}

/// The default model as the CPU engine loads it; None (after saying `test` is skipped) where
/// this backend reads prompt chunks as they are.
fn padding_model(test: &str) -> Option<(tempfile::TempDir, Box<dyn LanguageModel>)> {
    let dir = smollm2_imported(test);
    let model = cohort::model::load::load_with_policy(dir.path(), Dtype::Float32, WeightPolicy::Kernel).unwrap();
    if model.prefill_block(0, 45).is_none() {
        common::skip(test, "this backend reads prompt chunks as they are (no packed reads)");
        return None;
    }
    Some((dir, model))
}

#[test]
fn a_packed_prompt_read_gives_every_row_its_lone_state() {
    let Some((_dir, model)) = padding_model("a_packed_prompt_read_gives_every_row_its_lone_state") else { return };
    assert_eq!(model.prefill_block(0, 45), Some(48));
    // A prompt read never takes the host path: short chunks are padded too, so where a read
    // splits does not change a row's bits (tests/engine/prompt_cache.rs).
    assert_eq!(model.prefill_block(0, 16), Some(16));
    assert_eq!(model.prefill_block(0, 5), Some(8));
    // Eight prompts of different lengths (one a whole number of blocks), each read alone.
    let lens = [29usize, 45, 61, 17, 40, 52, 33, 58];
    let prompts: Vec<Vec<u32>> = lens.iter().enumerate().map(|(i, &n)| prompt(n, i as u32)).collect();
    let mut alone = Vec::new();
    for p in &prompts {
        let mut row = model.new_row();
        let out = prefill_chunk(&*model, &mut row, p, true).unwrap();
        assert_eq!(row.len, p.len() as i32, "the padding is trimmed");
        assert_eq!(out.hidden.shape(), [1, p.len() as i32, 576]);
        alone.push((row, out));
    }
    // The same eight packed into one block of 8 x 64 positions.
    let mut rows: Vec<RowCache> = (0..lens.len()).map(|_| model.new_row()).collect();
    let parts: Vec<&[u32]> = prompts.iter().map(|p| p.as_slice()).collect();
    let outs = {
        let mut refs: Vec<&mut RowCache> = rows.iter_mut().collect();
        read_chunks(&*model, &mut refs, &parts, &[true; 8]).unwrap()
    };
    for (i, ((row, out), (lone_row, lone))) in rows.iter().zip(&outs).zip(&alone).enumerate() {
        let (h, l) = (
            differing(&out.hidden, &lone.hidden),
            differing(out.logits.as_ref().unwrap(), lone.logits.as_ref().unwrap()),
        );
        let kv = kv_differing(row, lone_row);
        assert_eq!((h, l, kv), (0, 0, 0), "row {i} ({} tokens): hidden, logits, KV elements differing", lens[i]);
    }
    // The comparison sees a difference where there is one: the same row with its last token
    // changed differs there and only there.
    let mut other = prompts[1].clone();
    *other.last_mut().unwrap() += 1;
    let mut row = model.new_row();
    let out = prefill_chunk(&*model, &mut row, &other, true).unwrap();
    let last = |a: &Array| cohort::model::ops::slice_axis(a, 1, 44, 45).unwrap();
    let first = |a: &Array| cohort::model::ops::slice_axis(a, 1, 0, 44).unwrap();
    assert_eq!(differing(&first(&out.hidden), &first(&alone[1].1.hidden)), 0);
    assert!(differing(&last(&out.hidden), &last(&alone[1].1.hidden)) > 0, "a changed token is seen");
}

/// A row in the middle of a long prompt (its second chunk, at an offset) and a fresh one, packed:
/// each gets the state of its own chunk-by-chunk read alone, and the next chunk goes on from it.
#[test]
fn rows_at_different_offsets_pack_and_read_on() {
    let Some((_dir, model)) = padding_model("rows_at_different_offsets_pack_and_read_on") else { return };
    let (long, short) = (prompt(90, 3), prompt(27, 4));
    let mut lone_long = model.new_row();
    for (i, part) in long.chunks(30).enumerate() {
        prefill_chunk(&*model, &mut lone_long, part, i == 2).unwrap();
    }
    let mut lone_short = model.new_row();
    prefill_chunk(&*model, &mut lone_short, &short, true).unwrap();

    let (mut a, mut b) = (model.new_row(), model.new_row());
    prefill_chunk(&*model, &mut a, &long[..30], false).unwrap();
    read_chunks(&*model, &mut [&mut a, &mut b], &[&long[30..60], &short], &[false, true]).unwrap();
    assert_eq!((a.len, b.len), (60, 27));
    prefill_chunk(&*model, &mut a, &long[60..], true).unwrap();
    assert_eq!(kv_differing(&a, &lone_long), 0, "the long prompt, its middle chunk packed");
    assert_eq!(kv_differing(&b, &lone_short), 0, "the short prompt, packed beside it");
}
