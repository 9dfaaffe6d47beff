//! The profile picker (built-in and user profiles) and the "save as profile" prompt.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use super::popup;
use crate::config::profile::bad_name_chars;
use crate::tui::app::App;
use crate::tui::input::InputLine;

pub fn draw_profiles(frame: &mut Frame, area: Rect, app: &App, selected: usize) {
    let s = &app.styles;
    let height = app.profiles.len() as u16 + 5;
    let inner =
        popup::open(frame, area, 72, height, Line::from(Span::styled(" profiles ", s.title)), s.popup, s.border(true));
    let mut lines: Vec<Line> = app
        .profiles
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let marker = if p.name == app.settings.profile { "●" } else { " " };
            let origin = if p.path.is_some() { "yours" } else { "built in" };
            let text = format!(" {marker} {:<14} {:<9} {}", p.name, origin, p.description.as_deref().unwrap_or(""));
            let style = if i == selected { s.selection } else { s.popup };
            Line::from(Span::styled(text, style))
        })
        .collect();
    if lines.is_empty() {
        lines.push(Line::from(Span::styled(" no profiles found", s.muted)));
    }
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(" enter load · ctrl+s save current settings · esc close", s.muted)));
    frame.render_widget(Paragraph::new(lines), inner);
}

pub fn draw_save(frame: &mut Frame, area: Rect, app: &App, name: &InputLine) {
    let s = &app.styles;
    let title = Line::from(Span::styled(" save settings as a profile ", s.title));
    let bad = bad_name_chars(name.text());
    let problem = if bad.is_empty() {
        let n = app.panes.len();
        let plural = if n == 1 { "" } else { "s" };
        let own = app.panes.iter().filter(|p| p.settings.is_some()).count();
        let own = if own > 0 { format!(" ({own} with settings of their own, as [pane.N])") } else { String::new() };
        Line::from(Span::styled(format!(" saves the current settings, with {n} pane{plural}{own}"), s.muted))
    } else {
        let list: Vec<String> = bad.iter().map(|c| format!("{c:?}")).collect();
        Line::from(Span::styled(format!(" ✖ not allowed in a name: {}", list.join(" ")), s.error))
    };
    // Which profile cohort starts with: only `default` loads without --profile.
    let start = match name.text().trim() {
        "default" => vec![" cohort starts with this profile (it is `default`)".to_owned()],
        "" => vec![" only `default` loads at start-up; another with --profile".to_owned()],
        other => {
            vec![" only `default` loads at start-up; this one with".to_owned(), format!(" cohort --profile {other}")]
        }
    };
    let lines = vec![
        Line::from(vec![Span::styled(" name: ", s.muted), Span::styled(name.text().to_owned(), s.popup)]),
        problem,
    ]
    .into_iter()
    .chain(start.into_iter().map(|t| Line::from(Span::styled(t, s.muted))))
    .chain([Line::from(Span::styled(" letters, digits, - and _ · enter save · esc cancel", s.muted))])
    .collect::<Vec<_>>();
    // The popup holds its text wrapped: the pane sentence runs past one line with eight panes.
    let width = 60u16;
    let text_width = usize::from(width.saturating_sub(2)).max(1);
    let rows: usize = lines.iter().map(|l| l.width().max(1).div_ceil(text_width)).sum();
    let height = u16::try_from(rows).unwrap_or(u16::MAX).saturating_add(3);
    let inner = popup::open(frame, area, width, height, title, s.popup, s.border(true));
    frame.render_widget(Paragraph::new(lines).wrap(ratatui::widgets::Wrap { trim: false }), inner);
    let x = inner.x + 7 + name.layout(usize::MAX / 2).1.1 as u16;
    if x < inner.right() && inner.height > 0 {
        frame.set_cursor_position((x, inner.y));
    }
}
