//! Answers as markdown, parsed by pulldown-cmark (CommonMark plus GitHub's tables, strikethrough
//! and task lists) and drawn for a pane: headings, list items and quotes with hanging indents,
//! rules, *emphasis*, **strong**, ~~strike~~, inline `code`, links as their text with the address
//! dimmed after it, tables as aligned columns (cells cut with `…` when the pane is narrow), and
//! fenced code blocks framed, highlighted by syntect (the colours come from the theme's `code_*`
//! keys) and never wrapped: code lines are kept whole ([`Rendered`]) and cut where a pane draws
//! them, at its sideways scroll (`…` marks code past either edge).
//!
//! Chat models mean their line breaks, so the source is read line by line: each line outside a
//! code block or table is parsed on its own (a paragraph's lines stay lines, and markdown that
//! spans lines, such as emphasis across a line break, shows as written). That also makes
//! streaming cheap: [`BlockState`] carries what one line leaves for the next (an open fence and
//! its highlighter, a table not yet ended), so a pane renders each complete line once and only
//! the unfinished last one again as tokens arrive ([`render_into`], then [`finish`] on a copy of
//! the state for the tail). A table is drawn when it ends, as its column widths depend on every
//! row; until then it is drawn again with each token, like the tail. An unclosed fence (an answer
//! still streaming) renders as code to the end. No input panics (a proptest holds it to that).

use std::sync::LazyLock;

use pulldown_cmark::{Alignment, Event, Options, Parser, Tag, TagEnd, TextMergeStream};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use syntect::highlighting::{
    Color as SynColor, HighlightIterator, HighlightState, Highlighter, StyleModifier, Theme as SynTheme, ThemeItem,
    ThemeSettings,
};
use syntect::parsing::{ParseState, ScopeStack, SyntaxSet};

use super::rendered::Rendered;
use super::style::Styles;
use super::wrap::{Wrapper, char_width, sanitize, width as text_width};

/// Where a line falls, carried from line to line so that complete lines can be rendered once and
/// kept while an answer streams: inside a fenced code block (its fence and highlighter state), or
/// inside a table that has not ended yet (its lines, drawn when it ends).
#[derive(Debug, Clone, Default)]
pub struct BlockState {
    fence: Option<Fence>,
    /// Lines of a table not drawn yet, or one line that may be a table's header (it is one when
    /// the next line is a delimiter row such as `|---|:--:|`).
    pending: Vec<String>,
    /// The pending lines continue a long table already partly drawn: its header is not repeated.
    continued: bool,
}

#[derive(Debug, Clone)]
struct Fence {
    /// The fence's character and length: it closes on a line of at least as many.
    marker: char,
    len: usize,
    /// None for a language syntect does not know (or after a line it could not parse).
    highlight: Option<Highlight>,
}

#[derive(Debug, Clone)]
struct Highlight {
    parse: ParseState,
    scopes: HighlightState,
}

/// Rows of one table drawn at a time: a longer table is drawn in pieces as it streams (each piece
/// sized to its own rows), so a huge table does not make every token redraw it all.
const TABLE_ROWS_AT_ONCE: usize = 200;
/// Code lines longer than this (bytes) end highlighting for the rest of their block: regex
/// highlighting of a minified kilobyte line can take long.
const HIGHLIGHT_MAX_LINE: usize = 4096;

/// Render `text` at `width` cells, code cut at the edge.
pub fn render(text: &str, width: usize, styles: &Styles) -> Vec<Line<'static>> {
    let mut out = Rendered::default();
    let mut state = BlockState::default();
    render_into(&mut state, text, width, styles, &mut out);
    finish(&mut state, width, styles, &mut out);
    out.shown(width.max(4), 0)
}

/// Render `text` (one or more lines) continuing from `state`, appending to `out`. A table's lines
/// stay in `state` until a line that is not part of it arrives, or [`finish`].
pub fn render_into(state: &mut BlockState, text: &str, width: usize, styles: &Styles, out: &mut Rendered) {
    let text = sanitize(text);
    let width = width.max(4);
    for line in text.split('\n') {
        render_line(state, line, width, styles, out);
    }
}

/// Draw what `state` still holds (a table at the end of the text so far).
pub fn finish(state: &mut BlockState, width: usize, styles: &Styles, out: &mut Rendered) {
    flush(state, width.max(4), styles, out);
}

/// Load the syntax definitions and compile the patterns of the languages answers use most, on
/// another thread (about 130 ms), so that the first code block does not wait for them (a
/// language's first lines cost 20-40 ms; the compiled patterns are shared between threads).
pub fn prewarm() {
    std::thread::spawn(|| {
        let styles = Styles::new(&crate::config::theme::Theme::builtin("dark"));
        for lang in ["rust", "python", "bash", "js", "c", "cpp", "json"] {
            if let Some(mut highlight) = Highlight::new(lang) {
                highlight.line("x = f(1) // \"s\"", &styles);
            }
        }
    });
}

fn render_line(state: &mut BlockState, line: &str, width: usize, styles: &Styles, out: &mut Rendered) {
    if let Some(fence) = &mut state.fence {
        let t = line.trim();
        if t.len() >= fence.len && t.chars().all(|c| c == fence.marker) {
            out.push(frame_line("╰", "", width, styles));
            state.fence = None;
        } else {
            code_line(fence, line, styles, out);
        }
        return;
    }
    let trimmed = line.trim_start();
    if let Some((marker, len)) = fence_open(trimmed) {
        flush(state, width, styles, out);
        let info = trimmed[len..].trim();
        out.push(frame_line("╭", info, width, styles));
        state.fence = Some(Fence { marker, len, highlight: Highlight::new(info) });
        return;
    }
    if !state.pending.is_empty() {
        let in_table = state.pending.len() >= 2;
        if (in_table && is_row(line)) || (!in_table && is_delimiter_row(line)) {
            state.pending.push(line.to_owned());
            if state.pending.len() >= TABLE_ROWS_AT_ONCE + 2 {
                let head = state.pending[..2].to_vec();
                flush(state, width, styles, out);
                state.pending = head;
                state.continued = true;
            }
            return;
        }
        flush(state, width, styles, out);
    }
    if is_row(line) {
        state.pending.push(line.to_owned());
        return;
    }
    block_line(line, width, styles, out);
}

/// "```rust" -> ('`', 3); "~~~~" -> ('~', 4). A backtick fence's info string has no backticks
/// (```` ```x``` ```` is inline code).
fn fence_open(line: &str) -> Option<(char, usize)> {
    for c in ['`', '~'] {
        let n = line.chars().take_while(|&x| x == c).count();
        if n >= 3 && !(c == '`' && line[n..].contains('`')) {
            return Some((c, n));
        }
    }
    None
}

/// A line that may be a table's row: it has a `|` and is not a quote.
fn is_row(line: &str) -> bool {
    let t = line.trim_start();
    !t.starts_with('>') && t.contains('|')
}

/// `|---|:--:|`, `--- | ---`: the line under a table's header.
fn is_delimiter_row(line: &str) -> bool {
    let t = line.trim();
    if !t.contains('|') || !t.contains('-') {
        return false;
    }
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    t.split('|').all(|cell| {
        let c = cell.trim();
        let c = c.strip_prefix(':').unwrap_or(c);
        let c = c.strip_suffix(':').unwrap_or(c);
        !c.is_empty() && c.chars().all(|x| x == '-')
    })
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
    Line::from(cut(vec![Span::styled(s, styles.code_frame)], width, styles.code_frame))
}

fn code_line(fence: &mut Fence, line: &str, styles: &Styles, out: &mut Rendered) {
    let mut spans = vec![Span::styled("│ ".to_owned(), styles.code_frame)];
    match fence.highlight.as_mut().and_then(|h| h.line(line, styles)) {
        Some(pieces) => spans.extend(pieces),
        None => {
            fence.highlight = None;
            spans.push(Span::styled(line.to_owned(), styles.code));
        }
    }
    out.push_code(Line::from(spans));
}

/// `spans` cut to `width` cells: when they are wider, the last cell shows `…` (in `marker`).
pub(super) fn cut(spans: Vec<Span<'static>>, width: usize, marker: Style) -> Vec<Span<'static>> {
    if spans.iter().map(Span::width).sum::<usize>() <= width {
        return spans;
    }
    let budget = width.saturating_sub(1);
    let mut used = 0;
    let mut out = Vec::new();
    'spans: for span in spans {
        let mut kept = String::new();
        for c in span.content.chars() {
            let w = char_width(c);
            if used + w > budget {
                if !kept.is_empty() {
                    out.push(Span::styled(kept, span.style));
                }
                break 'spans;
            }
            used += w;
            kept.push(c);
        }
        out.push(Span::styled(kept, span.style));
    }
    // A wide character that did not fit leaves a gap: the marker still goes at the edge.
    let gap = budget - used;
    out.push(Span::styled(format!("{}…", " ".repeat(gap)), marker));
    if width == 0 {
        out.clear();
    }
    out
}

// ---------------------------------------------------------------- syntax highlighting

/// syntect's bundled syntaxes (Rust, Python, C, C++, JavaScript, shell, JSON, YAML, SQL and
/// about 70 more), read once.
static SYNTAXES: LazyLock<SyntaxSet> = LazyLock::new(SyntaxSet::load_defaults_newlines);

/// What a piece of code is, as the theme colours it. syntect's theme stands in for a lookup
/// table: each class's "colour" is its number, turned into the theme's style by [`class_style`].
const CLASSES: &[(&str, u8)] = &[
    // Operators read better as plain code than as keywords.
    ("keyword.operator, punctuation", 0),
    ("comment, punctuation.definition.comment", 1),
    ("string, punctuation.definition.string, constant.character.escape", 2),
    ("keyword, storage, variable.language", 3),
    ("constant.numeric, constant.language, constant.character, constant.other", 4),
    (
        "entity.name.type, entity.name.class, entity.name.struct, entity.name.enum, entity.name.trait, \
         entity.name.impl, support.type, support.class, entity.other.inherited-class",
        5,
    ),
    ("entity.name.function, support.function, variable.function, support.macro, entity.name.macro", 6),
];

static CLASS_THEME: LazyLock<SynTheme> = LazyLock::new(|| SynTheme {
    settings: ThemeSettings { foreground: Some(class_color(0)), ..ThemeSettings::default() },
    scopes: CLASSES
        .iter()
        .filter_map(|(selector, class)| {
            Some(ThemeItem {
                scope: selector.parse().ok()?,
                style: StyleModifier { foreground: Some(class_color(*class)), background: None, font_style: None },
            })
        })
        .collect(),
    ..SynTheme::default()
});

fn class_color(class: u8) -> SynColor {
    SynColor { r: class, g: 0, b: 0, a: 0xff }
}

fn class_style(class: u8, styles: &Styles) -> Style {
    match class {
        1 => styles.code_comment,
        2 => styles.code_string,
        3 => styles.code_keyword,
        4 => styles.code_number,
        5 => styles.code_type,
        6 => styles.code_function,
        _ => styles.code,
    }
}

impl Highlight {
    /// A highlighter for a fence's info string (`rust`, `py`, `sh title="x"`), if syntect knows
    /// the language.
    fn new(info: &str) -> Option<Highlight> {
        let lang = info.split(|c: char| c.is_whitespace() || c == ',' || c == '{').next()?;
        if lang.is_empty() {
            return None;
        }
        let syntax = SYNTAXES.find_syntax_by_token(lang)?;
        let highlighter = Highlighter::new(&CLASS_THEME);
        Some(Highlight { parse: ParseState::new(syntax), scopes: HighlightState::new(&highlighter, ScopeStack::new()) })
    }

    /// One line of code as styled pieces; None when syntect cannot parse it (the block goes on
    /// unhighlighted).
    fn line(&mut self, line: &str, styles: &Styles) -> Option<Vec<Span<'static>>> {
        if line.len() > HIGHLIGHT_MAX_LINE {
            return None;
        }
        let with_newline = format!("{line}\n");
        let ops = self.parse.parse_line(&with_newline, &SYNTAXES).ok()?;
        let highlighter = Highlighter::new(&CLASS_THEME);
        let mut spans: Vec<Span<'static>> = Vec::new();
        for (style, piece) in HighlightIterator::new(&mut self.scopes, &ops, &with_newline, &highlighter) {
            let piece = piece.strip_suffix('\n').unwrap_or(piece);
            if piece.is_empty() {
                continue;
            }
            let style = class_style(style.foreground.r, styles);
            match spans.last_mut() {
                Some(last) if last.style == style => last.content.to_mut().push_str(piece),
                _ => spans.push(Span::styled(piece.to_owned(), style)),
            }
        }
        Some(spans)
    }
}

// ---------------------------------------------------------------- lines and inline text

fn options() -> Options {
    Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS
}

/// One line outside code blocks and tables, parsed on its own.
fn block_line(line: &str, width: usize, styles: &Styles, out: &mut Rendered) {
    let trimmed = line.trim_start();
    if trimmed.is_empty() {
        out.push(Line::default());
        return;
    }
    // Leading spaces are kept as indentation (nested lists), not read as an indented code block.
    let indent = " ".repeat(line[..line.len() - trimmed.len()].chars().count().min(8));
    let mut first = vec![Span::raw(indent.clone())];
    let mut rest = vec![Span::raw(indent)];
    let mut wrapper: Option<Wrapper> = None;
    let mut inline = Inline::new(styles.assistant, styles);
    let mut lists: Vec<Option<u64>> = Vec::new();
    let mut drew = false;
    for event in TextMergeStream::new(Parser::new_ext(trimmed, options())) {
        match event {
            Event::Start(Tag::BlockQuote(_)) => {
                first.push(Span::styled("│ ", styles.muted));
                rest.push(Span::styled("│ ", styles.muted));
                inline.push(styles.muted);
            }
            Event::End(TagEnd::BlockQuote(_)) => inline.pop(),
            Event::Start(Tag::List(start)) => lists.push(start),
            Event::End(TagEnd::List(_)) => {
                lists.pop();
            }
            Event::Start(Tag::Item) => {
                let bullet = match lists.last() {
                    Some(Some(n)) => format!("{n}. "),
                    _ => "• ".to_owned(),
                };
                rest.push(Span::raw(" ".repeat(text_width(&bullet))));
                first.push(Span::styled(bullet, styles.accent));
            }
            Event::Start(Tag::Heading { level, .. }) => {
                first.push(Span::styled(format!("{} ", "#".repeat(level as usize)), styles.muted));
                inline.push(styles.heading);
            }
            Event::End(TagEnd::Heading(_)) => inline.pop(),
            Event::Start(Tag::CodeBlock(_)) => inline.push(styles.code),
            Event::End(TagEnd::CodeBlock) => inline.pop(),
            Event::Rule => {
                if let Some(w) = wrapper.take() {
                    out.extend(w.finish());
                }
                let mut spans = std::mem::take(&mut first);
                let used: usize = spans.iter().map(Span::width).sum();
                spans.push(Span::styled("─".repeat(width.saturating_sub(used).max(3)), styles.muted));
                out.push(Line::from(cut(spans, width, styles.muted)));
                drew = true;
            }
            // Inline text and styles (and the end of a link: its address); the line's wrapper
            // starts, with the markers gathered so far, at its first text.
            event => inline.event(event, &mut |text, style| {
                let w = wrapper.get_or_insert_with(|| Wrapper::new(width, std::mem::take(&mut first), rest.clone()));
                w.push(text, style);
            }),
        }
    }
    if let Some(w) = wrapper {
        out.extend(w.finish());
    } else if !drew {
        if first.len() > 1 {
            // A marker alone: "-", "#", ">".
            out.push(Line::from(first));
        } else {
            // Nothing to show (a link reference definition): the line as written.
            let mut w = Wrapper::new(width, first, rest);
            w.push(trimmed, styles.assistant);
            out.extend(w.finish());
        }
    }
}

/// Styles of inline text as pulldown-cmark's events open and close them.
struct Inline<'s> {
    stack: Vec<Style>,
    /// Open links: the address and the text shown so far (the address is shown after the text
    /// unless it is the same).
    links: Vec<(String, String)>,
    styles: &'s Styles,
}

impl<'s> Inline<'s> {
    fn new(base: Style, styles: &'s Styles) -> Inline<'s> {
        Inline { stack: vec![base], links: Vec::new(), styles }
    }

    fn current(&self) -> Style {
        *self.stack.last().expect("never empty")
    }

    fn push(&mut self, style: Style) {
        self.stack.push(style);
    }

    fn pop(&mut self) {
        if self.stack.len() > 1 {
            self.stack.pop();
        }
    }

    fn text(&mut self, text: &str, style: Style, sink: &mut dyn FnMut(&str, Style)) {
        for (_, shown) in &mut self.links {
            shown.push_str(text);
        }
        sink(text, style);
    }

    /// Turn one inline event into styled text for `sink`.
    fn event(&mut self, event: Event<'_>, sink: &mut dyn FnMut(&str, Style)) {
        let styles = self.styles;
        match event {
            // HTML shows as written (an HTML block's text ends with its line's newline).
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => {
                self.text(t.trim_end_matches('\n'), self.current(), sink)
            }
            // Code keeps the emphasis around it (struck, bold, a link's underline).
            Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                self.text(&t, self.current().patch(styles.code), sink)
            }
            Event::SoftBreak | Event::HardBreak => self.text(" ", self.current(), sink),
            Event::FootnoteReference(t) => self.text(&format!("[^{t}]"), self.current(), sink),
            Event::TaskListMarker(done) => sink(if done { "[x] " } else { "[ ] " }, styles.accent),
            Event::Rule => {}
            Event::Start(tag) => match tag {
                Tag::Emphasis => self.push(self.current().add_modifier(Modifier::ITALIC)),
                Tag::Strong => self.push(self.current().patch(styles.strong)),
                Tag::Strikethrough => self.push(self.current().add_modifier(Modifier::CROSSED_OUT)),
                Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                    self.push(self.current().patch(styles.link));
                    self.links.push((dest_url.into_string(), String::new()));
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => self.pop(),
                TagEnd::Link | TagEnd::Image => {
                    self.pop();
                    if let Some((url, shown)) = self.links.pop() {
                        let bare = url.strip_prefix("mailto:").unwrap_or(&url);
                        if !url.is_empty() && shown != url && shown != bare {
                            let address = if shown.is_empty() { url } else { format!(" ({url})") };
                            self.text(&address, styles.muted, sink);
                        }
                    }
                }
                _ => {}
            },
        }
    }
}

/// The text of each code block in `text` (fenced or indented), in order, as written between its
/// fences: what the message picker's code key copies.
pub fn code_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut open: Option<String> = None;
    for event in Parser::new_ext(text, options()) {
        match event {
            Event::Start(Tag::CodeBlock(_)) => open = Some(String::new()),
            Event::Text(t) => {
                if let Some(block) = open.as_mut() {
                    block.push_str(&t);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(open.take()),
            _ => {}
        }
    }
    blocks
}

// ---------------------------------------------------------------- tables

/// Draw the pending lines: a table when pulldown-cmark reads them as one, else line by line.
fn flush(state: &mut BlockState, width: usize, styles: &Styles, out: &mut Rendered) {
    if state.pending.is_empty() {
        return;
    }
    let lines = std::mem::take(&mut state.pending);
    let continued = std::mem::take(&mut state.continued);
    if lines.len() >= 2 && table(&lines.join("\n"), !continued, width, styles, out) {
        return;
    }
    for line in &lines {
        block_line(line, width, styles, out);
    }
}

/// Draw `text` as a table if it is one: columns padded to their widest cell (aligned as the
/// delimiter row says), narrowed to fit the pane by cutting the widest cells.
fn table(text: &str, with_head: bool, width: usize, styles: &Styles, out: &mut Rendered) -> bool {
    let mut events = TextMergeStream::new(Parser::new_ext(text, options()));
    let Some(Event::Start(Tag::Table(aligns))) = events.next() else { return false };
    let mut rows: Vec<Vec<Vec<Span<'static>>>> = Vec::new();
    let mut inline = Inline::new(styles.assistant, styles);
    for event in events {
        match event {
            Event::Start(Tag::TableHead) => {
                rows.push(Vec::new());
                inline = Inline::new(styles.heading, styles);
            }
            Event::Start(Tag::TableRow) => {
                rows.push(Vec::new());
                inline = Inline::new(styles.assistant, styles);
            }
            Event::Start(Tag::TableCell) => {
                if let Some(row) = rows.last_mut() {
                    row.push(Vec::new());
                }
            }
            Event::Start(Tag::Table(_)) | Event::End(TagEnd::Table) => break,
            Event::End(TagEnd::TableHead | TagEnd::TableRow | TagEnd::TableCell) => {}
            event => {
                let Some(cell) = rows.last_mut().and_then(|r| r.last_mut()) else { continue };
                inline.event(event, &mut |t, s| push_span(cell, t, s));
            }
        }
    }
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0).max(aligns.len());
    if rows.is_empty() || columns == 0 {
        return false;
    }
    let natural: Vec<usize> = (0..columns)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|cell| cell.iter().map(Span::width).sum()).max().unwrap_or(0))
        .collect();
    let widths = fit(&natural, width.saturating_sub(3 * (columns - 1)));
    let separator = || Span::styled(" │ ", styles.muted);
    for (i, row) in rows.iter().enumerate() {
        if i == 0 && !with_head {
            continue;
        }
        let mut spans = Vec::new();
        for (c, w) in widths.iter().enumerate() {
            if c > 0 {
                spans.push(separator());
            }
            let cell = row.get(c).cloned().unwrap_or_default();
            let align = aligns.get(c).copied().unwrap_or(Alignment::None);
            spans.extend(pad(cut(cell, *w, styles.muted), *w, align, c + 1 == columns));
        }
        out.push(Line::from(cut(spans, width, styles.muted)));
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "─".repeat(*w)).collect();
            let rule = Span::styled(rule.join("─┼─"), styles.muted);
            out.push(Line::from(cut(vec![rule], width, styles.muted)));
        }
    }
    true
}

fn push_span(cell: &mut Vec<Span<'static>>, text: &str, style: Style) {
    match cell.last_mut() {
        Some(last) if last.style == style => last.content.to_mut().push_str(text),
        _ => cell.push(Span::styled(text.to_owned(), style)),
    }
}

/// Column widths within `room` cells: the natural ones if they fit, else every column capped at
/// the largest width that fits (the cap's leftover cells go to the first capped columns), never
/// under 3 cells (or the natural width, if less). Lines still too wide are cut at the pane edge.
fn fit(natural: &[usize], room: usize) -> Vec<usize> {
    let total = |cap: usize| natural.iter().map(|&w| w.min(cap)).sum::<usize>();
    if total(usize::MAX) <= room {
        return natural.to_vec();
    }
    let (mut lo, mut hi) = (0, natural.iter().copied().max().unwrap_or(0));
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if total(mid) <= room { lo = mid } else { hi = mid - 1 }
    }
    let cap = lo.max(3);
    let mut spare = room.saturating_sub(total(cap));
    natural
        .iter()
        .map(|&w| {
            let mut c = w.min(cap);
            if w > c && spare > 0 {
                c += 1;
                spare -= 1;
            }
            c
        })
        .collect()
}

/// A cell padded to `width` cells as its column is aligned (the last column gets no trailing
/// spaces).
fn pad(mut cell: Vec<Span<'static>>, width: usize, align: Alignment, last: bool) -> Vec<Span<'static>> {
    let room = width.saturating_sub(cell.iter().map(Span::width).sum());
    let (before, after) = match align {
        Alignment::Right => (room, 0),
        Alignment::Center => (room / 2, room - room / 2),
        Alignment::Left | Alignment::None => (0, room),
    };
    if before > 0 {
        cell.insert(0, Span::raw(" ".repeat(before)));
    }
    if after > 0 && !last {
        cell.push(Span::raw(" ".repeat(after)));
    }
    cell
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::theme::Theme;
    use proptest::prelude::*;

    fn texts(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    fn styles() -> Styles {
        Styles::new(&Theme::builtin("dark"))
    }

    /// The style of the first span whose text contains `needle`.
    fn style_of(lines: &[Line], needle: &str) -> Style {
        lines
            .iter()
            .flat_map(|l| &l.spans)
            .find(|s| s.content.contains(needle))
            .unwrap_or_else(|| panic!("{needle}"))
            .style
    }

    /// Rendered the way a pane does while streaming: complete lines in pieces, then the tail on a
    /// copy of the state.
    fn streamed(text: &str, width: usize, styles: &Styles) -> Vec<Line<'static>> {
        let mut state = BlockState::default();
        let mut out = Rendered::default();
        let stable = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let mut done = 0;
        for (i, _) in text[..stable].match_indices('\n') {
            render_into(&mut state, &text[done..i], width, styles, &mut out);
            done = i + 1;
        }
        let mut tail_state = state.clone();
        render_into(&mut tail_state, &text[stable..], width, styles, &mut out);
        finish(&mut tail_state, width, styles, &mut out);
        out.shown(width.max(4), 0)
    }

    #[test]
    fn code_blocks_are_framed_and_not_word_wrapped() {
        let lines = render("Run:\n```sh\nls  -la\n```\n- one\n- **two**", 20, &styles());
        assert_eq!(
            texts(&lines),
            ["Run:", "╭─ sh ──────────────", "│ ls  -la", "╰───────────────────", "• one", "• two"]
        );
    }

    #[test]
    fn an_unclosed_fence_stays_code() {
        let lines = render("```\nfn main() {", 20, &styles());
        assert_eq!(texts(&lines), ["╭───────────────────", "│ fn main() {"]);
    }

    #[test]
    fn long_code_lines_are_cut_at_the_edge_not_wrapped() {
        let lines = render("```\nlet x = \"a very long string literal\";\n```", 20, &styles());
        assert_eq!(texts(&lines), ["╭───────────────────", "│ let x = \"a very l…", "╰───────────────────"]);
        assert!(lines.iter().all(|l| l.width() <= 20));
    }

    #[test]
    fn rust_code_is_highlighted_with_the_themes_colours() {
        let s = styles();
        let lines = render("```rust\n// note\nfn main() { let n = 42; println!(\"hi\"); }\n```", 80, &s);
        assert_eq!(style_of(&lines, "// note"), s.code_comment);
        assert_eq!(style_of(&lines, "fn"), s.code_keyword);
        assert_eq!(style_of(&lines, "42"), s.code_number);
        assert_eq!(style_of(&lines, "\"hi\""), s.code_string);
        assert_eq!(style_of(&lines, "main"), s.code_function);
        // An unknown language is code, unhighlighted.
        let lines = render("```nosuchlang\nfn x\n```", 80, &s);
        assert_eq!(style_of(&lines, "fn x"), s.code);
    }

    #[test]
    fn emphasis_strong_strike_and_code_inline() {
        let s = styles();
        let lines = render("a *soft* and **loud** and ~~gone~~ and `x()`", 80, &s);
        assert_eq!(texts(&lines), ["a soft and loud and gone and x()"]);
        assert!(style_of(&lines, "soft").add_modifier.contains(Modifier::ITALIC));
        assert_eq!(style_of(&lines, "loud"), s.assistant.patch(s.strong));
        assert!(style_of(&lines, "gone").add_modifier.contains(Modifier::CROSSED_OUT));
        assert_eq!(style_of(&lines, "x()"), s.code);
    }

    #[test]
    fn links_show_their_text_then_the_address_dimmed() {
        let s = styles();
        let lines = render("See [the docs](https://example.com/d) or <https://x.org>.", 80, &s);
        assert_eq!(texts(&lines), ["See the docs (https://example.com/d) or https://x.org."]);
        assert_eq!(style_of(&lines, "the docs"), s.assistant.patch(s.link));
        assert_eq!(style_of(&lines, "(https://example.com/d)"), s.muted);
    }

    #[test]
    fn tables_are_aligned_columns() {
        let text = "| name | n |\n|:-----|--:|\n| alpha | 1 |\n| b | 200 |\nafter";
        let lines = render(text, 40, &styles());
        assert_eq!(texts(&lines), ["name  │   n", "──────┼────", "alpha │   1", "b     │ 200", "after"]);
        assert_eq!(style_of(&lines, "name"), styles().heading);
    }

    #[test]
    fn narrow_tables_cut_their_widest_cells() {
        let text = "| key | description |\n|---|---|\n| a | a rather long description here |";
        let lines = render(text, 20, &styles());
        assert_eq!(texts(&lines), ["key │ description", "────┼───────────────", "a   │ a rather long…"]);
        assert!(lines.iter().all(|l| l.width() <= 20), "{:?}", texts(&lines));
    }

    #[test]
    fn html_and_link_definitions_show_as_written() {
        let lines = render("<div>x</div>\n[a]: https://a.org\n-\nx <b>y</b>", 40, &styles());
        assert_eq!(texts(&lines), ["<div>x</div>", "[a]: https://a.org", "• ", "x <b>y</b>"]);
    }

    #[test]
    fn a_line_with_a_pipe_that_is_not_a_table_is_text() {
        let lines = render("a | b\nplain", 40, &styles());
        assert_eq!(texts(&lines), ["a | b", "plain"]);
        let lines = render("a | b", 40, &styles());
        assert_eq!(texts(&lines), ["a | b"]);
    }

    #[test]
    fn line_breaks_lists_quotes_and_headings_are_kept() {
        let text = "one\ntwo\n  - nested *it*\n3. third\n> quoted\n## Head\n---\n- [x] done";
        let lines = render(text, 30, &styles());
        assert_eq!(
            texts(&lines),
            [
                "one",
                "two",
                "  • nested it",
                "3. third",
                "│ quoted",
                "## Head",
                "──────────────────────────────",
                "• [x] done"
            ]
        );
    }

    #[test]
    fn streaming_a_table_and_code_renders_as_whole() {
        let s = styles();
        let text = "Intro\n| a | b |\n|---|---|\n| 1 | 2 |\n```rust\nfn f() {}\n```\n| x | y |\n|-|-|\n| 3 |";
        for end in 0..=text.len() {
            if text.is_char_boundary(end) {
                assert_eq!(streamed(&text[..end], 24, &s), render(&text[..end], 24, &s), "at {end}");
            }
        }
    }

    fn markdownish() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("|".to_owned()),
            Just("| a | b |\n|---|:-:|\n".to_owned()),
            Just("```".to_owned()),
            Just("```rust\n".to_owned()),
            Just("~~~".to_owned()),
            Just("\n".to_owned()),
            Just("*".to_owned()),
            Just("**".to_owned()),
            Just("~~".to_owned()),
            Just("[".to_owned()),
            Just("](".to_owned()),
            Just(")".to_owned()),
            Just("<http://a>".to_owned()),
            Just("- ".to_owned()),
            Just("1. ".to_owned()),
            Just("> ".to_owned()),
            Just("# ".to_owned()),
            Just("`".to_owned()),
            Just("    ".to_owned()),
            Just("\t".to_owned()),
            Just("漢字".to_owned()),
            Just("\u{301}".to_owned()),
            "[a-z ]{0,12}",
            any::<String>(),
        ];
        prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]
        #[test]
        fn any_text_renders_without_panicking_and_streams_the_same(text in markdownish(), width in 1usize..120) {
            let s = styles();
            let whole = render(&text, width, &s);
            prop_assert_eq!(streamed(&text, width, &s), whole);
        }

        #[test]
        fn code_and_tables_never_pass_the_pane_edge(
            cells in prop::collection::vec("[^|\\\n`]{0,30}", 1..12),
            code in "[^\n`~]{0,200}",
            width in 1usize..120,
        ) {
            let columns = cells.len().div_ceil(2);
            let row = |r: &[String]| format!("| {} |", r.join(" | "));
            let head: Vec<String> = (0..columns).map(|c| format!("h{c}")).collect();
            let text = format!(
                "{}\n|{}\n{}\n```rust\n{code}\n```",
                row(&head),
                "---|".repeat(columns),
                cells.chunks(columns).map(row).collect::<Vec<_>>().join("\n"),
            );
            for line in render(&text, width, &styles()) {
                prop_assert!(line.width() <= width.max(4), "{:?} at {width}", line);
            }
        }
    }
}
