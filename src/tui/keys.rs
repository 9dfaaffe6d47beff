//! From a key press to an action. Overlays take every key; otherwise a binding from the keymap
//! wins, and whatever is left is typing for the focused pane's input.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::action::Action;
use super::app::App;
use crate::config::keymap::Command;

pub fn resolve(app: &App, key: KeyEvent) -> Action {
    if app.overlay.is_some() {
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
