//! The overlays the app opens over its panes, held as a stack ([`Popups`]): the one on top takes
//! the keys and is drawn over those beneath, and closing it shows the one beneath again (the save
//! dialog opened from the profile picker goes back to the picker). Each overlay's state is a
//! variant of [`Overlay`]; its keys are a module here (help, profiles, pickers, settings_form,
//! sessions, search, row), each answering a key with the overlay to keep (`None` closes it), or,
//! where it can open another over itself or close those beneath, with [`Next`]; its drawing is in
//! `tui::views`.

mod help;
mod pickers;
mod profiles;
mod row;
mod search;
mod sessions;
mod settings_form;

use crossterm::event::KeyEvent;

use super::App;
use crate::tui::action::Effect;
use crate::tui::input::InputLine;
use crate::tui::settings::SettingsForm;
use crate::tui::transcript::SessionEntry;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    Help {
        scroll: usize,
    },
    Profiles {
        selected: usize,
    },
    SaveProfile {
        name: InputLine,
    },
    /// Picking a message of the focused pane to copy: `index` into `Pane::messages`; `code`: the
    /// code block of it that the code key copies next.
    Select {
        index: usize,
        code: usize,
    },
    /// Picking the message of the focused pane to branch from (`index` into `Pane::messages`):
    /// a new pane gets the conversation up to it.
    Branch {
        index: usize,
    },
    /// A pane's settings form.
    Settings(Box<SettingsForm>),
    /// The inspector drilled into one row (by request id); `opened`: the drill-down showed the
    /// inspector, and hides it again on the way back.
    Row {
        id: String,
        opened: bool,
    },
    /// The saved sessions.
    Sessions(Box<SessionList>),
    /// Finding `query` in the focused pane's conversation; the match shown is `back` matches up
    /// from the newest.
    Search {
        query: InputLine,
        back: usize,
    },
}

/// The session list: the sessions saved (newest first), the one picked, and what the keys do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionList {
    pub list: Vec<SessionEntry>,
    pub selected: usize,
    pub mode: SessionMode,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMode {
    /// Moving through the list.
    Browse,
    /// Typing the picked session's new name.
    Rename(InputLine),
    /// Asking before the picked session is deleted.
    Delete,
}

/// The overlays open, bottom first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Popups(Vec<Overlay>);

impl Popups {
    /// The overlay that takes the keys.
    pub fn top(&self) -> Option<&Overlay> {
        self.0.last()
    }

    pub fn top_mut(&mut self) -> Option<&mut Overlay> {
        self.0.last_mut()
    }

    /// Every overlay open, bottom first (drawn in this order).
    pub fn iter(&self) -> impl Iterator<Item = &Overlay> {
        self.0.iter()
    }

    pub fn is_open(&self) -> bool {
        !self.0.is_empty()
    }

    /// Open `overlay` over those open.
    pub fn open(&mut self, overlay: Overlay) {
        self.0.push(overlay);
    }

    pub fn close_all(&mut self) {
        self.0.clear();
    }
}

/// What follows a key in the overlay on top.
#[derive(Debug)]
pub enum Next {
    /// It stays open, as given.
    Keep(Overlay),
    /// It closes; the one beneath, if any, takes the keys again.
    Close,
    /// Every overlay closes (the dialog's work is done).
    CloseAll,
    /// It stays (the first), and another opens over it (the second).
    Over(Overlay, Overlay),
}

impl From<Option<Overlay>> for Next {
    fn from(kept: Option<Overlay>) -> Self {
        kept.map_or(Next::Close, Next::Keep)
    }
}

impl App {
    /// The overlay on top, if any.
    pub fn overlay(&self) -> Option<&Overlay> {
        self.popups.top()
    }

    /// A key for the overlay on top.
    pub(super) fn overlay_key(&mut self, key: KeyEvent, fx: &mut Vec<Effect>) {
        let Some(top) = self.popups.0.pop() else { return };
        let next = match top {
            Overlay::Help { scroll } => self.help_key(scroll, key).into(),
            Overlay::Profiles { selected } => self.profiles_key(selected, key, fx),
            Overlay::SaveProfile { name } => self.save_profile_key(name, key, fx),
            Overlay::Select { index, code } => self.select_key(index, code, key, fx).into(),
            Overlay::Branch { index } => self.branch_key(index, key, fx).into(),
            Overlay::Settings(form) => self.settings_key(form, key, fx).into(),
            Overlay::Sessions(open) => self.sessions_key(open, key, fx).into(),
            Overlay::Search { query, back } => self.search_key(query, back, key).into(),
            Overlay::Row { id, opened } => self.row_key(id, opened, key).into(),
        };
        match next {
            Next::Keep(overlay) => self.popups.open(overlay),
            Next::Close => {}
            Next::CloseAll => self.popups.close_all(),
            Next::Over(kept, over) => {
                self.popups.open(kept);
                self.popups.open(over);
            }
        }
    }
}
