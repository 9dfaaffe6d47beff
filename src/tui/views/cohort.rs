//! The cohort panel: the continuous lane as it runs now (its width, cycles, rows that joined
//! and left, requests queued) or the sealed cohorts, how wide they really were (histogram),
//! cycles per physical width, verify cycles, drafts accepted and rejected, the last route, the last error, where the
//! owner last finalised, the weight policy in force, the exactness probe's verdict and the
//! construction check.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::histogram;
use crate::engine::api::FinalizeScope;
use crate::tui::app::App;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let s = &app.styles;
    let t = &app.telemetry;
    let block = Block::bordered().border_style(s.border(false)).title(Span::styled(" cohort ", s.title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let pair = |label: &str, value: String, style: Style| {
        vec![Span::styled(format!("{label} "), s.muted), Span::styled(value, style)]
    };
    let line = |parts: Vec<Vec<Span<'static>>>| {
        let mut spans = vec![Span::raw(" ")];
        for (i, p) in parts.into_iter().enumerate() {
            if i > 0 {
                spans.push(Span::styled(" · ", s.muted));
            }
            spans.extend(p);
        }
        Line::from(spans)
    };
    let drafts = t.accepted_drafts + t.rejected_drafts;
    let rate =
        if drafts > 0 { format!(" ({:.1}%)", 100.0 * t.accepted_drafts as f64 / drafts as f64) } else { String::new() };
    let fixed: Vec<String> = t.fixed_width_cycles.iter().map(|(w, n)| format!("b{w}:{n}")).collect();
    let fixed = if fixed.is_empty() { "-".to_owned() } else { fixed.join(" ") };
    let route = if t.last_route.is_empty() { "-".to_owned() } else { t.last_route.clone() };
    let finalize_style = if t.finalize_scope == FinalizeScope::CohortOwnerFinalizeFailed { s.error } else { s.base };
    let (error, error_style) = match &t.last_error {
        Some(e) => (e.clone(), s.error),
        None => ("none".to_owned(), s.base),
    };
    let probe = t.probe_verdict.clone().unwrap_or_else(|| "not run".into());
    let weights = match &app.engine {
        crate::tui::app::EngineStatus::Ready(info) => info.weights.clone(),
        _ => "-".to_owned(),
    };
    let width = inner.width as usize;
    let mut lines = Vec::new();
    // The histogram's bars, and its header and scale when it has any.
    let hist_rows = if t.real_width_histogram.is_empty() { 1 } else { t.real_width_histogram.len() + 2 };
    let full_height = 9 + hist_rows + usize::from(t.construction_check.is_some());
    if (inner.height as usize) < full_height {
        // Short on room (an 80x24 terminal): the histogram inline, the most telling figures first.
        let widths: Vec<String> = t.real_width_histogram.iter().map(|(w, n)| format!("{w}:{n}")).collect();
        let widths = if widths.is_empty() { "none yet".to_owned() } else { widths.join(" ") };
        lines.push(line(vec![pair("widths", widths, s.histogram), pair("cycles", fixed, s.base)]));
        lines.push(line(vec![
            pair("verify", t.verify_cycles.to_string(), s.base),
            pair("drafts", format!("{}/{}{rate}", t.accepted_drafts, t.rejected_drafts), s.base),
        ]));
        lines.push(line(vec![pair("route", route, s.accent)]));
        lines.push(line(vec![pair("prompt cache", cache_summary(&t.prompt_cache), s.base)]));
        lines.push(line(vec![pair("last error", error, error_style)]));
        lines.push(line(vec![pair("finalize", scope_name(t.finalize_scope).into(), finalize_style)]));
        lines.push(line(vec![pair("probe", probe, s.base)]));
    } else {
        let lane = t.lane_cycles > 0;
        if lane {
            lines.push(line(vec![
                pair("width now", t.width_now.to_string(), s.accent),
                pair("cycles", t.lane_cycles.to_string(), s.base),
                // Counted only while other rows decode: the row that starts a lane did not join it.
                pair("joined mid-run", t.joins.to_string(), s.base),
                pair("left mid-run", t.leaves.to_string(), s.base),
                pair("queued", t.pending.to_string(), s.base),
                pair("weights", weights, s.base),
            ]));
        } else {
            lines.push(line(vec![
                pair("cohorts", t.cohorts.to_string(), s.base),
                pair("solo", t.solo_runs.to_string(), s.base),
                pair("last width", t.last_real_width.to_string(), s.base),
                pair("weights", weights, s.base),
            ]));
        }
        let per = if lane { " real width per cycle" } else { " real width per sealed group" };
        lines.push(Line::from(Span::styled(per, s.muted)));
        if t.real_width_histogram.is_empty() {
            lines.push(Line::from(Span::styled("   none yet", s.muted)));
        }
        let counted = if lane { "cycles" } else { "groups" };
        lines.extend(histogram::bars(
            &t.real_width_histogram,
            |w| format!("{w}"),
            width,
            s.histogram,
            s.base,
            ("width", counted),
        ));
        lines.push(line(vec![pair("fixed-width cycles", fixed, s.base)]));
        lines.push(line(vec![
            pair("verify cycles", t.verify_cycles.to_string(), s.base),
            pair("drafts", format!("{} accepted / {} rejected{rate}", t.accepted_drafts, t.rejected_drafts), s.base),
        ]));
        lines.push(line(vec![pair("route", route, s.accent)]));
        if inner.height as usize > full_height {
            lines.push(line(vec![pair("prompt cache", cache_summary(&t.prompt_cache), s.base)]));
        }
        lines.push(line(vec![
            pair("finalize", scope_name(t.finalize_scope).into(), finalize_style),
            pair("poisoned", t.poisoned.to_string(), if t.poisoned > 0 { s.error } else { s.base }),
        ]));
        lines.push(line(vec![pair("probe", probe, s.base)]));
        if let Some(c) = &t.construction_check {
            let verdict = if c.passed { "passed" } else { "over bound" };
            lines.push(line(vec![pair(
                "construction",
                format!("{verdict} (max |diff| {:.2e} <= {:.2e})", c.max_abs_diff, c.bound),
                if c.passed { s.base } else { s.error },
            )]));
        }
        lines.push(line(vec![pair("last error", error, error_style)]));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), inner);
}

/// The prompt cache in one line: how it serves, what it holds against its budget, what it saved.
fn cache_summary(c: &crate::engine::api::CacheStats) -> String {
    use crate::engine::api::Reuse;
    let mb = |b: u64| b as f64 / (1u64 << 20) as f64;
    match c.reuse {
        Reuse::Off => match &c.inexact_because {
            Some(why) => format!("off: reuse is not exact here ({why})"),
            None => "off".into(),
        },
        reuse => format!(
            "{} · {} held, {:.0} of {:.0} MB · {} hits, {} tokens reused · {} evicted",
            reuse.name(),
            c.entries,
            mb(c.bytes_held),
            mb(c.budget_bytes),
            c.hits,
            c.tokens_reused,
            c.evictions
        ),
    }
}

fn scope_name(scope: FinalizeScope) -> &'static str {
    match scope {
        FinalizeScope::NotRequiredBeforeAdmission => "not_required_before_admission",
        FinalizeScope::CohortOwnerAfterDecode => "cohort_owner_after_decode",
        FinalizeScope::CohortOwnerFinalizeFailed => "cohort_owner_finalize_failed",
    }
}
