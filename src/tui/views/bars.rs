//! The top bar (profile, model, engine state, how many panes generate) and the bottom bar (the
//! latest notice, or the most useful keys).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::config::keymap::Command;
use crate::tui::action::{numerics_name, preset_name};
use crate::tui::app::{App, EngineStatus, Overlay, TICKS_PER_S};
use crate::tui::markdown::code_blocks;

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

pub fn draw_top(frame: &mut Frame, area: Rect, app: &App) {
    let s = &app.styles;
    let mut spans = vec![
        Span::styled(" cohort ", s.bar.patch(s.title)),
        Span::styled(format!("│ profile {} ", app.settings.profile), s.bar),
    ];
    // The engine's own numerics once loaded (the profile's until then); the preset is the
    // profile's, except attached, where the server's scheduler decides.
    let (numerics, attached) = match &app.engine {
        EngineStatus::Ready(info) => (info.numerics.clone(), info.weights == "server"),
        _ => (numerics_name(app.settings.numerics).to_owned(), false),
    };
    match &app.engine {
        EngineStatus::Loading { model, since_tick } => {
            let spin = SPINNER[(app.tick / 3) as usize % SPINNER.len()];
            let secs = app.tick.saturating_sub(*since_tick) as f64 / TICKS_PER_S as f64;
            spans.push(Span::styled(format!("│ {spin} loading {} {secs:.0} s ", short_model(model)), s.bar));
        }
        EngineStatus::Ready(info) => spans.push(Span::styled(format!("│ {} · {} ", info.model, info.mode), s.bar)),
        EngineStatus::Failed(_) => spans.push(Span::styled("│ ✖ no model ", s.bar.patch(s.error))),
    }
    let busy = app.busy_panes();
    let activity = if busy > 0 {
        format!("│ {busy}/{} generating ", app.panes.len())
    } else {
        let plural = if app.panes.len() == 1 { "" } else { "s" };
        format!("│ {} pane{plural} ", app.panes.len())
    };
    spans.push(Span::styled(activity, s.bar));
    let preset = if attached { "server".to_owned() } else { preset_name(app.settings.preset) };
    // The less urgent parts go whole or not at all when the bar is narrow.
    let optional = [
        Span::styled(format!("│ preset {preset} · numerics {numerics} "), s.bar),
        Span::styled(format!("│ {} ", app.session_title.as_deref().unwrap_or(&app.session)), s.bar.patch(s.muted)),
    ];
    let mut used = spans.iter().map(|span| span.width()).sum::<usize>();
    for span in optional {
        if used + span.width() <= area.width as usize {
            used += span.width();
            spans.push(span);
        }
    }
    let line = Line::from(spans);
    let used = line.width() as u16;
    frame.render_widget(Paragraph::new(line).style(s.bar), area);
    // Last, where there is room: the bottom bar names the help key too.
    let help = format!(" {} help ", app.keymap.describe_keys(Command::Help));
    let w = help.chars().count() as u16;
    if area.width >= used + w {
        let right = Rect { x: area.right() - w, width: w, ..area };
        frame.render_widget(Paragraph::new(help).style(s.bar.patch(s.key)), right);
    }
}

fn short_model(model: &str) -> &str {
    model.trim_end_matches('/').rsplit('/').next().unwrap_or(model)
}

pub fn draw_bottom(frame: &mut Frame, area: Rect, app: &App) {
    let s = &app.styles;
    if let Some(notice) = &app.notice {
        let style = if notice.error { s.error } else { s.accent };
        frame.render_widget(Paragraph::new(format!(" {}", notice.text)).style(style), area);
        return;
    }
    if let Some(Overlay::Select { index, .. } | Overlay::Branch { index }) = app.overlay() {
        let count = app.focused().messages().len();
        let (lead, enter) = match app.overlay() {
            Some(Overlay::Branch { .. }) => ("branch at ", " branch  "),
            _ => ("", " copy  "),
        };
        let mut spans = vec![
            Span::styled(format!(" {lead}message {} of {count}  ", index + 1), s.accent),
            Span::styled("↑/↓", s.key),
            Span::styled(" choose  ", s.muted),
            Span::styled("enter", s.key),
            Span::styled(enter, s.muted),
        ];
        // The copy picker's code key, where the picked message has code: which block it copies.
        if let Some(Overlay::Select { code, .. }) = app.overlay() {
            let blocks = app.focused().message_text(*index).map_or(0, |t| code_blocks(t).len());
            if blocks > 0 {
                spans.push(Span::styled("c", s.key));
                let which =
                    if blocks > 1 { format!(" code {}/{blocks}  ", code % blocks + 1) } else { " code  ".into() };
                spans.push(Span::styled(which, s.muted));
            }
        }
        spans.extend([Span::styled("esc", s.key), Span::styled(" back", s.muted)]);
        frame.render_widget(Paragraph::new(Line::from(spans)), area);
        return;
    }
    if let Some(Overlay::Search { query, back }) = app.overlay() {
        let hits = app.focused().search_hits.get();
        let lead = " find: ";
        let mut spans = vec![Span::styled(lead, s.accent), Span::styled(query.text().to_owned(), s.base)];
        spans.push(match hits {
            _ if query.text().is_empty() => Span::styled("  type what to find  ", s.muted),
            0 => Span::styled("  no match  ", s.error),
            n => Span::styled(format!("  {} of {n}  ", n - back % n), s.accent),
        });
        for (key, what) in [("↑/enter", " up  "), ("↓", " down  "), ("esc", " close")] {
            spans.push(Span::styled(key, s.key));
            spans.push(Span::styled(what, s.muted));
        }
        frame.render_widget(Paragraph::new(Line::from(spans)), area);
        let x = area.x + (lead.chars().count() + crate::tui::wrap::width(&query.text()[..query.cursor()])) as u16;
        if x < area.right() {
            frame.set_cursor_position((x, area.y));
        }
        return;
    }
    if let Some(Overlay::Row { id, .. }) = app.overlay() {
        let rows = &app.telemetry.rows;
        let place = match rows.iter().position(|r| r.id == *id) {
            Some(i) => format!(" row {i} of the lane's {}  ", rows.len()),
            None => " a row that has left the lane  ".to_owned(),
        };
        let spans = vec![
            Span::styled(place, s.accent),
            Span::styled("↑/↓", s.key),
            Span::styled(" other rows  ", s.muted),
            Span::styled("esc", s.key),
            Span::styled(" back", s.muted),
        ];
        frame.render_widget(Paragraph::new(Line::from(spans)), area);
        return;
    }
    let first = |c: Command| app.keymap.keys_for(c).first().map(ToString::to_string);
    let hints = [
        (Command::Send, "send"),
        (Command::SendAll, "send all"),
        (Command::Cancel, "cancel"),
        (Command::Zoom, "zoom"),
        (Command::Inspector, "inspector"),
        (Command::Help, "help"),
        (Command::Quit, "quit"),
    ];
    let mut spans = vec![Span::raw(" ")];
    if let Some(why) = &app.transcript_error {
        spans.push(Span::styled(format!("⚠ transcripts not saved: {why}  "), s.error));
    }
    for (command, label) in hints {
        if let Some(key) = first(command) {
            spans.push(Span::styled(key, s.key));
            spans.push(Span::styled(format!(" {label}  "), s.muted));
        }
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}
