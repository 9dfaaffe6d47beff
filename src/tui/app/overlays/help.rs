//! The help overlay's keys: up/down (k/j) a line, pageup/pagedown (space) ten; any other key
//! closes it. Drawn by `tui::views::help`.

use crossterm::event::{KeyCode, KeyEvent};

use super::super::App;
use super::Overlay;

impl App {
    pub(super) fn help_key(&mut self, scroll: usize, key: KeyEvent) -> Option<Overlay> {
        match key.code {
            KeyCode::Up | KeyCode::Char('k') => Some(Overlay::Help { scroll: scroll.saturating_sub(1) }),
            KeyCode::Down | KeyCode::Char('j') => Some(Overlay::Help { scroll: scroll + 1 }),
            KeyCode::PageUp => Some(Overlay::Help { scroll: scroll.saturating_sub(10) }),
            KeyCode::PageDown | KeyCode::Char(' ') => Some(Overlay::Help { scroll: scroll + 10 }),
            _ => None,
        }
    }
}
