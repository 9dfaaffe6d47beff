//! The memory panel: MLX active / peak / cache bytes, and active memory over time.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Sparkline, Wrap};

use crate::engine::runtime::human_bytes;
use crate::tui::app::App;

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
    let chart = Rect { y: inner.y + text_rows, height: inner.height - text_rows, ..inner };
    if chart.height > 0 {
        // Newest samples on the right: keep the tail that fits.
        let history: Vec<u64> = app.memory_history.iter().copied().collect();
        let tail = &history[history.len().saturating_sub(chart.width as usize)..];
        frame.render_widget(Sparkline::default().data(tail).style(s.spark), chart);
    }
}
