//! The message pickers' keys (copy a message, branch a new pane at one): up/down (k/j) one
//! message, home/end (g/G) the first and last, pageup/pagedown five; enter (or the picker's
//! own key again) acts, esc or q close. In the copy picker c copies the message's code block (with
//! several, the next one each time). Drawn in the focused pane and the bottom bar
//! (`tui::views::pane`, `tui::views::bars`).

use crossterm::event::{KeyCode, KeyEvent};

use super::super::App;
use super::Overlay;
use crate::config::keymap::Command;
use crate::tui::action::Effect;
use crate::tui::markdown::code_blocks;

impl App {
    /// Open a message picker (`overlay` at an index) on the focused pane's newest message, or say
    /// there is nothing to `verb`.
    pub(in crate::tui::app) fn open_picker(&mut self, verb: &str, overlay: impl FnOnce(usize) -> Overlay) {
        let count = self.focused().messages().len();
        if count == 0 {
            self.notify(format!("nothing to {verb}: this pane has no message yet"), true);
        } else {
            // The bottom bar shows the picker's keys.
            self.notice = None;
            self.popups.open(overlay(count - 1));
        }
    }

    pub(super) fn select_key(
        &mut self,
        index: usize,
        code: usize,
        key: KeyEvent,
        fx: &mut Vec<Effect>,
    ) -> Option<Overlay> {
        let copy = self.keymap.keys_for(Command::Copy).iter().any(|c| c.matches(&key));
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => None,
            KeyCode::Enter | KeyCode::Char('y') => self.copy_message(index, fx),
            _ if copy => self.copy_message(index, fx),
            KeyCode::Char('c') => self.copy_code(index, code, fx),
            _ => {
                let to = self.pick_move(index, &key);
                Some(Overlay::Select { index: to, code: if to == index { code } else { 0 } })
            }
        }
    }

    /// Copy code block `code` of message `index` (the first again after the last); the picker
    /// stays open while the message has more than one, for the next.
    fn copy_code(&mut self, index: usize, code: usize, fx: &mut Vec<Effect>) -> Option<Overlay> {
        let blocks = self.focused().message_text(index).map(code_blocks).unwrap_or_default();
        if blocks.is_empty() {
            self.notify(format!("message {} has no code block: enter copies it whole", index + 1), true);
            return Some(Overlay::Select { index, code });
        }
        let at = code % blocks.len();
        fx.push(Effect::Copy { text: blocks[at].clone() });
        (blocks.len() > 1).then_some(Overlay::Select { index, code: at + 1 })
    }

    pub(super) fn branch_key(&mut self, index: usize, key: KeyEvent, fx: &mut Vec<Effect>) -> Option<Overlay> {
        let again = self.keymap.keys_for(Command::Branch).iter().any(|c| c.matches(&key));
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => None,
            KeyCode::Enter | KeyCode::Char('b') => self.branch(index, fx),
            _ if again => self.branch(index, fx),
            _ => Some(Overlay::Branch { index: self.pick_move(index, &key) }),
        }
    }

    /// A message picker's move: up/down (k/j) one message, home/end (g/G) the first and last,
    /// pageup/pagedown five; other keys stay.
    fn pick_move(&self, index: usize, key: &KeyEvent) -> usize {
        let last = self.focused().messages().len().saturating_sub(1);
        let index = match key.code {
            KeyCode::Up | KeyCode::Char('k') => index.saturating_sub(1),
            KeyCode::Down | KeyCode::Char('j') => index + 1,
            KeyCode::Home | KeyCode::Char('g') => 0,
            KeyCode::End | KeyCode::Char('G') => last,
            KeyCode::PageUp => index.saturating_sub(5),
            KeyCode::PageDown => index + 5,
            _ => index,
        };
        index.min(last)
    }
}
