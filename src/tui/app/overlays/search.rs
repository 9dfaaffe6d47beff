//! The search bar's keys: typing edits the query (the newest match shown), enter/up (or the
//! search key again) the next older match, down the newer; esc closes it, the view staying on
//! the match it showed. Drawn in the focused pane and the bottom bar.

use crossterm::event::{KeyCode, KeyEvent};

use super::super::App;
use super::Overlay;
use crate::config::keymap::Command;
use crate::tui::input::InputLine;

impl App {
    pub(super) fn search_key(&mut self, mut query: InputLine, back: usize, key: KeyEvent) -> Option<Overlay> {
        let pane = self.focused();
        let hits = pane.search_hits.get();
        let again = self.keymap.keys_for(Command::Search).iter().any(|c| c.matches(&key));
        let back = match key.code {
            // Closed, the view stays on the match it showed (scrolled up, it holds
            // still; the bottom follows new text again).
            KeyCode::Esc => {
                let (top, max) = (pane.shown_top.get(), pane.max_scroll.get());
                if hits > 0 {
                    self.focused_mut().scroll_top = (top < max).then_some(top);
                }
                return None;
            }
            _ if again => (back + 1) % hits.max(1),
            KeyCode::Enter | KeyCode::Up => (back + 1) % hits.max(1),
            KeyCode::Down => (back + hits.max(1) - 1) % hits.max(1),
            _ => {
                let before = query.text().to_owned();
                query.handle_key(&key);
                if query.text() == before { back } else { 0 }
            }
        };
        Some(Overlay::Search { query, back })
    }
}
