//! View snapshots: app states built directly (no engine, no terminal), drawn on ratatui's
//! TestBackend and compared with insta. Text-only snapshots cover layout; the theme snapshots
//! include every style change, so a colour change shows up too.

use cohort::config::theme::Theme;
use cohort::engine::request::FinishReason;
use cohort::engine::telemetry::RowState;
use cohort::tui::action::Action;
use cohort::tui::app::{App, InspectorPanel, Overlay};
use cohort::tui::input::InputLine;
use cohort::tui::style::Styles;
use cohort::tui::transcript::SessionEntry;
use cohort::tui::{fixture, views};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::{Color, Modifier};

fn draw(app: &App, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| views::draw(f, app)).unwrap();
    terminal
}

#[test]
fn one_pane() {
    let app = fixture::mixed(1, "dark");
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn four_panes() {
    let app = fixture::mixed(4, "dark");
    insta::assert_snapshot!(draw(&app, 100, 30).backend());
}

#[test]
fn eight_panes() {
    let app = fixture::mixed(8, "dark");
    insta::assert_snapshot!(draw(&app, 160, 40).backend());
}

#[test]
fn eight_panes_with_the_inspector() {
    let mut app = fixture::mixed(8, "dark");
    app.inspector = Some(InspectorPanel::All);
    insta::assert_snapshot!(draw(&app, 200, 50).backend());
}

#[test]
fn eight_panes_with_the_inspector_at_80x24() {
    let mut app = fixture::mixed(8, "dark");
    app.inspector = Some(InspectorPanel::All);
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn inspector_rows_panel_alone() {
    let mut app = fixture::mixed(4, "dark");
    app.inspector = Some(InspectorPanel::Rows);
    insta::assert_snapshot!(draw(&app, 120, 30).backend());
}

#[test]
fn inspector_cohort_panel_alone() {
    let mut app = fixture::mixed(4, "dark");
    app.inspector = Some(InspectorPanel::Cohort);
    insta::assert_snapshot!(draw(&app, 120, 30).backend());
}

#[test]
fn inspector_cohort_panel_of_a_running_lane() {
    let mut app = fixture::mixed(4, "dark");
    app.inspector = Some(InspectorPanel::Cohort);
    let t = &mut app.telemetry;
    (t.lane_cycles, t.width_now, t.joins, t.leaves, t.pending) = (310, 3, 5, 2, 1);
    t.real_width_histogram = [(1, 40), (2, 120), (3, 150)].into();
    t.fixed_width_cycles = t.real_width_histogram.clone();
    insta::assert_snapshot!(draw(&app, 120, 30).backend());
}

#[test]
fn inspector_rows_panel_of_a_running_lane() {
    let mut app = fixture::mixed(4, "dark");
    app.inspector = Some(InspectorPanel::Rows);
    let queued = app.telemetry.rows.pop().unwrap();
    let t = &mut app.telemetry;
    for (i, r) in t.rows.iter_mut().enumerate() {
        (r.admission_wait_s, r.joined_at_cycle) = (0.05 * i as f64, 40 * i as u64);
    }
    t.queued = vec![queued.id, "script-7".into()];
    let screen = draw(&app, 200, 30);
    insta::assert_snapshot!(screen.backend());
    // Issue 58, item 15: the abbreviated headers are spelled out under the rows.
    let text = screen.backend().to_string();
    for legend in
        ["commit: positions committed", "phys: positions written", "mtp c/p: MTP history", "t/cyc: tokens per cycle"]
    {
        assert!(text.contains(legend), "no {legend:?} in\n{text}");
    }
}

#[test]
fn a_cancelled_pane_keeps_its_partial_answer() {
    let mut app = fixture::mixed(4, "dark");
    app.focus = 2;
    app.zoomed = true;
    assert_eq!(app.panes[2].state, RowState::Cancelled);
    let screen = draw(&app, 60, 14);
    insta::assert_snapshot!(screen.backend());
}

#[test]
fn an_error_pane_shows_the_error() {
    let mut app = fixture::mixed(4, "dark");
    app.focus = 3;
    app.zoomed = true;
    assert_eq!(app.panes[3].state, RowState::Error);
    insta::assert_snapshot!(draw(&app, 60, 14).backend());
}

#[test]
fn the_help_overlay_lists_the_bindings() {
    let mut app = fixture::mixed(4, "dark");
    app.popups.open(Overlay::Help { scroll: 0 });
    insta::assert_snapshot!(draw(&app, 100, 48).backend());
}

/// Issue 40: the help overlay lists the mouse (click focuses, the wheel scrolls).
#[test]
fn the_help_overlay_lists_the_mouse() {
    let mut app = fixture::mixed(4, "dark");
    app.popups.open(Overlay::Help { scroll: 60 });
    let text = draw(&app, 100, 48).backend().to_string();
    assert!(text.contains("the mouse"), "{text}");
    assert!(text.contains("focus the pane clicked"), "{text}");
    assert!(text.contains("scroll the pane under the pointer"), "{text}");
    assert!(text.contains("scroll code blocks sideways in the pane under the pointer"), "{text}");
}

/// Issue 40: every command is in the help overlay with its keys (scrolled through to the end),
/// those added for branching, sessions and search included.
#[test]
fn the_help_overlay_lists_every_command() {
    let mut app = fixture::mixed(4, "dark");
    let mut text = String::new();
    for scroll in (0..200).step_by(20) {
        app.popups.open(Overlay::Help { scroll });
        text.push_str(&draw(&app, 100, 48).backend().to_string());
    }
    for command in cohort::config::keymap::Command::all() {
        let keys = app.keymap.describe_keys(command);
        assert!(text.contains(&format!("│ │ {keys} ")), "{} ({keys}) missing from the help", command.name());
    }
    assert!(text.contains("branch: a new pane carries the focused pane's conversation"), "{text}");
}

/// Issue 40: the help overlay also lists the keys that work inside the lists and forms (they are
/// not commands, so the keymap's list leaves them out): the message pickers, the row drill-down,
/// the session list, the settings form, the profile picker, the search and the help itself.
#[test]
fn the_help_overlay_lists_the_keys_inside_lists_and_forms() {
    let mut app = fixture::mixed(4, "dark");
    app.popups.open(Overlay::Help { scroll: 1000 });
    let end = draw(&app, 100, 48);
    insta::assert_snapshot!(end.backend());
    let mut text = String::new();
    for scroll in (0..200).step_by(20) {
        app.popups.open(Overlay::Help { scroll });
        text.push_str(&draw(&app, 100, 48).backend().to_string());
    }
    for heading in [
        "inside lists and forms",
        "picking a message (select, branch)",
        "a row drilled into",
        "the session list",
        "the settings form",
        "the profile picker",
        "searching",
    ] {
        assert!(text.contains(&format!("│ │ {heading}")), "{heading:?} missing:\n{text}");
    }
    for (keys, what) in [
        ("enter / y / ctrl+y", "copy the message picked"),
        ("enter / b / alt+b", "branch at the message picked"),
        ("pageup / pagedown", "five messages up / down"),
        ("up / down / k / j", "the row above / below"),
        ("home / end / g / G", "the first / last row"),
        ("esc / q / alt+i / f12", "back"),
        ("r", "rename the session picked"),
        ("d / delete", "delete the session picked"),
        ("ctrl+g", "apply the form to every pane"),
        ("ctrl+d", "put the profile's values back in the form"),
        ("ctrl+s", "save the current settings as a profile"),
        ("down", "the match below"),
        ("enter / up / ctrl+f", "the match above"),
    ] {
        let found = text.lines().any(|l| {
            let Some((_, l)) = l.split_once("│ │ ") else { return false };
            l.starts_with(&format!("{keys} ")) && l[keys.len()..].trim_start().starts_with(what)
        });
        assert!(found, "{keys:?} → {what:?} missing:\n{text}");
    }
}

#[test]
fn the_profile_picker() {
    let mut app = fixture::mixed(4, "dark");
    app.profiles = fixture::shipped_profiles();
    app.popups.open(Overlay::Profiles { selected: 1 });
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn the_save_profile_prompt() {
    let mut app = fixture::mixed(1, "dark");
    app.popups.open(Overlay::SaveProfile { name: InputLine::new("my-eight") });
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

#[test]
fn the_model_still_loading() {
    let mut app = App::new(fixture::settings(2), Theme::builtin("dark"), Default::default(), fixture::SESSION);
    app.panes[0].input.set("queued before the model loaded");
    app.update(cohort::tui::action::Action::Command(cohort::config::keymap::Command::Send));
    for _ in 0..45 {
        app.update(cohort::tui::action::Action::Tick);
    }
    insta::assert_snapshot!(draw(&app, 80, 12).backend());
}

#[test]
fn dark_theme_styles() {
    let app = fixture::mixed(2, "dark");
    insta::assert_snapshot!(format!("{:?}", draw(&app, 60, 12).backend().buffer()));
}

#[test]
fn light_theme_styles() {
    let app = fixture::mixed(2, "light");
    insta::assert_snapshot!(format!("{:?}", draw(&app, 60, 12).backend().buffer()));
}

#[test]
fn no_color_draws_without_colours_but_keeps_focus_and_states_apart() {
    let mut app = fixture::mixed(4, "dark");
    app.theme = Theme::builtin("dark").without_colors();
    app.styles = Styles::new(&app.theme);
    app.inspector = Some(InspectorPanel::All);
    let screen = draw(&app, 120, 40);
    let buffer = screen.backend().buffer();
    for cell in buffer.content() {
        assert_eq!((cell.fg, cell.bg), (Color::Reset, Color::Reset), "a coloured cell under NO_COLOR: {cell:?}");
    }
    // Focus and states still show, through modifiers.
    assert!(buffer.content().iter().any(|c| c.modifier.contains(Modifier::REVERSED)));
    assert!(buffer.content().iter().any(|c| c.modifier.contains(Modifier::BOLD)));
}

#[test]
fn tiny_terminals_do_not_panic() {
    let mut app = fixture::mixed(8, "dark");
    app.inspector = Some(InspectorPanel::All);
    for (w, h) in [(1, 1), (10, 4), (20, 6), (33, 9), (80, 5)] {
        draw(&app, w, h);
    }
    app.popups.open(Overlay::Help { scroll: 99 });
    draw(&app, 12, 6);
}

#[test]
fn a_long_answer_scrolls_from_the_bottom() {
    let mut app = fixture::app(1, "dark");
    let long: String = (1..=60).map(|i| format!("line {i}\n")).collect();
    fixture::play(&mut app, 0, "many lines", &long, Some(FinishReason::Length), std::time::Instant::now());
    let text = draw(&app, 40, 12).backend().to_string();
    assert!(text.contains("line 60"), "follows the newest text:\n{text}");
    app.update(cohort::tui::action::Action::Command(cohort::config::keymap::Command::ScrollUp));
    let text = draw(&app, 40, 12).backend().to_string();
    assert!(!text.contains("line 60") && text.contains("↑"), "scrolled up:\n{text}");
}

#[test]
fn streaming_an_answer_renders_the_same_as_rendering_it_whole() {
    let answer = format!(
        "{}\n\n{}\n> a quote\n1. first\n---\n## Heading\n```\nunclosed",
        fixture::CODE_ANSWER,
        fixture::PROSE_ANSWER
    );
    let t0 = std::time::Instant::now();
    let mut streamed = fixture::app(1, "dark");
    streamed.panes[0].input.set("q");
    streamed.update(cohort::tui::action::Action::Command(cohort::config::keymap::Command::Send));
    let id = streamed.panes[0].in_flight.as_ref().unwrap().id.clone();
    let mut terminal = Terminal::new(TestBackend::new(50, 40)).unwrap();
    // Pieces of 1 to 3 characters (as tokens come), drawn after each.
    let chars: Vec<char> = answer.chars().collect();
    let mut pieces = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let n = (1 + at % 3).min(chars.len() - at);
        pieces.push(chars[at..at + n].iter().collect::<String>());
        at += n;
    }
    for piece in pieces {
        let event = cohort::engine::row::RowEvent::Delta { id: id.clone(), text: piece, ids: vec![1] };
        streamed.update(cohort::tui::action::Action::Row { pane: 1, event, at: t0 });
        terminal.draw(|f| views::draw(f, &streamed)).unwrap();
    }
    assert_eq!(streamed.panes[0].turns[0].answer, answer);
    let mut whole = fixture::app(1, "dark");
    fixture::play(&mut whole, 0, "q", "", None, t0);
    whole.panes[0].turns[0].answer = answer.clone();
    whole.panes[0].in_flight = streamed.panes[0].in_flight.clone();
    whole.panes[0].state = streamed.panes[0].state;
    let a = draw(&streamed, 50, 40).backend().to_string();
    let b = draw(&whole, 50, 40).backend().to_string();
    assert_eq!(a, b);
}

/// While transcripts cannot be saved (a full disk), the bottom bar says so and keeps saying so,
/// whatever notices come and go, until a record is written again.
#[test]
fn a_transcript_that_cannot_be_saved_warns_until_it_can() {
    let bottom = |app: &App| {
        let t = draw(app, 100, 30);
        let buffer = t.backend().buffer();
        (0..100).map(|x| buffer[(x, 29)].symbol().to_owned()).collect::<String>()
    };
    let mut app = fixture::mixed(2, "dark");
    assert!(!bottom(&app).contains("not saved"));
    app.update(cohort::tui::action::Action::Transcript(Some("No space left on device".into())));
    for _ in 0..1000 {
        app.update(cohort::tui::action::Action::Tick);
    }
    let line = bottom(&app);
    assert!(line.contains("transcripts not saved") && line.contains("No space left"), "{line}");
    app.update(cohort::tui::action::Action::Transcript(None));
    for _ in 0..1000 {
        app.update(cohort::tui::action::Action::Tick);
    }
    assert!(!bottom(&app).contains("not saved"), "{}", bottom(&app));
}

/// The pane title carries a context gauge, in the error style once the window is nearly full.
#[test]
fn the_pane_title_shows_how_full_the_context_is() {
    let mut app = fixture::app(1, "dark");
    fixture::play(&mut app, 0, "q", "an answer", Some(FinishReason::Stop), std::time::Instant::now());
    let title = |app: &App| {
        let t = draw(app, 80, 12);
        let buffer = t.backend().buffer();
        let text: String = (0..80).map(|x| buffer[(x, 1)].symbol().to_owned()).collect();
        let at = text.find("ctx").map(|i| text[..i].chars().count() as u16);
        (text, at.map(|x| buffer[(x, 1)].style()))
    };
    let (text, _) = title(&app);
    assert!(text.contains("ctx 1%"), "{text}");
    app.panes[0].turns[0].stats.as_mut().unwrap().prompt_tokens = 3600;
    let (text, style) = title(&app);
    assert!(text.contains("ctx 88%"), "{text}");
    assert_eq!(style.and_then(|s| s.fg), app.styles.error.fg, "a nearly full window is shown as an error");
}

/// A message sent while the pane answers shows under the answer as queued.
#[test]
fn a_queued_message_shows_under_the_answer() {
    let mut app = fixture::app(1, "dark");
    fixture::play(&mut app, 0, "Count to ten", fixture::PARTIAL_ANSWER, None, std::time::Instant::now());
    app.panes[0].input.set("and then backwards");
    app.update(cohort::tui::action::Action::Command(cohort::config::keymap::Command::Send));
    app.notice = None;
    insta::assert_snapshot!(draw(&app, 60, 12).backend());
}

/// The save prompt says at once which characters a name cannot have (they are not dropped).
#[test]
fn the_save_profile_prompt_flags_a_bad_name() {
    let mut app = fixture::mixed(1, "dark");
    app.popups.open(Overlay::SaveProfile { name: InputLine::new("my test!") });
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

/// The top bar names the profile, the preset and the numerics once each (before: the numerics
/// twice and never the preset).
#[test]
fn the_top_bar_names_profile_preset_and_numerics_once() {
    let mut app = fixture::mixed(2, "dark");
    app.settings.profile = "mine".into();
    app.settings.preset = cohort::engine::scheduler::Preset::Latency;
    if let cohort::tui::app::EngineStatus::Ready(summary) = &mut app.engine {
        summary.numerics = "balanced".into();
    }
    let t = draw(&app, 160, 12);
    let buffer = t.backend().buffer();
    let top: String = (0..160).map(|x| buffer[(x, 0)].symbol().to_owned()).collect();
    for part in ["profile mine", "preset latency", "numerics balanced"] {
        assert_eq!(top.matches(part).count(), 1, "{part:?} once in {top:?}");
    }
    assert!(!top.contains("throughput"), "{top}");
}

/// The input box wraps between words (before, mid-word at the box's edge).
#[test]
fn the_input_wraps_between_words() {
    let mut app = fixture::app(1, "dark");
    app.panes[0].input.set("please explain the difference between these two approaches to batching");
    let t = draw(&app, 40, 16);
    insta::assert_snapshot!(t.backend());
    let text = t.backend().to_string();
    for word in ["explain", "difference", "between", "approaches", "batching"] {
        assert!(text.contains(word), "{word:?} is split:\n{text}");
    }
}

/// Scrolled up while an answer streams, the view holds still: new text arrives below it and the
/// marker counts the lines below; paging back down to the bottom follows the new text again.
#[test]
fn a_scrolled_view_holds_still_while_text_streams() {
    use cohort::config::keymap::Command;
    use cohort::tui::action::Action;
    let mut app = fixture::app(1, "dark");
    let long: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    fixture::play(&mut app, 0, "many lines", &long, None, std::time::Instant::now());
    let body = |app: &App| {
        let text = draw(app, 40, 12).backend().to_string();
        text.lines().skip(2).take(5).collect::<Vec<_>>().join("\n")
    };
    body(&app);
    app.update(Action::Command(Command::ScrollUp));
    let held = body(&app);
    let id = app.panes[0].in_flight.as_ref().unwrap().id.clone();
    for i in 41..=60 {
        let event = cohort::engine::row::RowEvent::Delta { id: id.clone(), text: format!("line {i}\n"), ids: vec![1] };
        app.update(Action::Row { pane: 1, event, at: std::time::Instant::now() });
        assert_eq!(body(&app), held, "the view moved when line {i} arrived");
    }
    let text = draw(&app, 40, 12).backend().to_string();
    assert!(!text.contains("line 60"), "{text}");
    for _ in 0..10 {
        app.update(Action::Command(Command::ScrollDown));
    }
    let event = cohort::engine::row::RowEvent::Delta { id, text: "line 61\n".into(), ids: vec![1] };
    app.update(Action::Row { pane: 1, event, at: std::time::Instant::now() });
    let text = draw(&app, 40, 12).backend().to_string();
    assert!(text.contains("line 61") && !text.contains('↑'), "at the bottom, the view follows again:\n{text}");
    app.update(Action::Command(Command::ScrollUp));
    assert!(app.panes[0].scroll_top.is_some());
    app.handle_key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::End,
        crossterm::event::KeyModifiers::CONTROL,
    ));
    assert_eq!(app.panes[0].scroll_top, None, "ctrl+end follows the newest text again");
}

/// An answer with a table, emphasis, strike, a link and a Rust code block (issue 40, item 5).
const MARKDOWN_ANSWER: &str = "## Flags\n| flag | default | what it does |\n|:--|:-:|--:|\n| `--panes` | 4 | how many panes to open |\n| `--theme` | dark | the colours |\n\nUse *either* flag, **not both**; ~~`--old`~~ is gone. See [the guide](https://example.com/guide).\n```rust\nfn main() {\n    let panes: u32 = 4; // the default\n    println!(\"{panes} panes, and a line too long for a narrow pane\");\n}\n```\nDone.";

fn markdown_app() -> App {
    let mut app = fixture::app(1, "dark");
    fixture::play(&mut app, 0, "flags?", MARKDOWN_ANSWER, Some(FinishReason::Stop), std::time::Instant::now());
    app
}

/// The cell style where `needle` starts on screen.
fn style_at(terminal: &Terminal<TestBackend>, needle: &str) -> ratatui::style::Style {
    let buffer = terminal.backend().buffer();
    let width = buffer.area.width as usize;
    let rows: Vec<String> = buffer.content().chunks(width).map(|r| r.iter().map(|c| c.symbol()).collect()).collect();
    for (y, row) in rows.iter().enumerate() {
        if let Some(byte) = row.find(needle) {
            let x = row[..byte].chars().count();
            return buffer.content()[y * width + x].style();
        }
    }
    panic!("{needle:?} is not on screen:\n{}", rows.join("\n"));
}

/// Tables as aligned columns, emphasis without its stars, a link's address dimmed after its text,
/// and a code block highlighted and cut at the pane's edge (not wrapped): wide and narrow.
#[test]
fn markdown_answers_render_tables_emphasis_links_and_highlighted_code() {
    let app = markdown_app();
    let wide = draw(&app, 80, 24);
    insta::assert_snapshot!("markdown_answer_80", wide.backend());
    let narrow = draw(&app, 40, 24);
    insta::assert_snapshot!("markdown_answer_40", narrow.backend());
    let styles = &app.styles;
    for screen in [&wide, &narrow] {
        assert_eq!(style_at(screen, "fn main").fg, styles.code_keyword.fg);
        assert_eq!(style_at(screen, "u32").fg, styles.code_keyword.fg);
        assert_eq!(style_at(screen, "// the").fg, styles.code_comment.fg);
        assert_eq!(style_at(screen, "println!").fg, styles.code_function.fg);
        assert!(style_at(screen, "either").add_modifier.contains(Modifier::ITALIC));
        assert!(style_at(screen, "not both").add_modifier.contains(Modifier::BOLD));
        assert!(style_at(screen, "--old").add_modifier.contains(Modifier::CROSSED_OUT));
        assert!(style_at(screen, "the guide").add_modifier.contains(Modifier::UNDERLINED));
        assert_eq!(style_at(screen, "flag ").fg, styles.heading.fg);
    }
    assert_eq!(style_at(&wide, "(https://example.com/guide)").fg, styles.muted.fg);
}

/// Issue 40 (item 5): code is never wrapped, so a narrow pane scrolls its code blocks sideways
/// (shift+right / shift+left, through the keymap): `…` in the gutter marks code hidden on the
/// left, the last cell code past the edge; the prose, the table and the frame stay where they
/// are; the offset stops where the widest code line ends, and comes back to 0.
#[test]
fn code_blocks_scroll_sideways_in_a_narrow_pane() {
    let mut app = markdown_app();
    let shift = |code| crossterm::event::KeyEvent::new(code, crossterm::event::KeyModifiers::SHIFT);
    let before = draw(&app, 40, 24).backend().to_string();
    app.handle_key(shift(crossterm::event::KeyCode::Right));
    app.handle_key(shift(crossterm::event::KeyCode::Right));
    let scrolled = draw(&app, 40, 24);
    insta::assert_snapshot!("markdown_answer_40_code_scrolled", scrolled.backend());
    assert_eq!(style_at(&scrolled, "panes, and").fg, app.styles.code_string.fg, "highlighting survives the cut");
    let text = scrolled.backend().to_string();
    let same = |needle: &str| before.lines().find(|l| l.contains(needle)) == text.lines().find(|l| l.contains(needle));
    assert!(same("gone. See the guide") && same("--panes") && same("╭─ rust"), "only code moves:\n{text}");
    // Far right: the widest line's end shows, and no further.
    for _ in 0..20 {
        app.handle_key(shift(crossterm::event::KeyCode::Right));
    }
    let end = draw(&app, 40, 24).backend().to_string();
    assert!(end.contains("a narrow pane\");"), "{end}");
    let widest = "    println!(\"{panes} panes, and a line too long for a narrow pane\");".len();
    // A 40-cell pane holds 36 cells of text (border and padding), 34 of code after the gutter.
    assert_eq!(app.panes[0].code_scroll, widest - 34, "stops where the widest line ends");
    for _ in 0..20 {
        app.handle_key(shift(crossterm::event::KeyCode::Left));
    }
    assert_eq!(app.panes[0].code_scroll, 0);
    assert_eq!(draw(&app, 40, 24).backend().to_string(), before);
}

/// Issue 40 (item 5): a search match inside code past the pane's edge is shown: the code is
/// drawn from a little before it, marked as the current match, while the search is open; closed,
/// the code goes back to where the pane had it.
#[test]
fn a_search_match_in_code_past_the_edge_is_scrolled_into_view() {
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = markdown_app();
    let before = draw(&app, 40, 24).backend().to_string();
    assert!(!before.contains("narrow pane"), "{before}");
    app.handle_key(KeyEvent::new(KeyCode::Char('f'), KeyModifiers::CONTROL));
    for c in "narrow pane".chars() {
        app.handle_key(plain_key(KeyCode::Char(c)));
    }
    let found = draw(&app, 40, 24);
    let text = found.backend().to_string();
    assert!(text.contains("find: narrow pane  1 of 1"), "{text}");
    assert!(text.contains("│…") && text.contains("narrow pane"), "the match is on screen:\n{text}");
    assert_eq!(style_at(&found, "narrow pane").bg, app.styles.selection.bg, "marked as the current match");
    assert_eq!(app.panes[0].code_scroll, 0, "the pane's own offset is unchanged");
    app.handle_key(plain_key(KeyCode::Esc));
    assert_eq!(draw(&app, 40, 24).backend().to_string(), before);
}

/// Issue 40: a pane editing its last message says so on the rule above the input (what enter
/// and esc do), with the message back in the box.
#[test]
fn a_pane_editing_its_last_message() {
    let mut app = fixture::mixed(1, "dark");
    app.handle_key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::F(2),
        crossterm::event::KeyModifiers::NONE,
    ));
    assert!(app.panes[0].editing.is_some());
    app.notice = None;
    insta::assert_snapshot!(draw(&app, 70, 16).backend());
}

/// Issue 40: picking a message to copy highlights it in the focused pane, scrolled into view
/// (here the first question, above a long answer), and the bottom bar says what the keys do.
#[test]
fn a_message_picked_for_copying() {
    let mut app = fixture::app(1, "dark");
    let t0 = std::time::Instant::now();
    fixture::play(&mut app, 0, "Write a loop in Rust", fixture::CODE_ANSWER, Some(FinishReason::Stop), t0);
    let long: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    fixture::play(&mut app, 0, "Count to thirty", &long, Some(FinishReason::Stop), t0);
    app.popups.open(Overlay::Select { index: 0, code: 0 });
    let screen = draw(&app, 60, 14);
    insta::assert_snapshot!(screen.backend());
    let selected = app.styles.selection;
    let buffer = screen.backend().buffer();
    let row = (0..buffer.area.height).find(|&y| row_text(buffer, y).contains("Write a loop")).expect("in view");
    assert_eq!(buffer[(4, row)].bg, selected.bg.unwrap(), "the picked message is highlighted");
    let other = (0..buffer.area.height).find(|&y| row_text(buffer, y).contains("Here is a loop")).unwrap();
    assert_ne!(buffer[(4, other)].bg, selected.bg.unwrap(), "its answer is not");
}

/// Issue 40: branching: the message picked is highlighted as for copying, and the bottom bar
/// says what enter does; branched at a question, the new pane (focused) shows the conversation
/// before it and the question in its box.
#[test]
fn a_conversation_branched_at_a_question() {
    let mut app = fixture::app(1, "dark");
    let t0 = std::time::Instant::now();
    fixture::play(&mut app, 0, "Write a loop in Rust", fixture::CODE_ANSWER, Some(FinishReason::Stop), t0);
    fixture::play(&mut app, 0, "Now in Python", "for i in range(3):\n    print(i)", Some(FinishReason::Stop), t0);
    app.handle_key(alt_key('b'));
    app.handle_key(plain_key(crossterm::event::KeyCode::Up));
    let picking = draw(&app, 60, 16);
    insta::assert_snapshot!("a_message_picked_for_branching", picking.backend());
    let buffer = picking.backend().buffer();
    let row = (0..buffer.area.height).find(|&y| row_text(buffer, y).contains("Now in Python")).expect("in view");
    assert_eq!(buffer[(4, row)].bg, app.styles.selection.bg.unwrap(), "the picked message is highlighted");
    app.handle_key(plain_key(crossterm::event::KeyCode::Enter));
    app.notice = None;
    insta::assert_snapshot!("a_conversation_branched_at_a_question", draw(&app, 100, 16).backend());
}

/// Issue 40: ctrl+f finds text in the focused pane's conversation as it reads on screen: every
/// match marked, the one shown (the newest first) in the selection style and scrolled into view,
/// the bottom bar with the query, which match of how many, and the keys; up goes to the match
/// above, down below (wrapping); a query found nowhere says so; esc closes and the view holds
/// where the match was.
#[test]
fn searching_a_conversation() {
    use crossterm::event::KeyCode;
    let mut app = fixture::app(1, "dark");
    let t0 = std::time::Instant::now();
    fixture::play(&mut app, 0, "Write a loop in Rust", fixture::CODE_ANSWER, Some(FinishReason::Stop), t0);
    let long: String = (1..=30).map(|i| format!("line {i}\n")).collect();
    fixture::play(&mut app, 0, "Count to thirty", &long, Some(FinishReason::Stop), t0);
    app.handle_key(crossterm::event::KeyEvent::new(KeyCode::Char('f'), crossterm::event::KeyModifiers::CONTROL));
    for c in "LINE 2".chars() {
        app.handle_key(plain_key(KeyCode::Char(c)));
    }
    assert_eq!(app.panes[0].input.text(), "", "the query is not typed into the box");
    let newest = draw(&app, 60, 14);
    insta::assert_snapshot!("searching_a_conversation", newest.backend());
    let text = newest.backend().to_string();
    assert!(text.contains("find: LINE 2  11 of 11"), "line 2 and 20 to 29:\n{text}");
    let buffer = newest.backend().buffer();
    let at = |needle: &str| {
        let y = (0..buffer.area.height).find(|&y| row_text(buffer, y).contains(needle)).expect(needle);
        let x = row_text(buffer, y).find(needle).unwrap();
        buffer[(row_text(buffer, y)[..x].chars().count() as u16, y)].clone()
    };
    assert_eq!(at("line 29").bg, app.styles.selection.bg.unwrap(), "the match shown");
    assert!(at("line 28").modifier.contains(Modifier::REVERSED), "another match, marked");
    assert!(!at("line 30").modifier.contains(Modifier::REVERSED), "not a match");

    for _ in 0..3 {
        app.handle_key(plain_key(KeyCode::Up));
    }
    assert!(draw(&app, 60, 14).backend().to_string().contains("8 of 11"));
    app.handle_key(plain_key(KeyCode::Down));
    app.handle_key(plain_key(KeyCode::Enter));
    assert!(draw(&app, 60, 14).backend().to_string().contains("8 of 11"), "down, then enter goes up again");
    // The first match, far up: scrolled into view.
    for _ in 0..7 {
        app.handle_key(plain_key(KeyCode::Up));
    }
    let first = draw(&app, 60, 14).backend().to_string();
    assert!(first.contains("1 of 11") && first.contains("line 2 "), "{first}");
    assert!(!first.contains("line 29"), "{first}");
    app.handle_key(plain_key(KeyCode::Up));
    assert!(draw(&app, 60, 14).backend().to_string().contains("11 of 11"), "up from the first wraps to the newest");

    for _ in 0..6 {
        app.handle_key(plain_key(KeyCode::Backspace));
    }
    for c in "rust".chars() {
        app.handle_key(plain_key(KeyCode::Char(c)));
    }
    let rust = draw(&app, 60, 14).backend().to_string();
    assert!(rust.contains("find: rust  3 of 3"), "the question, the answer and its code frame:\n{rust}");
    app.handle_key(plain_key(KeyCode::Char('z')));
    assert!(draw(&app, 60, 14).backend().to_string().contains("no match"));
    app.handle_key(plain_key(KeyCode::Backspace));
    draw(&app, 60, 14);
    app.handle_key(plain_key(KeyCode::Esc));
    assert_eq!(app.overlay(), None);
    let held = draw(&app, 60, 14).backend().to_string();
    assert!(held.contains("╭─ rust") && held.contains(" ↑"), "still there, the lines below it counted:\n{held}");
    assert!(app.panes[0].scroll_top.is_some(), "the view holds where the match was");
}

fn session(name: &str, title: Option<&str>, panes: usize, turns: usize, first: &str, modified: u64) -> SessionEntry {
    let first = Some(first.to_owned()).filter(|f| !f.is_empty());
    SessionEntry { name: name.into(), title: title.map(Into::into), panes, turns, first, modified }
}

/// Issue 40: the session list: each saved session's name (a title given in the app, else its
/// folder's), when it was last written, its panes, turns and first question, the one in use
/// marked and the one picked highlighted, the keys under it; then the same list renaming the
/// picked session (its name being typed) and asking before deleting it.
#[test]
fn the_session_list() {
    let mut app = fixture::mixed(2, "dark");
    let list = vec![
        session(fixture::SESSION, None, 2, 2, "Write a loop in Rust", 1_767_269_100),
        session("20251230-081500", Some("rivers of Europe"), 3, 14, "Name three rivers\nand their seas", 1_767_082_500),
        session("20251229-220000", None, 1, 1, "", 1_767_045_600),
    ];
    app.update(Action::Sessions(list));
    app.handle_key(plain_key(crossterm::event::KeyCode::Down));
    insta::assert_snapshot!(draw(&app, 120, 30).backend());
    app.handle_key(plain_key(crossterm::event::KeyCode::Char('r')));
    for c in " (2025)".chars() {
        app.handle_key(plain_key(crossterm::event::KeyCode::Char(c)));
    }
    let renaming = draw(&app, 120, 30);
    insta::assert_snapshot!("the_session_list_renaming", renaming.backend());
    assert!(renaming.backend().to_string().contains("new name: rivers of Europe (2025)"));
    app.handle_key(plain_key(crossterm::event::KeyCode::Esc));
    app.handle_key(plain_key(crossterm::event::KeyCode::Char('d')));
    let deleting = draw(&app, 120, 30);
    insta::assert_snapshot!("the_session_list_asking_before_a_delete", deleting.backend());
    assert_eq!(style_at(&deleting, "delete rivers of Europe for good").fg, app.styles.error.fg);
}

fn row_text(buffer: &ratatui::buffer::Buffer, y: u16) -> String {
    (0..buffer.area.width).map(|x| buffer[(x, y)].symbol().to_owned()).collect()
}

fn alt_key(c: char) -> crossterm::event::KeyEvent {
    crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char(c), crossterm::event::KeyModifiers::ALT)
}
fn plain_key(code: crossterm::event::KeyCode) -> crossterm::event::KeyEvent {
    crossterm::event::KeyEvent::new(code, crossterm::event::KeyModifiers::NONE)
}

/// Issue 40 (item 2): the focused pane's settings form: every per-request value with its range,
/// the pane's own generation mode (blank: the engine's, named) with what the modes do, and a
/// refused value's message naming the field (top_p here, focused).
#[test]
fn the_pane_settings_form() {
    let mut app = fixture::mixed(2, "dark");
    app.focus = 1;
    app.handle_key(alt_key(','));
    for c in "Answer in one short paragraph.".chars() {
        app.handle_key(plain_key(crossterm::event::KeyCode::Char(c)));
    }
    // Up from the first field wraps to the last, the generation mode.
    app.handle_key(plain_key(crossterm::event::KeyCode::Up));
    for c in "ar".chars() {
        app.handle_key(plain_key(crossterm::event::KeyCode::Char(c)));
    }
    app.handle_key(plain_key(crossterm::event::KeyCode::Down));
    app.handle_key(plain_key(crossterm::event::KeyCode::Down));
    app.handle_key(plain_key(crossterm::event::KeyCode::Down));
    app.handle_key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Char('u'),
        crossterm::event::KeyModifiers::CONTROL,
    ));
    for c in "1.5".chars() {
        app.handle_key(plain_key(crossterm::event::KeyCode::Char(c)));
    }
    assert!(app.handle_key(plain_key(crossterm::event::KeyCode::Enter)).is_empty(), "top_p = 1.5 is refused");
    let terminal = draw(&app, 100, 30);
    insta::assert_snapshot!(terminal.backend());
    assert_eq!(style_at(&terminal, "✖ invalid sampler setting top_p").fg, app.styles.error.fg);
}

/// Issue 40 (item 2): with an engine that decodes ar (no MTP head in use) the form says every
/// pane decodes ar whatever it asks, and a blank mode names ar as the engine's.
#[test]
fn the_settings_form_says_an_ar_engine_serves_every_pane_ar() {
    let mut app = fixture::mixed(2, "dark");
    if let cohort::tui::app::EngineStatus::Ready(summary) = &mut app.engine {
        summary.mode = "ar".into();
    }
    app.handle_key(alt_key(','));
    let text = draw(&app, 100, 30).backend().to_string();
    assert!(text.contains("mtp or ar; blank = the engine's (ar)"), "{text}");
    assert!(text.contains("the engine decodes ar (no MTP head in use), so every pane does too"), "{text}");
}

/// Issue 40 (item 2): each pane shows its settings on its bottom border (its own generation mode
/// too): its own in the accent colour, the profile's muted; a narrow pane keeps what fits.
#[test]
fn a_pane_shows_its_settings() {
    let mut app = fixture::mixed(2, "dark");
    let mut own = app.settings.chat();
    own.sampler = cohort::engine::sampler::SamplerConfig::greedy();
    own.max_tokens = 64;
    own.system = Some("Be terse.".into());
    own.mode = Some(cohort::engine::request::GenerationMode::Ar);
    app.panes[0].settings = Some(own);
    let terminal = draw(&app, 100, 16);
    insta::assert_snapshot!(terminal.backend());
    assert_eq!(style_at(&terminal, "greedy max64 sys:\"Be terse.\" ar").fg, app.styles.accent.fg);
    assert_eq!(style_at(&terminal, "t0.6 p0.95 k20 max512").fg, app.styles.muted.fg);
    let narrow = draw(&app, 44, 16);
    insta::assert_snapshot!("a_pane_shows_its_settings_narrow", narrow.backend());
}

/// Issue 40 (item 3): drilling into one row: its request and pane, offsets (target and MTP
/// history, committed and physical), tokens, drafts, the route, the admission wait, and its
/// acceptance history as charts with their scales; the bottom bar says which row and the keys.
#[test]
fn inspector_row_drill_down() {
    let mut app = fixture::mixed(8, "dark");
    for (i, r) in app.telemetry.rows.iter_mut().enumerate() {
        (r.admission_wait_s, r.joined_at_cycle) = (0.05 * i as f64, 40 * i as u64);
    }
    app.telemetry.lane_cycles = 310;
    app.focus = 1;
    app.handle_key(alt_key('i'));
    insta::assert_snapshot!(draw(&app, 200, 50).backend());
    // Below the panes on a narrow screen: figures and charts side by side.
    insta::assert_snapshot!("inspector_row_drill_down_in_a_band", draw(&app, 110, 30).backend());
}

/// Issue 40 (item 5): a row whose result has come shows its own route (its last cycle's) and the
/// widest cohort it decoded in, from its result, and how long its first token took; a running
/// row shows the lane's route.
#[test]
fn a_drilled_row_that_has_ended_shows_its_own_route() {
    let mut app = fixture::mixed(4, "dark");
    let stats = app.panes[0].turns[0].stats.as_mut().unwrap();
    (stats.route, stats.real_width, stats.ttft_s) = ("qwen35_mtp_batch_b2_t2_m4_throughput".into(), 3, 0.21);
    app.focus = 0;
    app.handle_key(alt_key('i'));
    let screen = draw(&app, 200, 50);
    insta::assert_snapshot!(screen.backend());
    let text = screen.backend().to_string();
    assert!(text.contains("route     qwen35_mtp_batch_b2_t2_m4_throughput (its own) · widest cohort 3"), "{text}");
    assert!(text.contains("· first token after 0.21 s"), "{text}");
    app.handle_key(plain_key(crossterm::event::KeyCode::Down));
    let running = draw(&app, 200, 50).backend().to_string();
    assert!(running.contains(&format!("route     {} (the lane's)", fixture::ROUTE)), "{running}");
}

/// Issue 40 (item 2): a row decoding ar (its pane's own mode) shows no drafts but says why: from
/// its result once it has ended, from the engine's row telemetry while it runs.
#[test]
fn a_drilled_row_decoding_ar_says_it_drafts_nothing() {
    use cohort::engine::request::GenerationMode;
    let mut app = fixture::mixed(4, "dark");
    app.panes[0].turns[0].stats.as_mut().unwrap().mode = Some(GenerationMode::Ar);
    app.focus = 0;
    app.handle_key(alt_key('i'));
    let ended = draw(&app, 200, 50).backend().to_string();
    assert!(ended.contains("drafts    none: the row decodes ar, without drafts"), "{ended}");
    app.handle_key(plain_key(crossterm::event::KeyCode::Down));
    let running = draw(&app, 200, 50).backend().to_string();
    assert!(running.contains(" accepted / ") && !running.contains("decodes ar"), "{running}");
    for row in app.telemetry.rows.iter_mut() {
        row.mode = Some(GenerationMode::Ar);
    }
    let running = draw(&app, 200, 50).backend().to_string();
    assert!(running.contains("drafts    none: the row decodes ar, without drafts"), "{running}");
}

/// Issue 40 (item 3): a row that has left the lane still shows, as last seen, and says so.
#[test]
fn a_drilled_row_that_has_left_shows_as_last_seen() {
    let mut app = fixture::mixed(4, "dark");
    app.focus = 0;
    app.handle_key(alt_key('i'));
    let mut t = fixture::telemetry(&app);
    t.rows.remove(0);
    app.update(cohort::tui::action::Action::Telemetry(Box::new(t)));
    let screen = draw(&app, 200, 50);
    let text: String = (0..50).map(|y| row_text(screen.backend().buffer(), y)).collect::<Vec<_>>().join("\n");
    assert!(text.contains("row - · pane 1 · done · left the lane (last seen)"), "{text}");
    assert!(text.contains("target committed 39"), "{text}");
}

/// Issue 40 (item 3): every chart has its scale: the memory chart its bytes (0 to the highest
/// sample) and its time span, the width histogram its axis, the rows' draft sparklines a legend.
#[test]
fn inspector_charts_have_scales() {
    let mut app = fixture::mixed(4, "dark");
    app.inspector = Some(InspectorPanel::Memory);
    insta::assert_snapshot!("inspector_memory_panel_alone", draw(&app, 120, 30).backend());
    app.inspector = Some(InspectorPanel::All);
    let screen = draw(&app, 200, 50);
    let text: String = (0..50).map(|y| row_text(screen.backend().buffer(), y)).collect::<Vec<_>>().join("\n");
    let top = cohort::platform::backend::human_bytes(*app.memory_history.iter().max().unwrap() as usize);
    for scale in [top.as_str(), "now", "width", "█ accepted", "0 "] {
        assert!(text.contains(scale), "{scale:?} missing:\n{text}");
    }
}

/// Issue 40 (item 3): the queue as it is: each waiting request in order, with its pane, how
/// long it has waited and its prompt; rows still reading their prompts; what waits for the model.
#[test]
fn inspector_queue_panel_lists_the_queue() {
    let mut app = fixture::mixed(4, "dark");
    for _ in 0..90 {
        app.update(cohort::tui::action::Action::Tick);
    }
    app.focus = 0;
    app.panes[0].input.set("a question that waits for a free row");
    app.update(cohort::tui::action::Action::Command(cohort::config::keymap::Command::Send));
    for _ in 0..75 {
        app.update(cohort::tui::action::Action::Tick);
    }
    let waiting = app.panes[0].in_flight.as_ref().unwrap().id.clone();
    let mut t = fixture::telemetry(&app);
    t.rows.retain(|r| r.id != waiting);
    t.queued = vec![waiting, "script-7".into()];
    // Pane 2's row has been admitted and still reads its prompt.
    t.rows[0].state = cohort::engine::telemetry::RowState::Prefill;
    (t.rows[0].prefill_done, t.rows[0].prefill_total) = (512, 2048);
    app.update(cohort::tui::action::Action::Telemetry(Box::new(t)));
    app.notice = None;
    app.inspector = Some(InspectorPanel::Queue);
    insta::assert_snapshot!(draw(&app, 120, 30).backend());
}

/// Issue 40: the rows panel with no row running says so truthfully, whatever the profile (before:
/// "no cohort yet: send to several panes at once", wrong under the latency profile, which runs
/// one row at a time); with one running row (a single-pane run, as the latency profile has), it
/// lists that row, and the hint is gone.
#[test]
fn inspector_rows_panel_idle_and_with_one_running_row() {
    let mut app = fixture::app(2, "dark");
    app.settings.profile = "latency".into();
    app.settings.preset = cohort::engine::scheduler::Preset::Latency;
    app.inspector = Some(InspectorPanel::Rows);
    let idle = draw(&app, 100, 14);
    insta::assert_snapshot!("inspector_rows_panel_idle", idle.backend());
    let text = idle.backend().to_string();
    assert!(text.contains("no row running: send a prompt"), "{text}");
    assert!(!text.contains("no cohort yet"), "{text}");
    fixture::play(&mut app, 0, "Count to ten", fixture::PARTIAL_ANSWER, None, std::time::Instant::now());
    let mut t = fixture::telemetry(&app);
    (t.active, t.last_real_width, t.cohorts, t.solo_runs) = (1, 1, 0, 1);
    app.update(Action::Telemetry(Box::new(t)));
    app.notice = None;
    let running = draw(&app, 100, 14);
    insta::assert_snapshot!("inspector_rows_panel_with_one_running_row", running.backend());
    let text = running.backend().to_string();
    assert!(!text.contains("no row running"), "{text}");
    assert_eq!(app.telemetry.rows.len(), 1);
}

fn ctrl_key(c: char) -> crossterm::event::KeyEvent {
    crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char(c), crossterm::event::KeyModifiers::CONTROL)
}

/// Issue 40: an answer that takes the conversation past 80% of the context window: the pane's
/// gauge in the error style and the bottom bar's warning with what to do.
#[test]
fn the_context_window_warning_past_80_percent() {
    let mut app = fixture::app(1, "dark");
    app.panes[0].input.set("Summarise everything so far");
    app.update(Action::Command(cohort::config::keymap::Command::Send));
    let id = app.panes[0].in_flight.as_ref().unwrap().id.clone();
    let mut result = cohort::engine::request::RequestResult::ended(&id, FinishReason::Stop);
    result.text = "A long conversation, summarised.".into();
    (result.stats.prompt_tokens, result.stats.completion_tokens) = (3400, 100);
    let done = cohort::engine::row::RowEvent::Done(Box::new(result));
    app.update(Action::Row { pane: app.panes[0].id, event: done, at: std::time::Instant::now() });
    let screen = draw(&app, 120, 12);
    insta::assert_snapshot!(screen.backend());
    let text = screen.backend().to_string();
    assert!(text.contains("ctx 85%") && text.contains("85%") && text.contains("ctrl+l"), "{text}");
    assert_eq!(style_at(&screen, "ctx 85%").fg, app.styles.error.fg);
}

/// Issue 40: a view scrolled up marks how many lines are below it (↑N) on the pane's border.
#[test]
fn a_scrolled_view_marks_the_lines_below() {
    let mut app = fixture::app(1, "dark");
    let long: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    fixture::play(&mut app, 0, "many lines", &long, Some(FinishReason::Stop), std::time::Instant::now());
    draw(&app, 40, 12); // the page size a scroll moves by comes from the last frame
    app.update(Action::Command(cohort::config::keymap::Command::ScrollUp));
    let screen = draw(&app, 40, 12);
    insta::assert_snapshot!(screen.backend());
    assert!(screen.backend().to_string().contains('↑'), "{}", screen.backend());
}

/// Issue 40: ctrl+c with a conversation on screen only asks: the bottom bar says a second press
/// within 2 s quits.
#[test]
fn ctrl_c_after_an_answer_shows_the_quit_hint() {
    let mut app = fixture::app(2, "dark");
    fixture::play(&mut app, 0, "Say hello", "Hello!", Some(FinishReason::Stop), std::time::Instant::now());
    app.handle_key(ctrl_key('c'));
    assert!(!app.should_quit);
    let screen = draw(&app, 80, 12);
    insta::assert_snapshot!(screen.backend());
    assert!(screen.backend().to_string().contains("ctrl+c again within 2 s quits"), "{}", screen.backend());
}

/// Issue 40: a search for text found nowhere says so in the bottom bar, and marks nothing.
#[test]
fn a_search_with_no_match() {
    let mut app = fixture::app(1, "dark");
    let t0 = std::time::Instant::now();
    fixture::play(&mut app, 0, "Write a loop in Rust", fixture::CODE_ANSWER, Some(FinishReason::Stop), t0);
    app.handle_key(ctrl_key('f'));
    for c in "python".chars() {
        app.handle_key(plain_key(crossterm::event::KeyCode::Char(c)));
    }
    let screen = draw(&app, 60, 14);
    insta::assert_snapshot!(screen.backend());
    assert!(screen.backend().to_string().contains("find: python  no match"), "{}", screen.backend());
}

/// Issue 58, item 15: a pane's title names the cohort row its request runs in only while it runs;
/// once the answer ends (here cancelled) the row is another request's, and `row N` goes.
#[test]
fn a_pane_names_its_row_only_while_its_request_runs() {
    let mut app = fixture::app(2, "dark");
    fixture::play(&mut app, 0, "Count to ten", fixture::PARTIAL_ANSWER, None, std::time::Instant::now());
    let t = fixture::telemetry(&app);
    app.update(Action::Telemetry(Box::new(t)));
    // The panes' titles are the only place `row N` shows with no inspector open.
    let title = |app: &App| draw(app, 100, 14).backend().to_string();
    assert!(title(&app).contains("row 0"), "{}", title(&app));
    let pane = app.panes[0].id;
    let id = app.panes[0].in_flight.as_ref().unwrap().id.clone();
    let done = cohort::engine::request::RequestResult::ended(&id, FinishReason::Cancelled);
    let event = cohort::engine::row::RowEvent::Done(Box::new(done));
    app.update(Action::Row { pane, event, at: std::time::Instant::now() });
    assert!(app.panes[0].in_flight.is_none());
    assert!(!title(&app).contains("row 0"), "{}", title(&app));
}

/// Issue 58, item 14: with eight panes, some with settings of their own, the save dialog cut its
/// own sentence off, and nothing said which profile cohort starts with. The dialog wraps its text
/// and says that `default` loads at start-up and how to start with another.
#[test]
fn the_save_profile_prompt_says_it_all_and_how_the_profile_is_started() {
    let mut app = fixture::mixed(8, "dark");
    for pane in app.panes.iter_mut().take(3) {
        pane.settings = Some(app.settings.chat());
    }
    app.popups.open(Overlay::SaveProfile { name: InputLine::new("my-eight") });
    let screen = format!("{:?}", draw(&app, 80, 24).backend());
    assert!(screen.contains("of their own") && screen.contains("[pane.N])"), "the sentence is cut:\n{screen}");
    assert!(screen.contains("--profile my-eight"), "how to start with it:\n{screen}");
    assert!(screen.contains("`default`"), "which profile loads at start-up:\n{screen}");
    app.popups.open(Overlay::SaveProfile { name: InputLine::new("default") });
    let screen = format!("{:?}", draw(&app, 80, 24).backend());
    assert!(screen.contains("cohort starts with"), "saving as default:\n{screen}");
}

/// The save dialog opened from the profile picker is drawn over it (issue 59: overlays stack).
#[test]
fn the_save_prompt_over_the_profile_picker() {
    let mut app = fixture::mixed(4, "dark");
    app.profiles = fixture::shipped_profiles();
    app.popups.open(Overlay::Profiles { selected: 1 });
    app.popups.open(Overlay::SaveProfile { name: InputLine::new("my-eight") });
    insta::assert_snapshot!(draw(&app, 80, 24).backend());
}

/// Issue 58: the copy picker on an answer with code says that c copies its code block.
#[test]
fn the_copy_picker_on_an_answer_with_code_offers_its_code_block() {
    let mut app = fixture::app(1, "dark");
    let t0 = std::time::Instant::now();
    fixture::play(&mut app, 0, "Write a loop in Rust", fixture::CODE_ANSWER, Some(FinishReason::Stop), t0);
    app.popups.open(Overlay::Select { index: 1, code: 0 });
    let screen = draw(&app, 80, 10);
    let bottom = row_text(screen.backend().buffer(), 9);
    assert!(bottom.contains("message 2 of 2") && bottom.contains("c code"), "{bottom}");
    insta::assert_snapshot!(screen.backend());
}

/// Issue 58: a pane's system prompt was shown only as `sys`; the start of its first line shows
/// in the pane's border where it fits.
#[test]
fn a_panes_system_prompt_shows_its_first_words() {
    let mut app = fixture::app(1, "dark");
    app.settings.system = Some("Answer briefly, in French.\nNever apologise.".into());
    let screen = draw(&app, 80, 10);
    let buffer = screen.backend().buffer();
    let text: Vec<String> = (0..buffer.area.height).map(|y| row_text(buffer, y)).collect();
    assert!(text.iter().any(|l| l.contains("sys:\"Answer briefly,…\"")), "{text:#?}");
}
