//! What changes the app (actions in) and what the app asks the outside world to do (effects
//! out). `App::update` is the only place state changes; the event loop turns keys, engine events
//! and ticks into actions and carries effects out to the engine, the disk and the terminal.

use std::path::PathBuf;
use std::time::Instant;

use crossterm::event::KeyEvent;

use super::transcript::{Record, RestoredPane, SessionEntry};
use crate::config::keymap::{Command, Keymap};
use crate::config::profile::{Profile, Settings};
use crate::config::theme::Theme;
use crate::engine::api::EngineInfo;
use crate::engine::api::Numerics;
use crate::engine::api::Request;
use crate::engine::api::RowEvent;
use crate::engine::api::Telemetry;

#[derive(Debug)]
pub enum Action {
    /// A bound key's command.
    Command(Command),
    /// A key no binding claims: text editing, or input to an open overlay.
    Key(KeyEvent),
    /// Scroll pane `pane` (an index) by `lines`: up when negative (the mouse wheel over a pane,
    /// focused or not).
    Scroll {
        pane: usize,
        lines: isize,
    },
    /// Scroll pane `pane`'s code blocks `cells` sideways: left when negative (the mouse's
    /// sideways wheel, or shift with the wheel where the terminal sends that).
    ScrollCode {
        pane: usize,
        cells: isize,
    },
    /// Bracketed paste into the focused input.
    Paste(String),
    Resize,
    /// The render tick (about 30 a second): animations and notice expiry.
    Tick,
    /// An event of the request pane `pane` has in flight; `at` is when the loop received it.
    Row {
        pane: u32,
        event: RowEvent,
        at: Instant,
    },
    Telemetry(Box<Telemetry>),
    EngineReady(Box<EngineSummary>),
    EngineFailed(String),
    ProfileLoaded(Box<ProfileSwitch>),
    ProfileSaved {
        name: String,
        path: PathBuf,
    },
    /// Transcripts cannot be written (why), or can again (None).
    Transcript(Option<String>),
    /// What the external editor saved, for pane `pane`'s input.
    Edited {
        pane: u32,
        text: String,
    },
    /// Pane `pane`'s draft `key` counted (None: it could not be).
    DraftCounted {
        pane: u32,
        key: u64,
        counted: Option<super::window::Counted>,
    },
    /// A line for the status bar (results of effects: copied, saved, failed).
    Notice {
        text: String,
        error: bool,
    },
    /// The saved sessions, newest first: opens the session list (or refreshes it).
    Sessions(Vec<SessionEntry>),
    /// A saved session read back, to open in place of the current one.
    SessionOpened(Box<OpenedSession>),
    /// Session `name` was given a title (None: its folder's name again).
    SessionTitled {
        name: String,
        title: Option<String>,
    },
}

/// A session read back from its transcripts, for the app to open.
#[derive(Debug)]
pub struct OpenedSession {
    pub name: String,
    pub title: Option<String>,
    pub panes: Vec<RestoredPane>,
}

/// What the app asks for; the event loop performs these.
#[derive(Debug)]
pub enum Effect {
    Submit {
        pane: u32,
        request: Request,
    },
    Cancel {
        request: String,
    },
    /// Append to the pane's transcript.
    Record {
        pane: u32,
        record: Record,
    },
    Copy {
        text: String,
    },
    /// Count what pane `pane`'s draft `key` would send (`messages`) off the UI thread; comes back
    /// as `DraftCounted`.
    CountDraft {
        pane: u32,
        key: u64,
        messages: Vec<crate::model::text::tokenizer::ChatMessage>,
    },
    /// Hand pane `pane`'s input to the external editor (the screen is given to it meanwhile);
    /// comes back as `Edited`.
    Edit {
        pane: u32,
        text: String,
    },
    /// Write pane `pane`'s conversation (`turns` turns), as Markdown, to a file.
    Export {
        pane: u32,
        turns: usize,
        markdown: String,
    },
    SaveProfile {
        name: String,
        profile: Box<Profile>,
    },
    /// Record in the session's transcripts that profile `spec` (as `--profile` takes it) is in
    /// use from now on, so `--resume` reopens with it.
    RecordProfile {
        spec: String,
    },
    /// Load a profile by name or path, then come back with `ProfileLoaded`.
    LoadProfile {
        spec: String,
    },
    /// Start the engine again with the app's (new) settings.
    RestartEngine,
    /// List the saved sessions; comes back as `Sessions`.
    ListSessions,
    /// Read session `name`'s transcripts; comes back as `SessionOpened`.
    OpenSession {
        name: String,
    },
    /// Write transcripts into session `name` from now on (the app has opened it); the session
    /// left behind goes if nothing was written to it.
    UseSession {
        name: String,
    },
    /// Give session `name` a title (None: its folder's name again).
    TitleSession {
        name: String,
        title: Option<String>,
    },
    /// Delete session `name` (never the one in use).
    DeleteSession {
        name: String,
    },
}

/// A newly loaded profile, resolved with the command-line flags, its theme and keymap.
#[derive(Debug)]
pub struct ProfileSwitch {
    pub settings: Settings,
    pub theme: Theme,
    pub keymap: Keymap,
    /// The profile as the session records it (see [`crate::tui::recorded_profile`]).
    pub spec: String,
}

/// What the status bar and the inspector show about the loaded engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineSummary {
    pub model: String,
    pub mode: String,
    pub numerics: String,
    /// The weight policy in force (`kernel`, `dequantize`, `quantized`).
    pub weights: String,
    pub probe: Option<String>,
    pub max_context: i32,
    pub load_s: f64,
    /// Counts a draft's prompt as the engine will (None attached to a server: its tokenizer is
    /// not here).
    pub counter: Option<super::window::PromptCounter>,
}

impl EngineSummary {
    /// A server the TUI is attached to (its weights policy is the server's business).
    pub fn from_server(info: &crate::client::ServerInfo, url: &str, load_s: f64) -> EngineSummary {
        EngineSummary {
            model: format!("{} @ {url}", info.model),
            mode: info.mode.clone(),
            numerics: info.numerics.clone(),
            weights: "server".into(),
            probe: None,
            max_context: info.max_context,
            load_s,
            counter: None,
        }
    }

    /// A local engine; `counter` from its model's tokenizer.
    pub fn from_info(info: &EngineInfo, load_s: f64, counter: Option<super::window::PromptCounter>) -> EngineSummary {
        let model = info.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        EngineSummary {
            model,
            mode: format!("{:?}", info.mode).to_lowercase(),
            numerics: numerics_name(info.numerics).to_owned(),
            weights: info.weights.name().to_owned(),
            probe: info.probe.clone(),
            max_context: info.max_context,
            load_s,
            counter,
        }
    }
}

/// A numerics mode as profiles and `--numerics` spell it.
pub fn numerics_name(n: Numerics) -> &'static str {
    match n {
        Numerics::Throughput => "throughput",
        Numerics::Balanced => "balanced",
        Numerics::B1Exact => "b1-exact",
    }
}

/// A preset as profiles and `--preset` spell it.
pub fn preset_name(p: crate::engine::api::Preset) -> String {
    use clap::ValueEnum as _;
    p.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_else(|| format!("{p:?}").to_lowercase())
}
