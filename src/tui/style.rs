//! Styles by role, built once from a theme. Views ask for `styles.border(focused)` and never see
//! colours, so `NO_COLOR` is handled here alone: colours are all `Reset` and emphasis falls back
//! to bold / reverse / italic.

use ratatui::style::{Color, Modifier, Style};

use crate::config::theme::Theme;
use crate::engine::api::RowState;

#[derive(Debug, Clone)]
pub struct Styles {
    pub base: Style,
    pub muted: Style,
    pub title: Style,
    pub accent: Style,
    pub user: Style,
    pub assistant: Style,
    pub heading: Style,
    pub strong: Style,
    pub code: Style,
    pub code_frame: Style,
    /// Highlighted code: comments, strings, keywords, numbers, type and function names.
    pub code_comment: Style,
    pub code_string: Style,
    pub code_keyword: Style,
    pub code_number: Style,
    pub code_type: Style,
    pub code_function: Style,
    /// A link's text in an answer (its address follows, muted).
    pub link: Style,
    pub error: Style,
    pub bar: Style,
    pub spark: Style,
    pub histogram: Style,
    pub selection: Style,
    /// A search's matches (the current one takes `selection`).
    pub search: Style,
    pub popup: Style,
    pub key: Style,
    border: Style,
    border_focused: Style,
    states: [Style; 7],
}

impl Styles {
    pub fn new(theme: &Theme) -> Styles {
        let p = &theme.palette;
        let fg = |c: Color| Style::new().fg(c);
        let base = Style::new().fg(p.text).bg(p.background);
        let mono = theme.no_color;
        // Without colours, a focused border and the states must still be told apart.
        let emphasis = |style: Style, m: Modifier| if mono { style.add_modifier(m) } else { style };
        Styles {
            base,
            muted: emphasis(fg(p.muted), Modifier::DIM),
            title: fg(p.title).add_modifier(Modifier::BOLD),
            accent: fg(p.accent),
            user: emphasis(fg(p.user), Modifier::BOLD),
            assistant: fg(p.assistant),
            heading: fg(p.heading).add_modifier(Modifier::BOLD),
            strong: fg(p.heading).add_modifier(Modifier::BOLD),
            code: emphasis(fg(p.code_fg).bg(p.code_bg), Modifier::ITALIC),
            code_frame: fg(p.muted).bg(p.code_bg),
            code_comment: emphasis(fg(p.code_comment).bg(p.code_bg), Modifier::DIM),
            code_string: fg(p.code_string).bg(p.code_bg),
            code_keyword: emphasis(fg(p.code_keyword).bg(p.code_bg), Modifier::BOLD),
            code_number: fg(p.code_number).bg(p.code_bg),
            code_type: fg(p.code_type).bg(p.code_bg),
            code_function: fg(p.code_function).bg(p.code_bg),
            link: fg(p.accent).add_modifier(Modifier::UNDERLINED),
            error: emphasis(fg(p.error), Modifier::BOLD),
            bar: Style::new().fg(p.bar_fg).bg(p.bar_bg),
            spark: fg(p.spark),
            histogram: fg(p.histogram),
            selection: if mono {
                Style::new().add_modifier(Modifier::REVERSED)
            } else {
                Style::new().fg(p.selection_fg).bg(p.selection_bg)
            },
            search: if mono {
                Style::new().add_modifier(Modifier::UNDERLINED | Modifier::BOLD)
            } else {
                Style::new().fg(p.accent).add_modifier(Modifier::REVERSED)
            },
            popup: Style::new().fg(p.text).bg(p.popup_bg),
            key: fg(p.accent).add_modifier(Modifier::BOLD),
            border: fg(p.border),
            border_focused: emphasis(fg(p.border_focused), Modifier::BOLD),
            states: [
                fg(p.idle),
                emphasis(fg(p.queued), Modifier::ITALIC),
                emphasis(fg(p.prefill), Modifier::ITALIC),
                fg(p.decoding).add_modifier(Modifier::BOLD),
                fg(p.done),
                emphasis(fg(p.cancelled), Modifier::REVERSED),
                emphasis(fg(p.error), Modifier::REVERSED),
            ],
        }
    }

    pub fn border(&self, focused: bool) -> Style {
        if focused { self.border_focused } else { self.border }
    }

    pub fn state(&self, state: RowState) -> Style {
        self.states[state_index(state)]
    }
}

fn state_index(state: RowState) -> usize {
    match state {
        RowState::Idle => 0,
        RowState::Queued => 1,
        RowState::Prefill => 2,
        RowState::Decoding => 3,
        RowState::Done => 4,
        RowState::Cancelled => 5,
        RowState::Error => 6,
    }
}

/// The word a state is shown as.
pub fn state_label(state: RowState) -> &'static str {
    match state {
        RowState::Idle => "idle",
        RowState::Queued => "queued",
        RowState::Prefill => "prefill",
        RowState::Decoding => "decoding",
        RowState::Done => "done",
        RowState::Cancelled => "cancelled",
        RowState::Error => "error",
    }
}
