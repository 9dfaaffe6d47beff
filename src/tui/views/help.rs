//! The help overlay: every command with the keys the active keymap gives it, then the fixed
//! editing keys of the input box and the mouse.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::popup;
use crate::tui::app::App;
use crate::tui::wrap::Wrapper;

/// Keys of the input box (not rebindable: they are what every line editor does).
const EDITING: &[(&str, &str)] = &[
    ("left / right / home / end", "move in the input"),
    ("backspace / delete", "delete a character"),
    ("ctrl+a / ctrl+e", "start / end of the input"),
    ("ctrl+w / ctrl+u / ctrl+k", "delete a word / to the start / to the end"),
    ("?", "help, when the input is empty"),
];

/// The mouse (not rebindable either).
const MOUSE: &[(&str, &str)] = &[
    ("click", "focus the pane clicked"),
    ("wheel", "scroll the pane under the pointer (shift+drag selects text in most terminals)"),
    ("sideways wheel", "scroll code blocks sideways in the pane under the pointer"),
];

pub fn draw(frame: &mut Frame, area: Rect, app: &App, scroll: usize) {
    let s = &app.styles;
    let title = Line::from(vec![
        Span::styled(" keys ", s.title),
        Span::styled(format!("profile {} ", app.settings.profile), s.muted),
    ]);
    let inner = popup::open(frame, area, 96, 44, title, s.popup, s.border(true));
    let bound: Vec<(String, String)> = app
        .keymap
        .entries()
        .iter()
        .map(|(command, _)| (app.keymap.describe_keys(*command), command.describe()))
        .collect();
    let editing: Vec<(String, String)> = EDITING.iter().map(|(k, w)| ((*k).to_owned(), (*w).to_owned())).collect();
    let mouse: Vec<(String, String)> = MOUSE.iter().map(|(k, w)| ((*k).to_owned(), (*w).to_owned())).collect();
    let widest = bound.iter().chain(&editing).chain(&mouse).map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let width = inner.width as usize;
    let key_width = widest.min(width / 2);
    // Descriptions wrap under themselves, so a narrow terminal still shows all of each.
    let rows = |entries: &[(String, String)], lines: &mut Vec<Line<'static>>| {
        for (keys, what) in entries {
            let first = vec![Span::styled(format!(" {keys:<key_width$}  "), s.key)];
            let mut w = Wrapper::new(width, first, vec![Span::raw(" ".repeat(key_width + 3))]);
            w.push(what, s.popup);
            lines.extend(w.finish());
        }
    };
    let mut lines = Vec::new();
    rows(&bound, &mut lines);
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(" editing the input", s.title)));
    rows(&editing, &mut lines);
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(" the mouse", s.title)));
    rows(&mouse, &mut lines);
    lines.push(Line::default());
    let mut w = Wrapper::new(width, vec![Span::raw(" ")], vec![Span::raw(" ")]);
    w.push(
        "keys are set in a profile's [keys] table (docs/configuration.md) · up/down scroll · any other key closes",
        s.muted,
    );
    lines.extend(w.finish());
    let height = inner.height as usize;
    let scroll = scroll.min(lines.len().saturating_sub(height));
    let visible: Vec<Line> = lines.into_iter().skip(scroll).take(height).collect();
    frame.render_widget(Paragraph::new(visible), inner);
}
