//! A turn's rendered lines, with its code lines kept whole. Code is never wrapped, so a line
//! wider than the pane is cut when it is drawn, at the pane's sideways offset ([`code_view`]):
//! scrolling a pane's code blocks costs the visible lines and renders nothing again, and a turn
//! rendered once while it streamed stays valid at every offset.

use ratatui::text::{Line, Span};

use super::markdown::cut;
use super::wrap::char_width;

/// Cells before a code line's code: its gutter span, `│ `.
pub const GUTTER: usize = 2;

#[derive(Debug, Clone, Default)]
pub struct Rendered {
    lines: Vec<Line<'static>>,
    /// Which of `lines` are code lines (ascending indices).
    code: Vec<usize>,
    /// The widest code line's code, in cells (its gutter not counted).
    widest_code: usize,
}

impl Rendered {
    pub fn push(&mut self, line: Line<'static>) {
        self.lines.push(line);
    }

    pub fn extend(&mut self, lines: impl IntoIterator<Item = Line<'static>>) {
        self.lines.extend(lines);
    }

    /// A code line: its gutter span, then the code, whole.
    pub fn push_code(&mut self, line: Line<'static>) {
        self.widest_code = self.widest_code.max(line.width().saturating_sub(GUTTER));
        self.code.push(self.lines.len());
        self.lines.push(line);
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn is_code(&self, index: usize) -> bool {
        self.code.binary_search(&index).is_ok()
    }

    /// The lines, each with whether it is a code line.
    pub fn iter(&self) -> impl Iterator<Item = (&Line<'static>, bool)> {
        self.lines.iter().enumerate().map(|(i, line)| (line, self.is_code(i)))
    }

    pub fn widest_code(&self) -> usize {
        self.widest_code
    }

    pub fn clear(&mut self) {
        *self = Rendered::default();
    }

    /// The lines as drawn at `width` cells with code scrolled `offset` cells sideways.
    pub fn shown(&self, width: usize, offset: usize) -> Vec<Line<'static>> {
        self.iter()
            .map(|(line, code)| if code { code_view(line.clone(), offset, width) } else { line.clone() })
            .collect()
    }
}

impl From<Vec<Line<'static>>> for Rendered {
    fn from(lines: Vec<Line<'static>>) -> Rendered {
        Rendered { lines, ..Rendered::default() }
    }
}

/// The most a pane of `width` cells needs to scroll sideways to show the end of code `widest`
/// cells wide.
pub fn max_offset(widest: usize, width: usize) -> usize {
    widest.saturating_sub(width.saturating_sub(GUTTER))
}

/// Code line `line` (gutter span first) in `width` cells, its code scrolled `offset` cells to the
/// left. Code hidden on the left shows as `…` in the gutter, code past the edge as `…` in the last
/// cell; a wide character split by the offset leaves a blank cell.
pub fn code_view(line: Line<'static>, offset: usize, width: usize) -> Line<'static> {
    let Line { style, alignment, spans } = line;
    let mut spans = spans.into_iter();
    let Some(mut gutter) = spans.next() else { return Line { style, alignment, spans: Vec::new() } };
    let marker = gutter.style;
    let mut shown = Vec::new();
    let mut skipped = 0;
    let mut hidden = false;
    for span in spans {
        if skipped >= offset {
            shown.push(span);
            continue;
        }
        let mut kept = String::new();
        for c in span.content.chars() {
            if skipped >= offset {
                kept.push(c);
                continue;
            }
            hidden = true;
            skipped += char_width(c);
            // The right half of a wide character split by the offset.
            kept.extend(std::iter::repeat_n(' ', skipped.saturating_sub(offset)));
        }
        if !kept.is_empty() {
            shown.push(Span::styled(kept, span.style));
        }
    }
    if hidden {
        gutter = Span::styled(format!("{}…", gutter.content.trim_end()), marker);
    }
    let mut all = vec![gutter];
    all.extend(shown);
    Line { style, alignment, spans: cut(all, width, marker) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::{Color, Style};

    fn code(text: &str) -> Line<'static> {
        Line::from(vec![Span::styled("│ ", Style::default().fg(Color::Blue)), Span::raw(text.to_owned())])
    }

    fn text(line: &Line) -> String {
        line.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn at_offset_zero_a_long_line_is_cut_at_the_edge() {
        assert_eq!(text(&code_view(code("let x = 12345;"), 0, 10)), "│ let x =…");
        assert_eq!(text(&code_view(code("short"), 0, 10)), "│ short");
    }

    #[test]
    fn scrolled_code_shows_what_was_hidden_with_a_marker_on_each_hidden_side() {
        assert_eq!(text(&code_view(code("let x = 12345;"), 4, 10)), "│…x = 123…");
        assert_eq!(text(&code_view(code("let x = 12345;"), 6, 10)), "│…= 12345;");
        // A line shorter than the offset shows only its gutter marker.
        assert_eq!(text(&code_view(code("ab"), 6, 10)), "│…");
    }

    #[test]
    fn a_wide_character_split_by_the_offset_leaves_a_blank_and_widths_hold() {
        let line = code_view(code("漢字abc"), 1, 10);
        assert_eq!(text(&line), "│… 字abc");
        for offset in 0..10 {
            for width in 1..12 {
                let line = code_view(code("漢字 mixed 語 text"), offset, width);
                assert!(line.width() <= width.max(1), "{offset} {width}: {:?}", text(&line));
            }
        }
    }

    #[test]
    fn styles_of_the_code_are_kept_across_the_cut() {
        let line = Line::from(vec![
            Span::styled("│ ", Style::default().fg(Color::Blue)),
            Span::styled("fn", Style::default().fg(Color::Red)),
            Span::raw(" main() {}"),
        ]);
        let shown = code_view(line, 1, 40);
        assert_eq!(shown.spans[1], Span::styled("n", Style::default().fg(Color::Red)));
        assert_eq!(shown.spans[2], Span::raw(" main() {}"));
    }

    #[test]
    fn the_widest_code_line_sets_how_far_a_pane_can_scroll() {
        let mut r = Rendered::from(vec![Line::from("user text that is wide but not code")]);
        r.push_code(code("0123456789"));
        r.push(Line::from("x"));
        r.push_code(code("0123"));
        assert_eq!(r.widest_code(), 10);
        assert_eq!((r.is_code(0), r.is_code(1), r.is_code(2), r.is_code(3)), (false, true, false, true));
        assert_eq!(max_offset(r.widest_code(), 8), 4);
        assert_eq!(max_offset(r.widest_code(), 40), 0);
        assert_eq!(text(&r.shown(8, 4)[1]), "│…456789");
    }
}
