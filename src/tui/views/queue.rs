//! The queue panel: requests waiting, rows active, and how long the last cohort's first request
//! waited to be sealed.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

use crate::tui::app::App;

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let s = &app.styles;
    let t = &app.telemetry;
    let block = Block::bordered().border_style(s.border(false)).title(Span::styled(" queue ", s.title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let figure = |label: &str, value: String| {
        vec![Span::styled(format!("{label} "), s.muted), Span::styled(format!("{value}  "), s.base)]
    };
    let mut spans = figure("pending", t.pending.to_string());
    spans.extend(figure("active", t.active.to_string()));
    spans.extend(figure("queue wait", format!("{:.1} ms", t.last_queue_wait_s * 1000.0)));
    frame.render_widget(Paragraph::new(Line::from(spans)).wrap(Wrap { trim: true }), inner);
}
