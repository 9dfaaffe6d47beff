//! The terminal UI: state in, frame out. It talks to the engine only through the engine handle.
//!
//! `app` holds the state and `update(Action) -> Vec<Effect>`; `event` runs the loop (terminal
//! input, engine results, a render tick) and performs effects; `views` draw from state alone;
//! `bridge` drains engine events; `transcript` appends every pane's conversation to disk.

pub mod action;
pub mod app;
pub mod args;
/// The frame-time measurement (`cargo test --release --test tui tui_bench -- --ignored`): test code.
#[cfg(feature = "testing")]
pub mod bench;
pub mod bridge;
pub mod clipboard;
pub mod editor;
pub mod event;
pub mod export;
/// Scripted app states for the view snapshots and the frame bench: test code only.
#[cfg(feature = "testing")]
pub mod fixture;
pub mod input;
pub mod layout;
pub mod markdown;
pub mod pane;
pub mod rendered;
pub mod search;
pub mod settings;
pub mod style;
pub mod terminal;
pub mod transcript;
pub mod views;
pub mod window;
pub mod wrap;

use std::io::IsTerminal as _;

use anyhow::{Context as _, Result};

pub use args::TuiArgs;

use crate::config::keymap::Keymap;
use crate::config::profile::{LoadedProfile, Settings, list_profiles, load_profile, load_startup_profile};
use crate::config::theme::load_theme;
use crate::platform::paths::Paths;
use app::App;
use transcript::{
    TranscriptWriter, latest_session, load_session, release_session_if_empty, reserve_session, session_pane_count,
    session_profile, session_title, transcripts_dir,
};

/// Start the TUI: resolve the profile, check the model exists, open (or resume) a session, and
/// run the event loop until the user quits.
pub fn run(args: TuiArgs, paths: &Paths) -> Result<()> {
    // The session first: a resumed one reopens with the profile it recorded.
    let dir = transcripts_dir(&paths.data_dir);
    let resumed = match args.resume.as_deref() {
        Some(spec) => {
            let spec = if spec == args::LATEST {
                latest_session(&dir).with_context(|| format!("no session to resume in {}", dir.display()))?
            } else {
                spec.to_owned()
            };
            let (name, folder, panes) = load_session(&dir, &spec)?;
            Some((name, session_profile(&folder), session_title(&folder), panes, folder))
        }
        None => None,
    };
    let recorded = resumed.as_ref().and_then(|(_, profile, _, _, _)| profile.as_deref());
    let (loaded, profile_spec, profile_notice) = startup_profile(args.profile.as_deref(), recorded, paths)?;
    let mut settings = Settings::resolve(&loaded, &args.overrides())?;
    let theme = load_theme(&settings.theme, paths)?.respecting_no_color();
    let keymap = Keymap::with_overrides(&settings.keys, &settings.origin)?;
    // Fail before taking the screen over: a missing model is the most likely first-run error
    // (attached, the server has the model).
    if args.attach.is_none() {
        settings.resolve_model()?;
    }
    // Without this check, taking the screen over fails with the OS's "os error 6" (ENXIO).
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        anyhow::bail!(
            "cohort's TUI needs a terminal (stdin or stdout is not a tty); for headless use, `cohort generate` reads \
             prompts from a file or stdin and `cohort serve` answers over HTTP"
        );
    }
    // A session resumed by its path is written where it was read: its folder's parent is its
    // home, not the data dir (a same-named local session got its turns).
    let (session, title, restored, home) = match resumed {
        Some((name, _, title, panes, folder)) => {
            // The session's own pane count, as it was left (`--panes` still wins).
            if args.overrides().panes.is_none()
                && let Some(n) = session_pane_count(&folder)
            {
                settings.panes = n;
            }
            let home = folder.parent().map_or_else(|| dir.clone(), std::path::Path::to_path_buf);
            (name, title, panes, home)
        }
        None => (reserve_session(&dir)?, None, Vec::new(), dir.clone()),
    };
    // The profile's pane count, on a terminal too small for it, opens as many as fit; `--panes`
    // and a resumed session's panes are taken as they are.
    let mut fitted = None;
    if args.overrides().panes.is_none()
        && restored.is_empty()
        && let Ok((columns, rows)) = crossterm::terminal::size()
    {
        let fit = layout::panes_that_fit(ratatui::layout::Rect::new(0, 0, columns, rows), settings.panes);
        if fit < settings.panes {
            fitted = Some(format!(
                "{fit} of the profile's {} panes fit this {columns}x{rows} terminal (--panes {} opens them all)",
                settings.panes, settings.panes
            ));
            settings.panes = fit;
        }
    }
    tracing::info!(%session, profile = %settings.profile, "starting the TUI");
    markdown::prewarm();
    let mut app = App::new(settings, theme, keymap, &session);
    app.profiles = list_profiles(paths);
    app.session_title = title;
    app.restore(restored);
    if let Some(notice) = profile_notice {
        tracing::warn!("{notice}");
        app.notify_long(notice, true);
    } else if let Some(notice) = fitted {
        tracing::info!("{notice}");
        app.notify_long(notice, false);
    }
    let transcripts = TranscriptWriter::new(&home, &session, &profile_spec, app.settings.model.clone());
    let started_in = session.clone();
    let attach = args.attach.clone().map(|url| event::Attach { url, api_key: args.api_key.clone() });
    let ctx = event::Context { paths: paths.clone(), overrides: args.overrides(), transcripts, attach };
    // All drivers: an attached TUI talks HTTP from this runtime.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    // The session in use at the end: another may have been opened in the app.
    let (outcome, session) = runtime.block_on(event::run(app, ctx));
    // A model still loading would hold the runtime's drop; the process is ending anyway.
    runtime.shutdown_background();
    // A session nothing was written to leaves no folder (they piled up, one per start). The one
    // in use at the end lives in the data dir unless it is the one resumed by its path.
    let home = if session == started_in { home } else { dir };
    let kept = !release_session_if_empty(&home, &session);
    outcome?;
    if kept {
        eprintln!("cohort: session {session} (transcripts in {})", home.join(&session).display());
    }
    Ok(())
}

/// The profile to start with, the way its session records it (for `--resume`), and a notice
/// when a recorded profile could not be used. An explicit `--profile` wins (and a bad one is an
/// error); else the resumed session's `recorded` profile; a recorded one that is gone or no
/// longer parses falls back to the default profile, with a notice saying so.
pub fn startup_profile(
    explicit: Option<&str>,
    recorded: Option<&str>,
    paths: &Paths,
) -> Result<(LoadedProfile, String, Option<String>)> {
    if explicit.is_none()
        && let Some(spec) = recorded
    {
        match load_profile(spec, paths) {
            Ok(loaded) => return Ok((loaded, spec.to_owned(), None)),
            Err(e) => {
                let loaded = load_startup_profile(None, paths)?;
                let notice =
                    format!("the session's profile {spec} could not be loaded ({e:#}); using {} instead", loaded.name);
                let name = loaded.name.clone();
                return Ok((loaded, name, Some(notice)));
            }
        }
    }
    let loaded = load_startup_profile(explicit, paths)?;
    let spec = match explicit {
        Some(s) => recorded_profile(s),
        None => loaded.name.clone(),
    };
    Ok((loaded, spec, None))
}

/// A profile as a session records it (for `--resume`): a name as it is; a file by its absolute
/// path, so a resume from another folder finds it.
pub fn recorded_profile(spec: &str) -> String {
    if spec.contains('/') || spec.ends_with(".toml") {
        std::fs::canonicalize(spec).map(|p| p.display().to_string()).unwrap_or_else(|_| spec.to_owned())
    } else {
        spec.to_owned()
    }
}
