//! Whether a cohort of MTP rows drafts this cycle or takes a plain step.
//!
//! A depth-one draft pays when a cycle of draft and two-position verify costs less than 1 +
//! acceptance plain steps. On a GPU a 16-row verify costs little more than an 8-row step; on a
//! CPU whose products are bound by arithmetic it costs nearly two, and at width 8 on the
//! project's 2-core Xeon the two kinds came out level at acceptance 0.6 (docs/journal). Which
//! holds depends on the machine, the model, the width, the acceptance and the context, so the
//! lane measures both: per physical width it keeps the tokens a second of each kind's last [`WINDOW`] cycles,
//! runs the kind whose median is higher, and every [`PROBE_EVERY`] cycles runs the other once so
//! that its figure follows the context as it grows. A median, because a cycle now and then
//! takes twice its time (another process on the core) and one such cycle must not turn the
//! choice.
//!
//! Only greedy rows may skip drafts: they emit the same tokens either way (the exactness gate
//! holds a verify block to its chain of steps), and a plain cycle writes the MTP history their
//! drafts would have written ([`super::cycle::ar_keeping_history`]). A sampled row's tokens
//! depend on whether it drafted, so a cohort with one drafts every cycle.

use std::collections::{BTreeMap, VecDeque};

/// How a lane of MTP rows chooses its cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DraftPolicy {
    /// Every cycle drafts (benchmarks that time MTP cycles; tests that count drafts).
    Always,
    /// Greedy cohorts draft only while drafting has been measured faster.
    #[default]
    Measured,
}

/// The kind of a cycle of MTP rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleKind {
    Draft,
    Plain,
}

impl CycleKind {
    fn other(self) -> Self {
        match self {
            CycleKind::Draft => CycleKind::Plain,
            CycleKind::Plain => CycleKind::Draft,
        }
    }
}

/// Cycles of the better kind between two runs of the other.
pub const PROBE_EVERY: u32 = 16;

/// Cycles of each kind whose rates the choice reads.
pub const WINDOW: usize = 5;

#[derive(Debug, Default, Clone)]
struct Rates {
    /// Tokens a second of each kind's last cycles, oldest first.
    draft: VecDeque<f64>,
    plain: VecDeque<f64>,
    /// Cycles of the better kind since the other last ran.
    since_other: u32,
}

fn median(v: &VecDeque<f64>) -> Option<f64> {
    (!v.is_empty()).then(|| crate::platform::timing::median(v.iter().copied().collect()))
}

impl Rates {
    fn best(&self) -> Option<CycleKind> {
        match (median(&self.draft), median(&self.plain)) {
            (Some(d), Some(p)) => Some(if p > d { CycleKind::Plain } else { CycleKind::Draft }),
            _ => None,
        }
    }
}

/// The lane's measurements and its choice, per physical width.
#[derive(Debug, Default, Clone)]
pub struct DraftChooser {
    widths: BTreeMap<usize, Rates>,
}

impl DraftChooser {
    /// The kind of the next greedy cycle at `width`: each kind once first (drafting first), then
    /// the faster, with the other every [`PROBE_EVERY`] cycles.
    pub fn choose(&self, width: usize) -> CycleKind {
        let Some(r) = self.widths.get(&width) else { return CycleKind::Draft };
        match r.best() {
            None if r.draft.is_empty() => CycleKind::Draft,
            None => CycleKind::Plain,
            Some(best) if r.since_other >= PROBE_EVERY => best.other(),
            Some(best) => best,
        }
    }

    /// A greedy cycle of `kind` at `width` emitted `tokens` in `seconds`.
    pub fn record(&mut self, width: usize, kind: CycleKind, tokens: usize, seconds: f64) {
        if seconds <= 0.0 || !seconds.is_finite() {
            return;
        }
        let r = self.widths.entry(width).or_default();
        let best = r.best();
        let rate = tokens as f64 / seconds;
        let window = match kind {
            CycleKind::Draft => &mut r.draft,
            CycleKind::Plain => &mut r.plain,
        };
        if window.len() == WINDOW {
            window.pop_front();
        }
        window.push_back(rate);
        r.since_other = if best == Some(kind) { r.since_other.saturating_add(1) } else { 0 };
    }

    /// Each width's figures so far: (width, drafting tok/s, plain tok/s), the medians the choice
    /// reads.
    #[cfg(test)]
    fn rates(&self) -> Vec<(usize, Option<f64>, Option<f64>)> {
        self.widths.iter().map(|(&w, r)| (w, median(&r.draft), median(&r.plain))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `n` cycles at width 8 where a draft cycle emits `draft_tokens` in `draft_s` and a plain
    /// one 8 tokens in `plain_s`; the kinds chosen, in order.
    fn run(n: usize, draft_tokens: usize, draft_s: f64, plain_s: f64) -> Vec<CycleKind> {
        let mut c = DraftChooser::default();
        (0..n)
            .map(|_| {
                let kind = c.choose(8);
                match kind {
                    CycleKind::Draft => c.record(8, kind, draft_tokens, draft_s),
                    CycleKind::Plain => c.record(8, kind, 8, plain_s),
                }
                kind
            })
            .collect()
    }

    #[test]
    fn each_kind_is_measured_first_then_the_faster_runs_with_the_other_every_probe_interval() {
        // Drafting: 13 tokens in 0.1 s (130/s) against plain 8 in 0.05 s (160/s).
        let kinds = run(100, 13, 0.1, 0.05);
        assert_eq!(&kinds[..2], &[CycleKind::Draft, CycleKind::Plain]);
        let drafts: Vec<usize> =
            kinds.iter().enumerate().filter(|(_, k)| **k == CycleKind::Draft).map(|(i, _)| i).collect();
        // After the two first cycles, the other kind once every PROBE_EVERY + 1 cycles.
        let probes = |first: usize| -> Vec<usize> {
            let every = PROBE_EVERY as usize + 1;
            std::iter::once(first).chain((1..).map(|k| 1 + k * every).take_while(|&i| i < 100)).collect()
        };
        assert_eq!(drafts, probes(0));

        // The other way round: drafting pays, plain steps run only as probes.
        let kinds = run(100, 13, 0.1, 0.1);
        let plain: Vec<usize> =
            kinds.iter().enumerate().filter(|(_, k)| **k == CycleKind::Plain).map(|(i, _)| i).collect();
        assert_eq!(plain, probes(1));
    }

    #[test]
    fn widths_are_measured_apart_and_a_changed_cost_moves_the_choice() {
        let mut c = DraftChooser::default();
        c.record(8, CycleKind::Draft, 13, 0.1);
        c.record(8, CycleKind::Plain, 8, 0.05);
        assert_eq!(c.choose(8), CycleKind::Plain);
        assert_eq!(c.choose(2), CycleKind::Draft, "an unmeasured width drafts first");
        // One slow plain cycle (another process took the core) does not turn the choice; plain
        // steps that stay slower (a longer context) do.
        c.record(8, CycleKind::Plain, 8, 0.05);
        c.record(8, CycleKind::Plain, 8, 0.4);
        assert_eq!(c.choose(8), CycleKind::Plain);
        for _ in 0..WINDOW {
            c.record(8, CycleKind::Plain, 8, 0.2);
        }
        assert_eq!(c.choose(8), CycleKind::Draft);
        // A cycle with no time (a clock that did not move) teaches nothing.
        c.record(8, CycleKind::Plain, 8, 0.0);
        assert_eq!(c.rates().len(), 1);
        assert!(c.rates()[0].2.unwrap().is_finite());
    }
}
