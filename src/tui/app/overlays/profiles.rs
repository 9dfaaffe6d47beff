//! The profile picker's and the save-profile dialog's keys. The picker: up/down move, enter
//! loads the profile picked, ctrl+s opens the save dialog over it, esc or q close it. The
//! dialog: the keys edit the name, enter saves the current settings under it (and closes both),
//! esc goes back to what was beneath. Drawn by `tui::views::picker`.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::super::App;
use super::{Next, Overlay};
use crate::config::profile::{PaneProfile, check_profile_name, is_built_in};
use crate::tui::action::Effect;
use crate::tui::input::InputLine;

impl App {
    /// The save dialog, offering the profile in use's name unless it is a built-in one.
    fn save_dialog(&self) -> Overlay {
        Overlay::SaveProfile { name: InputLine::new(suggested_profile_name(&self.settings.profile)) }
    }

    pub(in crate::tui::app) fn open_save_profile(&mut self) {
        let dialog = self.save_dialog();
        self.popups.open(dialog);
    }

    pub(super) fn profiles_key(&mut self, selected: usize, key: KeyEvent, fx: &mut Vec<Effect>) -> Next {
        let kept: Option<Overlay> = {
            let count = self.profiles.len();
            match key.code {
                KeyCode::Up => Some(Overlay::Profiles { selected: selected.saturating_sub(1) }),
                KeyCode::Down => Some(Overlay::Profiles { selected: (selected + 1).min(count.saturating_sub(1)) }),
                KeyCode::Enter => {
                    if let Some(entry) = self.profiles.get(selected) {
                        let spec =
                            entry.path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| entry.name.clone());
                        fx.push(Effect::LoadProfile { spec });
                    }
                    None
                }
                // The dialog opens over the picker, which esc in it goes back to.
                KeyCode::Char('s') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                    return Next::Over(Overlay::Profiles { selected }, self.save_dialog());
                }
                KeyCode::Esc | KeyCode::Char('q') => None,
                _ => Some(Overlay::Profiles { selected }),
            }
        };
        kept.into()
    }

    pub(super) fn save_profile_key(&mut self, mut name: InputLine, key: KeyEvent, fx: &mut Vec<Effect>) -> Next {
        let kept: Option<Overlay> = match key.code {
            KeyCode::Esc => None,
            KeyCode::Enter => match check_profile_name(name.text()).and_then(|()| not_built_in(name.text())) {
                Ok(()) => {
                    // The panes open now, which may differ from the profile's count.
                    let mut profile = self.settings.to_profile();
                    profile.panes = Some(self.panes.len());
                    // Panes' own settings as they are now, by their place on screen.
                    profile.pane = self
                        .panes
                        .iter()
                        .enumerate()
                        .filter_map(|(i, p)| {
                            Some(((i + 1).to_string(), PaneProfile::from_settings(p.settings.as_ref()?)))
                        })
                        .collect();
                    fx.push(Effect::SaveProfile { name: name.text().to_owned(), profile: Box::new(profile) });
                    // Saved: the picker it may have been opened from closes too.
                    return Next::CloseAll;
                }
                Err(e) => {
                    self.notify(format!("{e:#}"), true);
                    Some(Overlay::SaveProfile { name })
                }
            },
            // Every character is typed: one a name cannot have is flagged by the prompt and
            // refused on enter, never dropped silently (which saved `my test!` as `mytest`).
            _ => {
                name.handle_key(&key);
                Some(Overlay::SaveProfile { name })
            }
        };
        kept.into()
    }
}

/// The name ctrl+s offers: the profile in use, unless it is a built-in one, which a user profile
/// of the same name would replace (issue 58: Enter on the offered name did so without a word).
fn suggested_profile_name(current: &str) -> &str {
    if is_built_in(current) { "" } else { current }
}

/// A built-in profile's name is not taken by a saved one.
fn not_built_in(name: &str) -> anyhow::Result<()> {
    if is_built_in(name) {
        anyhow::bail!(
            "\"{name}\" is a built-in profile: a saved profile of that name would replace it; choose another name"
        );
    }
    Ok(())
}
