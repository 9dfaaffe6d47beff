//! The TUI attached to a running `cohort serve` (`cohort --attach URL`): its panes chat through
//! the server's API and its inspector draws the server's telemetry. A real server process on
//! the default model; the app and the event loop's bridge as `cohort` runs them, views drawn on
//! ratatui's TestBackend.

use crate::common;

use std::time::{Duration, Instant};

use cohort::client::RemoteEngine;
use cohort::engine::request::FinishReason;
use cohort::engine::telemetry::RowState;
use cohort::tui::action::{Action, Effect, EngineSummary};
use cohort::tui::app::{App, InspectorPanel};
use cohort::tui::bridge::{Backend, Bridge};
use cohort::tui::{fixture, views};
use common::server::Server;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn screen(app: &App) -> String {
    let mut terminal = Terminal::new(TestBackend::new(160, 40)).unwrap();
    terminal.draw(|f| views::draw(f, app)).unwrap();
    let buffer = terminal.backend().buffer();
    let width = buffer.area.width as usize;
    let cells: Vec<&str> = buffer.content().iter().map(|c| c.symbol()).collect();
    cells.chunks(width).map(|row| row.concat()).collect::<Vec<_>>().join("\n")
}

/// Run the bridge and the app as the event loop does, until nothing is pending.
async fn pump(app: &mut App, bridge: &mut Bridge, until: impl Fn(&App) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !until(app) {
        assert!(Instant::now() < deadline, "the attached panes did not get there");
        for action in bridge.drain() {
            app.update(action);
        }
        if let Some(t) = bridge.telemetry() {
            app.update(Action::Telemetry(Box::new(t)));
        }
        // The streams are tasks on this runtime: yield to them.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn attached_panes_chat_through_the_server_and_the_inspector_shows_its_engine() {
    let server = Server::start("attached_panes_chat_through_the_server_and_the_inspector_shows_its_engine", &[]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let remote = RemoteEngine::connect(&server.base, None).await.unwrap();
        assert_eq!(remote.info.mode, "mtp");
        let summary = EngineSummary::from_server(&remote.info, &server.base, 0.0);
        let mut bridge = Bridge::default();
        bridge.attach(Backend::Remote(remote));
        let mut app = fixture::app(3, "dark");
        app.update(Action::EngineReady(Box::new(summary)));
        app.inspector = Some(InspectorPanel::Cohort);
        app.settings.max_tokens = 40;
        app.settings.ignore_eos = true;
        for (i, pane) in app.panes.iter_mut().enumerate() {
            pane.input.set(&format!("Tell me about the sea, {i}."));
        }
        // Pane 2 decodes ar (its own mode), the others in the server's mode.
        let mut plain = app.settings.chat();
        plain.mode = Some(cohort::engine::request::GenerationMode::Ar);
        app.panes[1].settings = Some(plain);
        let mut ids = Vec::new();
        for effect in app.handle_key(KeyEvent::new(KeyCode::F(5), KeyModifiers::NONE)) {
            if let Effect::Submit { pane, mut request } = effect {
                if ids.len() == 2 {
                    // The third answer is long: it is cancelled while it streams.
                    request.max_tokens = 3000;
                }
                ids.push(request.id.clone());
                bridge.submit(pane, request);
            }
        }
        assert_eq!(ids.len(), 3, "send-all sent every pane");
        // While they stream, the inspector shows the server's lane.
        pump(&mut app, &mut bridge, |app| app.telemetry.lane_cycles > 0 && app.telemetry.active >= 2).await;
        let busy = screen(&app);
        assert!(busy.contains(&format!("@ {}", server.base)), "the model line names the server:\n{busy}");
        assert!(busy.contains("cycles"), "the inspector shows the server's lane:\n{busy}");
        pump(&mut app, &mut bridge, |app| app.panes[0].state == RowState::Done && app.panes[1].state == RowState::Done)
            .await;
        bridge.cancel(&ids[2]);
        pump(&mut app, &mut bridge, |app| app.panes.iter().all(|p| !p.is_busy())).await;
        for (i, pane) in app.panes[..2].iter().enumerate() {
            let turn = &pane.turns[0];
            assert_eq!((turn.finish, turn.error.as_deref()), (Some(FinishReason::Length), None));
            let stats = turn.stats.as_ref().unwrap();
            assert_eq!(stats.completion_tokens, 40, "the server's usage");
            assert!(stats.real_width >= 2, "decoded beside the others on the server: {stats:?}");
            assert!(!stats.route.is_empty() && !turn.answer.is_empty());
            let mode = if i == 1 { "Ar" } else { "Mtp" };
            assert_eq!(format!("{:?}", stats.mode), format!("Some({mode})"), "the mode the server ran pane {}", i + 1);
            if i == 1 {
                assert_eq!(stats.acceptance_rate, 0.0, "an ar row drafts nothing: {stats:?}");
            }
        }
        let cancelled = &app.panes[2];
        assert_eq!(cancelled.state, RowState::Cancelled);
        assert!(!cancelled.turns[0].answer.is_empty(), "the cancelled pane keeps what it got");
    });
    // The server freed the cancelled row when the stream was dropped.
    let h = server.wait_idle(Duration::from_secs(5));
    assert_eq!(h["status"], "ready");
}
