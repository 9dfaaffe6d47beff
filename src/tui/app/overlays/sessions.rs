//! The session list's keys. Browsing: up/down (k/j), home/end (g/G) move; enter opens the
//! session picked, r renames it, d (or delete) asks before deleting it; esc, q or the key again
//! close the list. Renaming: the keys edit the name, enter gives it, esc goes back. Asked to
//! delete: y deletes, any other key keeps it. Drawn by `tui::views::sessions`.

use crossterm::event::{KeyCode, KeyEvent};

use super::super::App;
use super::{Overlay, SessionList, SessionMode};
use crate::config::keymap::Command;
use crate::tui::action::Effect;
use crate::tui::input::InputLine;
use crate::tui::transcript::{SessionEntry, check_session_title};

impl App {
    /// The saved sessions arrived: open the list on the session in use (else the newest), or
    /// refresh the list already open, keeping the place.
    pub(in crate::tui::app) fn show_sessions(&mut self, list: Vec<SessionEntry>) {
        if list.is_empty() {
            self.popups.close_all();
            return self.notify("no saved session yet: a session is saved once a pane has a message".into(), true);
        }
        let selected = match self.popups.top() {
            Some(Overlay::Sessions(open)) => open.selected.min(list.len() - 1),
            _ => list.iter().position(|e| e.name == self.session).unwrap_or(0),
        };
        // The bottom bar is free for what the list's keys report.
        let open = Overlay::Sessions(Box::new(SessionList { list, selected, mode: SessionMode::Browse }));
        match self.popups.top_mut() {
            Some(top @ Overlay::Sessions(_)) => *top = open,
            _ => {
                self.notice = None;
                self.popups.open(open);
            }
        }
    }

    /// Keys in the session list. Browsing: up/down (k/j), home/end (g/G) move; enter opens the
    /// session picked, r renames it, d (or delete) asks before deleting it; esc, q or the key
    /// again close the list. Renaming: the keys edit the name, enter gives it, esc goes back.
    /// Asked to delete: y deletes, any other key keeps it.
    pub(super) fn sessions_key(
        &mut self,
        mut open: Box<SessionList>,
        key: KeyEvent,
        fx: &mut Vec<Effect>,
    ) -> Option<Overlay> {
        let last = open.list.len().saturating_sub(1);
        let picked = open.list.get(open.selected).cloned()?;
        match std::mem::replace(&mut open.mode, SessionMode::Browse) {
            SessionMode::Rename(mut name) => match key.code {
                KeyCode::Esc => {}
                KeyCode::Enter => match check_session_title(name.text()) {
                    Ok(()) => {
                        let title = Some(name.text().trim().to_owned()).filter(|t| !t.is_empty());
                        fx.push(Effect::TitleSession { name: picked.name, title });
                    }
                    Err(e) => {
                        self.notify(format!("{e:#}"), true);
                        open.mode = SessionMode::Rename(name);
                    }
                },
                _ => {
                    name.handle_key(&key);
                    open.mode = SessionMode::Rename(name);
                }
            },
            SessionMode::Delete => {
                if key.code == KeyCode::Char('y') {
                    fx.push(Effect::DeleteSession { name: picked.name });
                }
            }
            SessionMode::Browse => {
                let again = self.keymap.keys_for(Command::Sessions).iter().any(|c| c.matches(&key));
                match key.code {
                    KeyCode::Esc | KeyCode::Char('q') => return None,
                    _ if again => return None,
                    KeyCode::Up | KeyCode::Char('k') => open.selected = open.selected.saturating_sub(1),
                    KeyCode::Down | KeyCode::Char('j') => open.selected = (open.selected + 1).min(last),
                    KeyCode::Home | KeyCode::Char('g') => open.selected = 0,
                    KeyCode::End | KeyCode::Char('G') => open.selected = last,
                    // Its title to edit; an untitled session's box starts empty (its folder name
                    // is not a name to type after).
                    KeyCode::Char('r') => {
                        open.mode = SessionMode::Rename(InputLine::new(picked.title.as_deref().unwrap_or_default()))
                    }
                    KeyCode::Char('d') | KeyCode::Delete if picked.name == self.session => {
                        self.notify("that is the session in use: open another one to delete this one".into(), true);
                    }
                    KeyCode::Char('d') | KeyCode::Delete => open.mode = SessionMode::Delete,
                    KeyCode::Enter if picked.name == self.session => {
                        self.notify(format!("session {} is the one open", picked.label()), false);
                        return None;
                    }
                    KeyCode::Enter if self.busy_panes() > 0 => {
                        let keys = self.keymap.describe_keys(Command::CancelAll);
                        self.notify(
                            format!(
                                "panes are answering: wait for them (or cancel them: {keys}) to open another session"
                            ),
                            true,
                        );
                    }
                    KeyCode::Enter => {
                        fx.push(Effect::OpenSession { name: picked.name });
                        return None;
                    }
                    _ => {}
                }
            }
        }
        Some(Overlay::Sessions(open))
    }
}
