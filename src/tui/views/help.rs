//! The help overlay: every command with the keys the active keymap gives it, then the fixed
//! editing keys of the input box, the mouse, and the keys inside the lists and forms.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::popup;
use crate::config::keymap::Command;
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

/// Keys inside the lists and forms (fixed, as `App::overlay_key` has them; a command's own key,
/// which also works in some, is added from the keymap): each group under its heading.
fn inside(app: &App) -> Vec<(&'static str, Vec<(String, String)>)> {
    // Fixed keys, then the command's keys where it has any.
    let and = |fixed: &str, command: Command| {
        let keys = app.keymap.keys_for(command);
        if keys.is_empty() { fixed.to_owned() } else { format!("{fixed} / {}", app.keymap.describe_keys(command)) }
    };
    let pairs = |rows: &[(&str, &str)]| -> Vec<(String, String)> {
        rows.iter().map(|(k, w)| ((*k).to_owned(), (*w).to_owned())).collect()
    };
    let mut picker = pairs(&[
        ("up / down / k / j", "one message up / down"),
        ("home / end / g / G", "the first / last message"),
        ("pageup / pagedown", "five messages up / down"),
    ]);
    picker.push((and("enter / y", Command::Copy), "copy the message picked (select)".into()));
    picker.push((and("enter / b", Command::Branch), "branch at the message picked (branch)".into()));
    picker.push(("esc / q".into(), "back".into()));
    let mut row =
        pairs(&[("up / down / k / j", "the row above / below"), ("home / end / g / G", "the first / last row")]);
    row.push((and("esc / q", Command::InspectRow), "back".into()));
    let mut sessions = pairs(&[
        ("up / down / k / j", "choose a session"),
        ("home / end / g / G", "the first / last session"),
        ("enter", "open the session picked in place of this one"),
        ("r", "rename the session picked (enter gives the name, esc keeps the old one)"),
        ("d / delete", "delete the session picked: it asks first, y deletes, any other key keeps it"),
    ]);
    sessions.push((and("esc / q", Command::Sessions), "close the list".into()));
    let settings = pairs(&[
        ("up / down / tab / shift+tab", "move between the fields"),
        ("enter", "apply the form to this pane"),
        ("ctrl+g", "apply the form to every pane"),
        ("ctrl+d", "put the profile's values back in the form"),
        ("esc", "close the form, changing nothing"),
    ]);
    let profiles = pairs(&[
        ("up / down", "choose a profile"),
        ("enter", "load the profile picked"),
        ("ctrl+s", "save the current settings as a profile"),
        ("esc / q", "close the picker"),
    ]);
    let search = vec![
        (and("enter / up", Command::Search), "the match above (wrapping)".to_owned()),
        ("down".into(), "the match below (wrapping)".into()),
        ("esc".into(), "close the search; the view stays where the match was".into()),
    ];
    let help = pairs(&[
        ("up / down / k / j", "scroll this help by a line"),
        ("pageup / pagedown / space", "scroll it by ten lines; any other key closes it"),
    ]);
    vec![
        ("picking a message (select, branch)", picker),
        ("a row drilled into (inspect_row)", row),
        ("the session list (sessions)", sessions),
        ("the settings form (settings)", settings),
        ("the profile picker (profiles)", profiles),
        ("searching (search)", search),
        ("this help", help),
    ]
}

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
    let inside = inside(app);
    let widest = bound
        .iter()
        .chain(&editing)
        .chain(&mouse)
        .chain(inside.iter().flat_map(|(_, keys)| keys))
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
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
    lines.push(Line::from(Span::styled(" inside lists and forms", s.title)));
    for (heading, keys) in &inside {
        lines.push(Line::from(Span::styled(format!(" {heading}"), s.muted)));
        rows(keys, &mut lines);
    }
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
