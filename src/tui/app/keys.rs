//! From a key press (or a mouse event) to an action. Overlays take every key; otherwise a
//! binding from the keymap wins, and whatever is left is typing for the focused pane's input.
//! A left click focuses the pane under the pointer, the wheel scrolls it (the sideways wheel
//! scrolls its code blocks); the pane is found in the same layout the views draw.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers, MouseButton, MouseEvent, MouseEventKind};
use ratatui::layout::Rect;

use super::App;
use crate::config::keymap::Command;
use crate::tui::action::Action;

pub fn resolve(app: &App, key: KeyEvent) -> Action {
    if app.popups.is_open() {
        return Action::Key(key);
    }
    // `?` opens help only when nothing is being typed, so a question mark can still be typed.
    let plain = !key.modifiers.intersects(KeyModifiers::CONTROL | KeyModifiers::ALT);
    if key.code == KeyCode::Char('?') && plain && app.focused().input.text().is_empty() {
        return Action::Command(Command::Help);
    }
    match app.keymap.lookup(&key) {
        Some(command) => Action::Command(command),
        None => Action::Key(key),
    }
}

/// Lines one notch of the mouse wheel scrolls.
pub const WHEEL_LINES: isize = 3;
/// Cells one notch of the sideways wheel scrolls code blocks.
pub const WHEEL_CELLS: isize = 6;

/// A mouse event on a screen of `area` (the last frame drawn): a left click on a pane focuses
/// it, the wheel over a pane scrolls that pane. Anything else (the bars, the inspector, an empty
/// grid cell, any event while an overlay is open) does nothing.
pub fn mouse(app: &App, event: MouseEvent, area: Rect) -> Option<Action> {
    if app.popups.is_open() {
        return None;
    }
    // Motion and drags (reported too while the mouse is captured) skip the layout.
    let action = |pane| match event.kind {
        MouseEventKind::Down(MouseButton::Left) => Action::Command(Command::FocusPane(pane as u8)),
        MouseEventKind::ScrollUp => Action::Scroll { pane, lines: -WHEEL_LINES },
        MouseEventKind::ScrollLeft => Action::ScrollCode { pane, cells: -WHEEL_CELLS },
        MouseEventKind::ScrollRight => Action::ScrollCode { pane, cells: WHEEL_CELLS },
        _ => Action::Scroll { pane, lines: WHEEL_LINES },
    };
    match event.kind {
        MouseEventKind::Down(MouseButton::Left)
        | MouseEventKind::ScrollUp
        | MouseEventKind::ScrollDown
        | MouseEventKind::ScrollLeft
        | MouseEventKind::ScrollRight => app.screen(area).pane_at(event.column, event.row).map(action),
        _ => None,
    }
}
