//! The queue panel, as it is: how many requests wait for a row and how many rows are active,
//! then each waiting request in order (its pane, how long it has waited, its prompt), the rows
//! admitted that still read their prompts, and messages the engine has not seen yet (sent while
//! the model loads).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use super::rows::pane_of;
use crate::engine::api::RowState;
use crate::tui::app::{App, EngineStatus, TICKS_PER_S};
use crate::tui::wrap::sanitize;

/// Entries listed at most (the count says how many there are).
const MOST: usize = 8;

/// One entry per line: (what, detail).
fn entries(app: &App) -> Vec<Line<'static>> {
    let s = &app.styles;
    let t = &app.telemetry;
    let mut out = Vec::new();
    let waited = |id: &str| {
        let pane = pane_of(app, id)?;
        let flight = app.panes[pane].in_flight.as_ref().filter(|f| f.id == id)?;
        Some(app.tick.saturating_sub(flight.sent_tick) as f64 / TICKS_PER_S as f64)
    };
    let prompt = |pane: usize| {
        let text = app.panes[pane].turns.last().map(|t| sanitize(t.user.lines().next().unwrap_or_default()));
        text.map(|t| format!(" “{t}”")).unwrap_or_default()
    };
    for (i, id) in t.queued.iter().enumerate() {
        let mut spans = vec![Span::styled(format!(" {}. ", i + 1), s.muted)];
        match pane_of(app, id) {
            Some(p) => {
                spans.push(Span::styled(format!("pane {}", p + 1), s.state(RowState::Queued)));
                if let Some(secs) = waited(id) {
                    spans.push(Span::styled(format!(" · waiting {secs:.1} s"), s.muted));
                }
                spans.push(Span::styled(prompt(p), s.base));
            }
            // Another client's request, on a server the TUI is attached to.
            None => spans.push(Span::styled(id.clone(), s.base)),
        }
        out.push(Line::from(spans));
    }
    for row in t.rows.iter().filter(|r| r.state == RowState::Prefill) {
        let who = pane_of(app, &row.id).map(|p| format!("pane {}", p + 1)).unwrap_or(row.id.clone());
        out.push(Line::from(vec![
            Span::styled(" reading its prompt: ", s.muted),
            Span::styled(who, s.state(RowState::Prefill)),
            Span::styled(format!(" {}/{} tokens", row.prefill_done, row.prefill_total), s.muted),
        ]));
    }
    // Sent, but not in the engine's queue or rows yet.
    let loading = matches!(app.engine, EngineStatus::Loading { .. });
    for (p, pane) in app.panes.iter().enumerate() {
        let Some(flight) = &pane.in_flight else { continue };
        let seen = t.queued.contains(&flight.id) || t.rows.iter().any(|r| r.id == flight.id);
        if !seen && pane.state == RowState::Queued {
            let why = if loading { " waits for the model to load" } else { " sent, not in the engine's queue yet" };
            out.push(Line::from(vec![
                Span::styled(format!(" pane {}", p + 1), s.state(RowState::Queued)),
                Span::styled(why, s.muted),
            ]));
        }
    }
    out
}

/// Rows the panel wants: its figures, each entry (up to `MOST`) and the borders (with no entry,
/// a line saying so shows where there is room for it).
pub fn height(app: &App) -> u16 {
    (entries(app).len().min(MOST) + 3) as u16
}

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let s = &app.styles;
    let t = &app.telemetry;
    let block = Block::bordered().border_style(s.border(false)).title(Span::styled(" queue ", s.title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let figure = |label: &str, value: String| {
        vec![Span::styled(format!("{label} "), s.muted), Span::styled(format!("{value}  "), s.base)]
    };
    let mut spans = vec![Span::raw(" ")];
    spans.extend(figure("waiting", t.queued.len().to_string()));
    spans.extend(figure("active", t.active.to_string()));
    spans.extend(figure("last wait", format!("{:.1} ms", t.last_queue_wait_s * 1000.0)));
    let mut lines = vec![Line::from(spans)];
    let entries = entries(app);
    if entries.is_empty() {
        lines.push(Line::from(Span::styled(" nothing waits for a row", s.muted)));
    }
    let more = entries.len().saturating_sub(MOST);
    lines.extend(entries.into_iter().take(MOST - usize::from(more > 0)));
    if more > 0 {
        lines.push(Line::from(Span::styled(format!(" … and {} more", more + 1), s.muted)));
    }
    frame.render_widget(Paragraph::new(lines), inner);
}
