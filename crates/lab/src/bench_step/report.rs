//! bench-step's per-arm report: each step's median against its bandwidth floor, and the B8
//! cohort's aggregate measured and projected. A step that `--steps` left out is not reported
//! (its medians are empty, and a table of NaN reads as a measurement).

use super::{Figures, StepKind};
use cohort_core::engine::cohort::FIXED_WIDTH;

/// Each step's floor in ms: the bytes it must read / the measured bandwidth.
pub(super) struct Floors {
    pub(super) b1: f64,
    pub(super) draft: f64,
    pub(super) verify: f64,
    pub(super) b8_ar: f64,
}

/// One arm's report as printed, for the steps in `steps`.
pub(super) fn render(f: &Figures, floors: &Floors, prefill: usize, steps: &[StepKind]) -> String {
    let (b1, b8) = (steps.contains(&StepKind::B1), steps.contains(&StepKind::B8));
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    let row = |name: &str, ms: f64, floor: f64| format!("| {name} | {ms:.2} | {floor:.3} | {:.1}x |", ms / floor);
    line(format!(
        "\nGated DeltaNet route: {:?}; cohort attention: {:?}; compiled blocks: {:?}",
        f.route, f.attention, f.compiled
    ));
    if let Some(d) = f.b1_logits_vs_first {
        line(format!("first B1 logits against the first arm's: {d:.2e} of the largest logit"));
    }
    if b1 {
        line(format!(
            "B1 step graph built in {:.2} ms, handed to the device by {:.2} ms (medians); the rest is waiting for it",
            f.b1_build_ms, f.b1_enqueued_ms
        ));
    }
    line(format!("prefill {prefill} tokens: {:.0} tok/s", f.prefill_tok_s));
    if b8 {
        line(format!(
            "B8 verify handed to the device by {:.2} ms, B8 AR step by {:.2} ms (medians)",
            f.verify_enqueued_ms, f.b8_ar_enqueued_ms
        ));
    }
    line("| step | median ms | floor ms | ratio |".into());
    line("| --- | --- | --- | --- |".into());
    if b1 {
        line(row("B1 AR step (T=1)", f.b1_ms, floors.b1));
        line(row("B1 AR step, pipelined", f.b1_pipelined_ms, floors.b1));
    }
    if b8 {
        line(format!("| B8 MTP cycle: owe history (accepted rows' entries) | {:.2} | | |", f.owe_ms));
        line(row("B8 MTP cycle: draft (M=8)", f.draft_ms, floors.draft));
        line(row("B8 MTP cycle: verify (T=2, M=16, ids to the host)", f.verify_ms, floors.verify));
        line(format!("| B8 MTP cycle: decide | {:.3} | | |", f.decide_ms));
        line(format!("| B8 MTP cycle: commit (keep=2 or keep=1 per row, tokens emitted) | {:.2} | | |", f.commit_ms));
        line(format!("| B8 MTP cycle, all phases | {:.2} | | |", f.mtp_cycle_ms));
        line(row("B8 AR cycle (T=1, M=8, step, decide, commit)", f.b8_ar_ms, floors.b8_ar));
    }
    let width = FIXED_WIDTH as f64;
    let mut rates = Vec::new();
    if b1 {
        rates.push(format!("B1 AR: {:.1} tok/s ({:.1} pipelined)", 1e3 / f.b1_ms, 1e3 / f.b1_pipelined_ms));
    }
    if b8 {
        rates.push(format!("B8 AR: {:.0} tok/s; B8 MTP cycle {:.2} ms", width * 1e3 / f.b8_ar_ms, f.mtp_cycle_ms));
    }
    line(rates.join("; "));
    if b8 {
        line(format!(
            "B8 MTP cohort as the engine serves it (untimed cycles): {:.0} tok/s at acceptance {:.2} (measured)",
            f.served_tok_s, f.served_acceptance
        ));
        for acc in [0.0, 0.3, 0.6, 0.8] {
            line(format!(
                "  projection (not measured): B8 aggregate at acceptance {acc:.1}: {:.0} tok/s",
                width * (1.0 + acc) / (f.mtp_cycle_ms * 1e-3)
            ));
        }
        // The served cycles overlap their phases, so they run shorter than the phases timed one
        // by one; a cycle costs the same whatever its rows accept, so the rate scales with
        // 1 + acceptance (0.67: the default model's trained head in `cohort-lab bench`).
        if f.served_tok_s > 0.0 {
            let cycle_ms = width * (1.0 + f.served_acceptance) / f.served_tok_s * 1e3;
            let at = |acc: f64| width * (1.0 + acc) / (cycle_ms * 1e-3);
            line(format!(
                "  projection (not measured) from the served cycles ({cycle_ms:.2} ms each): {:.0} tok/s at acceptance 0.6, {:.0} at 0.67, {:.0} at 0.8",
                at(0.6),
                at(0.67),
                at(0.8)
            ));
        }
    }
    out
}

/// Print one arm's report and flush: stdout may be a file that a time limit cuts off.
pub(super) fn print(f: &Figures, floors: &Floors, prefill: usize, steps: &[StepKind]) {
    use std::io::Write;
    print!("{}", render(f, floors, prefill, steps));
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_step::{AttentionPath, CompiledBlocks, GdnRoute};

    /// What `measure` leaves for the steps `--steps` left out: empty medians.
    fn b8_only() -> Figures {
        Figures {
            route: GdnRoute::Kernel,
            attention: AttentionPath::Batched,
            compiled: CompiledBlocks::All,
            b1_logits_vs_first: None,
            b1_build_ms: f64::NAN,
            b1_enqueued_ms: f64::NAN,
            b8_ar_ms: 10.0,
            verify_enqueued_ms: 5.6,
            b8_ar_enqueued_ms: 5.5,
            owe_ms: 0.01,
            prefill_tok_s: 2000.0,
            b1_ms: f64::NAN,
            b1_pipelined_ms: f64::NAN,
            draft_ms: 1.5,
            verify_ms: 12.5,
            decide_ms: 0.006,
            commit_ms: 0.3,
            mtp_cycle_ms: 14.4,
            served_tok_s: 560.0,
            served_acceptance: 0.0,
        }
    }

    const FLOORS: Floors = Floors { b1: 0.6, draft: 0.15, verify: 3.1, b8_ar: 1.9 };

    /// `--steps b8` printed "B1 AR: NaN tok/s (NaN pipelined)" and B1 rows of NaN.
    #[test]
    fn a_step_left_out_is_not_reported() {
        let text = render(&b8_only(), &FLOORS, 64, &[StepKind::B8]);
        assert!(!text.contains("NaN"), "{text}");
        assert!(!text.contains("B1 AR"), "{text}");
        assert!(
            text.contains("| B8 MTP cycle: verify (T=2, M=16, ids to the host) | 12.50 | 3.100 | 4.0x |"),
            "{text}"
        );
        assert!(text.contains("B8 AR: 800 tok/s; B8 MTP cycle 14.40 ms"), "{text}");
        assert!(text.contains("projection (not measured): B8 aggregate at acceptance 0.6: 889 tok/s"), "{text}");
        // 560 tok/s served at acceptance 0: 8 tokens a cycle, 14.29 ms; at 0.67, 13.36 tokens.
        assert!(
            text.contains(
                "from the served cycles (14.29 ms each): 896 tok/s at acceptance 0.6, 935 at 0.67, 1008 at 0.8"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_b1_only_run_reports_no_cohort() {
        let f = Figures { b1_ms: 5.0, b1_pipelined_ms: 4.0, b1_build_ms: 1.5, b1_enqueued_ms: 4.5, ..b8_only() };
        let text = render(&f, &FLOORS, 64, &[StepKind::B1]);
        assert!(text.contains("B1 AR: 200.0 tok/s (250.0 pipelined)"), "{text}");
        assert!(!text.contains("B8"), "{text}");
    }
}
