//! The context window in view (issue 54): a pane counts its draft with the model's own tokenizer
//! and chat template once the draft settles, shows it against the window before it is sent, and
//! a message that would overflow is not sent: enter offers to leave out the fewest oldest turns
//! that make room (a second enter does it, marked in the pane and the transcript; esc keeps
//! everything), and a message too long on its own is refused with the text kept in the box.

use crate::common;

use std::time::Instant;

use cohort::config::keymap::Command;
use cohort::engine::request::{FinishReason, Prompt};
use cohort::model::text::tokenizer::TextTokenizer;
use cohort::tui::action::{Action, Effect};
use cohort::tui::app::{App, EngineStatus};
use cohort::tui::fixture;
use cohort::tui::transcript::{Record, TranscriptWriter, read_pane};
use cohort::tui::window::{PromptCounter, SETTLE_TICKS};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

/// One pane on a `window`-token model whose drafts are counted with a real tokenizer and chat
/// template (the Qwen3.5 fixture's).
fn app(window: i32) -> App {
    let mut app = fixture::app(1, "dark");
    let tokenizer = TextTokenizer::load(&common::fixture("qwen35_moe_4bit")).unwrap();
    let EngineStatus::Ready(summary) = &mut app.engine else { panic!("the fixture's engine is ready") };
    summary.counter = Some(PromptCounter::new(tokenizer));
    summary.max_context = window;
    app
}

fn counter(app: &App) -> PromptCounter {
    let EngineStatus::Ready(summary) = &app.engine else { panic!("ready") };
    summary.counter.clone().unwrap()
}

/// Ticks until the draft settles, each count asked for carried out as the event loop does.
/// Returns how many counts were asked for.
fn settle(app: &mut App) -> usize {
    let mut asked = 0;
    for _ in 0..=SETTLE_TICKS {
        for effect in app.update(Action::Tick) {
            if let Effect::CountDraft { pane, key, messages } = effect {
                asked += 1;
                let counted = counter(app).count(&messages).ok();
                app.update(Action::DraftCounted { pane, key, counted });
            }
        }
    }
    asked
}

fn screen(app: &App) -> String {
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    terminal.draw(|f| cohort::tui::views::draw(f, app)).unwrap();
    let buffer = terminal.backend().buffer();
    (0..buffer.area.height)
        .map(|y| (0..buffer.area.width).map(|x| buffer[(x, y)].symbol()).collect::<String>() + "\n")
        .collect()
}

fn send(app: &mut App) -> Vec<Effect> {
    app.update(Action::Command(Command::Send))
}

fn submitted(fx: &[Effect]) -> Option<Vec<String>> {
    fx.iter().find_map(|e| match e {
        Effect::Submit { request, .. } => match &request.prompt {
            Prompt::Chat(m) => Some(m.iter().map(|m| m.content.clone()).collect()),
            _ => None,
        },
        _ => None,
    })
}

/// Three finished turns with answers of ~60 words each.
fn three_turns(app: &mut App) {
    let answer = "word ".repeat(60);
    for q in ["first question", "second question", "third question"] {
        fixture::play(app, 0, q, &answer, Some(FinishReason::Stop), Instant::now());
    }
}

#[test]
fn a_settled_draft_is_counted_once_and_shown_against_the_window() {
    let mut app = app(4096);
    app.panes[0].input.set("What is the capital of France?");
    assert_eq!(settle(&mut app), 1);
    assert_eq!(settle(&mut app), 0, "a draft unchanged is not counted again");
    let key = app.draft_key_of(0);
    let counted = app.panes[0].window.count_of(key).expect("counted");
    let alone = counter(&app).text("What is the capital of France?").unwrap();
    assert_eq!(counted.draft, alone);
    assert!(counted.prompt > counted.draft, "the template adds tokens: {counted:?}");
    let max_tokens = app.chat_settings(0).max_tokens;
    let shown = format!("draft {alone} tok · {} + {max_tokens} of 4096", counted.prompt);
    assert!(screen(&app).contains(&shown), "{shown:?} not on\n{}", screen(&app));

    // A changed draft shows no stale count until it is counted in turn.
    app.panes[0].input.set("What is the capital of France? And of Spain?");
    app.update(Action::Tick);
    assert!(!screen(&app).contains("draft "), "a stale count is shown");
    assert_eq!(settle(&mut app), 1);
    assert!(screen(&app).contains("draft "));
}

#[test]
fn a_message_that_would_overflow_offers_to_leave_out_the_oldest_turns() {
    let mut app = app(4096);
    three_turns(&mut app);
    let max_tokens = app.chat_settings(0).max_tokens;
    // A window that holds the draft with the last two turns but not with all three.
    let draft = "And a fourth question?";
    app.panes[0].input.set(draft);
    settle(&mut app);
    let full = app.panes[0].window.count_of(app.draft_key_of(0)).unwrap().prompt;
    let window = full + max_tokens + 2 - 30;
    let EngineStatus::Ready(summary) = &mut app.engine else { unreachable!() };
    summary.max_context = window as i32;
    assert!(screen(&app).contains("offers to leave out old turns"), "{}", screen(&app));

    let fx = send(&mut app);
    assert_eq!(submitted(&fx), None, "sent over the window");
    assert_eq!(app.panes[0].input.text(), draft, "the draft left the box");
    let notice = app.notice.clone().expect("an offer is shown");
    assert!(notice.text.contains("leaves out the oldest 1 turn"), "{notice:?}");

    // esc keeps everything; the next enter offers again.
    app.update(Action::Command(Command::Cancel));
    assert!(app.panes[0].window.offer.is_none());
    assert!(app.panes[0].turns.iter().all(|t| !t.dropped));
    assert_eq!(submitted(&send(&mut app)), None);

    // Accepted: the oldest turn is left out (recorded), and the rest is sent.
    let fx = send(&mut app);
    let messages = submitted(&fx).expect("sent after the second enter");
    assert!(!messages.iter().any(|m| m == "first question"), "{messages:?}");
    assert!(messages.iter().any(|m| m == "second question") && messages.last().unwrap() == draft);
    let dropped: Vec<&str> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Record { record: Record::Dropped { request }, .. } => Some(request.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(dropped, [app.panes[0].turns[0].request_id.as_str()]);
    assert!(app.panes[0].turns[0].dropped && !app.panes[0].turns[1].dropped);
    assert!(screen(&app).contains("left out to fit the context window"), "{}", screen(&app));
}

#[test]
fn a_message_too_long_on_its_own_is_refused_and_kept() {
    let mut app = app(64);
    three_turns(&mut app);
    let draft = "tell me about ".repeat(20);
    app.panes[0].input.set(&draft);
    settle(&mut app);
    let fx = send(&mut app);
    assert_eq!(submitted(&fx), None);
    assert_eq!(app.panes[0].input.text(), draft);
    let notice = app.notice.clone().expect("said why");
    assert!(notice.error && notice.text.contains("even without the earlier turns"), "{notice:?}");
    assert!(app.panes[0].turns.iter().all(|t| !t.dropped));
}

#[test]
fn a_draft_not_counted_yet_goes_and_the_engine_decides() {
    let mut app = app(64);
    three_turns(&mut app);
    app.panes[0].input.set(&"tell me about ".repeat(20));
    assert!(submitted(&send(&mut app)).is_some());
}

#[test]
fn turns_left_out_stay_left_out_when_a_session_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = TranscriptWriter::new(dir.path(), "s", "p", None);
    for (request, text) in [("r1", "one"), ("r2", "two")] {
        writer
            .append(1, &Record::User { request: request.into(), text: text.into(), replaces: None, system: None })
            .unwrap();
    }
    writer.append(1, &Record::Dropped { request: "r1".into() }).unwrap();
    let file = std::fs::read_dir(dir.path().join("s")).unwrap().next().unwrap().unwrap().path();
    let (turns, _) = read_pane(&file).unwrap();
    assert_eq!(turns.iter().map(|t| t.dropped).collect::<Vec<_>>(), [true, false]);
}
