//! The session list: every saved session, the one written to last first, with its name (the
//! title given in the app, else the folder's), when it was last written, its panes and turns
//! and its first question; the session in use marked. Under the list: the name being typed,
//! the question before a delete, or the keys.

use ratatui::Frame;
use ratatui::layout::{Position, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::popup;
use crate::tui::app::{App, SessionList, SessionMode};
use crate::tui::transcript::{SessionEntry, timestamp_name};
use crate::tui::wrap::sanitize;

/// Columns: the marker, the name, when, panes and turns; the first question takes the rest.
const NAME: usize = 24;
const WHEN: usize = 16;
const COUNTS: usize = 18;
/// Sessions shown at once (the list scrolls to keep the one picked in view).
const ROWS: usize = 12;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, open: &SessionList) {
    let s = &app.styles;
    let count = open.list.len();
    let title = Line::from(vec![Span::styled(" sessions ", s.title), Span::styled(format!("{count} saved "), s.muted)]);
    let rows = count.min(ROWS);
    // The list, a blank line and two lines under it.
    let inner = popup::open(frame, area, 110, rows as u16 + 5, title, s.popup, s.border(true));
    let width = inner.width as usize;
    let room = (inner.height as usize).saturating_sub(3).max(1);
    let first = (open.selected + 1).saturating_sub(room);
    let mut lines: Vec<Line> = open
        .list
        .iter()
        .enumerate()
        .skip(first)
        .take(room)
        .map(|(i, entry)| {
            let text = row(entry, entry.name == app.session, width);
            Line::from(Span::styled(text, if i == open.selected { s.selection } else { s.popup }))
        })
        .collect();
    lines.push(Line::default());
    let picked = open.list.get(open.selected);
    let mut cursor = None;
    match (&open.mode, picked) {
        (SessionMode::Rename(name), Some(entry)) => {
            let lead = " new name: ";
            lines.push(Line::from(vec![Span::styled(lead, s.muted), Span::styled(name.text().to_owned(), s.popup)]));
            let at = lead.chars().count() + name.text()[..name.cursor()].chars().count();
            cursor = Some((at as u16, (lines.len() - 1) as u16));
            let hint = format!(" enter names {} (empty: its folder's name) · esc back", entry.name);
            lines.push(Line::from(Span::styled(hint, s.muted)));
        }
        (SessionMode::Delete, Some(entry)) => {
            let (p, t) = (if entry.panes == 1 { "" } else { "s" }, if entry.turns == 1 { "" } else { "s" });
            let question = format!(
                " delete {} for good ({} pane{p}, {} turn{t})? y deletes · any other key keeps it",
                entry.label(),
                entry.panes,
                entry.turns
            );
            lines.push(Line::from(Span::styled(question, s.error)));
        }
        _ => {
            let mut spans = Vec::new();
            for (i, (key, what)) in
                [("enter", "open"), ("r", "rename"), ("d", "delete"), ("↑/↓", "choose"), ("esc", "close")]
                    .iter()
                    .enumerate()
            {
                spans.push(Span::styled(if i == 0 { " " } else { " · " }, s.muted));
                spans.push(Span::styled(*key, s.key));
                spans.push(Span::styled(format!(" {what}"), s.muted));
            }
            lines.push(Line::from(spans));
            let note = " opened, a session replaces the panes on screen (this one stays saved as it is)";
            lines.push(Line::from(Span::styled(note, s.muted)));
        }
    }
    frame.render_widget(Paragraph::new(lines), inner);
    if let Some((x, y)) = cursor
        && x < inner.width
        && y < inner.height
    {
        frame.set_cursor_position(Position { x: inner.x + x, y: inner.y + y });
    }
}

/// ` ● name  2026-01-01 12:00  3 panes 12 turns  “first question…”`, cut to `width` cells.
fn row(entry: &SessionEntry, current: bool, width: usize) -> String {
    let marker = if current { "●" } else { " " };
    let (p, t) = (if entry.panes == 1 { "" } else { "s" }, if entry.turns == 1 { "" } else { "s" });
    let counts = format!("{} pane{p} {} turn{t}", entry.panes, entry.turns);
    let first = entry.first.as_deref().map(|q| sanitize(q.lines().next().unwrap_or_default()).into_owned());
    let mut text = format!(
        " {marker} {:<NAME$} {:<WHEN$} {counts:<COUNTS$} {}",
        fit(entry.label(), NAME),
        when(entry.modified),
        first.map(|q| format!("“{q}”")).unwrap_or_default()
    );
    if text.chars().count() > width {
        text = fit(&text, width);
    }
    text
}

/// `text` in at most `width` characters, cut with `…`.
fn fit(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// `2026-01-01 12:00` (UTC) from Unix seconds.
fn when(unix_s: u64) -> String {
    let t = timestamp_name(unix_s);
    format!("{}-{}-{} {}:{}", &t[0..4], &t[4..6], &t[6..8], &t[9..11], &t[11..13])
}
