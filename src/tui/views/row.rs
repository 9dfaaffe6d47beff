//! The inspector drilled into one row: its request and pane, its offsets (the target's and the
//! MTP history's, committed and physical), tokens, prefill, drafts (none for a row decoding ar),
//! the route (the lane's while it runs, its own once its result has come), how long it waited for
//! a row (and for its first token, once ended); then its acceptance history: each recent draft, and the acceptance rate as a
//! moving average, both charted with their scales. A row that has left the lane shows as last
//! seen. Figures and charts stack, or sit side by side in a short, wide inspector.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::chart;
use super::rows::pane_of;
use crate::engine::api::GenerationMode;
use crate::engine::api::RowTelemetry;
use crate::tui::app::App;
use crate::tui::style::state_label;
use crate::tui::wrap::sanitize;

/// Drafts the moving average of the acceptance rate spans.
const WINDOW: usize = 8;
/// The narrowest side-by-side half.
const HALF: u16 = 44;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, id: &str) {
    let s = &app.styles;
    let t = &app.telemetry;
    let live = t.rows.iter().position(|r| r.id == id);
    let row = live.map(|i| &t.rows[i]).or(app.row_seen.as_ref().filter(|r| r.id == id));
    let pane = pane_of(app, id);
    let mut title = vec![Span::styled(" row ", s.title)];
    if let Some(row) = row {
        let number = live.map(|i| i.to_string()).unwrap_or_else(|| "-".into());
        title = vec![Span::styled(format!(" row {number} "), s.title)];
        if let Some(p) = pane {
            title.push(Span::styled(format!("· pane {} ", p + 1), s.title));
        }
        title.push(Span::styled(format!("· {} ", state_label(row.state)), s.state(row.state)));
        if live.is_none() {
            title.push(Span::styled("· left the lane (last seen) ", s.muted));
        }
    }
    let block = Block::bordered().border_style(s.border(true)).title(Line::from(title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(row) = row else {
        let sent = app.panes.iter().any(|p| p.in_flight.as_ref().is_some_and(|f| f.id == id));
        let text = if sent {
            " waiting for the lane's first report of this request (esc goes back)"
        } else {
            " this row is no longer in the lane (esc goes back)"
        };
        return frame.render_widget(Paragraph::new(Span::styled(text, s.muted)), inner);
    };
    let figures = figures(app, row, pane);
    let side = inner.width >= 2 * HALF && (inner.height as usize) < figures.len() + 1 + 12;
    if side {
        let [left, right] = Layout::horizontal([Constraint::Fill(1), Constraint::Fill(1)]).spacing(1).areas(inner);
        frame.render_widget(Paragraph::new(figures).wrap(Wrap { trim: false }), left);
        let charts = charts(app, row, right.width as usize, right.height as usize);
        frame.render_widget(Paragraph::new(charts), right);
    } else {
        let room = (inner.height as usize).saturating_sub(figures.len() + 1);
        let mut lines = figures;
        lines.push(Line::default());
        lines.extend(charts(app, row, inner.width as usize, room));
        frame.render_widget(Paragraph::new(lines), inner);
    }
}

/// `label  value`, the label column aligned.
fn pair(label: &str, parts: Vec<(String, Style)>, muted: Style) -> Line<'static> {
    let mut spans = vec![Span::styled(format!(" {label:<9} "), muted)];
    spans.extend(parts.into_iter().map(|(text, style)| Span::styled(text, style)));
    Line::from(spans)
}

fn figures(app: &App, row: &RowTelemetry, pane: Option<usize>) -> Vec<Line<'static>> {
    let s = &app.styles;
    let t = &app.telemetry;
    let (v, m) = (s.base, s.muted);
    let mut lines = Vec::new();
    let slot = row.slot.map(|n| format!("slot {n}")).unwrap_or_else(|| "no slot yet (reading its prompt)".into());
    lines.push(pair("request", vec![(row.id.clone(), v), (format!(" · {slot}"), m)], m));
    // The pane's turn of this request: its prompt, and once it has ended, its own figures.
    let turn = pane.and_then(|p| app.panes[p].turns.iter().rev().find(|t| t.request_id == row.id));
    if let Some(turn) = turn {
        let first = sanitize(turn.user.lines().next().unwrap_or_default()).into_owned();
        lines.push(pair("prompt", vec![(format!("“{first}”"), s.user)], m));
    }
    let result = turn.and_then(|t| t.stats.as_ref()).filter(|stats| !stats.route.is_empty());
    lines.push(pair(
        "offsets",
        vec![
            ("target committed ".into(), m),
            (row.committed_offset.to_string(), v),
            (" · physical ".into(), m),
            (row.physical_offset.to_string(), v),
        ],
        m,
    ));
    lines.push(pair(
        "",
        vec![
            ("MTP history committed ".into(), m),
            (row.mtp_committed_offset.to_string(), v),
            (" · physical ".into(), m),
            (row.mtp_physical_offset.to_string(), v),
        ],
        m,
    ));
    lines.push(pair(
        "tokens",
        vec![
            (row.tokens.to_string(), v),
            (" · ".into(), m),
            (format!("{:.2}", row.tokens_per_cycle), v),
            (" per cycle · prefill ".into(), m),
            (format!("{}/{}", row.prefill_done, row.prefill_total), v),
        ],
        m,
    ));
    let drafts = row.accepted + row.rejected;
    let rate =
        if drafts > 0 { format!(" ({:.0}%)", 100.0 * row.accepted as f64 / drafts as f64) } else { String::new() };
    // The mode the row ran in: its result's once it has ended, else the engine's report of it.
    let mode = result.and_then(|stats| stats.mode).or(row.mode);
    if mode == Some(GenerationMode::Ar) {
        lines.push(pair("drafts", vec![("none".into(), v), (": the row decodes ar, without drafts".into(), m)], m));
    } else {
        lines.push(pair(
            "drafts",
            vec![
                (row.accepted.to_string(), v),
                (" accepted / ".into(), m),
                (row.rejected.to_string(), v),
                (format!(" rejected{rate}"), m),
            ],
            m,
        ));
    }
    // A row reports no route while it runs: the lane's is shown, then the one its result names
    // (its last cycle's) once it has ended.
    match result {
        Some(stats) => {
            let width = format!(" · widest cohort {}", stats.real_width);
            lines.push(pair("route", vec![(stats.route.clone(), s.accent), (format!(" (its own){width}"), m)], m));
        }
        None => {
            let route = if t.last_route.is_empty() { "-".to_owned() } else { t.last_route.clone() };
            lines.push(pair("route", vec![(route, s.accent), (" (the lane's)".into(), m)], m));
        }
    }
    let mut wait = vec![(format!("{:.2} s", row.admission_wait_s), v), (" from arrival to a row".into(), m)];
    if row.joined_at_cycle > 0 || t.lane_cycles > 0 {
        wait.push((format!(" · joined at cycle {}", row.joined_at_cycle), m));
        if t.lane_cycles >= row.joined_at_cycle {
            wait.push((format!(" ({} cycles ago)", t.lane_cycles - row.joined_at_cycle), m));
        }
    }
    if let Some(stats) = result.filter(|stats| stats.ttft_s > 0.0) {
        wait.push((format!(" · first token after {:.2} s", stats.ttft_s), m));
    }
    lines.push(pair("admission", wait, m));
    lines
}

/// The recent drafts (accepted high, rejected low) and the acceptance rate's moving average, in
/// `width` x at most `height` cells.
fn charts(app: &App, row: &RowTelemetry, width: usize, height: usize) -> Vec<Line<'static>> {
    let s = &app.styles;
    let recent = &row.recent_accepts;
    if recent.is_empty() {
        return vec![Line::from(Span::styled(" no drafts yet: the acceptance history starts with the first", s.muted))];
    }
    let mut lines = Vec::new();
    // Each draft one column: accepted on the upper row, rejected on the lower (aligned with the
    // rate chart below: its labels take 4 cells, then ` ┤`).
    let plot = width.saturating_sub(6).max(1);
    let shown = &recent[recent.len().saturating_sub(plot)..];
    lines.push(Line::from(Span::styled(format!(" the last {} drafts", shown.len()), s.muted)));
    let strip = |label: &str, want: u8, style: Style| {
        let cells: String = shown.iter().map(|&a| if a == want { '█' } else { ' ' }).collect();
        Line::from(vec![Span::styled(format!("{label:>4} ┤"), s.muted), Span::styled(cells, style)])
    };
    lines.push(strip("acc", 1, s.spark));
    lines.push(strip("rej", 0, s.muted));
    lines.push(Line::from(Span::styled(format!("     └{}", "─".repeat(shown.len())), s.muted)));
    let left = format!("-{}", shown.len());
    let gap = shown.len().saturating_sub(left.len() + 3).max(1);
    lines.push(Line::from(Span::styled(format!("      {left}{}now", " ".repeat(gap)), s.muted)));
    // The rate, each column the mean of the WINDOW drafts up to it.
    let rows = height.saturating_sub(lines.len() + 3).clamp(1, 4);
    if height >= lines.len() + 4 {
        let rates: Vec<f64> = (0..recent.len())
            .map(|k| {
                let from = (k + 1).saturating_sub(WINDOW);
                let part = &recent[from..=k];
                part.iter().map(|&a| f64::from(a)).sum::<f64>() / part.len() as f64
            })
            .collect();
        lines.push(Line::from(Span::styled(format!(" acceptance rate, mean of {WINDOW} drafts"), s.muted)));
        let axes = chart::Axes { top: "100%".into(), bottom: "0%".into(), left: left.clone(), right: "now".into() };
        let shown_rates = &rates[rates.len().saturating_sub(plot)..];
        lines.extend(chart::columns(shown_rates, 1.0, rows, width, &axes, s.spark, s.muted));
    }
    lines
}
