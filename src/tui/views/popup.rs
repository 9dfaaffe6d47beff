//! Overlays sit in a centred box over whatever is behind them.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear};

/// A box of at most `width` x `height`, centred in `area`; returns its inside.
pub fn open(frame: &mut Frame, area: Rect, width: u16, height: u16, title: Line, style: Style, border: Style) -> Rect {
    let w = width.min(area.width.saturating_sub(2)).max(1);
    let h = height.min(area.height.saturating_sub(2)).max(1);
    let rect = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    let block = Block::bordered().title(title).style(style).border_style(border);
    let inner = block.inner(rect);
    frame.render_widget(Clear, rect);
    frame.render_widget(block, rect);
    inner
}
