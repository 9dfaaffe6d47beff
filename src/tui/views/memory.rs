//! The memory panel: MLX active / peak / cache bytes, and active memory over time as a chart
//! with its scale (bytes from 0 to the highest sample shown, and how far back it reaches).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use super::{chart, spark};
use crate::platform::backend::human_bytes;
use crate::tui::app::{App, TICKS_PER_S};
use crate::tui::event::TELEMETRY_EVERY;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let s = &app.styles;
    let m = &app.telemetry.memory;
    let block = Block::bordered().border_style(s.border(false)).title(Span::styled(" memory ", s.title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.height == 0 {
        return;
    }
    let figure = |label: &str, bytes: usize| {
        vec![Span::styled(format!("{label} "), s.muted), Span::styled(format!("{}  ", human_bytes(bytes)), s.base)]
    };
    let mut spans = figure("active", m.active);
    spans.extend(figure("peak", m.peak));
    spans.extend(figure("cache", m.cache));
    let line = Line::from(spans);
    let text_rows = (line.width().div_ceil(inner.width.max(1) as usize) as u16).clamp(1, inner.height);
    frame.render_widget(Paragraph::new(line).wrap(Wrap { trim: true }), Rect { height: text_rows, ..inner });
    let area = Rect { y: inner.y + text_rows, height: inner.height - text_rows, ..inner };
    if area.height == 0 || app.memory_history.is_empty() {
        return;
    }
    let history: Vec<f64> = app.memory_history.iter().map(|&b| b as f64).collect();
    let width = area.width as usize;
    // Samples come with each telemetry copy: this many seconds apart.
    let every = TELEMETRY_EVERY as f64 / TICKS_PER_S as f64;
    let span = |n: usize| format!("-{:.0} s", n as f64 * every);
    let max = history.iter().copied().fold(0.0, f64::max);
    let top = human_bytes(max as usize);
    let lines = if area.height >= 3 {
        let shown = history.len().min(width.saturating_sub(top.chars().count() + 2).max(1));
        let axes = chart::Axes { top, bottom: "0".into(), left: span(shown), right: "now".into() };
        chart::columns(&history, max, area.height as usize - 2, width, &axes, s.spark, s.muted)
    } else {
        // One row: the sparkline with its scale after it.
        let room = width.saturating_sub(format!(" 0 to {top}, {} to now", span(history.len())).chars().count()).max(1);
        let shown = &history[history.len().saturating_sub(room)..];
        let values: Vec<f64> = shown.iter().map(|v| if max > 0.0 { v / max } else { 0.0 }).collect();
        vec![Line::from(vec![
            Span::styled(spark::sparkline(&values, room), s.spark),
            Span::styled(format!(" 0 to {top}, {} to now", span(shown.len())), s.muted),
        ])]
    };
    frame.render_widget(Paragraph::new(lines), area);
}
