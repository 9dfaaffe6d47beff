//! Word wrapping of styled text to a width, measured in terminal cells. Written here (not
//! ratatui's `Paragraph` wrap) because panes need the wrapped line count to scroll from the bottom
//! and to cache finished answers.

use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// Cells a string takes on screen.
pub fn width(s: &str) -> usize {
    Span::raw(s).width()
}

pub fn char_width(c: char) -> usize {
    let mut buf = [0u8; 4];
    width(c.encode_utf8(&mut buf))
}

/// Model output can hold control bytes (random weights, or a tokenizer's raw bytes). They would
/// move the terminal's cursor, so each becomes a visible replacement character; tabs become spaces.
pub fn sanitize(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' => out.push('\n'),
            '\t' => out.push_str("    "),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Wraps one logical line made of styled pieces. The first output line starts with `first`, later
/// ones with `rest` (hanging indent for list items and quotes).
pub struct Wrapper {
    width: usize,
    rest: Vec<Span<'static>>,
    rest_width: usize,
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    current_width: usize,
    indent_width: usize,
}

impl Wrapper {
    pub fn new(width: usize, first: Vec<Span<'static>>, rest: Vec<Span<'static>>) -> Wrapper {
        let first_width = first.iter().map(Span::width).sum();
        let rest_width = rest.iter().map(Span::width).sum();
        Wrapper {
            width: width.max(1),
            rest,
            rest_width,
            lines: Vec::new(),
            current: first,
            current_width: first_width,
            indent_width: first_width,
        }
    }

    /// Add text in a style, breaking between words (a word longer than a line is split).
    pub fn push(&mut self, text: &str, style: Style) {
        for token in split_words(text) {
            let word = token.trim_end_matches(' ');
            let word_width = width(word);
            let at_line_start = self.current_width == self.indent_width;
            if !at_line_start && self.current_width + word_width > self.width {
                self.break_line();
            }
            let token = if self.current_width == self.indent_width { token.trim_start_matches(' ') } else { token };
            if token.is_empty() {
                continue;
            }
            if self.current_width + width(token.trim_end_matches(' ')) > self.width {
                self.push_chars(token, style);
            } else {
                self.append(token, style);
            }
        }
    }

    /// Add text breaking anywhere (code blocks keep their spacing, so they are not word-wrapped).
    pub fn push_chars(&mut self, text: &str, style: Style) {
        let mut start = 0;
        let mut run_width = 0;
        for (i, c) in text.char_indices() {
            let w = char_width(c);
            if self.current_width + run_width + w > self.width && (run_width > 0 || !self.at_line_start()) {
                self.append(&text[start..i], style);
                self.break_line();
                start = i;
                run_width = 0;
            }
            run_width += w;
        }
        self.append(&text[start..], style);
    }

    fn at_line_start(&self) -> bool {
        self.current_width == self.indent_width
    }

    fn append(&mut self, text: &str, style: Style) {
        if text.is_empty() {
            return;
        }
        self.current_width += width(text);
        if let Some(last) = self.current.last_mut()
            && last.style == style
        {
            last.content.to_mut().push_str(text);
            return;
        }
        self.current.push(Span::styled(text.to_owned(), style));
    }

    fn break_line(&mut self) {
        let mut spans = std::mem::replace(&mut self.current, self.rest.clone());
        if let Some(last) = spans.last_mut() {
            let trimmed = last.content.trim_end_matches(' ').len();
            last.content.to_mut().truncate(trimmed);
        }
        self.lines.push(Line::from(spans));
        self.current_width = self.rest_width;
        self.indent_width = self.rest_width;
    }

    pub fn finish(mut self) -> Vec<Line<'static>> {
        self.break_line();
        self.lines
    }
}

/// "a  word here" -> ["a  ", "word ", "here"]: each word with the spaces after it.
fn split_words(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let word_end = rest.find(' ').unwrap_or(rest.len());
        let spaces_end = rest[word_end..].find(|c| c != ' ').map(|i| word_end + i).unwrap_or(rest.len());
        let (token, tail) = rest.split_at(spaces_end);
        rest = tail;
        Some(token)
    })
}

/// Plain text wrapped in one style, every line with the same indent.
pub fn wrap_plain(text: &str, width: usize, style: Style, indent: &str) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    for line in text.split('\n') {
        let prefix = vec![Span::styled(indent.to_owned(), style)];
        let mut w = Wrapper::new(width, prefix.clone(), prefix);
        w.push(line, style);
        out.extend(w.finish());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn wraps_between_words_and_splits_long_ones() {
        let lines = wrap_plain("the quick brown fox jumps", 10, Style::new(), "");
        assert_eq!(texts(&lines), ["the quick", "brown fox", "jumps"]);
        let lines = wrap_plain("abcdefghijklmnop", 6, Style::new(), "");
        assert_eq!(texts(&lines), ["abcdef", "ghijkl", "mnop"]);
    }

    #[test]
    fn hanging_indent_applies_after_the_first_line() {
        let mut w = Wrapper::new(8, vec![Span::raw("- ")], vec![Span::raw("  ")]);
        w.push("one two three", Style::new());
        assert_eq!(texts(&w.finish()), ["- one", "  two", "  three"]);
    }

    #[test]
    fn control_bytes_become_visible() {
        assert_eq!(sanitize("a\u{7}b\tc\n"), "a\u{fffd}b    c\n");
    }
}
