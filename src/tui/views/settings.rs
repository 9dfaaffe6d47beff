//! A pane's settings form: one row per value its requests carry (the field being edited marked
//! and highlighted, its range beside it; a blank generation mode names the engine's), what the
//! two modes do, why the last apply was refused, and the form's keys.

use ratatui::Frame;
use ratatui::layout::{Position, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::popup;
use crate::config::keymap::Command;
use crate::tui::app::{App, EngineStatus};
use crate::tui::input::InputLine;
use crate::tui::settings::{FIELDS, MAX_TOKENS, MODE, SYSTEM, SettingsForm, most_tokens};
use crate::tui::wrap::Wrapper;

/// Columns: a marker, the label, the value (numbers), the range.
const LABEL: usize = 18;
const NUMBER: usize = 12;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, form: &SettingsForm) {
    let s = &app.styles;
    let Some(index) = app.panes.iter().position(|p| p.id == form.pane) else { return };
    let whose = if app.panes[index].settings.is_some() { "its own" } else { "the profile's" };
    let title = Line::from(vec![
        Span::styled(format!(" settings · pane {} ", index + 1), s.title),
        Span::styled(format!("· {whose} "), s.muted),
    ]);
    let height = FIELDS.len() as u16 + 9;
    let inner = popup::open(frame, area, 88, height, title, s.popup, s.border(true));
    let width = inner.width as usize;
    let window = match &app.engine {
        EngineStatus::Ready(summary) => most_tokens(summary.max_context),
        _ => None,
    };
    // The mode a blank field means: the engine's (or the server's), once it is known.
    let (engine_mode, whose) = match &app.engine {
        EngineStatus::Ready(summary) if summary.weights == "server" => (Some(summary.mode.clone()), "the server's"),
        EngineStatus::Ready(summary) => (Some(summary.mode.clone()), "the engine's"),
        _ => (app.settings.mode.map(|m| m.name().to_owned()), "the engine's"),
    };
    let mut lines = Vec::new();
    let mut cursor = None;
    for (i, (_, label, range)) in FIELDS.iter().enumerate() {
        let focused = i == form.field;
        let marker = if focused { "›" } else { " " };
        let mut spans = vec![Span::styled(marker, s.key), Span::styled(format!("{label:<LABEL$} "), s.muted)];
        let lead = 1 + LABEL + 1;
        let value_width = if i == SYSTEM { width.saturating_sub(lead + 1) } else { NUMBER };
        let (text, at) = window_of(&form.inputs[i], value_width);
        let style = if focused { s.selection } else { s.popup };
        if i == SYSTEM && text.is_empty() && !focused {
            spans.push(Span::styled(format!("{:<value_width$}", "none"), s.muted));
        } else {
            spans.push(Span::styled(format!("{text:<value_width$}"), style));
        }
        let range = match (i, window) {
            (MAX_TOKENS, Some(most)) => format!("1 to {most}"),
            (MODE, _) => format!("mtp or ar; blank = {whose} ({})", engine_mode.as_deref().unwrap_or("auto")),
            _ => (*range).to_owned(),
        };
        if !range.is_empty() {
            spans.push(Span::styled(format!("  {range}"), s.muted));
        }
        if focused {
            cursor = Some(((lead + at) as u16, i as u16));
        }
        lines.push(Line::from(spans));
    }
    lines.push(Line::default());
    let mut w = Wrapper::new(width, vec![Span::raw(" ")], vec![Span::raw(" ")]);
    w.push("generation mode", s.popup);
    if engine_mode.as_deref() == Some("ar") {
        let profiles = app.keymap.describe_keys(Command::Profiles);
        w.push(
            &format!(
                ": {} decodes ar (no MTP head in use), so every pane does too, whatever it asks; a profile's \
                 `mode` ({profiles}) restarts the engine",
                whose.trim_end_matches("'s")
            ),
            s.muted,
        );
    } else {
        w.push(
            ": mtp drafts a token with the MTP head and verifies it, ar decodes one token a step; greedy answers \
             are the same either way, only the speed differs",
            s.muted,
        );
    }
    lines.extend(w.finish());
    lines.push(Line::default());
    if let Some(error) = &form.error {
        let mut w = Wrapper::new(width, vec![Span::raw(" ")], vec![Span::raw("   ")]);
        w.push(&format!("✖ {error}"), s.error);
        lines.extend(w.finish());
    }
    let mut w = Wrapper::new(width, vec![Span::raw(" ")], vec![Span::raw(" ")]);
    for (i, (key, what)) in [
        ("enter", "this pane"),
        ("ctrl+g", "every pane"),
        ("ctrl+d", "the profile's values"),
        ("↑/↓", "field"),
        ("esc", "cancel"),
    ]
    .iter()
    .enumerate()
    {
        if i > 0 {
            w.push(" · ", s.muted);
        }
        w.push(key, s.key);
        w.push(&format!(" {what}"), s.muted);
    }
    lines.extend(w.finish());
    frame.render_widget(Paragraph::new(lines), inner);
    if let Some((x, y)) = cursor
        && x < inner.width
        && y < inner.height
    {
        frame.set_cursor_position(Position { x: inner.x + x, y: inner.y + y });
    }
}

/// The part of `input` that fits `width` cells with its cursor in view (newlines shown as ⏎),
/// and the cursor's column in it.
fn window_of(input: &InputLine, width: usize) -> (String, usize) {
    let shown: Vec<char> = input
        .text()
        .chars()
        .map(|c| match c {
            '\n' => '⏎',
            c if c.is_control() => '\u{fffd}',
            c => c,
        })
        .collect();
    let cursor = input.text()[..input.cursor()].chars().count();
    let start = (cursor + 1).saturating_sub(width.max(1));
    (shown.iter().skip(start).take(width).collect(), cursor - start)
}
