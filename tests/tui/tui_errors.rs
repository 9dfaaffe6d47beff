//! A request's error in the TUI shows in its own pane only, and the other panes' rows keep
//! running: the app builds the requests, the event loop's bridge submits them to a real engine
//! (the fixture model) and drains the engine's events back into the app, as `cohort` does.

use crate::common;

use std::time::{Duration, Instant};

use cohort::config::model_args::ModelArgs;
use cohort::engine::owner::EngineSetup;
use cohort::engine::request::FinishReason;
use cohort::engine::row::RowEvent;
use cohort::engine::scheduler::{Numerics, Preset};
use cohort::engine::telemetry::RowState;
use cohort::tui::action::{Action, Effect};
use cohort::tui::app::App;
use cohort::tui::bridge::{Backend, Bridge};
use cohort::tui::{fixture, views};
use common::fixture as fixture_dir;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// One pane drawn alone, as text.
fn pane_screen(app: &App, index: usize) -> String {
    let mut terminal = Terminal::new(TestBackend::new(70, 18)).unwrap();
    terminal.draw(|f| views::pane::draw(f, f.area(), app, index)).unwrap();
    let buffer = terminal.backend().buffer();
    let width = buffer.area.width as usize;
    let cells: Vec<&str> = buffer.content().iter().map(|c| c.symbol()).collect();
    cells.chunks(width).map(|row| row.concat()).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_request_error_shows_in_its_pane_only_and_the_other_rows_keep_running() {
    let args =
        ModelArgs { model: Some(fixture_dir("qwen35_moe_4bit").display().to_string()), dtype: None, weights: None };
    let setup = EngineSetup {
        scheduler: Preset::Throughput.config(),
        numerics: Numerics::Throughput,
        mode: None,
        serial: false,
        allow_inexact: false,
    };
    let mut bridge = Bridge::default();
    bridge.attach(Backend::Local(args.start_engine(setup).unwrap()));

    let mut app = fixture::app(4, "dark");
    app.settings.max_tokens = 48;
    app.settings.ignore_eos = true;
    const BAD: usize = 1;
    for (i, pane) in app.panes.iter_mut().enumerate() {
        // The BAD pane's prompt is longer than the fixture's 4096-position context window.
        pane.input.set(&if i == BAD { "a heron stood ".repeat(2000) } else { format!("The boat {i}") });
    }
    for effect in app.handle_key(KeyEvent::new(KeyCode::F(5), KeyModifiers::NONE)) {
        if let Effect::Submit { pane, request } = effect {
            bridge.submit(pane, request);
        }
    }
    assert_eq!(bridge.pending(), 4, "send-all sends every pane");

    let bad_id = app.panes[BAD].id;
    let mut busy_when_the_error_showed = None;
    let mut deltas_after_the_error = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while bridge.pending() > 0 {
        assert!(Instant::now() < deadline, "the requests did not finish");
        for action in bridge.drain() {
            let (pane, event_done, is_delta) = match &action {
                Action::Row { pane, event, .. } => {
                    (*pane, matches!(event, RowEvent::Done(_)), matches!(event, RowEvent::Delta { .. }))
                }
                _ => unreachable!("the bridge drains row events only"),
            };
            let effects = app.update(action);
            assert!(!effects.iter().any(|e| matches!(e, Effect::Cancel { .. })), "an error cancels nothing");
            if pane == bad_id && event_done {
                busy_when_the_error_showed =
                    Some(app.panes.iter().enumerate().filter(|(i, p)| *i != BAD && p.is_busy()).count());
            } else if is_delta && busy_when_the_error_showed.is_some() {
                deltas_after_the_error += 1;
            }
        }
        if let Some(t) = bridge.telemetry() {
            app.update(Action::Telemetry(Box::new(t)));
        }
        std::thread::sleep(Duration::from_millis(1));
    }

    let bad = &app.panes[BAD];
    assert_eq!(bad.state, RowState::Error);
    let error = bad.turns[0].error.clone().expect("the failed turn keeps its error");
    assert!(error.contains("context window"), "{error}");
    // The pane shows the message's start; the others show no error at all.
    let shown: String = error.chars().take(30).collect();
    let screen = pane_screen(&app, BAD);
    assert!(screen.contains(&shown), "pane {BAD} does not show {shown:?}:\n{screen}");
    assert_eq!(busy_when_the_error_showed, Some(3), "the other panes were still generating when the error came");
    assert!(deltas_after_the_error > 0, "the other panes streamed on after the error");
    for (i, pane) in app.panes.iter().enumerate().filter(|(i, _)| *i != BAD) {
        let turn = &pane.turns[0];
        assert_eq!(
            (pane.state, turn.finish, turn.error.as_deref()),
            (RowState::Done, Some(FinishReason::Length), None)
        );
        let stats = turn.stats.as_ref().unwrap();
        assert_eq!((stats.completion_tokens, stats.real_width), (48, 3), "pane {i}: one cohort of the three");
        assert!(!turn.answer.is_empty());
        let screen = pane_screen(&app, i);
        assert!(!screen.contains(&shown) && !screen.contains("✖ error:"), "pane {i} shows an error:\n{screen}");
    }

    // The failed message does not poison the pane: the next prompt there is answered (before,
    // it was sent again with every later prompt, which failed the same way until ctrl+l).
    app.focus = BAD;
    app.panes[BAD].input.set("The boat again");
    for effect in app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)) {
        if let Effect::Submit { pane, request } = effect {
            bridge.submit(pane, request);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while bridge.pending() > 0 {
        assert!(Instant::now() < deadline, "the request did not finish");
        for action in bridge.drain() {
            app.update(action);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let turn = app.panes[BAD].turns.last().unwrap();
    assert_eq!((turn.finish, turn.error.as_deref()), (Some(FinishReason::Length), None), "the next prompt works");
    assert!(pane_screen(&app, BAD).contains("not sent with later prompts"));
}

/// Started without a terminal (a pipe, a CI job), the TUI says what it needs and what to use
/// instead, and leaves no empty session folder behind (before: "os error 6", and a folder per try).
#[test]
fn without_a_terminal_the_tui_says_so_and_leaves_no_session_folder() {
    let home = tempfile::tempdir().unwrap();
    let model = fixture_dir("qwen35_moe_4bit");
    for _ in 0..2 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["--model", model.to_str().unwrap()])
            .env("COHORT_HOME", home.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("needs a terminal") && stderr.contains("cohort generate"), "{stderr}");
        assert!(!stderr.contains("os error"), "{stderr}");
    }
    let sessions = home.path().join("data").join("transcripts");
    let left = std::fs::read_dir(&sessions).map(|d| d.count()).unwrap_or(0);
    assert_eq!(left, 0, "empty session folders in {}", sessions.display());
}

/// `--panes 0` names the flag (before, it blamed the built-in profile's file).
#[test]
fn a_bad_panes_flag_is_reported_as_the_flag() {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
        .args(["--panes", "0"])
        .env("COHORT_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--panes 0") && !stderr.contains(".toml"), "{stderr}");
}
