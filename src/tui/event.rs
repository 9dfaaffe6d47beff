//! The event loop: one tokio task selecting over terminal input (read on a small thread, since
//! crossterm's reads block), engine start-up results, and a render tick that drains every
//! request's events with `try_recv` and copies the engine's telemetry. Actions go through
//! `App::update`; the effects it returns are carried out here. The engine runs on its own thread
//! and nothing here ever waits on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use crossterm::event::{Event, KeyEventKind};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::action::{Action, Effect, EngineSummary, OpenedSession, ProfileSwitch};
use super::app::keys;
use super::app::{App, TICKS_PER_S};
use super::bridge::{Backend, Bridge};
use super::terminal::{self, Tui};
use super::transcript::{
    TranscriptWriter, delete_session, list_sessions, load_session, release_session_if_empty, session_title,
    set_session_title,
};
use super::{clipboard, editor, export, views};
use crate::config::keymap::Keymap;
use crate::config::model_args::ModelArgs;
use crate::config::profile::{Overrides, Settings, load_profile, save_profile};
use crate::config::theme::load_theme;
use crate::engine::api::EngineHandle;
use crate::platform::paths::Paths;

/// Telemetry is copied every this many ticks (it clones every row's figures).
pub const TELEMETRY_EVERY: u64 = 4;
/// Without new events the screen is still redrawn this often (spinner, loading clock).
const IDLE_REDRAW_EVERY: u64 = 6;
/// How long quitting waits for cancelled rows to report, so their transcripts get a final line.
const QUIT_GRACE: Duration = Duration::from_secs(2);

/// What the loop needs besides the app.
pub struct Context {
    pub paths: Paths,
    pub overrides: Overrides,
    pub transcripts: TranscriptWriter,
    /// A `cohort serve` to chat through instead of an engine of our own.
    pub attach: Option<Attach>,
}

#[derive(Debug, Clone)]
pub struct Attach {
    pub url: String,
    pub api_key: Option<String>,
}

enum EngineMsg {
    Ready(Box<Backend>, Box<EngineSummary>),
    Failed(String),
    /// Work done off the loop (a draft counted) coming back.
    Action(Box<Action>),
}

/// Run the UI until the user quits. The terminal is restored on every way out. Also returns the
/// session in use at the end (the app can open another).
pub async fn run(mut app: App, mut ctx: Context) -> (Result<()>, String) {
    let mut tui = match terminal::enter() {
        Ok(tui) => tui,
        Err(e) => return (Err(e), ctx.transcripts.session.clone()),
    };
    let stop_input = Arc::new(AtomicBool::new(false));
    let mut bridge = Bridge::default();
    let outcome = drive(&mut app, &mut ctx, &mut tui, &mut bridge, stop_input.clone()).await;
    stop_input.store(true, Ordering::SeqCst);
    terminal::leave();
    finish(&mut app, &mut ctx, &mut bridge).await;
    if let Err(e) = ctx.transcripts.record_pane_count(app.panes.len()) {
        tracing::warn!("the session's pane count: {e:#}");
    }
    (outcome, ctx.transcripts.session.clone())
}

async fn drive(
    app: &mut App,
    ctx: &mut Context,
    tui: &mut Tui,
    bridge: &mut Bridge,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let mut input = spawn_input_thread(stop)?;
    let (engine_tx, mut engine_rx) = unbounded_channel();
    match &ctx.attach {
        Some(attach) => connect(attach.clone(), engine_tx.clone()),
        None => start_engine(&app.settings, None, engine_tx.clone()),
    }
    let mut stop_signal = std::pin::pin!(stop_signals());
    let mut signalled = false;
    let mut ticker = tokio::time::interval(Duration::from_millis(1000 / TICKS_PER_S));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut dirty = true;
    // The last frame drawn: mouse events are matched against what is on screen.
    let mut area = ratatui::layout::Rect::default();
    loop {
        if dirty {
            area = tui.draw(|frame| views::draw(frame, app))?.area;
            dirty = false;
        }
        let actions = tokio::select! {
            event = input.recv() => match event {
                Some(event) => input_actions(app, event, area),
                None => vec![Action::Command(crate::config::keymap::Command::Quit)],
            },
            Some(msg) = engine_rx.recv() => engine_actions(msg, bridge, &ctx.transcripts.dir, &engine_tx),
            // SIGTERM, or SIGHUP from a closed terminal: quit as the key does (answers are
            // cancelled and their final records written, the terminal is given back).
            () = &mut stop_signal, if !signalled => {
                signalled = true;
                tracing::info!("a stop signal: quitting");
                vec![Action::Command(crate::config::keymap::Command::Quit)]
            }
            _ = ticker.tick() => {
                let mut actions = bridge.drain();
                if app.tick.is_multiple_of(TELEMETRY_EVERY) && let Some(t) = bridge.telemetry() {
                    actions.push(Action::Telemetry(Box::new(t)));
                }
                if actions.is_empty() && app.tick.is_multiple_of(IDLE_REDRAW_EVERY) {
                    dirty = true;
                }
                actions.push(Action::Tick);
                actions
            }
        };
        let mut queue = std::collections::VecDeque::from(actions);
        while let Some(action) = queue.pop_front() {
            dirty |= !matches!(action, Action::Tick);
            for effect in app.update(action) {
                queue.extend(perform(effect, app, ctx, tui, bridge, &engine_tx));
            }
        }
        if app.should_quit {
            return Ok(());
        }
    }
}

fn input_actions(app: &App, event: Event, area: ratatui::layout::Rect) -> Vec<Action> {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => vec![keys::resolve(app, key)],
        Event::Mouse(mouse) => keys::mouse(app, mouse, area).into_iter().collect(),
        Event::Paste(text) => vec![Action::Paste(text)],
        Event::Resize(..) => vec![Action::Resize],
        _ => Vec::new(),
    }
}

fn engine_actions(
    msg: EngineMsg,
    bridge: &mut Bridge,
    session: &std::path::Path,
    engine_tx: &UnboundedSender<EngineMsg>,
) -> Vec<Action> {
    match msg {
        EngineMsg::Ready(engine, summary) => {
            if let Some(p) = &summary.probe {
                tracing::info!("{p}");
            }
            if let Backend::Local(handle) = engine.as_ref() {
                keep_cache_in(handle, session, engine_tx);
            }
            bridge.attach(*engine);
            vec![Action::EngineReady(summary)]
        }
        EngineMsg::Failed(message) => {
            tracing::error!("the engine did not start: {message}");
            bridge.fail(&message);
            vec![Action::EngineFailed(message)]
        }
        EngineMsg::Action(action) => vec![*action],
    }
}

/// Have a local engine keep its prompt cache in the session's folder (what a resumed session
/// saved there is read back, so its conversations continue warm); what it says of the file
/// comes back as a notice.
fn keep_cache_in(engine: &EngineHandle, session: &std::path::Path, tx: &UnboundedSender<EngineMsg>) {
    let said = engine.keep_cache_in(session.join(crate::engine::api::PROMPT_CACHE_FILE));
    let tx = tx.clone();
    tokio::task::spawn_blocking(move || {
        if let Ok(Some(text)) = said.recv() {
            let _ = tx.send(EngineMsg::Action(Box::new(Action::Notice { text, error: false })));
        }
    });
}

/// Carry out one effect; returns follow-up actions (results to show).
fn perform(
    effect: Effect,
    app: &App,
    ctx: &mut Context,
    tui: &mut Tui,
    bridge: &mut Bridge,
    engine_tx: &UnboundedSender<EngineMsg>,
) -> Vec<Action> {
    let notice = |text: String, error: bool| vec![Action::Notice { text, error }];
    match effect {
        Effect::Submit { pane, request } => {
            #[cfg(feature = "testing")]
            panic_if_asked(&request);
            bridge.submit(pane, request)
        }
        Effect::Cancel { request } => bridge.cancel(&request),
        Effect::Record { pane, record } => {
            // The bar's warning stays while writes fail and goes with the first that works.
            return match ctx.transcripts.append(pane, &record) {
                Err(e) => {
                    tracing::error!("transcript: {e:#}");
                    let why = format!("{:#}", e.root_cause());
                    if app.transcript_error.as_deref() == Some(why.as_str()) {
                        Vec::new()
                    } else {
                        vec![Action::Transcript(Some(why))]
                    }
                }
                Ok(()) if app.transcript_error.is_some() => vec![Action::Transcript(None)],
                Ok(()) => Vec::new(),
            };
        }
        Effect::CountDraft { pane, key, messages } => {
            if let super::app::EngineStatus::Ready(summary) = &app.engine
                && let Some(counter) = summary.counter.clone()
            {
                let tx = engine_tx.clone();
                tokio::task::spawn_blocking(move || {
                    let counted = counter
                        .count(&messages)
                        .inspect_err(|e| tracing::debug!("pane {pane}'s draft could not be counted: {e:#}"))
                        .ok();
                    let _ = tx.send(EngineMsg::Action(Box::new(Action::DraftCounted { pane, key, counted })));
                });
            }
        }
        Effect::Copy { text } => {
            return match clipboard::copy(&text, &ctx.paths.data_dir, tui.backend_mut()) {
                Ok(c) => {
                    let how = if c.sent_osc52 { "to the clipboard (OSC 52) and " } else { "" };
                    notice(format!("copied {} chars {how}to {}", c.chars, c.file.display()), false)
                }
                Err(e) => notice(format!("copy failed: {e:#}"), true),
            };
        }
        Effect::Edit { pane, text } => {
            let editor = editor::command();
            // The input thread stops reading first: the editor's keys are the editor's.
            pause_input(true);
            terminal::suspend();
            let edited = editor::edit(&text, &editor, &std::env::temp_dir());
            let back = terminal::resume(tui);
            pause_input(false);
            if let Err(e) = back {
                tracing::error!("taking the terminal back after {editor}: {e:#}");
            }
            return match edited {
                Ok(text) => vec![Action::Edited { pane, text }],
                Err(e) => {
                    tracing::warn!("editor: {e:#}");
                    notice(format!("{e:#}"), true)
                }
            };
        }
        Effect::Export { pane, turns, markdown } => {
            // The session's folder, beside the transcripts; the current directory if that fails.
            let mut dirs = vec![ctx.transcripts.dir.clone()];
            dirs.extend(std::env::current_dir().ok());
            let number = app.panes.iter().position(|p| p.id == pane).map_or(0, |i| i + 1);
            let plural = if turns == 1 { "" } else { "s" };
            return match export::write(&dirs, pane, &markdown) {
                Ok(path) => {
                    notice(format!("pane {number}: {turns} turn{plural} exported to {}", path.display()), false)
                }
                Err(e) => {
                    tracing::error!("export: {e:#}");
                    notice(format!("export failed: {e:#}"), true)
                }
            };
        }
        Effect::SaveProfile { name, profile } => {
            return match save_profile(&ctx.paths, &name, &profile) {
                Ok(path) => vec![Action::ProfileSaved { name, path }],
                Err(e) => notice(format!("profile not saved: {e:#}"), true),
            };
        }
        Effect::RecordProfile { spec } => {
            if let Err(e) = ctx.transcripts.record_profile(&spec) {
                tracing::error!("transcript: {e:#}");
                return vec![Action::Transcript(Some(format!("{:#}", e.root_cause())))];
            }
        }
        Effect::LoadProfile { spec } => {
            return match load_switch(&spec, &app.settings, ctx) {
                Ok(switch) => vec![Action::ProfileLoaded(Box::new(switch))],
                Err(e) => notice(format!("{e:#}"), true),
            };
        }
        Effect::ListSessions => return vec![Action::Sessions(list_sessions(&ctx.transcripts.root))],
        Effect::OpenSession { name } => {
            return match load_session(&ctx.transcripts.root, &name) {
                Ok((name, folder, panes)) => {
                    let title = session_title(&folder);
                    vec![Action::SessionOpened(Box::new(OpenedSession { name, title, panes }))]
                }
                Err(e) => notice(format!("the session was not opened: {e:#}"), true),
            };
        }
        Effect::UseSession { name } => {
            let left = ctx.transcripts.session.clone();
            if let Err(e) = ctx.transcripts.record_pane_count(app.panes.len()) {
                tracing::warn!("the session's pane count: {e:#}");
            }
            ctx.transcripts.switch(&name);
            tracing::info!(session = %name, "opened in the app");
            if let Some(Backend::Local(engine)) = bridge.backend() {
                keep_cache_in(engine, &ctx.transcripts.dir, engine_tx);
            }
            // The session left behind goes if nothing was written to it, as at exit.
            release_session_if_empty(&ctx.transcripts.root, &left);
        }
        Effect::TitleSession { name, title } => {
            let root = ctx.transcripts.root.clone();
            return match set_session_title(&root, &name, title.as_deref()) {
                Ok(()) => vec![Action::SessionTitled { name, title }, Action::Sessions(list_sessions(&root))],
                Err(e) => notice(format!("the session was not renamed: {e:#}"), true),
            };
        }
        Effect::DeleteSession { name } => {
            if name == ctx.transcripts.session {
                return notice("the session in use is not deleted".into(), true);
            }
            let root = ctx.transcripts.root.clone();
            let mut actions = match delete_session(&root, &name) {
                Ok(()) => notice(format!("session {name} deleted"), false),
                Err(e) => notice(format!("the session was not deleted: {e:#}"), true),
            };
            actions.push(Action::Sessions(list_sessions(&root)));
            return actions;
        }
        Effect::RestartEngine => match &ctx.attach {
            // The server keeps its own model and preset; the profile's sampler values apply.
            Some(attach) => {
                drop(bridge.detach());
                connect(attach.clone(), engine_tx.clone());
                return notice(
                    format!("attached to {}: the server's model and preset stay as they are", attach.url),
                    false,
                );
            }
            None => {
                let old = match bridge.detach() {
                    Some(Backend::Local(engine)) => Some(engine),
                    _ => None,
                };
                start_engine(&app.settings, old, engine_tx.clone())
            }
        },
    }
    Vec::new()
}

/// Test hook (tests/tui/tui_e2e.rs): a prompt equal to `COHORT_TUI_PANIC_ON` panics the UI
/// thread, to show that the panic hook gives the terminal back and transcripts survive. Built
/// only with the `testing` feature: the product neither reads the variable nor holds the hook.
#[cfg(feature = "testing")]
fn panic_if_asked(request: &crate::engine::api::Request) {
    let Some(word) = std::env::var_os("COHORT_TUI_PANIC_ON") else { return };
    if let crate::engine::api::Prompt::Chat(messages) = &request.prompt
        && messages.last().is_some_and(|m| word == m.content.as_str())
    {
        panic!("COHORT_TUI_PANIC_ON: a panic on purpose, for the test");
    }
}

/// Load a profile for an in-app switch. A profile without a model keeps the current one.
fn load_switch(spec: &str, current: &Settings, ctx: &Context) -> Result<ProfileSwitch> {
    let loaded = load_profile(spec, &ctx.paths)?;
    let mut settings = Settings::resolve(&loaded, &ctx.overrides)?;
    if settings.model.is_none() {
        settings.model = current.model.clone();
        settings.dtype = settings.dtype.or_else(|| current.dtype.clone());
        settings.weights = settings.weights.or_else(|| current.weights.clone());
    }
    let theme = load_theme(&settings.theme, &ctx.paths)?.respecting_no_color();
    let keymap = Keymap::with_overrides(&settings.keys, &settings.origin)?;
    Ok(ProfileSwitch { settings, theme, keymap, spec: crate::tui::recorded_profile(spec) })
}

/// Load the model on a blocking thread (the engine then runs on its own owner thread); the
/// result comes back on `tx`. An old engine is dropped there too, since dropping joins its thread.
fn start_engine(settings: &Settings, old: Option<EngineHandle>, tx: UnboundedSender<EngineMsg>) {
    let (args, setup) = ModelArgs::from_settings(settings);
    tokio::task::spawn_blocking(move || {
        drop(old);
        let started = Instant::now();
        tracing::info!(model = ?args.model, "loading the model");
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| args.start_engine(setup)));
        let msg = match outcome {
            Ok(Ok(engine)) => {
                // The draft counter's own copy of the tokenizer (the engine's lives on its thread);
                // without it panes show no count, and the engine still checks every prompt.
                let counter = crate::model::text::tokenizer::TextTokenizer::load(&engine.info.dir)
                    .inspect_err(|e| tracing::warn!("drafts will not be counted: {e:#}"))
                    .ok()
                    .map(super::window::PromptCounter::new);
                let summary = EngineSummary::from_info(&engine.info, started.elapsed().as_secs_f64(), counter);
                EngineMsg::Ready(Box::new(Backend::Local(engine)), Box::new(summary))
            }
            Ok(Err(e)) => EngineMsg::Failed(format!("{e:#}")),
            Err(_) => EngineMsg::Failed("the model loader panicked (see the log)".into()),
        };
        let _ = tx.send(msg);
    });
}

/// Resolves on SIGTERM or SIGHUP (never where there are no such signals).
async fn stop_signals() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::terminate()), signal(SignalKind::hangup())) {
            (Ok(mut term), Ok(mut hup)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = hup.recv() => {},
                }
            }
            _ => std::future::pending::<()>().await,
        }
    }
    #[cfg(not(unix))]
    std::future::pending::<()>().await
}

/// Attach to a running `cohort serve` (waiting while it loads); the outcome comes back on `tx`.
fn connect(attach: Attach, tx: UnboundedSender<EngineMsg>) {
    tokio::spawn(async move {
        let started = Instant::now();
        tracing::info!(url = %attach.url, "attaching to a server");
        let msg = match crate::client::RemoteEngine::connect(&attach.url, attach.api_key).await {
            Ok(remote) => {
                let summary = EngineSummary::from_server(&remote.info, &attach.url, started.elapsed().as_secs_f64());
                EngineMsg::Ready(Box::new(Backend::Remote(remote)), Box::new(summary))
            }
            Err(e) => EngineMsg::Failed(format!("{e:#}")),
        };
        let _ = tx.send(msg);
    });
}

/// Set while another program (the external editor) has the terminal: the input thread stops
/// reading, and says so in `INPUT_PARKED`.
static INPUT_PAUSED: AtomicBool = AtomicBool::new(false);
static INPUT_PARKED: AtomicBool = AtomicBool::new(false);

/// Stop (or restart) reading the terminal; stopping waits (up to a second) until the input
/// thread is out of its poll, so no key meant for the editor is taken.
fn pause_input(pause: bool) {
    if !pause {
        INPUT_PAUSED.store(false, Ordering::SeqCst);
        return;
    }
    INPUT_PARKED.store(false, Ordering::SeqCst);
    INPUT_PAUSED.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(1);
    while !INPUT_PARKED.load(Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Terminal events, read on their own thread (crossterm's `read` blocks) and polled with a
/// timeout so the thread notices when the app is done (or pauses for an editor).
fn spawn_input_thread(stop: Arc<AtomicBool>) -> Result<UnboundedReceiver<Event>> {
    let (tx, rx) = unbounded_channel();
    std::thread::Builder::new().name("cohort-input".into()).spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            if INPUT_PAUSED.load(Ordering::SeqCst) {
                INPUT_PARKED.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            match crossterm::event::poll(Duration::from_millis(100)) {
                Ok(false) => {}
                Ok(true) => match crossterm::event::read() {
                    Ok(event) => {
                        if tx.send(event).is_err() {
                            return;
                        }
                    }
                    Err(e) => return tracing::error!("terminal input: {e}"),
                },
                Err(e) => return tracing::error!("terminal input: {e}"),
            }
        }
    })?;
    Ok(rx)
}

/// After the screen is given back: wait briefly for cancelled rows' final events so every
/// transcript ends with its answer's last line, then let the engine go.
async fn finish(app: &mut App, ctx: &mut Context, bridge: &mut Bridge) {
    let deadline = Instant::now() + QUIT_GRACE;
    loop {
        for action in bridge.drain() {
            for effect in app.update(action) {
                if let Effect::Record { pane, record } = effect
                    && let Err(e) = ctx.transcripts.append(pane, &record)
                {
                    tracing::error!("transcript: {e:#}");
                }
            }
        }
        if bridge.pending() == 0 || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
