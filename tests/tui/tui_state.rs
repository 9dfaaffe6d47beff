//! Key sequences and engine events through `App::update`, with no terminal and no engine: the
//! effects returned are what the event loop would carry out.

use std::collections::BTreeMap;
use std::time::Instant;

use cohort::config::keymap::{Command, KeyList, Keymap};
use cohort::config::profile::Settings;
use cohort::config::theme::Theme;
use cohort::engine::request::{FinishReason, GenerationMode, Prompt, RequestResult};
use cohort::engine::row::RowEvent;
use cohort::engine::telemetry::RowState;
use cohort::tui::action::{Action, Effect, OpenedSession, ProfileSwitch};
use cohort::tui::app::{App, InspectorPanel, Overlay, SessionMode};
use cohort::tui::fixture;
use cohort::tui::input::InputLine;
use cohort::tui::transcript::Record;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}
fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}
fn alt(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::ALT)
}

fn type_text(app: &mut App, text: &str) -> Vec<Effect> {
    text.chars().flat_map(|c| app.handle_key(key(KeyCode::Char(c)))).collect()
}

fn submits(fx: &[Effect]) -> Vec<(u32, String)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Submit { pane, request } => match &request.prompt {
                Prompt::Chat(m) => Some((*pane, m.last().unwrap().content.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn cancels(fx: &[Effect]) -> Vec<String> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Cancel { request } => Some(request.clone()),
            _ => None,
        })
        .collect()
}

fn request_id(app: &App, index: usize) -> String {
    app.panes[index].in_flight.as_ref().expect("in flight").id.clone()
}

fn deliver(app: &mut App, index: usize, event: RowEvent) -> Vec<Effect> {
    let pane = app.panes[index].id;
    app.update(Action::Row { pane, event, at: Instant::now() })
}

fn finish(app: &mut App, index: usize, reason: FinishReason, text: &str) -> Vec<Effect> {
    let mut result = RequestResult::error(&request_id(app, index), String::new());
    result.finish_reason = reason;
    result.error = None;
    result.text = text.into();
    deliver(app, index, RowEvent::Done(Box::new(result)))
}

#[test]
fn focus_moves_by_number_tab_and_direction() {
    let mut app = fixture::app(8, "dark");
    app.handle_key(alt(KeyCode::Char('3')));
    assert_eq!(app.focus, 2);
    app.handle_key(key(KeyCode::Tab));
    assert_eq!(app.focus, 3);
    app.handle_key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT));
    assert_eq!(app.focus, 2);
    app.handle_key(alt(KeyCode::Down));
    assert_eq!(app.focus, 6, "8 panes are 4 columns by 2 rows");
    app.handle_key(alt(KeyCode::Right));
    assert_eq!(app.focus, 7);
    app.handle_key(alt(KeyCode::Right));
    assert_eq!(app.focus, 7, "the grid's edge stops focus");
    app.handle_key(alt(KeyCode::Char('9')));
    assert_eq!(app.focus, 7);
}

#[test]
fn enter_sends_the_focused_input_as_a_chat() {
    let mut app = fixture::app(4, "dark");
    app.handle_key(alt(KeyCode::Char('2')));
    type_text(&mut app, "hello there");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert_eq!(submits(&fx), [(2, "hello there".to_owned())]);
    assert!(matches!(&fx[0], Effect::Record { pane: 2, record: Record::User { text, .. } } if text == "hello there"));
    assert_eq!(app.panes[1].state, RowState::Queued);
    assert!(app.panes[1].input.text().is_empty());
    // Empty input sends nothing.
    assert!(app.handle_key(key(KeyCode::Enter)).is_empty());
}

#[test]
fn send_all_submits_every_pending_input_together() {
    let mut app = fixture::app(8, "dark");
    for i in 0..8u8 {
        app.handle_key(alt(KeyCode::Char((b'1' + i) as char)));
        type_text(&mut app, &format!("prompt {i}"));
    }
    let fx = app.handle_key(key(KeyCode::F(5)));
    let sent = submits(&fx);
    assert_eq!(sent.len(), 8);
    for (i, (pane, text)) in sent.iter().enumerate() {
        assert_eq!((*pane, text.as_str()), (i as u32 + 1, format!("prompt {i}").as_str()));
    }
    assert_eq!(app.busy_panes(), 8);
}

#[test]
fn send_all_with_only_the_focused_input_broadcasts_it() {
    let mut app = fixture::app(4, "dark");
    type_text(&mut app, "same question");
    let fx = app.handle_key(key(KeyCode::F(5)));
    let sent = submits(&fx);
    assert_eq!(sent.len(), 4);
    assert!(sent.iter().all(|(_, t)| t == "same question"));
    assert!(app.panes.iter().all(|p| p.input.text().is_empty()));
}

#[test]
fn esc_cancels_only_the_focused_generation_and_keeps_the_partial_answer() {
    let mut app = fixture::app(4, "dark");
    type_text(&mut app, "go");
    app.handle_key(key(KeyCode::F(5)));
    let id = request_id(&app, 2);
    deliver(&mut app, 2, RowEvent::Delta { id: id.clone(), text: "partial ".into(), ids: vec![1] });
    app.handle_key(alt(KeyCode::Char('3')));
    let fx = app.handle_key(key(KeyCode::Esc));
    assert_eq!(cancels(&fx), std::slice::from_ref(&id));
    // A second press does not cancel twice.
    assert!(cancels(&app.handle_key(key(KeyCode::Esc))).is_empty());
    let fx = finish(&mut app, 2, FinishReason::Cancelled, "partial answer");
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Record { record: Record::Done { finish: FinishReason::Cancelled, .. }, .. }))
    );
    assert_eq!(app.panes[2].state, RowState::Cancelled);
    assert_eq!(app.panes[2].turns[0].answer, "partial answer");
    for other in [0, 1, 3] {
        assert!(app.panes[other].is_busy(), "pane {other} keeps generating");
    }
}

#[test]
fn a_queued_or_prefilling_request_can_be_cancelled() {
    let mut app = fixture::app(2, "dark");
    type_text(&mut app, "wait");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(app.panes[0].state, RowState::Queued);
    assert_eq!(cancels(&app.handle_key(key(KeyCode::Esc))), [request_id(&app, 0)]);
    finish(&mut app, 0, FinishReason::Cancelled, "");
    assert_eq!(app.panes[0].state, RowState::Cancelled);

    type_text(&mut app, "again");
    app.handle_key(key(KeyCode::Enter));
    let id = request_id(&app, 0);
    deliver(&mut app, 0, RowEvent::Prefill { id: id.clone(), done: 5, total: 40 });
    assert_eq!(app.panes[0].state, RowState::Prefill);
    assert_eq!(cancels(&app.handle_key(ctrl('c'))), [id], "ctrl+c cancels when the pane generates");
}

#[test]
fn ctrl_c_quits_when_nothing_generates_and_asks_twice_otherwise() {
    let mut app = fixture::app(2, "dark");
    app.handle_key(ctrl('c'));
    assert!(app.should_quit);

    let mut app = fixture::app(2, "dark");
    app.handle_key(alt(KeyCode::Char('2')));
    type_text(&mut app, "busy");
    app.handle_key(key(KeyCode::Enter));
    app.handle_key(alt(KeyCode::Char('1')));
    assert!(app.handle_key(ctrl('c')).is_empty());
    assert!(!app.should_quit, "pane 2 is generating: the first press only warns");
    let fx = app.handle_key(ctrl('c'));
    assert!(app.should_quit);
    assert_eq!(cancels(&fx), [request_id(&app, 1)], "quitting cancels what still runs");
}

#[test]
fn ctrl_q_quits() {
    let mut app = fixture::app(1, "dark");
    app.handle_key(ctrl('q'));
    assert!(app.should_quit);
}

#[test]
fn zoom_toggles_and_esc_leaves_it() {
    let mut app = fixture::app(4, "dark");
    app.handle_key(ctrl('z'));
    assert!(app.zoomed);
    app.handle_key(ctrl('z'));
    assert!(!app.zoomed);
    app.handle_key(key(KeyCode::F(11)));
    app.handle_key(key(KeyCode::Esc));
    assert!(!app.zoomed);
}

#[test]
fn inspector_toggles_and_cycles_panels() {
    let mut app = fixture::app(2, "dark");
    app.handle_key(ctrl('t'));
    assert_eq!(app.inspector, Some(InspectorPanel::All));
    app.handle_key(key(KeyCode::F(4)));
    assert_eq!(app.inspector, Some(InspectorPanel::Rows));
    app.handle_key(key(KeyCode::F(4)));
    assert_eq!(app.inspector, Some(InspectorPanel::Cohort));
    app.handle_key(ctrl('t'));
    assert_eq!(app.inspector, None);
}

#[test]
fn question_mark_opens_help_only_on_an_empty_input() {
    let mut app = fixture::app(1, "dark");
    app.handle_key(key(KeyCode::Char('?')));
    assert_eq!(app.overlay(), Some(&Overlay::Help { scroll: 0 }));
    app.handle_key(key(KeyCode::Esc));
    assert_eq!(app.overlay(), None);
    type_text(&mut app, "why?");
    assert_eq!(app.panes[0].input.text(), "why?");
    assert_eq!(app.overlay(), None);
}

#[test]
fn save_profile_asks_for_a_name_and_saves_the_current_settings() {
    let mut app = fixture::app(4, "dark");
    for _ in 0..4 {
        app.handle_key(ctrl('n'));
    }
    app.handle_key(ctrl('s'));
    assert!(matches!(app.overlay(), Some(Overlay::SaveProfile { .. })));
    app.handle_key(ctrl('u'));
    // A name that is not safe as a file name is refused as typed, not silently changed.
    type_text(&mut app, "my test!");
    assert!(app.handle_key(key(KeyCode::Enter)).is_empty(), "not saved under another name");
    assert!(matches!(app.overlay(), Some(Overlay::SaveProfile { name }) if name.text() == "my test!"));
    let notice = app.notice.as_ref().expect("the refusal says why").text.clone();
    assert!(notice.contains("' '") && notice.contains("'!'"), "{notice}");
    app.handle_key(ctrl('u'));
    type_text(&mut app, "my-test");
    let fx = app.handle_key(key(KeyCode::Enter));
    match &fx[..] {
        [Effect::SaveProfile { name, profile }] => {
            assert_eq!(name, "my-test");
            assert_eq!(profile.panes, Some(8), "the panes open now, not the profile's count");
            assert_eq!(profile.model.as_deref(), Some("tests/fixtures/qwen35_moe_4bit"));
        }
        other => panic!("expected one SaveProfile, got {other:?}"),
    }
    assert_eq!(app.overlay(), None);
}

#[test]
fn the_picker_loads_the_chosen_profile() {
    let mut app = fixture::app(1, "dark");
    app.profiles = fixture::shipped_profiles();
    app.handle_key(ctrl('p'));
    app.handle_key(key(KeyCode::Down));
    let fx = app.handle_key(key(KeyCode::Enter));
    assert!(matches!(&fx[..], [Effect::LoadProfile { spec }] if spec == "balanced"));
}

#[test]
fn a_profile_needing_a_new_engine_waits_for_idle_panes() {
    let mut app = fixture::app(2, "dark");
    let mut settings = fixture::settings(4);
    settings.model = Some("another-model".into());
    let switch = || ProfileSwitch {
        settings: settings.clone(),
        theme: Theme::builtin("light"),
        keymap: Keymap::default(),
        spec: "another".into(),
    };
    type_text(&mut app, "busy");
    app.handle_key(key(KeyCode::Enter));
    assert!(app.update(Action::ProfileLoaded(Box::new(switch()))).is_empty(), "refused: not recorded either");
    assert_eq!(app.theme.name, "dark", "refused while generating");
    finish(&mut app, 0, FinishReason::Stop, "ok");
    let fx = app.update(Action::ProfileLoaded(Box::new(switch())));
    // Recorded for `--resume` (issue 40: a profile switched in the app was not).
    assert!(matches!(&fx[..], [Effect::RecordProfile { spec }, Effect::RestartEngine] if spec == "another"), "{fx:?}");
    assert_eq!((app.theme.name.as_str(), app.panes.len()), ("light", 4));
}

#[test]
fn later_turns_carry_the_conversation() {
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "answer one");
    type_text(&mut app, "second");
    let fx = app.handle_key(key(KeyCode::Enter));
    let Some(Effect::Submit { request, .. }) = fx.iter().find(|e| matches!(e, Effect::Submit { .. })) else {
        panic!("no submit")
    };
    let Prompt::Chat(messages) = &request.prompt else { panic!("not a chat") };
    let turns: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
    assert_eq!(turns, [("user", "first"), ("assistant", "answer one"), ("user", "second")]);
    // Up recalls earlier prompts.
    app.handle_key(key(KeyCode::Up));
    assert_eq!(app.panes[0].input.text(), "second");
    app.handle_key(key(KeyCode::Up));
    assert_eq!(app.panes[0].input.text(), "first");
}

#[test]
fn copy_asks_for_the_last_answer() {
    let mut app = fixture::app(1, "dark");
    assert!(app.handle_key(ctrl('y')).is_empty(), "nothing to copy yet");
    type_text(&mut app, "q");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "the answer");
    assert!(matches!(&app.handle_key(ctrl('y'))[..], [Effect::Copy { text }] if text == "the answer"));
}

#[test]
fn panes_can_be_added_closed_and_cleared() {
    let mut app = fixture::app(2, "dark");
    app.handle_key(ctrl('n'));
    assert_eq!((app.panes.len(), app.focus), (3, 2));
    app.handle_key(ctrl('x'));
    assert_eq!(app.panes.len(), 2);
    type_text(&mut app, "q");
    app.handle_key(key(KeyCode::Enter));
    let focus = app.focus;
    finish(&mut app, focus, FinishReason::Stop, "a");
    let fx = app.handle_key(ctrl('l'));
    assert!(matches!(&fx[..], [Effect::Record { record: Record::Clear, .. }]));
    assert!(app.focused().turns.is_empty());
}

#[test]
fn profile_keys_rebind_commands() {
    let keys = BTreeMap::from([("send_all".to_owned(), KeyList::One("ctrl+g".into()))]);
    let keymap = Keymap::with_overrides(&keys, "test.toml").unwrap();
    let mut app = App::new(fixture::settings(2), Theme::builtin("dark"), keymap, fixture::SESSION);
    type_text(&mut app, "x");
    assert_eq!(submits(&app.handle_key(ctrl('g'))).len(), 2);
    assert_eq!(app.keymap.lookup(&key(KeyCode::F(5))), None, "the override replaces the defaults");
    assert_eq!(app.keymap.lookup(&ctrl('g')), Some(Command::SendAll));
}

#[test]
fn a_row_that_finished_early_shows_done_before_its_result_arrives() {
    let mut app = fixture::app(2, "dark");
    type_text(&mut app, "q");
    app.handle_key(key(KeyCode::Enter));
    let id = request_id(&app, 0);
    deliver(&mut app, 0, RowEvent::Delta { id: id.clone(), text: "a".into(), ids: vec![1] });
    let mut telemetry = cohort::engine::telemetry::Telemetry::default();
    telemetry.rows.push(cohort::engine::telemetry::RowTelemetry { id, state: RowState::Done, ..Default::default() });
    app.update(Action::Telemetry(Box::new(telemetry)));
    assert_eq!((app.panes[0].state, app.panes[0].row), (RowState::Done, Some(0)));
    assert!(app.panes[0].is_busy(), "the result itself has not come yet");
}

/// An over-context message fails; it stays on screen, marked, but is not sent again: the next
/// prompt carries only the conversation that worked (before, every later prompt failed the same
/// way until ctrl+l). Up still recalls the failed text, to shorten it and send it again.
#[test]
fn a_failed_message_does_not_poison_later_prompts() {
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "answer one");
    let long = "a heron stood ".repeat(40);
    app.panes[0].input.set(&long);
    app.handle_key(key(KeyCode::Enter));
    let id = request_id(&app, 0);
    let refused = RequestResult::refused(&id, "10014 tokens: over the 4096-token context window".into());
    deliver(&mut app, 0, RowEvent::Done(Box::new(refused)));
    assert_eq!(app.panes[0].state, RowState::Error);
    assert_eq!(app.panes[0].turns.len(), 2, "the failed message stays visible");

    type_text(&mut app, "second");
    let fx = app.handle_key(key(KeyCode::Enter));
    let Some(Effect::Submit { request, .. }) = fx.iter().find(|e| matches!(e, Effect::Submit { .. })) else {
        panic!("no submit")
    };
    let Prompt::Chat(messages) = &request.prompt else { panic!("not a chat") };
    let turns: Vec<(&str, &str)> = messages.iter().map(|m| (m.role.as_str(), m.content.as_str())).collect();
    assert_eq!(turns, [("user", "first"), ("assistant", "answer one"), ("user", "second")]);
    finish(&mut app, 0, FinishReason::Stop, "answer two");
    app.handle_key(key(KeyCode::Up));
    app.handle_key(key(KeyCode::Up));
    assert_eq!(app.panes[0].input.text(), long, "up recalls the failed message");
}

/// A conversation nearing the context window warns once, when an answer takes it past 80%.
#[test]
fn a_conversation_near_the_context_window_warns() {
    let mut app = fixture::app(1, "dark");
    let answer = |app: &mut App, prompt_tokens: usize| {
        type_text(app, "q");
        app.handle_key(key(KeyCode::Enter));
        let mut result = RequestResult::ended(&request_id(app, 0), FinishReason::Stop);
        result.text = "a".into();
        (result.stats.prompt_tokens, result.stats.completion_tokens) = (prompt_tokens, 100);
        deliver(app, 0, RowEvent::Done(Box::new(result)));
        app.notice.as_ref().map(|n| n.text.clone())
    };
    assert_eq!(answer(&mut app, 1000), None);
    let warning = answer(&mut app, 3400).expect("a warning past 80%");
    assert!(warning.contains("85%") && warning.contains("ctrl+l"), "{warning}");
    assert_eq!(app.panes[0].context_tokens(), 3500);
}

/// In zoom, esc means "back": it leaves zoom and cancels nothing; a second esc cancels.
#[test]
fn esc_in_zoom_leaves_zoom_without_cancelling() {
    let mut app = fixture::app(2, "dark");
    type_text(&mut app, "go");
    app.handle_key(key(KeyCode::Enter));
    app.handle_key(ctrl('z'));
    assert!(app.zoomed);
    assert!(cancels(&app.handle_key(key(KeyCode::Esc))).is_empty(), "esc in zoom cancels nothing");
    assert!(!app.zoomed && app.panes[0].is_busy());
    assert_eq!(cancels(&app.handle_key(key(KeyCode::Esc))), [request_id(&app, 0)], "out of zoom, esc cancels");
}

/// ctrl+c with a conversation or unsent text on screen asks first: a second press within 2 s
/// quits, with a hint in the bottom bar meanwhile; later, the first press asks again.
#[test]
fn ctrl_c_after_an_answer_asks_before_quitting() {
    let mut app = fixture::app(2, "dark");
    type_text(&mut app, "q");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "the answer");
    app.handle_key(ctrl('c'));
    assert!(!app.should_quit, "an answer on screen: the first press only asks");
    let hint = app.notice.as_ref().expect("a hint").text.clone();
    assert!(hint.contains("ctrl+c again") && hint.contains("quit"), "{hint}");
    for _ in 0..3 * cohort::tui::app::TICKS_PER_S {
        app.update(Action::Tick);
    }
    app.handle_key(ctrl('c'));
    assert!(!app.should_quit, "the first press expired: this one asks again");
    app.handle_key(ctrl('c'));
    assert!(app.should_quit);

    // Unsent text counts too.
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "half a thought");
    app.handle_key(ctrl('c'));
    assert!(!app.should_quit);
    app.handle_key(ctrl('c'));
    assert!(app.should_quit);
}

/// alt+enter (and shift+enter, where the terminal reports it) starts a new line, as in other chat
/// tools; sending every pane moved to f5 / ctrl+g.
#[test]
fn alt_enter_and_shift_enter_insert_a_newline() {
    let mut app = fixture::app(2, "dark");
    type_text(&mut app, "first line");
    assert!(app.handle_key(alt(KeyCode::Enter)).is_empty());
    assert!(app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::SHIFT)).is_empty());
    type_text(&mut app, "third");
    assert_eq!(app.panes[0].input.text(), "first line\n\nthird");
    assert!(app.panes.iter().all(|p| !p.is_busy()), "nothing was sent");
    assert_eq!(submits(&app.handle_key(ctrl('g'))).len(), 2, "ctrl+g sends to every pane");
}

/// Enter on a pane that is still answering queues the message: the box empties, the pane shows
/// it as next, and it is sent when the answer ends. So no refused text is left in the box for a
/// later send-all to pick up (before, it stayed there and a broadcast from another pane sent it
/// instead of broadcasting).
#[test]
fn enter_on_a_busy_pane_queues_the_message_until_the_answer_ends() {
    let mut app = fixture::app(3, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    type_text(&mut app, "follow-up");
    assert!(submits(&app.handle_key(key(KeyCode::Enter))).is_empty(), "not sent while answering");
    assert!(app.panes[0].input.text().is_empty(), "the box is free again");
    assert_eq!(app.panes[0].queued.as_deref(), Some("follow-up"));
    let notice = app.notice.as_ref().unwrap().text.clone();
    assert!(notice.contains("when the answer ends"), "{notice}");

    // A broadcast from pane 2 goes to the idle panes and leaves pane 1's queued message alone.
    app.handle_key(alt(KeyCode::Char('2')));
    type_text(&mut app, "everyone");
    let sent = submits(&app.handle_key(key(KeyCode::F(5))));
    assert_eq!(sent, [(2, "everyone".to_owned()), (3, "everyone".to_owned())]);
    let notice = app.notice.as_ref().unwrap().text.clone();
    assert!(notice.contains("panes 2, 3") && notice.contains("pane 1 is busy"), "{notice}");

    let fx = finish(&mut app, 0, FinishReason::Stop, "answer one");
    assert_eq!(submits(&fx), [(1, "follow-up".to_owned())], "the queued message goes when the answer ends");
    assert_eq!(app.panes[0].queued, None);
    let Some(Effect::Submit { request, .. }) = fx.iter().find(|e| matches!(e, Effect::Submit { .. })) else { panic!() };
    let Prompt::Chat(messages) = &request.prompt else { panic!() };
    assert_eq!(messages.len(), 3, "it follows the answer it waited for");
}

/// esc cancels the answer and puts a queued message back in the box, to edit or send.
#[test]
fn esc_puts_a_queued_message_back_in_the_box() {
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    type_text(&mut app, "next");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(cancels(&app.handle_key(key(KeyCode::Esc))).len(), 1);
    assert_eq!((app.panes[0].queued.as_deref(), app.panes[0].input.text()), (None, "next"));
    assert!(submits(&finish(&mut app, 0, FinishReason::Cancelled, "")).is_empty());
}

fn mouse(kind: crossterm::event::MouseEventKind, column: u16, row: u16) -> crossterm::event::MouseEvent {
    crossterm::event::MouseEvent { kind, column, row, modifiers: KeyModifiers::NONE }
}

/// Draw once (the panes learn their page size and how far they can scroll), as the loop does
/// before any click can land.
fn draw(app: &App, width: u16, height: u16) -> Rect {
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, height)).unwrap();
    terminal.draw(|frame| cohort::tui::views::draw(frame, app)).unwrap().area
}

/// Two panes, the second showing `answer` to `prompt` (ended with `finish`, or still streaming), the
/// focus on the first: the app, its 80x24 frame and a point inside the second pane.
fn over_the_second_pane(prompt: &str, answer: &str, finish: Option<FinishReason>) -> (App, Rect, (u16, u16)) {
    let mut app = fixture::app(2, "dark");
    fixture::play(&mut app, 1, prompt, answer, finish, Instant::now());
    app.focus = 0;
    let area = draw(&app, 80, 24);
    let (_, second) = app.screen(area).panes[1];
    (app, area, (second.x + 4, second.y + 4))
}

/// Issue 40: a click focuses the pane under the pointer; clicks on the bars, the inspector or
/// between panes change nothing.
#[test]
fn a_click_focuses_the_pane_under_the_pointer() {
    use crossterm::event::{MouseButton, MouseEventKind};
    let mut app = fixture::app(4, "dark");
    app.inspector = Some(InspectorPanel::All);
    let area = draw(&app, 160, 40);
    let screen = app.screen(area);
    let (_, third) = screen.panes[2];
    app.handle_mouse(mouse(MouseEventKind::Down(MouseButton::Left), third.x + 3, third.y + 2), area);
    assert_eq!(app.focus, 2, "a click on pane 3 focuses it");
    // The bars and the inspector: nothing happens.
    for (column, row) in [(5, 0), (5, area.height - 1), (screen.inspector.unwrap().x + 2, 5)] {
        let fx = app.handle_mouse(mouse(MouseEventKind::Down(MouseButton::Left), column, row), area);
        assert!(fx.is_empty());
        assert_eq!(app.focus, 2, "a click at ({column}, {row}) moved the focus");
    }
    // A help overlay takes the clicks.
    app.handle_key(key(KeyCode::Char('?')));
    let (_, first) = screen.panes[0];
    app.handle_mouse(mouse(MouseEventKind::Down(MouseButton::Left), first.x + 1, first.y + 1), area);
    assert_eq!(app.focus, 2);
}

/// Issue 40: the wheel scrolls the pane under the pointer, focused or not, with the page keys'
/// semantics: scrolled up it holds still, back at the bottom it follows the newest text again.
#[test]
fn the_wheel_scrolls_the_pane_under_the_pointer() {
    use crossterm::event::MouseEventKind;
    let long: String = (1..=60).map(|i| format!("line {i}\n")).collect();
    let (mut app, area, (column, row)) = over_the_second_pane("many lines", &long, None);
    app.handle_mouse(mouse(MouseEventKind::ScrollUp, column, row), area);
    assert_eq!(app.focus, 0, "the wheel does not move the focus");
    assert_eq!(app.panes[0].scroll_top, None);
    let top = app.panes[1].scroll_top.expect("wheel up on pane 2 scrolls pane 2");
    app.handle_mouse(mouse(MouseEventKind::ScrollUp, column, row), area);
    let higher = app.panes[1].scroll_top.unwrap();
    assert!(higher < top, "a second notch goes further up ({higher} < {top})");
    // Text streaming in does not move a scrolled view.
    let id = request_id(&app, 1);
    deliver(&mut app, 1, RowEvent::Delta { id, text: "line 61\n".into(), ids: vec![1] });
    draw(&app, 80, 24);
    assert_eq!(app.panes[1].scroll_top, Some(higher));
    for _ in 0..40 {
        app.handle_mouse(mouse(MouseEventKind::ScrollDown, column, row), area);
        draw(&app, 80, 24);
    }
    assert_eq!(app.panes[1].scroll_top, None, "wheeled back to the bottom, the view follows again");
}

/// Issue 40 (item 5): the sideways wheel scrolls the code blocks of the pane under the pointer,
/// focused or not, and never past the end of its widest code line; other panes keep theirs.
#[test]
fn the_sideways_wheel_scrolls_code_in_the_pane_under_the_pointer() {
    use crossterm::event::MouseEventKind;
    let code = format!("```\n{}\n```\n", "x".repeat(200));
    let (mut app, area, (column, row)) = over_the_second_pane("a long line", &code, Some(FinishReason::Stop));
    app.handle_mouse(mouse(MouseEventKind::ScrollRight, column, row), area);
    assert_eq!(app.focus, 0, "the wheel does not move the focus");
    assert_eq!(app.panes[0].code_scroll, 0);
    let step = app.panes[1].code_scroll;
    assert!(step > 0, "wheel right on pane 2 scrolls pane 2's code");
    for _ in 0..100 {
        app.handle_mouse(mouse(MouseEventKind::ScrollRight, column, row), area);
    }
    let max = app.panes[1].code_scroll;
    assert!(max < 200 && max > 150, "stops at the end of the 200-cell line ({max})");
    let mut terminal = ratatui::Terminal::new(ratatui::backend::TestBackend::new(80, 24)).unwrap();
    terminal.draw(|frame| cohort::tui::views::draw(frame, &app)).unwrap();
    let text = terminal.backend().to_string();
    assert!(text.contains("│…xxxxxxxx"), "the right pane shows code hidden on its left:\n{text}");
    app.handle_mouse(mouse(MouseEventKind::ScrollLeft, column, row), area);
    assert_eq!(app.panes[1].code_scroll, max - step);
    // A new conversation starts with its code at the left edge.
    app.focus = 1;
    app.update(Action::Command(Command::ClearPane));
    assert_eq!(app.panes[1].code_scroll, 0);
}

/// Issue 40: a warning shown at start-up (a resumed session's profile that is gone) is not
/// replaced by the model's "loaded" line.
#[test]
fn a_start_up_warning_outlasts_the_loaded_notice() {
    let mut app = App::new(fixture::settings(1), Theme::builtin("dark"), Keymap::default(), fixture::SESSION);
    app.notify_long("the session's profile gone could not be loaded".into(), true);
    for _ in 0..(6 * cohort::tui::app::TICKS_PER_S) {
        app.update(Action::Tick);
    }
    app.update(Action::EngineReady(Box::new(cohort::tui::action::EngineSummary {
        model: "m".into(),
        mode: "mtp".into(),
        numerics: "throughput".into(),
        weights: "kernel".into(),
        probe: None,
        max_context: 4096,
        load_s: 6.0,
        counter: None,
    })));
    let notice = app.notice.as_ref().expect("still shown");
    assert!(notice.error && notice.text.contains("profile gone"), "{notice:?}");
}

/// The request among `fx`, and its conversation as (role, text) pairs.
fn the_request(fx: &[Effect]) -> (&cohort::engine::request::Request, Vec<(String, String)>) {
    let Some(Effect::Submit { request, .. }) = fx.iter().find(|e| matches!(e, Effect::Submit { .. })) else {
        panic!("no submit in {fx:?}")
    };
    let Prompt::Chat(messages) = &request.prompt else { panic!("not a chat") };
    (request, messages.iter().map(|m| (m.role.clone(), m.content.clone())).collect())
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(r, t)| ((*r).to_owned(), (*t).to_owned())).collect()
}

/// Two finished turns in pane 1: "first" → "answer one", `second` → "answer two".
fn two_turns(second: &str) -> App {
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "answer one");
    type_text(&mut app, second);
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "answer two");
    app
}

/// Issue 40: f2 puts the last message back in the box; sent, it replaces that message and its
/// answer (on screen, in what later prompts carry, in the transcript) instead of following them.
#[test]
fn an_edited_message_replaces_the_last_turn() {
    let mut app = two_turns("secnod");
    let old = app.panes[0].turns[1].request_id.clone();
    assert!(app.handle_key(key(KeyCode::F(2))).is_empty());
    assert_eq!(app.panes[0].input.text(), "secnod");
    assert_eq!(app.panes[0].editing.as_deref(), Some(old.as_str()));
    app.handle_key(ctrl('u'));
    type_text(&mut app, "second");
    let fx = app.handle_key(key(KeyCode::Enter));
    let (request, messages) = the_request(&fx);
    assert_eq!(messages, pairs(&[("user", "first"), ("assistant", "answer one"), ("user", "second")]));
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Record { record: Record::User { text, replaces: Some(r), .. }, .. }
            if text == "second" && *r == old)),
        "the transcript records what it replaces: {fx:?}"
    );
    let users: Vec<&str> = app.panes[0].turns.iter().map(|t| t.user.as_str()).collect();
    assert_eq!(users, ["first", "second"], "the old question and its answer are gone from the view");
    assert_eq!(app.panes[0].turns[1].request_id, request.id);
    assert_eq!(app.panes[0].editing, None);
    finish(&mut app, 0, FinishReason::Stop, "answer two, again");
    // The next message follows the edited turn.
    type_text(&mut app, "third");
    let (_, messages) = the_request(&app.handle_key(key(KeyCode::Enter)));
    assert_eq!(messages[3], ("assistant".to_owned(), "answer two, again".to_owned()));
    assert_eq!(messages.len(), 5);
}

/// f2 refuses (and says why) on a busy pane, an empty pane, or over unsent text; esc stops
/// editing and keeps the text, which then goes as a new message.
#[test]
fn editing_refuses_what_it_would_lose_and_esc_stops_it() {
    let mut app = fixture::app(1, "dark");
    app.handle_key(key(KeyCode::F(2)));
    assert!(app.notice.as_ref().unwrap().text.contains("nothing to edit"));
    let mut app = two_turns("second");
    type_text(&mut app, "unsent");
    app.handle_key(key(KeyCode::F(2)));
    assert_eq!(app.panes[0].input.text(), "unsent", "unsent text is never overwritten");
    assert!(app.notice.as_ref().unwrap().text.contains("unsent"), "{:?}", app.notice);
    app.handle_key(key(KeyCode::Enter));
    app.handle_key(key(KeyCode::F(2)));
    assert_eq!(app.panes[0].editing, None, "not while it answers");
    assert!(app.notice.as_ref().unwrap().text.contains("answering"), "{:?}", app.notice);
    finish(&mut app, 0, FinishReason::Stop, "answer three");

    app.handle_key(key(KeyCode::F(2)));
    assert!(app.panes[0].editing.is_some());
    assert!(cancels(&app.handle_key(key(KeyCode::Esc))).is_empty());
    assert_eq!((app.panes[0].editing.as_deref(), app.panes[0].input.text()), (None, "unsent"));
    let fx = app.handle_key(key(KeyCode::Enter));
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Record { record: Record::User { replaces: None, .. }, .. })),
        "after esc the text goes as a new message"
    );
    assert_eq!(app.panes[0].turns.len(), 4);
}

/// ctrl+r asks the last question again: the new answer replaces the old one (with another seed,
/// so a sampled answer can differ); refused while the pane answers or has nothing to ask.
#[test]
fn regenerate_asks_the_last_question_again_in_place_of_its_answer() {
    let mut app = fixture::app(1, "dark");
    app.handle_key(ctrl('r'));
    assert!(app.notice.as_ref().unwrap().text.contains("nothing to regenerate"));
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "answer one");
    type_text(&mut app, "second");
    let fx = app.handle_key(key(KeyCode::Enter));
    let (old_id, old_seed) = (the_request(&fx).0.id.clone(), the_request(&fx).0.seed);
    app.handle_key(ctrl('r'));
    assert!(app.notice.as_ref().unwrap().text.contains("answering"), "not while it answers");
    finish(&mut app, 0, FinishReason::Stop, "answer two");
    type_text(&mut app, "kept in the box");

    let fx = app.handle_key(ctrl('r'));
    let (request, messages) = the_request(&fx);
    assert_eq!(messages, pairs(&[("user", "first"), ("assistant", "answer one"), ("user", "second")]));
    assert_ne!(request.seed, old_seed, "another seed: a sampled answer can come out differently");
    assert!(fx.iter().any(|e| matches!(e, Effect::Record { record: Record::User { replaces: Some(r), .. }, .. }
        if *r == old_id)));
    let pane = &app.panes[0];
    assert_eq!(pane.turns.len(), 2);
    assert_eq!((pane.turns[1].user.as_str(), pane.turns[1].answer.as_str()), ("second", ""));
    assert_eq!(pane.input.text(), "kept in the box", "the box is not touched");
    assert_eq!(app.keymap.describe_keys(Command::Regenerate), "ctrl+r");
    assert_eq!(app.keymap.describe_keys(Command::EditLast), "f2");
}

/// Issue 40: alt+s asks for the focused pane's conversation as Markdown (the loop writes it and
/// says where); a pane with no conversation says so instead.
#[test]
fn export_writes_the_conversation_as_markdown() {
    let mut app = fixture::mixed(4, "dark");
    app.settings.system = Some("Answer briefly.".into());
    app.focus = 2;
    let fx = app.handle_key(alt(KeyCode::Char('s')));
    let [Effect::Export { pane, turns, markdown }] = &fx[..] else { panic!("one export: {fx:?}") };
    assert_eq!((*pane, *turns), (3, 1));
    insta::assert_snapshot!("export_of_a_cancelled_answer", markdown);
    app.focus = 3;
    let fx = app.handle_key(KeyEvent::new(KeyCode::F(9), KeyModifiers::NONE));
    let [Effect::Export { markdown, .. }] = &fx[..] else { panic!("one export: {fx:?}") };
    assert!(markdown.contains("**Error:** the cohort lane was poisoned"), "{markdown}");
    app.focus = 1;
    let fx = app.handle_key(alt(KeyCode::Char('s')));
    let [Effect::Export { markdown, .. }] = &fx[..] else { panic!("one export: {fx:?}") };
    assert!(markdown.contains("still answering"), "{markdown}");

    let mut app = fixture::app(1, "dark");
    assert!(app.handle_key(alt(KeyCode::Char('s'))).is_empty());
    assert!(app.notice.as_ref().unwrap().text.contains("nothing to export"), "{:?}", app.notice);
}

/// Issue 40: alt+y picks any message of the focused pane (up/down or k/j move, home/end jump),
/// enter or y copies it through the same copy as ctrl+y, esc leaves; keys never reach the box.
#[test]
fn any_message_can_be_picked_and_copied() {
    let mut app = fixture::app(1, "dark");
    assert!(app.handle_key(alt(KeyCode::Char('y'))).is_empty());
    assert!(app.notice.as_ref().unwrap().text.contains("nothing to copy"), "{:?}", app.notice);
    assert_eq!(app.overlay(), None);

    let mut app = two_turns("second");
    app.handle_key(alt(KeyCode::Char('y')));
    assert_eq!(app.overlay(), Some(&Overlay::Select { index: 3, code: 0 }), "the newest answer first");
    app.handle_key(key(KeyCode::Up));
    app.handle_key(key(KeyCode::Char('k')));
    let fx = app.handle_key(key(KeyCode::Enter));
    assert!(matches!(&fx[..], [Effect::Copy { text }] if text == "answer one"), "{fx:?}");
    assert_eq!(app.overlay(), None);

    app.handle_key(alt(KeyCode::Char('y')));
    for _ in 0..5 {
        app.handle_key(key(KeyCode::Char('k')));
    }
    assert_eq!(app.overlay(), Some(&Overlay::Select { index: 0, code: 0 }), "the first message stops it");
    app.handle_key(key(KeyCode::Char('j')));
    app.handle_key(key(KeyCode::End));
    app.handle_key(key(KeyCode::Home));
    let fx = app.handle_key(key(KeyCode::Char('y')));
    assert!(matches!(&fx[..], [Effect::Copy { text }] if text == "first"), "{fx:?}");

    app.handle_key(alt(KeyCode::Char('y')));
    assert!(app.handle_key(key(KeyCode::Char('x'))).is_empty());
    assert!(app.overlay().is_some(), "a stray key keeps the choice open");
    assert!(app.handle_key(key(KeyCode::Esc)).is_empty());
    assert_eq!(app.overlay(), None);
    assert_eq!(app.panes[0].input.text(), "", "nothing was typed into the box");
}

/// Issue 40: ctrl+o hands the focused input to an external editor (the loop suspends the screen
/// and runs it); what the editor saved comes back into that pane's box, even if the focus moved.
#[test]
fn the_external_editor_gets_the_input_and_gives_it_back() {
    let mut app = fixture::app(2, "dark");
    app.handle_key(alt(KeyCode::Char('2')));
    type_text(&mut app, "a long prompt, begun here");
    let fx = app.handle_key(ctrl('o'));
    let [Effect::Edit { pane, text }] = &fx[..] else { panic!("one edit: {fx:?}") };
    assert_eq!((*pane, text.as_str()), (2, "a long prompt, begun here"));
    app.handle_key(alt(KeyCode::Char('1')));
    app.update(Action::Edited { pane: 2, text: "a long prompt,\nfinished in the editor".into() });
    assert_eq!(app.panes[1].input.text(), "a long prompt,\nfinished in the editor");
    assert_eq!(app.panes[0].input.text(), "");
    assert!(submits(&app.handle_key(alt(KeyCode::Char('2')))).is_empty(), "nothing is sent by itself");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert_eq!(submits(&fx), [(2, "a long prompt,\nfinished in the editor".to_owned())]);
}

/// An edit sent with send-all replaces its own pane's turn; the panes it is broadcast to get it
/// as a new message.
#[test]
fn an_edit_broadcast_replaces_only_its_own_turn() {
    let mut app = fixture::app(2, "dark");
    for pane in 0..2 {
        app.focus = pane;
        type_text(&mut app, "q");
        app.handle_key(key(KeyCode::Enter));
        finish(&mut app, pane, FinishReason::Stop, "a");
    }
    app.focus = 0;
    app.handle_key(key(KeyCode::F(2)));
    type_text(&mut app, " again");
    let fx = app.handle_key(key(KeyCode::F(5)));
    assert_eq!(submits(&fx), [(1, "q again".to_owned()), (2, "q again".to_owned())]);
    let replaces: Vec<(u32, bool)> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Record { pane, record: Record::User { replaces, .. } } => Some((*pane, replaces.is_some())),
            _ => None,
        })
        .collect();
    assert_eq!(replaces, [(1, true), (2, false)]);
    assert_eq!((app.panes[0].turns.len(), app.panes[1].turns.len()), (1, 2));
}

/// Issue 40 (item 2): one key cancels every running answer (queued, prefilling or decoding);
/// partial answers stay, queued follow-ups go back to their boxes, idle panes are untouched.
#[test]
fn cancel_all_cancels_every_running_answer() {
    let mut app = fixture::app(4, "dark");
    let fx = app.handle_key(alt(KeyCode::Char('c')));
    assert!(cancels(&fx).is_empty());
    let notice = app.notice.as_ref().unwrap();
    assert!(notice.error && notice.text.contains("nothing to cancel"), "{notice:?}");

    type_text(&mut app, "go");
    app.handle_key(key(KeyCode::F(5)));
    finish(&mut app, 1, FinishReason::Stop, "done early");
    let id = request_id(&app, 2);
    deliver(&mut app, 2, RowEvent::Delta { id, text: "partial ".into(), ids: vec![1] });
    // Pane 1 has a follow-up queued behind its answer.
    type_text(&mut app, "follow-up");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(app.panes[0].queued.as_deref(), Some("follow-up"));
    let running = [request_id(&app, 0), request_id(&app, 2), request_id(&app, 3)];

    let fx = app.handle_key(key(KeyCode::F(8)));
    assert_eq!(cancels(&fx), running, "every running answer, in pane order; pane 2 had finished");
    let notice = &app.notice.as_ref().unwrap().text;
    assert!(notice.contains("cancelling 3 answers (panes 1, 3, 4)"), "{notice}");
    assert_eq!((app.panes[0].queued.as_deref(), app.panes[0].input.text()), (None, "follow-up"));
    // Pressed again before the results arrive: nothing is cancelled twice.
    assert!(cancels(&app.handle_key(alt(KeyCode::Char('c')))).is_empty());

    for i in [0, 2, 3] {
        assert!(submits(&finish(&mut app, i, FinishReason::Cancelled, "")).is_empty(), "pane {i} sends nothing");
        assert_eq!(app.panes[i].state, RowState::Cancelled);
    }
    assert_eq!(app.panes[2].turns[0].answer, "partial ");
    assert_eq!(app.panes[1].state, RowState::Done);
    assert_eq!(Keymap::default().describe_keys(Command::CancelAll), "alt+c / f8");
}

/// Open the focused pane's settings (alt+,), set `(field, text)` pairs (fields counted from the
/// top: 0 system prompt, 1 temperature, 2 top_p, 3 top_k, 4 max_tokens, 5 presence_penalty,
/// 6 frequency_penalty, 7 generation mode), then press `then`.
fn set_settings(app: &mut App, fields: &[(usize, &str)], then: KeyEvent) -> Vec<Effect> {
    assert!(app.handle_key(KeyEvent::new(KeyCode::Char(','), KeyModifiers::ALT)).is_empty());
    assert!(matches!(app.overlay(), Some(Overlay::Settings(_))), "alt+, opens the settings");
    let mut at = 0;
    for &(field, text) in fields {
        while at < field {
            app.handle_key(key(KeyCode::Down));
            at += 1;
        }
        while at > field {
            app.handle_key(key(KeyCode::Up));
            at -= 1;
        }
        app.handle_key(ctrl('u'));
        type_text(app, text);
    }
    app.handle_key(then)
}

fn settings_records(fx: &[Effect]) -> Vec<(u32, Option<cohort::config::profile::ChatSettings>)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Record { pane, record: Record::Settings { settings } } => Some((*pane, settings.clone())),
            _ => None,
        })
        .collect()
}

/// Issue 40 (item 2): a pane's own system prompt, temperature, top_k and max_tokens go with its
/// requests and no other pane's; the transcript records them; esc leaves everything as it was.
#[test]
fn a_panes_own_settings_go_with_its_requests_only() {
    let mut app = fixture::app(2, "dark");
    let form = |app: &App| match app.overlay() {
        Some(Overlay::Settings(form)) => form.inputs.iter().map(|i| i.text().to_owned()).collect::<Vec<_>>(),
        other => panic!("no settings form: {other:?}"),
    };
    app.handle_key(KeyEvent::new(KeyCode::Char(','), KeyModifiers::ALT));
    assert_eq!(form(&app), ["", "0.6", "0.95", "20", "512", "0", "0", ""], "the form opens with the profile's values");
    app.handle_key(key(KeyCode::Esc));

    let fx = set_settings(&mut app, &[(0, "Be terse."), (1, "0.2"), (3, "40"), (4, "64")], key(KeyCode::Enter));
    assert_eq!(app.overlay(), None);
    let own = app.panes[0].settings.clone().expect("pane 1 has its own settings");
    let s = &own.sampler;
    assert_eq!(
        (own.system.as_deref(), s.temperature, s.top_p, s.top_k, own.max_tokens),
        (Some("Be terse."), 0.2, 0.95, 40, 64)
    );
    assert_eq!(settings_records(&fx), [(1, Some(own.clone()))], "recorded for --resume");
    assert_eq!(app.panes[1].settings, None, "pane 2 keeps the profile's");
    let notice = &app.notice.as_ref().unwrap().text;
    assert!(notice.contains("pane 1") && notice.contains("t0.2 p0.95 k40 max64 sys"), "{notice}");

    type_text(&mut app, "hi");
    let fx = app.handle_key(key(KeyCode::Enter));
    let (request, messages) = the_request(&fx);
    assert_eq!(messages, pairs(&[("system", "Be terse."), ("user", "hi")]));
    assert_eq!((request.sampler, request.max_tokens), (own.sampler, 64));

    app.handle_key(alt(KeyCode::Char('2')));
    type_text(&mut app, "hi");
    let fx = app.handle_key(key(KeyCode::Enter));
    let (request, messages) = the_request(&fx);
    assert_eq!(messages, pairs(&[("user", "hi")]));
    assert_eq!((request.sampler, request.max_tokens), (app.settings.sampler, 512));

    // esc closes the form and changes nothing.
    assert!(set_settings(&mut app, &[(1, "1.5")], key(KeyCode::Esc)).is_empty());
    assert_eq!((app.overlay(), app.panes[1].settings.as_ref()), (None, None));
}

/// Issue 40 (item 2): values the engine would refuse are refused in the form, with a message
/// naming the field (the engine's own words for the sampler), and that field focused.
#[test]
fn bad_settings_are_refused_naming_the_field() {
    let mut app = fixture::app(1, "dark");
    let cases: [(usize, &str, &[&str]); 9] = [
        (2, "1.5", &["top_p = 1.5", "(0, 1]"]),
        (1, "warm", &["temperature", "\"warm\" is not a number"]),
        (1, "-1", &["temperature = -1", ">= 0"]),
        (3, "5000", &["top_k = 5000", "1024"]),
        (3, "2.5", &["top_k", "whole number"]),
        (4, "0", &["max_tokens = 0", "at least 1"]),
        (4, "5000", &["max_tokens = 5000", "context window of 4096"]),
        (6, "inf", &["frequency_penalty = inf", "finite"]),
        (7, "fast", &["mode: \"fast\" is not a mode", "mtp or ar"]),
    ];
    for (field, text, words) in cases {
        let fx = set_settings(&mut app, &[(field, text)], key(KeyCode::Enter));
        assert!(fx.is_empty(), "{text}: nothing applied");
        let Some(Overlay::Settings(form)) = app.overlay() else { panic!("{text}: the form stays open") };
        let error = form.error.clone().expect("the form says why");
        assert!(words.iter().all(|w| error.contains(w)), "{text}: {error}");
        assert_eq!(form.field, field, "{text}: the field at fault is focused");
        // Typing clears the message; esc closes the form.
        app.handle_key(key(KeyCode::End));
        let Some(Overlay::Settings(form)) = app.overlay() else { panic!() };
        assert_eq!(form.error, None);
        app.handle_key(key(KeyCode::Esc));
        assert_eq!((app.overlay(), app.panes[0].settings.as_ref()), (None, None));
    }
}

/// Issue 40 (item 2): ctrl+g applies the form to every pane (a running answer keeps the values
/// it started with); ctrl+d puts the profile's values back in the form, and a pane given them
/// follows the profile again.
#[test]
fn settings_go_to_every_pane_and_back_to_the_profile() {
    let mut app = fixture::app(3, "dark");
    type_text(&mut app, "running");
    app.handle_key(key(KeyCode::Enter));
    let fx = set_settings(&mut app, &[(1, "0")], ctrl('g'));
    let records = settings_records(&fx);
    assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(app.panes.iter().all(|p| p.settings.as_ref().is_some_and(|s| s.sampler.temperature == 0.0)));
    let notice = &app.notice.as_ref().unwrap().text;
    assert!(notice.contains("every pane") && notice.contains("greedy max512"), "{notice}");
    assert!(notice.contains("pane 1's running answer keeps"), "{notice}");

    app.handle_key(KeyEvent::new(KeyCode::Char(','), KeyModifiers::ALT));
    app.handle_key(ctrl('d'));
    let Some(Overlay::Settings(form)) = app.overlay() else { panic!() };
    assert_eq!(form.inputs[1].text(), "0.6", "the profile's temperature is back in the form");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert_eq!(settings_records(&fx), [(1, None)], "pane 1 follows the profile again");
    assert_eq!(app.panes[0].settings, None);
    assert!(app.panes[1].settings.is_some() && app.panes[2].settings.is_some());
}

/// Issue 40 (item 2): a profile's `[pane.N]` tables give panes their own settings at start, and
/// saving a profile writes each pane's own settings back as `[pane.N]`.
#[test]
fn profiles_carry_each_panes_own_settings() {
    let mut settings = fixture::settings(3);
    let mut own = settings.chat();
    own.system = Some("Answer in French.".into());
    own.sampler.top_k = 5;
    own.mode = Some(GenerationMode::Ar);
    settings.pane_settings.insert(2, own.clone());
    let mut app = App::new(settings, Theme::builtin("dark"), Keymap::default(), fixture::SESSION);
    assert_eq!(app.panes.iter().map(|p| p.settings.clone()).collect::<Vec<_>>(), [None, Some(own.clone()), None]);
    app.handle_key(alt(KeyCode::Char('2')));
    type_text(&mut app, "bonjour");
    let fx = app.handle_key(key(KeyCode::Enter));
    let (request, messages) = the_request(&fx);
    assert_eq!((messages[0].1.as_str(), request.sampler.top_k, request.mode), ("Answer in French.", 5, own.mode));

    app.handle_key(ctrl('s'));
    app.handle_key(ctrl('u'));
    type_text(&mut app, "french");
    let fx = app.handle_key(key(KeyCode::Enter));
    let [Effect::SaveProfile { profile, .. }] = &fx[..] else { panic!("{fx:?}") };
    assert_eq!(profile.pane.keys().collect::<Vec<_>>(), ["2"], "only the pane with its own settings");
    let saved = &profile.pane["2"];
    assert_eq!(saved.system.as_deref(), Some("Answer in French."));
    assert_eq!(saved.sampler.as_ref().and_then(|s| s.top_k), Some(5));
    assert_eq!(saved.mode, Some(GenerationMode::Ar));
    // Written as TOML and read back, the profile gives pane 2 the same settings, mode included.
    let text = toml::to_string(profile).unwrap();
    assert!(text.contains("[pane.2]") && text.contains("mode = \"ar\""), "{text}");
    let loaded = cohort::config::profile::LoadedProfile {
        name: "french".into(),
        origin: "french.toml".into(),
        profile: cohort::config::profile::parse_profile(&text, "french.toml").unwrap(),
    };
    let resolved = Settings::resolve(&loaded, &Default::default()).unwrap();
    assert_eq!((resolved.pane_start(2), resolved.pane_start(1)), (Some(own), None));
}

/// Issue 40 (item 2): a pane's own generation mode goes with its requests (None: the engine's),
/// is shown on the pane, and a blank field gives the pane the engine's mode back.
#[test]
fn a_panes_generation_mode_goes_with_its_requests() {
    let mut app = fixture::app(2, "dark");
    set_settings(&mut app, &[(7, "ar")], key(KeyCode::Enter));
    assert_eq!(app.panes[0].settings.as_ref().and_then(|s| s.mode), Some(GenerationMode::Ar));
    let notice = &app.notice.as_ref().unwrap().text;
    assert!(notice.contains("pane 1") && notice.ends_with("max512 ar from the next message on"), "{notice}");
    type_text(&mut app, "hi");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert_eq!(the_request(&fx).0.mode, Some(GenerationMode::Ar));
    app.handle_key(alt(KeyCode::Char('2')));
    type_text(&mut app, "hi");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert_eq!(the_request(&fx).0.mode, None, "pane 2 decodes in the engine's mode");

    app.handle_key(alt(KeyCode::Char('1')));
    let fx = set_settings(&mut app, &[(7, "MTP")], key(KeyCode::Enter));
    assert_eq!(settings_records(&fx)[0].1.as_ref().and_then(|s| s.mode), Some(GenerationMode::Mtp));
    let fx = set_settings(&mut app, &[(7, "")], key(KeyCode::Enter));
    assert_eq!(settings_records(&fx), [(1, None)], "a blank mode and the profile's values: the profile's again");
}

/// Issue 40 (item 3): alt+i drills into the focused pane's row of the inspector (opening the
/// inspector if hidden), up/down move to the other rows, esc (or alt+i again) comes back and
/// hides an inspector it opened; typing does not reach the input meanwhile. With no row yet it
/// says so.
#[test]
fn a_row_of_the_inspector_can_be_drilled_into() {
    let mut app = fixture::app(2, "dark");
    assert!(app.handle_key(alt(KeyCode::Char('i'))).is_empty());
    assert_eq!(app.overlay(), None);
    let notice = app.notice.as_ref().unwrap();
    assert!(notice.error && notice.text.contains("no row to inspect"), "{notice:?}");

    let mut app = fixture::mixed(4, "dark");
    let ids: Vec<String> = app.telemetry.rows.iter().map(|r| r.id.clone()).collect();
    assert_eq!(ids.len(), 4);
    app.handle_key(alt(KeyCode::Char('2')));
    app.handle_key(alt(KeyCode::Char('i')));
    assert_eq!(app.overlay(), Some(&Overlay::Row { id: ids[1].clone(), opened: true }), "the focused pane's row");
    assert_eq!(app.inspector, Some(InspectorPanel::All), "the inspector opens to show it");
    app.handle_key(key(KeyCode::Down));
    assert!(matches!(app.overlay(), Some(Overlay::Row { id, .. }) if *id == ids[2]));
    for _ in 0..5 {
        app.handle_key(key(KeyCode::Up));
    }
    assert!(matches!(app.overlay(), Some(Overlay::Row { id, .. }) if *id == ids[0]), "the first row stops it");
    type_text(&mut app, "x");
    assert!(app.panes[1].input.text().is_empty(), "keys stay in the drill-down");
    // A new snapshot keeps the row it shows, and the last one seen once the row has gone.
    let mut later = fixture::telemetry(&app);
    later.rows[0].tokens = 99;
    app.update(Action::Telemetry(Box::new(later.clone())));
    assert_eq!(app.row_seen.as_ref().map(|r| r.tokens), Some(99));
    later.rows.remove(0);
    app.update(Action::Telemetry(Box::new(later)));
    assert_eq!(app.row_seen.as_ref().map(|r| (r.id.as_str(), r.tokens)), Some((ids[0].as_str(), 99)));
    app.handle_key(key(KeyCode::Esc));
    assert_eq!((app.overlay(), app.inspector), (None, None), "back, and the inspector it opened hides");

    app.handle_key(ctrl('t'));
    app.handle_key(key(KeyCode::F(12)));
    assert!(matches!(app.overlay(), Some(Overlay::Row { opened: false, .. })));
    app.handle_key(alt(KeyCode::Char('i')));
    assert_eq!((app.overlay(), app.inspector), (None, Some(InspectorPanel::All)), "it stays open");
}

/// Issue 40 (item 3): a sent message remembers when (in ticks), so the queue panel can say how
/// long each waits.
#[test]
fn a_request_remembers_when_it_was_sent() {
    let mut app = fixture::app(1, "dark");
    for _ in 0..45 {
        app.update(Action::Tick);
    }
    type_text(&mut app, "hello");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(app.panes[0].in_flight.as_ref().map(|f| f.sent_tick), Some(45));
}

/// The records `fx` appends to pane `pane`'s transcript.
fn records_of(fx: &[Effect], pane: u32) -> Vec<&Record> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Record { pane: p, record } if *p == pane => Some(record),
            _ => None,
        })
        .collect()
}

/// Issue 40: alt+b picks a message of the focused pane (the newest first; up/down move) and
/// enter branches there: a new pane, focused, holds the conversation before a picked question
/// with that question in its box to edit and send, or the conversation up to a picked answer;
/// its transcript starts with a branch record and the turns it took; the source pane is left as
/// it was, and the two conversations go their own ways.
#[test]
fn a_conversation_branches_into_a_new_pane_at_any_message() {
    let mut app = fixture::app(1, "dark");
    assert!(app.handle_key(alt(KeyCode::Char('b'))).is_empty());
    assert!(app.notice.as_ref().unwrap().text.contains("nothing to branch"), "{:?}", app.notice);
    assert_eq!(app.overlay(), None);

    let mut app = two_turns("second");
    app.panes[0].settings = Some(app.settings.chat());
    app.handle_key(alt(KeyCode::Char('b')));
    assert_eq!(app.overlay(), Some(&Overlay::Branch { index: 3 }), "the newest answer first");
    app.handle_key(key(KeyCode::Up));
    let fx = app.handle_key(key(KeyCode::Enter));
    assert_eq!((app.overlay(), app.panes.len(), app.focus), (None, 2, 1));
    let (source, branch) = (&app.panes[0], &app.panes[1]);
    assert_eq!(branch.turns.iter().map(|t| t.user.as_str()).collect::<Vec<_>>(), ["first"]);
    assert_eq!(branch.input.text(), "second", "the picked question waits in the box");
    assert_eq!((branch.state, branch.settings.clone()), (RowState::Done, source.settings.clone()));
    assert_eq!(source.turns.len(), 2, "the source pane keeps its conversation");
    let records = records_of(&fx, branch.id);
    assert!(
        matches!(records[0], Record::Branch { pane: 1, request, answer: false } if *request == source.turns[1].request_id),
        "{records:?}"
    );
    assert!(matches!(records[1], Record::Settings { settings: Some(_) }), "{records:?}");
    assert!(matches!(records[2], Record::User { text, .. } if text == "first"), "{records:?}");
    assert!(
        matches!(records[3], Record::Done { text, finish: FinishReason::Stop, .. } if text == "answer one"),
        "{records:?}"
    );
    assert_eq!(records.len(), 4);
    assert!(app.notice.as_ref().unwrap().text.contains("pane 2 branches pane 1 at message 3"), "{:?}", app.notice);

    // The branch asks its own question with the conversation before it.
    app.handle_key(ctrl('u'));
    type_text(&mut app, "a different second");
    let (_, messages) = the_request(&app.handle_key(key(KeyCode::Enter)));
    assert_eq!(messages, pairs(&[("user", "first"), ("assistant", "answer one"), ("user", "a different second")]));

    // An answer picked: the branch holds the conversation up to it, and an empty box.
    app.handle_key(alt(KeyCode::Char('1')));
    app.handle_key(alt(KeyCode::Char('b')));
    app.handle_key(key(KeyCode::Char('b')));
    let branch = &app.panes[2];
    assert_eq!((app.focus, branch.turns.len(), branch.input.text()), (2, 2, ""));
    assert_eq!(branch.turns[1].answer, "answer two");
}

/// A branch is refused (saying why) at eight panes, and from an answer still being written; its
/// question can be branched from meanwhile. esc leaves the picker with nothing changed.
#[test]
fn a_branch_needs_room_and_a_finished_answer() {
    let mut app = fixture::app(8, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    app.handle_key(alt(KeyCode::Char('b')));
    assert!(app.handle_key(key(KeyCode::Enter)).is_empty());
    assert!(app.notice.as_ref().unwrap().text.contains("8 panes at most"), "{:?}", app.notice);
    assert_eq!((app.panes.len(), app.overlay()), (8, None));

    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "first");
    app.handle_key(key(KeyCode::Enter));
    let id = request_id(&app, 0);
    deliver(&mut app, 0, RowEvent::Delta { id, text: "so far".into(), ids: vec![1] });
    app.handle_key(alt(KeyCode::Char('b')));
    assert_eq!(app.overlay(), Some(&Overlay::Branch { index: 1 }));
    assert!(app.handle_key(key(KeyCode::Enter)).is_empty());
    assert!(app.notice.as_ref().unwrap().text.contains("still being written"), "{:?}", app.notice);
    assert_eq!(app.panes.len(), 1);
    assert!(app.handle_key(key(KeyCode::Esc)).is_empty());
    assert_eq!(app.overlay(), None);
    app.handle_key(alt(KeyCode::Char('b')));
    app.handle_key(key(KeyCode::Up));
    app.handle_key(key(KeyCode::Enter));
    assert_eq!((app.panes.len(), app.panes[1].turns.len(), app.panes[1].input.text()), (2, 0, "first"));
    assert!(app.panes[0].is_busy(), "the source pane's answer runs on");
}

fn entry(name: &str, turns: usize) -> cohort::tui::transcript::SessionEntry {
    cohort::tui::transcript::SessionEntry {
        name: name.into(),
        title: None,
        panes: 1,
        turns,
        first: Some(format!("the first question of {name}")),
        modified: 1_767_268_800,
    }
}

/// Issue 40: alt+o asks for the saved sessions and lists them on the one in use; r renames the
/// one picked (the keys edit its name, enter gives it), d asks before deleting it (y deletes;
/// the session in use is refused), enter opens it: its panes replace the ones on screen and
/// transcripts go on in its files. Keys never reach the box meanwhile.
#[test]
fn the_session_list_renames_deletes_and_opens_sessions() {
    let mut app = fixture::app(2, "dark");
    fixture::play(&mut app, 0, "a question", "an answer", Some(FinishReason::Stop), Instant::now());
    let current = app.session.clone();
    let fx = app.handle_key(alt(KeyCode::Char('o')));
    assert!(matches!(&fx[..], [Effect::ListSessions]), "{fx:?}");
    app.update(Action::Sessions(vec![entry("20260102-090000", 3), entry(&current, 2), entry("20251231-235959", 1)]));
    let picked = |app: &App| match app.overlay() {
        Some(Overlay::Sessions(open)) => (open.list[open.selected].name.clone(), open.mode.clone()),
        other => panic!("no session list: {other:?}"),
    };
    assert_eq!(picked(&app).0, current, "the list opens on the session in use");

    // The session in use is not deleted.
    assert!(app.handle_key(key(KeyCode::Char('d'))).is_empty());
    assert_eq!(picked(&app).1, SessionMode::Browse);
    assert!(app.notice.as_ref().unwrap().text.contains("session in use"), "{:?}", app.notice);

    // Rename the newest: r, a new name, enter. An untitled session's box starts empty (issue 58,
    // item 16: it held the folder's name, and what the user typed went on after it).
    app.handle_key(key(KeyCode::Up));
    app.handle_key(key(KeyCode::Char('r')));
    assert_eq!(picked(&app).1, SessionMode::Rename(InputLine::new("")));
    type_text(&mut app, "rivers");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert!(
        matches!(&fx[..], [Effect::TitleSession { name, title: Some(t) }] if name == "20260102-090000" && t == "rivers"),
        "{fx:?}"
    );
    assert_eq!(picked(&app).1, SessionMode::Browse);
    app.update(Action::SessionTitled { name: current.clone(), title: Some("today".into()) });
    assert_eq!(app.session_title.as_deref(), Some("today"), "the session in use shows its new name");

    // Delete the oldest: d asks, any other key keeps it, y deletes.
    app.handle_key(key(KeyCode::End));
    app.handle_key(key(KeyCode::Char('d')));
    assert_eq!(picked(&app).1, SessionMode::Delete);
    assert!(app.handle_key(key(KeyCode::Char('n'))).is_empty());
    assert_eq!(picked(&app).1, SessionMode::Browse);
    app.handle_key(key(KeyCode::Delete));
    let fx = app.handle_key(key(KeyCode::Char('y')));
    assert!(matches!(&fx[..], [Effect::DeleteSession { name }] if name == "20251231-235959"), "{fx:?}");
    // The refreshed list keeps the place.
    app.update(Action::Sessions(vec![entry("20260102-090000", 3), entry(&current, 2)]));
    assert_eq!(picked(&app).0, current);

    // Open the other one: it replaces the panes; later records go to its files.
    app.handle_key(key(KeyCode::Char('k')));
    let fx = app.handle_key(key(KeyCode::Enter));
    assert!(matches!(&fx[..], [Effect::OpenSession { name }] if name == "20260102-090000"), "{fx:?}");
    assert_eq!(app.overlay(), None);
    assert_eq!(app.panes.iter().map(|p| p.input.text()).collect::<Vec<_>>(), ["", ""], "nothing was typed");
    let mut turn = cohort::tui::pane::Turn::default();
    (turn.request_id, turn.user, turn.answer) =
        ("20260102-090000-p4-7".into(), "an older question".into(), "an older answer".into());
    turn.finish = Some(FinishReason::Stop);
    let restored = cohort::tui::transcript::RestoredPane { id: 4, turns: vec![turn], settings: None };
    let opened = OpenedSession { name: "20260102-090000".into(), title: Some("rivers".into()), panes: vec![restored] };
    let fx = app.update(Action::SessionOpened(Box::new(opened)));
    assert!(matches!(&fx[..], [Effect::UseSession { name }] if name == "20260102-090000"), "{fx:?}");
    assert_eq!((app.session.as_str(), app.session_title.as_deref()), ("20260102-090000", Some("rivers")));
    assert_eq!(app.panes.iter().map(|p| p.id).collect::<Vec<_>>(), [4, 5], "its pane, then the profile's count");
    assert_eq!(app.panes[0].turns[0].answer, "an older answer");
    type_text(&mut app, "and now?");
    let fx = app.handle_key(key(KeyCode::Enter));
    let (request, messages) = the_request(&fx);
    assert_eq!(messages.len(), 3, "the conversation goes on");
    assert!(request.id.starts_with("20260102-090000-p4-") && !request.id.ends_with("-7"), "{}", request.id);
}

/// The session in use is only marked open, and another one is not opened while panes answer.
#[test]
fn a_session_opens_only_when_no_pane_answers() {
    let mut app = fixture::mixed(2, "dark");
    let current = app.session.clone();
    app.update(Action::Sessions(vec![entry(&current, 2), entry("20260102-090000", 3)]));
    assert!(app.handle_key(key(KeyCode::Enter)).is_empty());
    assert_eq!(app.overlay(), None);
    assert!(app.notice.as_ref().unwrap().text.contains("is the one open"), "{:?}", app.notice);
    assert!(app.panes[1].is_busy());
    app.update(Action::Sessions(vec![entry(&current, 2), entry("20260102-090000", 3)]));
    app.handle_key(key(KeyCode::Down));
    assert!(app.handle_key(key(KeyCode::Enter)).is_empty(), "pane 2 answers");
    assert!(app.notice.as_ref().unwrap().text.contains("panes are answering"), "{:?}", app.notice);
    let opened = OpenedSession { name: "20260102-090000".into(), title: None, panes: Vec::new() };
    assert!(app.update(Action::SessionOpened(Box::new(opened))).is_empty());
    assert_eq!(app.session, current);
    app.update(Action::Sessions(Vec::new()));
    assert_eq!(app.overlay(), None);
    assert!(app.notice.as_ref().unwrap().text.contains("no saved session yet"), "{:?}", app.notice);
}

/// Issue 40: ctrl+f opens a search of the focused pane's conversation (refused, saying why, on
/// an empty pane): typed and pasted text goes to the query, never the box; a new query starts
/// again from the newest match; esc closes, leaving a view that found nothing where it was.
#[test]
fn search_takes_the_keys_until_esc() {
    let mut app = fixture::app(1, "dark");
    assert!(app.handle_key(ctrl('f')).is_empty());
    assert!(app.notice.as_ref().unwrap().text.contains("nothing to search"), "{:?}", app.notice);
    assert_eq!(app.overlay(), None);

    let mut app = two_turns("second");
    app.panes[0].scroll_top = Some(1);
    app.handle_key(ctrl('f'));
    type_text(&mut app, "answ");
    app.update(Action::Paste("er\nignored".into()));
    let Some(Overlay::Search { query, back }) = app.overlay() else { panic!("{:?}", app.overlay()) };
    assert_eq!((query.text(), *back), ("answer", 0));
    assert_eq!(app.panes[0].input.text(), "", "nothing reached the box");
    assert!(app.handle_key(key(KeyCode::Esc)).is_empty());
    assert_eq!((app.overlay(), app.panes[0].scroll_top), (None, Some(1)), "no match was shown: the view stays");
    assert_eq!(app.keymap.describe_keys(Command::Search), "ctrl+f");
}

/// alt+i right after a send, before the lane's first report of the new row has reached the
/// TUI (telemetry is polled a few times a second), drills into that request anyway and fills in
/// once the report comes; it used to say "no row to inspect yet" although the pane was decoding.
#[test]
fn a_row_can_be_drilled_into_before_its_first_report() {
    let mut app = fixture::app(2, "dark");
    type_text(&mut app, "hello");
    app.handle_key(key(KeyCode::Enter));
    let id = request_id(&app, 0);
    assert!(app.telemetry.rows.is_empty());
    app.handle_key(alt(KeyCode::Char('i')));
    assert_eq!(app.overlay(), Some(&Overlay::Row { id: id.clone(), opened: true }), "{:?}", app.notice);
    assert!(app.row_seen.is_none());
    let mut report = fixture::telemetry(&app);
    let mut row = fixture::mixed(1, "dark").telemetry.rows.remove(0);
    row.id = id.clone();
    report.rows = vec![row];
    app.update(Action::Telemetry(Box::new(report)));
    assert_eq!(app.row_seen.as_ref().map(|r| r.id.as_str()), Some(id.as_str()), "the report fills it in");
}

/// Issue 58: ctrl+s was pre-filled with the current profile's name, so Enter on a built-in
/// profile (`throughput`) wrote a user `throughput.toml` that replaced it without a word. The
/// dialog opens empty on a built-in profile, and a built-in name is refused, saying why.
#[test]
fn saving_a_profile_never_takes_a_built_in_name() {
    let mut app = fixture::app(2, "dark");
    assert_eq!(app.settings.profile, "throughput");
    app.handle_key(ctrl('s'));
    assert!(
        matches!(app.overlay(), Some(Overlay::SaveProfile { name }) if name.text().is_empty()),
        "{:?}",
        app.overlay()
    );
    type_text(&mut app, "throughput");
    assert!(app.handle_key(key(KeyCode::Enter)).is_empty(), "saved over the built-in profile");
    assert!(matches!(app.overlay(), Some(Overlay::SaveProfile { name }) if name.text() == "throughput"));
    let notice = app.notice.as_ref().expect("the refusal says why").text.clone();
    assert!(notice.contains("built-in") && notice.contains("throughput"), "{notice}");
    app.handle_key(ctrl('u'));
    type_text(&mut app, "my-throughput");
    assert!(matches!(&app.handle_key(key(KeyCode::Enter))[..], [Effect::SaveProfile { .. }]));
}

/// Issue 58, item 15: drilling into a row while none runs said "the lane has had no request" even
/// seconds after rows had run. It says so only before any request; after, that no row runs now.
#[test]
fn drilling_in_with_no_row_running_says_whether_any_has_run() {
    let mut app = fixture::app(1, "dark");
    app.update(Action::Command(Command::InspectRow));
    let before = app.notice.as_ref().expect("a notice").text.clone();
    assert!(before.contains("has had no request"), "{before}");
    fixture::play(&mut app, 0, "Hi", "Hello there", Some(FinishReason::Stop), Instant::now());
    app.update(Action::Telemetry(Box::default())); // the lane emptied
    app.notice = None;
    app.update(Action::Command(Command::InspectRow));
    let after = app.notice.as_ref().expect("a notice").text.clone();
    assert!(!after.contains("has had no request") && after.contains("no row is running now"), "{after}");
}

/// Overlays stack (issue 59): the save dialog opened from the profile picker opens over it, esc
/// goes back to the picker where it was, and a save closes both.
#[test]
fn the_save_dialog_opens_over_the_profile_picker_and_esc_goes_back_to_it() {
    let mut app = fixture::app(2, "dark");
    app.profiles = fixture::shipped_profiles();
    app.handle_key(ctrl('p'));
    app.handle_key(key(KeyCode::Down));
    let picker = app.overlay().cloned().expect("the picker is open");
    assert!(matches!(picker, Overlay::Profiles { .. }), "{picker:?}");
    app.handle_key(ctrl('s'));
    assert!(matches!(app.overlay(), Some(Overlay::SaveProfile { .. })), "{:?}", app.overlay());
    assert_eq!(app.popups.iter().count(), 2, "over the picker, not in its place");
    app.handle_key(key(KeyCode::Esc));
    assert_eq!(app.overlay(), Some(&picker), "back to the picker, on the profile it was on");
    app.handle_key(ctrl('s'));
    type_text(&mut app, "mine");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert!(matches!(&fx[..], [Effect::SaveProfile { name, .. }] if name == "mine"), "{fx:?}");
    assert_eq!(app.overlay(), None, "saved: the picker beneath closes too");
    // Keys reach the panes again.
    type_text(&mut app, "hi");
    assert_eq!(app.panes[0].input.text(), "hi");
}

/// Issue 58: one code block of an answer could not be copied, only the whole message. In the
/// message picker, c copies the picked message's code block; with several, c again copies the
/// next (the picker stays open); a message with none says so.
#[test]
fn one_code_block_of_a_message_can_be_copied() {
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "two loops");
    app.handle_key(key(KeyCode::Enter));
    let answer =
        "Here:\n\n```rust\nfor i in 0..3 {}\n```\n\nand in Python:\n\n```python\nfor i in range(3):\n    pass\n```\n";
    finish(&mut app, 0, FinishReason::Stop, answer);
    app.handle_key(alt(KeyCode::Char('y')));
    let fx = app.handle_key(key(KeyCode::Char('c')));
    assert!(matches!(&fx[..], [Effect::Copy { text }] if text == "for i in 0..3 {}\n"), "{fx:?}");
    assert!(app.overlay().is_some(), "two blocks: the picker stays for the next");
    let fx = app.handle_key(key(KeyCode::Char('c')));
    assert!(matches!(&fx[..], [Effect::Copy { text }] if text == "for i in range(3):\n    pass\n"), "{fx:?}");
    // The question has no code block: nothing is copied, and the picker says why.
    app.handle_key(key(KeyCode::Up));
    assert!(app.handle_key(key(KeyCode::Char('c'))).is_empty());
    assert!(app.notice.as_ref().is_some_and(|n| n.text.contains("no code block")), "{:?}", app.notice);
    assert!(app.overlay().is_some());
    // A single block copies and closes the picker, as enter does.
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "one loop");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "```\nloop {}\n```");
    app.handle_key(alt(KeyCode::Char('y')));
    let fx = app.handle_key(key(KeyCode::Char('c')));
    assert!(matches!(&fx[..], [Effect::Copy { text }] if text == "loop {}\n"), "{fx:?}");
    assert_eq!(app.overlay(), None);
}

/// Issue 58: the export put the pane's system prompt at the top, as if every turn had been sent
/// with it. Each turn now records the system prompt its request carried (in the transcript too),
/// and the export says from which turn on one applied.
#[test]
fn the_export_says_which_turns_a_system_prompt_applied_to() {
    let mut app = fixture::app(1, "dark");
    type_text(&mut app, "first question");
    app.handle_key(key(KeyCode::Enter));
    finish(&mut app, 0, FinishReason::Stop, "answer one");
    app.settings.system = Some("Answer briefly.".into());
    type_text(&mut app, "second question");
    let fx = app.handle_key(key(KeyCode::Enter));
    assert!(
        fx.iter().any(|e| matches!(e, Effect::Record { record: Record::User { system: Some(s), .. }, .. } if s == "Answer briefly.")),
        "the transcript records the system prompt sent: {fx:?}"
    );
    finish(&mut app, 0, FinishReason::Stop, "answer two");
    assert_eq!(app.panes[0].turns[0].system, None);
    let [Effect::Export { markdown, .. }] = &app.handle_key(alt(KeyCode::Char('s')))[..] else { panic!("one export") };
    let at = |s: &str| markdown.find(s).unwrap_or_else(|| panic!("{s:?} missing:\n{markdown}"));
    assert!(
        at("first question") < at("Answer briefly.") && at("Answer briefly.") < at("second question"),
        "{markdown}"
    );
    assert!(markdown.contains("from this turn on"), "{markdown}");
}
