//! The app's state and `update`, the one function that changes it. No terminal, no engine, no
//! files here: `update` takes an action and returns effects for the event loop to perform, so
//! key sequences and engine events can be tested as plain function calls.

use std::collections::VecDeque;
use std::time::Instant;

use crossterm::event::{KeyEvent, MouseEvent};
use ratatui::layout::Rect;

mod context_window;
pub mod keys;
mod overlays;

pub use overlays::{Overlay, Popups, SessionList, SessionMode};

use super::action::{Action, Effect, EngineSummary, OpenedSession, ProfileSwitch};
use super::input::InputLine;
use super::layout::{Screen, neighbour, screen};
use super::pane::{InFlight, Pane, Turn};
use super::settings::{SettingsForm, summary};
use super::style::Styles;
use super::transcript::{Record, RestoredPane};
use crate::config::keymap::{Command, Keymap};
use crate::config::profile::{ChatSettings, MAX_PANES, ProfileEntry, Settings};
use crate::config::theme::Theme;
use crate::engine::api::RowEvent;
use crate::engine::api::{FinishReason, Prompt, Request, RequestResult};
use crate::engine::api::{RowState, RowTelemetry, Telemetry};

/// Render ticks per second (the event loop's tick is 1000 / TICKS_PER_S ms).
pub const TICKS_PER_S: u64 = 30;
/// How long a notice stays in the status bar.
const NOTICE_TICKS: u64 = 5 * TICKS_PER_S;
/// How long a first ctrl+c (with something on screen to lose) waits for the second.
const QUIT_ARM_TICKS: u64 = 2 * TICKS_PER_S;
/// A conversation past this share of the context window (percent) is warned about.
pub const CONTEXT_WARN_PERCENT: usize = 80;
/// Cells one press of code_left / code_right scrolls code blocks sideways.
const CODE_STEP: isize = 8;
/// Memory samples kept for the inspector's sparkline.
pub const MEMORY_HISTORY: usize = 240;

/// Which inspector panels are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InspectorPanel {
    All,
    Rows,
    Cohort,
    Memory,
    Queue,
}

impl InspectorPanel {
    fn next(self) -> InspectorPanel {
        match self {
            InspectorPanel::All => InspectorPanel::Rows,
            InspectorPanel::Rows => InspectorPanel::Cohort,
            InspectorPanel::Cohort => InspectorPanel::Memory,
            InspectorPanel::Memory => InspectorPanel::Queue,
            InspectorPanel::Queue => InspectorPanel::All,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum EngineStatus {
    Loading { model: String, since_tick: u64 },
    Ready(Box<EngineSummary>),
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub text: String,
    pub error: bool,
    pub until_tick: u64,
}

pub struct App {
    pub settings: Settings,
    pub theme: Theme,
    pub styles: Styles,
    pub keymap: Keymap,
    pub session: String,
    /// The name the session was given in the app (None: its folder's name).
    pub session_title: Option<String>,
    pub panes: Vec<Pane>,
    pub focus: usize,
    pub zoomed: bool,
    /// None = inspector hidden.
    pub inspector: Option<InspectorPanel>,
    /// The overlays open, the top one taking the keys.
    pub popups: Popups,
    pub engine: EngineStatus,
    pub telemetry: Telemetry,
    /// MLX active memory over time, oldest first.
    pub memory_history: VecDeque<u64>,
    /// The row the inspector is drilled into, as last seen (it stays on screen after the row
    /// has left the lane).
    pub row_seen: Option<RowTelemetry>,
    pub profiles: Vec<ProfileEntry>,
    pub notice: Option<Notice>,
    /// Why transcripts are not being saved, while they are not (shown until they are again).
    pub transcript_error: Option<String>,
    quit_armed_at: Option<u64>,
    pub should_quit: bool,
    pub tick: u64,
    /// Bumped when the theme changes, so cached answer lines are rendered again.
    pub style_epoch: u64,
    next_pane_id: u32,
    next_request: u64,
}

impl App {
    pub fn new(settings: Settings, theme: Theme, keymap: Keymap, session: &str) -> App {
        let panes = (1..=settings.panes as u32)
            .map(|id| Pane { settings: settings.pane_start(id as usize), ..Pane::new(id) })
            .collect();
        let model = settings.model.clone().unwrap_or_default();
        App {
            styles: Styles::new(&theme),
            next_pane_id: settings.panes as u32 + 1,
            settings,
            theme,
            keymap,
            session: session.to_owned(),
            session_title: None,
            panes,
            focus: 0,
            zoomed: false,
            inspector: None,
            popups: Popups::default(),
            engine: EngineStatus::Loading { model, since_tick: 0 },
            telemetry: Telemetry::default(),
            memory_history: VecDeque::new(),
            row_seen: None,
            profiles: Vec::new(),
            notice: None,
            transcript_error: None,
            quit_armed_at: None,
            should_quit: false,
            tick: 0,
            style_epoch: 0,
            next_request: 0,
        }
    }

    /// Put back the panes of a resumed session (ids kept, so transcripts keep appending to the
    /// same files); add empty panes up to the profile's count.
    pub fn restore(&mut self, restored: Vec<RestoredPane>) {
        if restored.is_empty() {
            return;
        }
        self.panes = restored
            .into_iter()
            .take(MAX_PANES)
            .map(|r| {
                let mut pane = Pane::new(r.id);
                // Recorded settings, else the profile's for the pane's number (not its place: a
                // session with panes 1 and 3 gives pane 3 the profile's `[pane.3]`).
                pane.settings = r.settings.unwrap_or_else(|| self.settings.pane_start(r.id as usize));
                pane.state = match r.turns.last() {
                    Some(t) if t.interrupted => RowState::Cancelled,
                    Some(t) => finish_state(t.finish.unwrap_or(FinishReason::Stop)),
                    None => RowState::Idle,
                };
                pane.turns = r.turns;
                pane
            })
            .collect();
        self.next_pane_id = self.panes.iter().map(|p| p.id).max().unwrap_or(0) + 1;
        // New turns continue the session's numbering: a resumed session never reuses an id.
        let used =
            self.panes.iter().flat_map(|p| &p.turns).filter_map(|t| t.request_id.rsplit('-').next()?.parse().ok());
        self.next_request = self.next_request.max(used.max().unwrap_or(0));
        while self.panes.len() < self.settings.panes.min(MAX_PANES) {
            self.add_pane();
        }
        self.focus = 0;
    }

    /// Where the bars, the panes and the inspector go on a screen of `area` (what the views
    /// draw and what a mouse click is matched against).
    pub fn screen(&self, area: Rect) -> Screen {
        screen(area, self.panes.len(), self.focus, self.zoomed, self.inspector.is_some())
    }

    pub fn focused(&self) -> &Pane {
        &self.panes[self.focus]
    }

    fn focused_mut(&mut self) -> &mut Pane {
        &mut self.panes[self.focus]
    }

    /// What pane `index`'s requests carry: its own settings, else the profile's.
    pub fn chat_settings(&self, index: usize) -> ChatSettings {
        self.panes[index].settings.clone().unwrap_or_else(|| self.settings.chat())
    }

    pub fn busy_panes(&self) -> usize {
        self.panes.iter().filter(|p| p.is_busy()).count()
    }

    /// Map a key to an action and apply it (what the event loop does with a key press).
    pub fn handle_key(&mut self, key: KeyEvent) -> Vec<Effect> {
        let action = keys::resolve(self, key);
        self.update(action)
    }

    /// Map a mouse event on a screen of `area` to an action and apply it (what the event loop
    /// does with a click or a wheel notch).
    pub fn handle_mouse(&mut self, event: MouseEvent, area: Rect) -> Vec<Effect> {
        match keys::mouse(self, event, area) {
            Some(action) => self.update(action),
            None => Vec::new(),
        }
    }

    /// The one place state changes.
    pub fn update(&mut self, action: Action) -> Vec<Effect> {
        let mut fx = Vec::new();
        match action {
            Action::Command(c) => self.command(c, &mut fx),
            Action::Key(k) => self.key(k, &mut fx),
            Action::Scroll { pane, lines } => self.scroll(pane, lines),
            Action::ScrollCode { pane, cells } => self.scroll_code(pane, cells),
            Action::Paste(text) => self.paste(&text),
            Action::Resize => {}
            Action::Tick => self.on_tick(&mut fx),
            Action::Row { pane, event, at } => self.row_event(pane, event, at, &mut fx),
            Action::Telemetry(t) => self.on_telemetry(*t),
            Action::EngineReady(summary) => {
                // A warning still showing (a resumed session's profile that is gone) stays.
                if !self.notice.as_ref().is_some_and(|n| n.error) {
                    self.notify(format!("{} loaded in {:.1} s", summary.model, summary.load_s), false);
                }
                self.engine = EngineStatus::Ready(summary);
            }
            Action::EngineFailed(message) => {
                self.notify(format!("the model did not load: {message}"), true);
                self.engine = EngineStatus::Failed(message);
            }
            Action::ProfileLoaded(switch) => self.switch_profile(*switch, &mut fx),
            Action::ProfileSaved { name, path } => {
                self.notify(format!("profile {name} saved to {}", path.display()), false);
                self.settings.profile = name.clone();
                self.settings.origin = path.display().to_string();
                self.profiles.retain(|p| p.name != name);
                self.profiles.push(ProfileEntry { name, path: Some(path), description: None });
            }
            Action::Notice { text, error } => self.notify(text, error),
            Action::DraftCounted { pane, key, counted } => {
                if let Some(p) = self.panes.iter_mut().find(|p| p.id == pane) {
                    p.window.counted(key, counted);
                }
            }
            Action::Edited { pane, text } => match self.panes.iter_mut().find(|p| p.id == pane) {
                Some(p) => {
                    p.input.set(&text);
                    p.history_pos = None;
                }
                None => self.notify("the pane that was edited is gone: the text is lost".into(), true),
            },
            Action::Transcript(error) => self.transcript_error = error,
            Action::Sessions(list) => self.show_sessions(list),
            Action::SessionOpened(opened) => self.open_session(*opened, &mut fx),
            Action::SessionTitled { name, title } => {
                if name == self.session {
                    self.session_title = title.clone();
                }
                match title {
                    Some(title) => self.notify(format!("session {name} is called {title:?} now"), false),
                    None => self.notify(format!("session {name} goes by its own name again"), false),
                }
            }
        }
        fx
    }

    pub fn notify(&mut self, text: String, error: bool) {
        self.notice = Some(Notice { text, error, until_tick: self.tick + NOTICE_TICKS });
    }

    /// A notice that stays four times as long (one shown at start-up, while the model loads).
    pub fn notify_long(&mut self, text: String, error: bool) {
        self.notify(text, error);
        if let Some(n) = self.notice.as_mut() {
            n.until_tick = self.tick + 4 * NOTICE_TICKS;
        }
    }

    fn on_tick(&mut self, fx: &mut Vec<Effect>) {
        self.tick += 1;
        self.count_drafts(fx);
        if self.notice.as_ref().is_some_and(|n| self.tick >= n.until_tick) {
            self.notice = None;
        }
        if self.quit_armed_at.is_some_and(|t| self.tick > t + QUIT_ARM_TICKS) {
            self.quit_armed_at = None;
        }
    }

    fn command(&mut self, command: Command, fx: &mut Vec<Effect>) {
        let n = self.panes.len();
        match command {
            Command::Send => self.send_focused(fx),
            Command::SendAll => self.send_all(fx),
            Command::Newline => self.focused_mut().input.insert("\n"),
            Command::EditLast => self.edit_last(),
            Command::Regenerate => self.regenerate(fx),
            Command::Editor => {
                let pane = self.focused();
                fx.push(Effect::Edit { pane: pane.id, text: pane.input.text().to_owned() });
            }
            // In zoom, esc is "back": it leaves zoom and cancels nothing.
            Command::Cancel => {
                if self.zoomed {
                    self.zoomed = false;
                } else if self.focused().is_busy() {
                    self.cancel_focused(fx);
                } else if self.withdraw_offer() {
                } else if self.focused_mut().editing.take().is_some() {
                    let send = self.keymap.describe_keys(Command::Send);
                    self.notify(
                        format!("stopped editing: the text stays in the box ({send} sends it as a new message)"),
                        false,
                    );
                }
            }
            Command::CancelAll => self.cancel_all(fx),
            Command::Interrupt => self.interrupt(fx),
            Command::Quit => self.quit(fx),
            Command::FocusNext => self.focus = (self.focus + 1) % n,
            Command::FocusPrev => self.focus = (self.focus + n - 1) % n,
            Command::FocusLeft => self.move_focus(-1, 0),
            Command::FocusRight => self.move_focus(1, 0),
            Command::FocusUp => self.move_focus(0, -1),
            Command::FocusDown => self.move_focus(0, 1),
            Command::FocusPane(i) if (i as usize) < n => self.focus = i as usize,
            Command::FocusPane(_) => {}
            Command::Zoom => self.zoomed = !self.zoomed,
            Command::Inspector => {
                self.inspector = match self.inspector {
                    Some(_) => None,
                    None => Some(InspectorPanel::All),
                }
            }
            Command::InspectorPanel => {
                self.inspector = Some(self.inspector.map(InspectorPanel::next).unwrap_or(InspectorPanel::All))
            }
            Command::InspectRow => self.inspect_row(),
            Command::Help => self.popups.open(Overlay::Help { scroll: 0 }),
            Command::Copy => match self.focused().last_answer() {
                Some(text) => fx.push(Effect::Copy { text: text.to_owned() }),
                None => self.notify("nothing to copy: this pane has no answer yet".into(), true),
            },
            Command::Select => self.open_picker("copy", |index| Overlay::Select { index, code: 0 }),
            Command::Branch => self.open_picker("branch", |index| Overlay::Branch { index }),
            Command::Search => {
                if self.focused().turns.is_empty() {
                    self.notify("nothing to search: this pane has no conversation yet".into(), true);
                } else {
                    // The bottom bar holds the query.
                    self.notice = None;
                    self.popups.open(Overlay::Search { query: InputLine::default(), back: 0 });
                }
            }
            Command::Export => self.export(fx),
            Command::Settings => {
                let form = SettingsForm::new(self.focused().id, &self.chat_settings(self.focus));
                self.popups.open(Overlay::Settings(Box::new(form)));
            }
            Command::NewPane => {
                if n < MAX_PANES {
                    self.add_pane();
                    self.focus = self.panes.len() - 1;
                } else {
                    self.notify(format!("{MAX_PANES} panes at most (one cohort's rows)"), true);
                }
            }
            Command::ClosePane => self.close_focused(),
            Command::ClearPane => self.clear_focused(fx),
            // Scrolled up, the view holds still while text streams in below; back at the
            // bottom (or ctrl+end), it follows the newest text again.
            Command::ScrollUp => {
                let page = self.focused().page.get().max(1) as isize;
                self.scroll(self.focus, -page);
            }
            Command::ScrollDown => {
                let page = self.focused().page.get().max(1) as isize;
                self.scroll(self.focus, page);
            }
            Command::ScrollBottom => self.focused_mut().scroll_top = None,
            Command::CodeLeft => self.scroll_code(self.focus, -CODE_STEP),
            Command::CodeRight => self.scroll_code(self.focus, CODE_STEP),
            Command::HistoryPrev => self.recall(-1),
            Command::HistoryNext => self.recall(1),
            Command::Profiles => {
                let current = self.profiles.iter().position(|p| p.name == self.settings.profile).unwrap_or(0);
                self.popups.open(Overlay::Profiles { selected: current });
            }
            Command::SaveProfile => self.open_save_profile(),
            Command::Sessions => fx.push(Effect::ListSessions),
        }
    }

    /// A saved session read back: its panes replace the ones on screen (the session left behind
    /// is saved as it is), and transcripts go on in its files. Refused while a pane answers.
    fn open_session(&mut self, opened: OpenedSession, fx: &mut Vec<Effect>) {
        if self.busy_panes() > 0 {
            return self.notify("panes are answering: the session was not opened".into(), true);
        }
        let OpenedSession { name, title, panes } = opened;
        let turns: usize = panes.iter().map(|p| p.turns.len()).sum();
        let count = panes.len();
        self.session = name.clone();
        self.session_title = title;
        self.panes.clear();
        self.restore(panes);
        while self.panes.len() < self.settings.panes.clamp(1, MAX_PANES) {
            self.add_pane();
        }
        self.focus = 0;
        self.zoomed = false;
        self.popups.close_all();
        self.row_seen = None;
        fx.push(Effect::UseSession { name: name.clone() });
        let label = self.session_title.clone().unwrap_or(name);
        let (p, t) = (if count == 1 { "" } else { "s" }, if turns == 1 { "" } else { "s" });
        self.notify(
            format!(
                "session {label} opened: {count} pane{p}, {turns} turn{t} (profile {} stays)",
                self.settings.profile
            ),
            false,
        );
    }

    /// Scroll pane `index` by `lines` (up when negative). Scrolled up, the view holds still
    /// while text streams in below; back at the bottom, it follows the newest text again.
    fn scroll(&mut self, index: usize, lines: isize) {
        let Some(pane) = self.panes.get_mut(index) else { return };
        let max = pane.max_scroll.get();
        let step = lines.unsigned_abs();
        pane.scroll_top = if lines < 0 {
            let top = pane.scroll_top.unwrap_or(max).min(max);
            (max > 0).then(|| top.saturating_sub(step))
        } else {
            pane.scroll_top.map(|top| top + step).filter(|top| *top < max)
        };
    }

    /// Scroll pane `index`'s code blocks `cells` sideways (left when negative), as far as its
    /// widest code line needs.
    fn scroll_code(&mut self, index: usize, cells: isize) {
        let Some(pane) = self.panes.get_mut(index) else { return };
        let max = pane.max_code_scroll.get();
        pane.code_scroll = pane.code_scroll.min(max).saturating_add_signed(cells).min(max);
    }

    fn add_pane(&mut self) {
        let settings = self.settings.pane_start(self.panes.len() + 1);
        self.panes.push(Pane { settings, ..Pane::new(self.next_pane_id) });
        self.next_pane_id += 1;
    }

    fn move_focus(&mut self, dx: i32, dy: i32) {
        if let Some(to) = neighbour(self.focus, self.panes.len(), dx, dy) {
            self.focus = to;
        }
    }

    fn send_focused(&mut self, fx: &mut Vec<Effect>) {
        let pane = self.focused();
        if pane.input.is_blank() {
            return;
        }
        if pane.is_busy() {
            // Queued rather than refused: a refused message would stay in the box, where a later
            // send-all would pick it up. It goes when the answer ends; esc puts it back.
            let number = self.focus + 1;
            let cancel = self.keymap.describe_keys(Command::Cancel);
            let pane = self.focused_mut();
            let text = pane.input.take();
            pane.history_pos = None;
            pane.queued = Some(match pane.queued.take() {
                Some(earlier) => format!("{earlier}\n{text}"),
                None => text,
            });
            return self.notify(
                format!("pane {number} is answering: your message goes when the answer ends ({cancel} cancels and puts it back)"),
                false,
            );
        }
        if self.stop_for_window(self.focus, fx) {
            return;
        }
        let pane = self.focused_mut();
        let text = pane.input.take();
        let replaces = pane.editing.take();
        self.submit(self.focus, text, replaces, fx);
    }

    /// Every idle pane with input sends it; if only the focused pane has input, it goes to every
    /// idle pane (type once, compare eight answers).
    fn send_all(&mut self, fx: &mut Vec<Effect>) {
        let ready: Vec<usize> =
            (0..self.panes.len()).filter(|&i| !self.panes[i].is_busy() && !self.panes[i].input.is_blank()).collect();
        let broadcast = ready == [self.focus];
        let targets: Vec<usize> =
            if broadcast { (0..self.panes.len()).filter(|&i| !self.panes[i].is_busy()).collect() } else { ready };
        if targets.is_empty() {
            self.notify("nothing to send: type into a pane first".into(), true);
            return;
        }
        let shared = broadcast.then(|| self.focused_mut().input.take());
        for &i in &targets {
            let text = match &shared {
                Some(t) => {
                    self.panes[i].input.take();
                    t.clone()
                }
                None => self.panes[i].input.take(),
            };
            // An edit replaces its turn when the text sent is that pane's own.
            let own = shared.is_none() || i == self.focus;
            let replaces = self.panes[i].editing.take().filter(|_| own);
            self.submit(i, text, replaces, fx);
        }
        // Say exactly what happened: which panes got what, and which were left out.
        let list = |ids: &[usize]| ids.iter().map(|i| (i + 1).to_string()).collect::<Vec<_>>().join(", ");
        let what = if broadcast { "the focused input to" } else { "each its own input:" };
        let plural = if targets.len() == 1 { "" } else { "s" };
        let mut text = format!("sent {what} pane{plural} {}", list(&targets));
        let busy: Vec<usize> =
            (0..self.panes.len()).filter(|i| !targets.contains(i) && self.panes[*i].is_busy()).collect();
        if !busy.is_empty() {
            let verb = if busy.len() == 1 { "is" } else { "are" };
            let plural = if busy.len() == 1 { "" } else { "s" };
            text.push_str(&format!(" (pane{plural} {} {verb} busy)", list(&busy)));
        }
        self.notify(text, false);
    }

    /// Send `text` from pane `index` as its next turn, or in place of the turn of the request
    /// `replaces` (an edit, a regeneration): that turn and any after it leave the conversation.
    fn submit(&mut self, index: usize, text: String, replaces: Option<String>, fx: &mut Vec<Effect>) {
        self.next_request += 1;
        let chat = self.chat_settings(index);
        let base_seed = self.settings.seed;
        let pane = &mut self.panes[index];
        pane.editing = None;
        let replaces = replaces.filter(|old| match pane.turns.iter().position(|t| t.request_id == *old) {
            Some(at) => {
                pane.turns.truncate(at);
                true
            }
            None => false,
        });
        let id = format!("{}-p{}-{}", self.session, pane.id, self.next_request);
        // Each pane and turn gets its own seed, so re-running a session reproduces it; a turn
        // asked again mixes in the request's number, so a sampled answer can come out otherwise.
        let again = if replaces.is_some() { self.next_request.wrapping_mul(0x9E37_79B9_7F4A_7C15) } else { 0 };
        let seed = base_seed.wrapping_add(u64::from(pane.id) * 1_000_003 + pane.turns.len() as u64).wrapping_add(again);
        let request = Request {
            id: id.clone(),
            prompt: Prompt::Chat(pane.messages_with(chat.system.as_deref(), &text)),
            max_tokens: chat.max_tokens,
            sampler: chat.sampler,
            seed,
            stop: Vec::new(),
            ignore_eos: self.settings.ignore_eos,
            mode: chat.mode,
        };
        let system = chat.system.clone();
        pane.turns.push(Turn { request_id: id.clone(), user: text.clone(), system: system.clone(), ..Turn::default() });
        pane.in_flight = Some(InFlight {
            id: id.clone(),
            sent: Instant::now(),
            sent_tick: self.tick,
            first_token: None,
            last_token: None,
            tokens: 0,
            prefill: (0, 0),
            cancel_requested: false,
        });
        pane.state = RowState::Queued;
        pane.row = None;
        pane.scroll_top = None;
        pane.history_pos = None;
        fx.push(Effect::Record { pane: pane.id, record: Record::User { request: id, text, replaces, system } });
        fx.push(Effect::Submit { pane: pane.id, request });
    }

    fn cancel_focused(&mut self, fx: &mut Vec<Effect>) {
        let number = self.focus + 1;
        if let Some(request) = self.focused_mut().cancel() {
            fx.push(Effect::Cancel { request });
            self.notify(format!("cancelling pane {number}; the other panes continue"), false);
        }
    }

    /// Cancel every running answer (each pane's queued message goes back to its box).
    fn cancel_all(&mut self, fx: &mut Vec<Effect>) {
        let mut running = Vec::new();
        for (i, pane) in self.panes.iter_mut().enumerate() {
            if pane.is_busy() {
                if let Some(request) = pane.cancel() {
                    fx.push(Effect::Cancel { request });
                }
                running.push((i + 1).to_string());
            }
        }
        if running.is_empty() {
            return self.notify("nothing to cancel: no pane is answering".into(), true);
        }
        let (answers, panes) = if running.len() == 1 { ("answer", "pane") } else { ("answers", "panes") };
        self.notify(
            format!(
                "cancelling {} {answers} ({panes} {}); partial answers are kept",
                running.len(),
                running.join(", ")
            ),
            false,
        );
    }

    /// ctrl+c: cancel the focused generation; with nothing to cancel there, quit. While any pane
    /// generates, shows a conversation or holds unsent text, a second press within 2 s is needed
    /// (a ctrl+c meant for an answer that just ended must not close the app).
    fn interrupt(&mut self, fx: &mut Vec<Effect>) {
        if self.focused().is_busy() {
            return self.cancel_focused(fx);
        }
        let busy = self.busy_panes();
        let kept = self.panes.iter().any(|p| !p.turns.is_empty() || !p.input.is_blank());
        if (busy == 0 && !kept) || self.quit_armed_at.is_some() {
            return self.quit(fx);
        }
        self.quit_armed_at = Some(self.tick);
        let keys = self.keymap.describe_keys(Command::Interrupt);
        let secs = QUIT_ARM_TICKS / TICKS_PER_S;
        let why = if busy > 0 { format!("{busy} pane(s) still generating: ") } else { String::new() };
        self.notify(format!("{why}{keys} again within {secs} s quits (transcripts are saved)"), true);
        // The hint goes when the press it asks for would no longer quit.
        if let Some(n) = self.notice.as_mut() {
            n.until_tick = self.tick + QUIT_ARM_TICKS + 1;
        }
    }

    /// Quit; generations still running are cancelled (their partial answers are kept).
    fn quit(&mut self, fx: &mut Vec<Effect>) {
        for pane in &mut self.panes {
            if let Some(flight) = pane.in_flight.as_mut().filter(|f| !f.cancel_requested) {
                flight.cancel_requested = true;
                fx.push(Effect::Cancel { request: flight.id.clone() });
            }
        }
        self.should_quit = true;
    }

    fn close_focused(&mut self) {
        if self.panes.len() == 1 {
            self.notify("the last pane stays".into(), true);
        } else if self.focused().is_busy() {
            self.notify("this pane is generating: cancel it first".into(), true);
        } else {
            self.panes.remove(self.focus);
            self.focus = self.focus.min(self.panes.len() - 1);
            self.zoomed = false;
        }
    }

    fn clear_focused(&mut self, fx: &mut Vec<Effect>) {
        if self.focused().is_busy() {
            return self.notify("this pane is generating: cancel it first".into(), true);
        }
        let pane = self.focused_mut();
        pane.turns.clear();
        pane.editing = None;
        pane.state = RowState::Idle;
        pane.row = None;
        pane.scroll_top = None;
        pane.code_scroll = 0;
        fx.push(Effect::Record { pane: pane.id, record: Record::Clear });
    }

    /// The focused pane's conversation as Markdown, for the loop to write.
    fn export(&mut self, fx: &mut Vec<Effect>) {
        let pane = self.focused();
        if pane.turns.is_empty() {
            return self.notify("nothing to export: this pane has no conversation yet".into(), true);
        }
        let model = match &self.engine {
            EngineStatus::Ready(summary) => summary.model.clone(),
            _ => self.settings.model.clone().unwrap_or_default(),
        };
        let about = super::export::About {
            number: self.focus + 1,
            session: &self.session,
            model: &model,
            profile: &self.settings.profile,
        };
        let markdown = super::export::markdown(pane, &about);
        fx.push(Effect::Export { pane: pane.id, turns: pane.turns.len(), markdown });
    }

    /// Put the focused pane's last message back in the box, to send in its place. Refused (with
    /// the reason in the bottom bar) while the pane answers, with nothing to edit, or over unsent
    /// text, which is never overwritten.
    fn edit_last(&mut self) {
        let cancel = self.keymap.describe_keys(Command::Cancel);
        let send = self.keymap.describe_keys(Command::Send);
        let pane = self.focused();
        if pane.is_busy() {
            return self.notify(format!("this pane is answering: {cancel} cancels the answer, then edit"), true);
        }
        let Some(turn) = pane.turns.last() else {
            return self.notify("nothing to edit: this pane has no message yet".into(), true);
        };
        if !pane.input.is_blank() && pane.input.text() != turn.user {
            return self.notify("the box holds unsent text: send or clear it (ctrl+u) first".into(), true);
        }
        let (id, text) = (turn.request_id.clone(), turn.user.clone());
        let pane = self.focused_mut();
        pane.input.set(&text);
        pane.editing = Some(id);
        pane.history_pos = None;
        self.notify(
            format!("editing the last message: {send} replaces it and its answer, {cancel} stops editing"),
            false,
        );
    }

    /// Ask the focused pane's last question again; the new answer replaces the last one.
    fn regenerate(&mut self, fx: &mut Vec<Effect>) {
        let cancel = self.keymap.describe_keys(Command::Cancel);
        let pane = self.focused();
        if pane.is_busy() {
            return self.notify(format!("this pane is answering: {cancel} cancels the answer, then regenerate"), true);
        }
        let Some(turn) = pane.turns.last() else {
            return self.notify("nothing to regenerate: this pane has no question yet".into(), true);
        };
        let (id, text) = (turn.request_id.clone(), turn.user.clone());
        self.submit(self.focus, text, Some(id), fx);
    }

    /// Up / down through this pane's earlier prompts (only when not in the middle of typing).
    fn recall(&mut self, step: i32) {
        let pane = &mut self.panes[self.focus];
        if pane.history_pos.is_none() && !pane.input.text().is_empty() {
            return;
        }
        let prompts: Vec<String> = pane.prompts().into_iter().map(str::to_owned).collect();
        let len = prompts.len() as i32;
        let pos = pane.history_pos.map(|p| p as i32).unwrap_or(len) + step;
        if pos < 0 || len == 0 {
            return;
        }
        if pos >= len {
            pane.history_pos = None;
            pane.input.set("");
        } else {
            pane.history_pos = Some(pos as usize);
            pane.input.set(&prompts[pos as usize]);
        }
    }

    /// A key no binding claims: it edits an overlay's input or the focused pane's input.
    fn key(&mut self, key: KeyEvent, fx: &mut Vec<Effect>) {
        if self.popups.is_open() {
            return self.overlay_key(key, fx);
        }
        let pane = self.focused_mut();
        if pane.input.handle_key(&key) {
            pane.history_pos = None;
        }
    }

    /// Give the panes at `targets` these settings (a pane given the profile's own values follows
    /// the profile again); each change is recorded for `--resume`.
    fn apply_settings(&mut self, targets: &[usize], values: ChatSettings, all: bool, fx: &mut Vec<Effect>) {
        let own = (values != self.settings.chat()).then_some(values.clone());
        for &i in targets {
            let pane = &mut self.panes[i];
            if pane.settings != own {
                pane.settings = own.clone();
                fx.push(Effect::Record { pane: pane.id, record: Record::Settings { settings: own.clone() } });
            }
        }
        let whose = if all { "every pane".to_owned() } else { format!("pane {}", targets[0] + 1) };
        let what = summary(&values).join(" ");
        let mut text = match own {
            Some(_) => format!("{whose}: {what} from the next message on"),
            None => format!("{whose}: the profile's settings again ({what})"),
        };
        let busy: Vec<String> =
            targets.iter().filter(|&&i| self.panes[i].is_busy()).map(|i| (i + 1).to_string()).collect();
        match &busy[..] {
            [] => {}
            [one] => text.push_str(&format!(" (pane {one}'s running answer keeps the values it started with)")),
            many => text.push_str(&format!(
                " (the running answers of panes {} keep the values they started with)",
                many.join(", ")
            )),
        }
        self.notify(text, false);
    }

    /// Branch the focused pane at message `index` of `Pane::messages`: a new pane (focused, with
    /// the pane's settings) holds the conversation before that message and, for an answer, the
    /// answer's turn too; a question goes into the new pane's box instead, to edit and send. The
    /// new pane's transcript starts with a `branch` record and the copied turns, so `--resume`
    /// brings it back. Refused at eight panes, and for an answer still being written.
    fn branch(&mut self, index: usize, fx: &mut Vec<Effect>) -> Option<Overlay> {
        let source = self.focus;
        let Some((turn, answer)) = self.panes[source].messages().get(index).copied() else {
            self.notify("that message is gone".into(), true);
            return None;
        };
        if self.panes.len() >= MAX_PANES {
            let close = self.keymap.describe_keys(Command::ClosePane);
            self.notify(format!("{MAX_PANES} panes at most: close one ({close}) to branch into a new pane"), true);
            return None;
        }
        let from = &self.panes[source];
        let picked = &from.turns[turn];
        if answer && from.in_flight.as_ref().is_some_and(|f| f.id == picked.request_id) {
            self.notify("that answer is still being written: branch from its question, or when it ends".into(), true);
            return Some(Overlay::Branch { index });
        }
        let (copied, question) = if answer {
            (from.turns[..=turn].to_vec(), None)
        } else {
            (from.turns[..turn].to_vec(), Some(picked.user.clone()))
        };
        let (from_id, at) = (from.id, picked.request_id.clone());
        let settings = from.settings.clone();
        let mut pane = Pane { settings: settings.clone(), ..Pane::new(self.next_pane_id) };
        self.next_pane_id += 1;
        pane.state = match copied.last() {
            Some(t) if t.interrupted => RowState::Cancelled,
            Some(t) => finish_state(t.finish.unwrap_or(FinishReason::Stop)),
            None => RowState::Idle,
        };
        let id = pane.id;
        let record = |record| Effect::Record { pane: id, record };
        fx.push(record(Record::Branch { pane: from_id, request: at, answer }));
        // Always recorded (null: the profile's), so a resumed branch does not take the
        // `[pane.N]` of the place it happens to have.
        fx.push(record(Record::Settings { settings }));
        for t in &copied {
            fx.push(record(Record::User {
                request: t.request_id.clone(),
                text: t.user.clone(),
                replaces: None,
                system: t.system.clone(),
            }));
            match t.finish {
                Some(finish) => fx.push(record(Record::Done {
                    request: t.request_id.clone(),
                    finish,
                    text: t.answer.clone(),
                    error: t.error.clone(),
                    stats: t.stats.clone().unwrap_or_default(),
                })),
                // An answer the session ended before: its text so far, still without an end.
                None if !t.answer.is_empty() => {
                    fx.push(record(Record::Delta { request: t.request_id.clone(), text: t.answer.clone() }))
                }
                None => {}
            }
        }
        pane.turns = copied;
        if let Some(q) = &question {
            pane.input.set(q);
        }
        let turns = pane.turns.len();
        self.panes.push(pane);
        self.focus = self.panes.len() - 1;
        self.zoomed = false;
        let plural = if turns == 1 { "" } else { "s" };
        let what = match question {
            Some(_) => format!("{turns} turn{plural} before it, and the question in the box to edit and send"),
            None => format!("{turns} turn{plural}, up to that answer"),
        };
        self.notify(
            format!("pane {} branches pane {} at message {}: {what}", self.focus + 1, source + 1, index + 1),
            false,
        );
        None
    }

    /// Copy message `index` of the focused pane (the picker closes).
    fn copy_message(&mut self, index: usize, fx: &mut Vec<Effect>) -> Option<Overlay> {
        match self.focused().message_text(index) {
            Some(text) => fx.push(Effect::Copy { text: text.to_owned() }),
            None => self.notify("that message is gone".into(), true),
        }
        None
    }

    fn paste(&mut self, text: &str) {
        let text = text.replace("\r\n", "\n").replace('\r', "\n");
        match self.popups.top_mut() {
            Some(Overlay::SaveProfile { name }) => name.insert(text.lines().next().unwrap_or_default()),
            Some(Overlay::Search { query, back }) => {
                query.insert(text.lines().next().unwrap_or_default());
                *back = 0;
            }
            Some(Overlay::Sessions(open)) => {
                if let SessionMode::Rename(name) = &mut open.mode {
                    name.insert(text.lines().next().unwrap_or_default());
                }
            }
            // The system prompt takes every line; a number, the first.
            Some(Overlay::Settings(form)) => {
                let text =
                    if form.field == super::settings::SYSTEM { &text } else { text.lines().next().unwrap_or_default() };
                form.inputs[form.field].insert(text.trim_end_matches('\n'));
                form.error = None;
            }
            Some(_) => {}
            None => self.focused_mut().input.insert(&text),
        }
    }

    fn row_event(&mut self, pane_id: u32, event: RowEvent, at: Instant, fx: &mut Vec<Effect>) {
        let Some(pane) = self.panes.iter_mut().find(|p| p.id == pane_id) else { return };
        let Some(flight) = pane.in_flight.as_mut() else { return };
        match event {
            // The prompt's size is known while the request waits for a row.
            RowEvent::Queued { id, prompt_tokens } if id == flight.id => flight.prefill = (0, prompt_tokens),
            RowEvent::Prefill { id, done, total } if id == flight.id => {
                flight.prefill = (done, total);
                if pane.state == RowState::Queued {
                    pane.state = RowState::Prefill;
                }
            }
            RowEvent::Delta { id, text, ids } if id == flight.id => {
                flight.tokens += ids.len().max(1);
                flight.first_token.get_or_insert(at);
                flight.last_token = Some(at);
                pane.state = RowState::Decoding;
                if let Some(turn) = pane.turn_for(&id) {
                    turn.answer.push_str(&text);
                }
                fx.push(Effect::Record { pane: pane_id, record: Record::Delta { request: id, text } });
            }
            RowEvent::Done(result) if result.id == flight.id => {
                let RequestResult { id, text, finish_reason, error, stats, .. } = *result;
                let tokens_per_s = flight.tokens_per_s();
                pane.in_flight = None;
                pane.state = finish_state(finish_reason);
                let Some(turn) = pane.turn_for(&id) else { return };
                // The result's text is the whole answer (the stream decoder's tail included); an
                // error result carries none, and then the streamed part stays.
                if !text.is_empty() {
                    turn.answer = text;
                }
                turn.finish = Some(finish_reason);
                turn.error = error.clone();
                turn.stats = Some(stats.clone());
                turn.tokens_per_s = tokens_per_s;
                // The final text may differ from what streamed (the decoder's tail): render anew.
                *turn.rendered.get_mut() = None;
                let record =
                    Record::Done { request: id, finish: finish_reason, text: turn.answer.clone(), error, stats };
                fx.push(Effect::Record { pane: pane_id, record });
                self.warn_context(pane_id);
                self.send_queued(pane_id, fx);
            }
            _ => {}
        }
    }

    /// After an answer: send the message queued while it ran.
    fn send_queued(&mut self, pane_id: u32, fx: &mut Vec<Effect>) {
        let Some(index) = self.panes.iter().position(|p| p.id == pane_id) else { return };
        if let Some(text) = self.panes[index].queued.take() {
            self.submit(index, text, None, fx);
        }
    }

    /// After an answer: say so when the pane's conversation nears the context window, before a
    /// prompt fails on it.
    fn warn_context(&mut self, pane_id: u32) {
        let EngineStatus::Ready(summary) = &self.engine else { return };
        let max = summary.max_context;
        let Some(index) = self.panes.iter().position(|p| p.id == pane_id) else { return };
        let Some(percent) = self.panes[index].context_percent(max) else { return };
        if percent >= CONTEXT_WARN_PERCENT {
            let clear = self.keymap.describe_keys(Command::ClearPane);
            self.notify(
                format!(
                    "pane {}'s conversation fills {percent}% of the {max}-token context window: {clear} starts a new one",
                    index + 1
                ),
                true,
            );
        }
    }

    fn on_telemetry(&mut self, telemetry: Telemetry) {
        if let Some(Overlay::Row { id, .. }) = self.popups.top()
            && let Some(row) = telemetry.rows.iter().find(|r| r.id == *id)
        {
            self.row_seen = Some(row.clone());
        }
        for pane in &mut self.panes {
            let Some(flight) = &pane.in_flight else { continue };
            let Some(index) = telemetry.rows.iter().position(|r| r.id == flight.id) else { continue };
            pane.row = Some(index);
            // A row that finished early reports its result only when its cohort ends; show that
            // it is done meanwhile.
            let row_state = telemetry.rows[index].state;
            let behind = pane.state == RowState::Queued && matches!(row_state, RowState::Prefill | RowState::Decoding);
            if behind || matches!(row_state, RowState::Done | RowState::Cancelled | RowState::Error) {
                pane.state = row_state;
            }
        }
        self.memory_history.push_back(telemetry.memory.active as u64);
        while self.memory_history.len() > MEMORY_HISTORY {
            self.memory_history.pop_front();
        }
        self.telemetry = telemetry;
    }

    fn switch_profile(&mut self, switch: ProfileSwitch, fx: &mut Vec<Effect>) {
        let restart = self.settings.engine_differs(&switch.settings);
        if restart && self.busy_panes() > 0 {
            return self.notify(
                "that profile needs the engine restarted: wait for (or cancel) the running generations first".into(),
                true,
            );
        }
        // Recorded for `--resume`, which reopens with the newest profile the session used.
        fx.push(Effect::RecordProfile { spec: switch.spec });
        self.settings = switch.settings;
        self.styles = Styles::new(&switch.theme);
        self.theme = switch.theme;
        self.keymap = switch.keymap;
        self.style_epoch += 1;
        // Every pane takes the new profile's settings (its `[pane.N]`, else its own values).
        for (i, pane) in self.panes.iter_mut().enumerate() {
            let settings = self.settings.pane_start(i + 1);
            if pane.settings != settings {
                pane.settings = settings.clone();
                fx.push(Effect::Record { pane: pane.id, record: Record::Settings { settings } });
            }
        }
        while self.panes.len() < self.settings.panes {
            self.add_pane();
        }
        // Panes beyond the new count go only if they hold nothing.
        while self.panes.len() > self.settings.panes
            && self.panes.last().is_some_and(|p| !p.is_busy() && p.turns.is_empty() && p.input.text().is_empty())
        {
            self.panes.pop();
        }
        self.focus = self.focus.min(self.panes.len() - 1);
        if restart {
            self.engine =
                EngineStatus::Loading { model: self.settings.model.clone().unwrap_or_default(), since_tick: self.tick };
            fx.push(Effect::RestartEngine);
        }
        self.notify(format!("profile {} ({})", self.settings.profile, self.settings.origin), false);
    }
}

pub fn finish_state(reason: FinishReason) -> RowState {
    match reason {
        FinishReason::Stop | FinishReason::Length => RowState::Done,
        FinishReason::Cancelled => RowState::Cancelled,
        FinishReason::Error => RowState::Error,
    }
}
