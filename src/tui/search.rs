//! Finding text in a pane's conversation: where a query occurs in a rendered line (ignoring
//! case), and the line again with those places marked. The pane view searches the lines it
//! draws, so a match is found as it reads on screen (markdown rendered, code framed).

use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// Where `query` occurs in `text`, as ranges of characters [from, to), left to right and not
/// overlapping; letters match whatever their case. An empty query occurs nowhere.
pub fn find(text: &str, query: &str) -> Vec<(usize, usize)> {
    let fold = |c: char| c.to_lowercase().next().unwrap_or(c);
    let needle: Vec<char> = query.chars().map(fold).collect();
    if needle.is_empty() {
        return Vec::new();
    }
    let hay: Vec<char> = text.chars().map(fold).collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at + needle.len() <= hay.len() {
        if hay[at..at + needle.len()] == needle[..] {
            out.push((at, at + needle.len()));
            at += needle.len();
        } else {
            at += 1;
        }
    }
    out
}

/// The text of a line, its spans joined.
pub fn line_text(line: &Line) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect()
}

/// `line` with each range of characters [from, to) in `marks` patched with its style (ranges in
/// order, not overlapping); the spans are split where a mark starts or ends.
pub fn mark(line: &Line<'static>, marks: &[(usize, usize, Style)]) -> Line<'static> {
    if marks.is_empty() {
        return line.clone();
    }
    let mut spans = Vec::new();
    let mut at = 0;
    for span in &line.spans {
        let chars: Vec<char> = span.content.chars().collect();
        let end = at + chars.len();
        let mut from = at;
        while from < end {
            // The mark covering `from`, else the next one to start inside this span.
            let covering = marks.iter().find(|(a, b, _)| *a <= from && from < *b);
            let (to, style) = match covering {
                Some((_, b, style)) => ((*b).min(end), span.style.patch(*style)),
                None => {
                    let next = marks.iter().map(|(a, _, _)| *a).filter(|a| *a > from).min().unwrap_or(end);
                    (next.min(end), span.style)
                }
            };
            spans.push(Span::styled(chars[from - at..to - at].iter().collect::<String>(), style));
            from = to;
        }
        at = end;
    }
    Line { spans, style: line.style, alignment: line.alignment }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::{Color, Modifier};

    #[test]
    fn matches_ignore_case_and_do_not_overlap() {
        assert_eq!(find("The cohort, THE lane", "the"), [(0, 3), (12, 15)]);
        assert_eq!(find("aaaa", "aa"), [(0, 2), (2, 4)]);
        assert_eq!(find("für Über", "über"), [(4, 8)]);
        assert_eq!(find("anything", ""), []);
        assert_eq!(find("ab", "abc"), []);
    }

    #[test]
    fn marks_split_spans_and_keep_their_styles() {
        let bold = Style::new().add_modifier(Modifier::BOLD);
        let line = Line::from(vec![Span::raw("› a "), Span::styled("loop in Rust", bold)]);
        let hit = Style::new().bg(Color::Yellow);
        let marked = mark(&line, &[(2, 6, hit)]);
        let parts: Vec<(&str, Style)> = marked.spans.iter().map(|s| (s.content.as_ref(), s.style)).collect();
        assert_eq!(parts, [("› ", Style::new()), ("a ", hit), ("lo", bold.patch(hit)), ("op in Rust", bold)]);
        assert_eq!(line_text(&marked), line_text(&line));
    }
}
