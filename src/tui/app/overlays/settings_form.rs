//! A pane's settings form's keys: up/down (tab/shift+tab) move between fields, enter applies
//! the form to its pane, ctrl+g to every pane, ctrl+d puts the profile's values back in it, esc
//! closes it; other keys edit the field. A refused value keeps the form open, the field at fault
//! focused and the reason shown. Drawn by `tui::views::settings`.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::super::{App, EngineStatus};
use super::Overlay;
use crate::tui::action::Effect;
use crate::tui::settings::SettingsForm;

impl App {
    /// Keys in a pane's settings form: up/down (tab/shift+tab) move between fields, enter applies
    /// the form to its pane, ctrl+g to every pane, ctrl+d puts the profile's values back in it,
    /// esc closes it; other keys edit the field. A refused value keeps the form open, the field at
    /// fault focused and the reason shown.
    pub(super) fn settings_key(
        &mut self,
        mut form: Box<SettingsForm>,
        key: KeyEvent,
        fx: &mut Vec<Effect>,
    ) -> Option<Overlay> {
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        let index = self.panes.iter().position(|p| p.id == form.pane)?;
        match key.code {
            KeyCode::Esc => return None,
            KeyCode::Up | KeyCode::BackTab => form.move_by(-1),
            KeyCode::Down | KeyCode::Tab => form.move_by(1),
            KeyCode::Char('d') if ctrl => {
                let values = self.settings.pane_start(index + 1).unwrap_or_else(|| self.settings.chat());
                form.fill(&values);
            }
            KeyCode::Enter | KeyCode::Char('g') if key.code == KeyCode::Enter || ctrl => {
                let window = match &self.engine {
                    EngineStatus::Ready(summary) => Some(summary.max_context),
                    _ => None,
                };
                match form.parse(window) {
                    Ok(values) => {
                        let all = key.code != KeyCode::Enter;
                        let targets: Vec<usize> = if all { (0..self.panes.len()).collect() } else { vec![index] };
                        self.apply_settings(&targets, values, all, fx);
                        return None;
                    }
                    Err((field, why)) => {
                        form.field = field;
                        form.error = Some(why);
                    }
                }
            }
            _ => {
                form.inputs[form.field].handle_key(&key);
                form.error = None;
            }
        }
        Some(Overlay::Settings(form))
    }
}
