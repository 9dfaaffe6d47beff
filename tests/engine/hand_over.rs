//! A step's forward handing its graph to the device every few layers (`Routes::hand_over_layers`)
//! must change when the device starts, never what it computes: the same kernels run on the same
//! inputs, so every logit and every row's state after the step keeps its bits. Runs on any
//! backend (MLX evaluates asynchronously on the CPU too).

use crate::common;

use cohort::model::families::qwen3_5::Qwen35Model;
use cohort::model::forward::{LanguageModel, Logits};
use cohort::model::routes::{self, HAND_OVER_LAYERS, Routes};
use mlx_rs::{Array, Dtype};

/// Twice as many layers as a hand-over spans and one more, so a step hands over twice and ends
/// on a partial group.
fn model() -> Qwen35Model {
    let layers = (2 * HAND_OVER_LAYERS + 1) as i32;
    let cfg = cohort_lab::synth::geometry("qwen35-moe-small", Some(layers), Some(512)).unwrap();
    let mut weights = cohort_lab::synth::make_weights(&cfg, Dtype::Float32, 21).unwrap();
    Qwen35Model::from_weights(cfg, &mut weights, Dtype::Float32).unwrap()
}

/// A prefill of two rows, then a two-token block on both as one batch: the logits of each, and
/// the next step's logits, which read the state the block left.
fn run(model: &Qwen35Model, hand_over: bool) -> Vec<Vec<f32>> {
    routes::scoped(Routes { hand_over_layers: hand_over, ..routes::current() }, || {
        let mut rows = [model.new_row(), model.new_row()];
        let mut out = Vec::new();
        for (i, row) in rows.iter_mut().enumerate() {
            let prompt: Vec<u32> = (0..12 + 5 * i as u32).map(|t| (t * 37 + 11 * i as u32 + 3) % 512).collect();
            let (_, logits, _) = model.prefill(row, &prompt, prompt.len(), false).unwrap();
            out.push(common::to_f32(&logits));
        }
        let [a, b] = &mut rows;
        let block = Array::from_slice(&[5i32, 9, 77, 3], &[2, 2]);
        let step = model.forward(&block, &mut [a, b], Logits::All, true).unwrap();
        out.push(common::to_f32(step.logits.as_ref().unwrap()));
        let next = model.forward(&Array::from_slice(&[1i32, 2], &[2, 1]), &mut [a, b], Logits::All, false).unwrap();
        out.push(common::to_f32(next.logits.as_ref().unwrap()));
        out
    })
}

#[test]
fn handing_over_every_few_layers_keeps_every_logit_bit_for_bit() {
    let model = model();
    let (whole, handed) = (run(&model, false), run(&model, true));
    for (what, (w, h)) in
        ["row 0's prefill", "row 1's prefill", "the block", "the next step"].iter().zip(whole.iter().zip(&handed))
    {
        assert_eq!(w.len(), h.len(), "{what}");
        let differing = w.iter().zip(h).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differing, 0, "{what}: {differing} logits differ with the hand-over on");
    }
}
