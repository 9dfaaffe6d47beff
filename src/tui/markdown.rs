//! Answers as markdown, enough for chat output: fenced code blocks set apart (framed, own colours,
//! never word-wrapped), headings, list items and quotes with hanging indents, rules, and inline
//! `code` and **bold**. Source line breaks are kept (chat models mean them). An unclosed fence (an
//! answer still streaming) renders as code to the end.

use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::style::Styles;
use super::wrap::{Wrapper, sanitize, width as text_width};

/// Where a line falls: inside a fenced code block (with its fence marker) or not. Carried from
/// line to line, so complete lines can be rendered once and kept while an answer streams.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockState {
    fence: Option<String>,
}

/// Render `text` at `width` cells.
pub fn render(text: &str, width: usize, styles: &Styles) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    render_into(&mut BlockState::default(), text, width, styles, &mut out);
    out
}

/// Render `text` (one or more lines) continuing from `state`, appending to `out`.
pub fn render_into(state: &mut BlockState, text: &str, width: usize, styles: &Styles, out: &mut Vec<Line<'static>>) {
    let text = sanitize(text);
    let width = width.max(4);
    for line in text.split('\n') {
        render_line(state, line, width, styles, out);
    }
}

fn render_line(state: &mut BlockState, line: &str, width: usize, styles: &Styles, out: &mut Vec<Line<'static>>) {
    let trimmed = line.trim_start();
    if let Some(marker) = &state.fence {
        if trimmed.starts_with(marker.as_str()) && trimmed.trim_end() == marker.as_str() {
            out.push(frame_line("╰", "", width, styles));
            state.fence = None;
        } else {
            code_line(line, width, styles, out);
        }
        return;
    }
    if let Some(marker) = fence_marker(trimmed) {
        let lang = trimmed[marker.len()..].trim();
        out.push(frame_line("╭", lang, width, styles));
        state.fence = Some(marker);
        return;
    }
    block_line(line, width, styles, out);
}

/// "```rust" -> "```"; "~~~~" -> "~~~~".
fn fence_marker(line: &str) -> Option<String> {
    for c in ['`', '~'] {
        let n = line.chars().take_while(|&x| x == c).count();
        if n >= 3 {
            return Some(std::iter::repeat_n(c, n).collect());
        }
    }
    None
}

/// The top or bottom edge of a code block: `╭─ rust ───`.
fn frame_line(corner: &str, label: &str, width: usize, styles: &Styles) -> Line<'static> {
    let mut s = format!("{corner}─");
    if !label.is_empty() {
        s.push(' ');
        s.push_str(label);
        s.push(' ');
    }
    let used = text_width(&s);
    if used < width {
        s.push_str(&"─".repeat(width - used));
    }
    Line::from(Span::styled(s, styles.code_frame))
}

fn code_line(line: &str, width: usize, styles: &Styles, out: &mut Vec<Line<'static>>) {
    let gutter = vec![Span::styled("│ ".to_owned(), styles.code_frame)];
    let mut w = Wrapper::new(width, gutter.clone(), gutter);
    w.push_chars(line, styles.code);
    out.extend(w.finish());
}

fn block_line(line: &str, width: usize, styles: &Styles, out: &mut Vec<Line<'static>>) {
    let trimmed = line.trim_start();
    let indent = " ".repeat((line.len() - trimmed.len()).min(8));
    let plain = styles.assistant;
    if trimmed.is_empty() {
        out.push(Line::default());
        return;
    }
    if is_rule(trimmed) {
        out.push(Line::from(Span::styled("─".repeat(width), styles.muted)));
        return;
    }
    if let Some((level, heading)) = heading(trimmed) {
        let mut w = Wrapper::new(width, vec![], vec![]);
        w.push(&format!("{} ", "#".repeat(level)), styles.muted);
        inline(&mut w, heading, styles.heading, styles);
        out.extend(w.finish());
        return;
    }
    if let Some(quote) = trimmed.strip_prefix('>') {
        let bar = vec![Span::styled(format!("{indent}│ "), styles.muted)];
        let mut w = Wrapper::new(width, bar.clone(), bar);
        inline(&mut w, quote.trim_start(), styles.muted, styles);
        out.extend(w.finish());
        return;
    }
    if let Some((bullet, item)) = list_item(trimmed) {
        let hang = " ".repeat(text_width(&bullet) + indent.len());
        let first = vec![Span::raw(indent.clone()), Span::styled(bullet, styles.accent)];
        let mut w = Wrapper::new(width, first, vec![Span::raw(hang)]);
        inline(&mut w, item, plain, styles);
        out.extend(w.finish());
        return;
    }
    let mut w = Wrapper::new(width, vec![Span::raw(indent.clone())], vec![Span::raw(indent)]);
    inline(&mut w, trimmed, plain, styles);
    out.extend(w.finish());
}

fn is_rule(line: &str) -> bool {
    let t = line.trim_end();
    t.len() >= 3
        && ['-', '*', '_']
            .iter()
            .any(|&c| t.chars().all(|x| x == c || x == ' ') && t.chars().filter(|&x| x == c).count() >= 3)
}

fn heading(line: &str) -> Option<(usize, &str)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    if (1..=6).contains(&level) && line[level..].starts_with(' ') { Some((level, line[level..].trim())) } else { None }
}

/// "- item" -> ("• ", "item"); "3. item" -> ("3. ", "item").
fn list_item(line: &str) -> Option<(String, &str)> {
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return Some(("• ".into(), rest));
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if (1..=3).contains(&digits) {
        let rest = &line[digits..];
        for sep in [". ", ") "] {
            if let Some(item) = rest.strip_prefix(sep) {
                return Some((format!("{}{}", &line[..digits], sep), item));
            }
        }
    }
    None
}

/// Inline `code` and **bold** inside a block; anything unmatched is plain text.
fn inline(w: &mut Wrapper, text: &str, plain: Style, styles: &Styles) {
    let mut rest = text;
    while !rest.is_empty() {
        let code = rest.find('`');
        let bold = rest.find("**");
        match (code, bold) {
            (Some(c), b) if b.is_none_or(|b| c < b) => {
                if let Some(end) = rest[c + 1..].find('`') {
                    w.push(&rest[..c], plain);
                    w.push(&rest[c + 1..c + 1 + end], styles.code);
                    rest = &rest[c + 2 + end..];
                    continue;
                }
                w.push(rest, plain);
                return;
            }
            (_, Some(b)) => {
                if let Some(end) = rest[b + 2..].find("**") {
                    w.push(&rest[..b], plain);
                    w.push(&rest[b + 2..b + 2 + end], styles.strong);
                    rest = &rest[b + 4 + end..];
                    continue;
                }
                w.push(rest, plain);
                return;
            }
            _ => {
                w.push(rest, plain);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::theme::Theme;

    fn texts(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn code_blocks_are_framed_and_not_word_wrapped() {
        let styles = Styles::new(&Theme::builtin("dark"));
        let lines = render("Run:\n```sh\nls  -la\n```\n- one\n- **two**", 20, &styles);
        assert_eq!(
            texts(&lines),
            ["Run:", "╭─ sh ──────────────", "│ ls  -la", "╰───────────────────", "• one", "• two"]
        );
    }

    #[test]
    fn an_unclosed_fence_stays_code() {
        let styles = Styles::new(&Theme::builtin("dark"));
        let lines = render("```\nfn main() {", 20, &styles);
        assert_eq!(texts(&lines), ["╭───────────────────", "│ fn main() {"]);
    }
}
