//! One chat pane: a border whose title carries the pane number, its cohort row, its state and
//! live tokens/s; the conversation scrolled from the bottom; the input box under a rule.

use std::cell::Ref;

use ratatui::Frame;
use ratatui::layout::{Position, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Padding, Paragraph};

use crate::engine::api::FinishReason;
use crate::engine::api::RowState;
use crate::tui::app::{App, CONTEXT_WARN_PERCENT, EngineStatus, Overlay};
use crate::tui::pane::{Pane, RenderCache, Turn};
use crate::tui::settings::summary;
use crate::tui::style::{Styles, state_label};
use crate::tui::wrap::{Wrapper, char_width, sanitize};
use crate::tui::{markdown, rendered, search};

/// Input rows shown at most (longer input scrolls inside the box).
const MAX_INPUT_ROWS: usize = 4;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, index: usize) {
    let pane = &app.panes[index];
    let focused = index == app.focus;
    let styles = &app.styles;
    // A column of padding reads better, where there is room to spare for it.
    let padding = if area.width >= 30 { Padding::horizontal(1) } else { Padding::ZERO };
    let block = Block::bordered().border_style(styles.border(focused)).padding(padding).title(title(
        pane,
        index,
        focused,
        area.width.saturating_sub(2) as usize,
        app,
    ));
    let footer = footer(pane, styles);
    // The pane's settings on the left of the bottom border, as much as fits beside the count.
    let room = (area.width as usize).saturating_sub(footer.width() + 4);
    let block = block.title_bottom(settings_line(app, index, room)).title_bottom(footer.right_aligned());
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.width < 2 || inner.height < 1 {
        return;
    }
    let prompt_width = 2;
    let (rows, cursor) = pane.input.layout(inner.width.saturating_sub(prompt_width) as usize);
    let max_input = if inner.height >= 6 { MAX_INPUT_ROWS.min(inner.height as usize / 3) } else { 1 };
    let input_rows = rows.len().clamp(1, max_input.max(1));
    // Small panes drop the conversation before the input: typing must stay possible.
    let body_height = inner.height.saturating_sub(input_rows as u16 + 1);
    if body_height > 0 {
        let body = Rect { height: body_height, ..inner };
        // The message being picked for copying or branching, in the focused pane.
        let picked = match app.overlay() {
            Some(Overlay::Select { index, .. } | Overlay::Branch { index }) if focused => {
                pane.messages().get(*index).copied()
            }
            _ => None,
        };
        // What the focused pane's search looks for, and which match it shows.
        let search = match app.overlay() {
            Some(Overlay::Search { query, back }) if focused => Some((query.text(), *back)),
            _ => None,
        };
        draw_body(frame, body, app, pane, picked, search);
        let rule = Rect { y: inner.y + body_height, height: 1, ..inner };
        frame.render_widget(Paragraph::new(rule_line(pane, app, focused, rule.width as usize)), rule);
    }
    let input_area = Rect { y: inner.y + inner.height - input_rows as u16, height: input_rows as u16, ..inner };
    // Keep the cursor's row visible when the input is taller than its box.
    let first = (cursor.0 + 1).saturating_sub(input_rows);
    let mut lines: Vec<Line> = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(input_rows)
        .map(|(i, r)| {
            let lead = if i == 0 { "› " } else { "  " };
            Line::from(vec![Span::styled(lead, styles.user), Span::styled(r.clone(), styles.base)])
        })
        .collect();
    if pane.input.text().is_empty() && focused {
        lines = vec![Line::from(vec![Span::styled("› ", styles.user), Span::styled("type a prompt", styles.muted)])];
    }
    frame.render_widget(Paragraph::new(lines), input_area);
    if focused && !app.popups.is_open() {
        let x = input_area.x + prompt_width + cursor.1 as u16;
        let y = input_area.y + (cursor.0 - first) as u16;
        if x < input_area.right() && y < input_area.bottom() {
            frame.set_cursor_position(Position { x, y });
        }
    }
}

/// The rule between the conversation and the input; while the last message is being edited it
/// says what enter and esc do.
fn rule_line(pane: &Pane, app: &App, focused: bool, width: usize) -> Line<'static> {
    let border = app.styles.border(focused);
    let mut spans = Vec::new();
    let mut used = 0;
    if pane.editing.is_some() {
        use crate::config::keymap::Command;
        let keys = |c| app.keymap.describe_keys(c);
        let text = format!(
            " ✎ editing · {} replaces the last message · {} stops ",
            keys(Command::Send),
            keys(Command::Cancel)
        );
        spans.push(Span::styled("──", border));
        used = 2 + text.chars().count();
        spans.push(Span::styled(text, app.styles.accent));
    }
    let label = window_label(pane, app).filter(|(text, _)| used + text.chars().count() + 2 <= width);
    let room = width.saturating_sub(used + label.as_ref().map_or(0, |(t, _)| t.chars().count()));
    spans.push(Span::styled("─".repeat(room), border));
    if let Some((text, style)) = label {
        spans.push(Span::styled(text, style));
    }
    Line::from(spans)
}

/// ` draft 23 tok · 1204 + 256 of 8192 (18%) `: what sending the draft would take of the
/// context window (its whole prompt and max_tokens), once counted; over it, in the error style
/// with what enter will offer.
fn window_label(pane: &Pane, app: &App) -> Option<(String, Style)> {
    use crate::tui::window::needed;
    let EngineStatus::Ready(summary) = &app.engine else { return None };
    let index = app.panes.iter().position(|p| p.id == pane.id)?;
    if pane.input.is_blank() || pane.is_busy() {
        return None;
    }
    let counted = pane.window.count_of(app.draft_key_of(index))?;
    let window = usize::try_from(summary.max_context).ok().filter(|w| *w > 0)?;
    let max_tokens = app.chat_settings(index).max_tokens;
    let need = needed(counted.prompt, max_tokens);
    Some(if need <= window {
        let percent = (need * 100).div_ceil(window);
        (
            format!(" draft {} tok · {} + {max_tokens} of {window} ({percent}%) ", counted.draft, counted.prompt),
            app.styles.muted,
        )
    } else {
        use crate::config::keymap::Command;
        (
            format!(
                " draft {} tok · needs {need} of {window}: {} offers to leave out old turns ",
                counted.draft,
                app.keymap.describe_keys(Command::Send)
            ),
            app.styles.error,
        )
    })
}

/// ` 3 · decoding · 66.9 tok/s · row 2 · ctx 12% `, dropping the least useful parts when narrow
/// (a nearly full context window comes before the speed).
fn title<'a>(pane: &Pane, index: usize, focused: bool, width: usize, app: &App) -> Line<'a> {
    let styles = &app.styles;
    let number_style = if focused { styles.border(true) } else { styles.title };
    let state = match &pane.in_flight {
        Some(f) if f.cancel_requested => "cancelling",
        _ => state_label(pane.state),
    };
    let mut parts = vec![(format!("{}", index + 1), number_style), (state.to_owned(), styles.state(pane.state))];
    let context = match &app.engine {
        EngineStatus::Ready(summary) => pane.context_percent(summary.max_context),
        _ => None,
    };
    let full = context.is_some_and(|p| p >= CONTEXT_WARN_PERCENT);
    if full && let Some(p) = context {
        parts.push((format!("ctx {p}%"), styles.error));
    }
    if let Some(tps) = pane.tokens_per_s() {
        parts.push((format!("{tps:.1} tok/s"), styles.muted));
    }
    // Only while the request runs: once it ends, the row is another request's.
    if let Some(row) = pane.row.filter(|_| pane.in_flight.is_some()) {
        parts.push((format!("row {row}"), styles.muted));
    }
    if !full && let Some(p) = context {
        parts.push((format!("ctx {p}%"), styles.muted));
    }
    let mut spans = vec![Span::raw(" ")];
    let mut used = 2;
    for (i, (text, style)) in parts.into_iter().enumerate() {
        let cost = text.chars().count() + if i > 0 { 3 } else { 0 };
        if used + cost > width {
            break;
        }
        if i > 0 {
            spans.push(Span::styled(" · ", styles.muted));
        }
        spans.push(Span::styled(text, style));
        used += cost;
    }
    spans.push(Span::raw(" "));
    Line::from(spans)
}

/// ` t0.6 p0.95 k20 max256 sys:"Answer briefly." `: what the pane's requests carry, in at most
/// `width` cells (the least telling parts dropped first; the system prompt shortened to `sys`
/// where its words do not fit); its own settings in the accent colour, the profile's muted.
fn settings_line<'a>(app: &App, index: usize, width: usize) -> Line<'a> {
    let own = app.panes[index].settings.is_some();
    let style = if own { app.styles.accent } else { app.styles.muted };
    // The parts from the left that fit, and how many they are.
    let fit = |parts: &[String]| {
        let (mut text, mut kept) = (String::new(), 0);
        for part in parts {
            let next = if text.is_empty() { part.clone() } else { format!("{text} {part}") };
            if next.chars().count() + 2 > width {
                break;
            }
            (text, kept) = (next, kept + 1);
        }
        (text, kept)
    };
    let chat = app.chat_settings(index);
    let mut parts = summary(&chat);
    let (short, _) = fit(&parts);
    // The system prompt's first words where they fit, else `sys` alone.
    let text = match (&chat.system, parts.iter().position(|p| p == "sys")) {
        (Some(system), Some(at)) => {
            parts[at] = system_label(system);
            let (long, kept) = fit(&parts);
            if kept > at { long } else { short }
        }
        _ => short,
    };
    if text.is_empty() {
        return Line::default();
    }
    Line::from(Span::styled(format!(" {text} "), style))
}

/// `sys:"first words…"`: the start of a system prompt's first line.
fn system_label(system: &str) -> String {
    const SHOWN: usize = 16;
    let first = system.lines().next().unwrap_or_default().trim();
    let shown: String = first.chars().take(SHOWN).collect::<String>().trim_end().to_owned();
    let more = first.chars().count() > SHOWN || system.trim().lines().nth(1).is_some();
    format!("sys:\"{shown}{}\"", if more { "…" } else { "" })
}

/// Bottom border: the newest answer's token count, or live progress.
fn footer<'a>(pane: &Pane, styles: &Styles) -> Line<'a> {
    let text = match (&pane.in_flight, pane.turns.last().and_then(|t| t.stats.as_ref())) {
        (Some(f), _) if f.tokens > 0 => format!(" {} tok ", f.tokens),
        (Some(f), _) if f.prefill.1 > 0 => format!(" prefill {}/{} ", f.prefill.0, f.prefill.1),
        (None, Some(s)) => format!(" {} tok ", s.completion_tokens),
        _ => String::new(),
    };
    Line::from(Span::styled(text, styles.muted))
}

/// The conversation; `picked` (a turn, and whether its answer rather than its question) is
/// highlighted and scrolled into view; so is a search's (`(query, back)`) match `back` up from
/// the newest, with every other match marked.
fn draw_body(
    frame: &mut Frame,
    area: Rect,
    app: &App,
    pane: &Pane,
    picked: Option<(usize, bool)>,
    search: Option<(&str, usize)>,
) {
    let width = area.width as usize;
    let height = area.height as usize;
    pane.page.set(height.saturating_sub(1).max(1));
    if pane.turns.is_empty() {
        let hint = empty_hint(app);
        frame.render_widget(Paragraph::new(hint), area);
        pane.max_scroll.set(0);
        pane.shown_top.set(0);
        pane.search_hits.set(0);
        return;
    }
    // Turns' lines come from their caches; only the visible window is copied out.
    let last = pane.turns.len() - 1;
    let blocks: Vec<(Ref<'_, RenderCache>, Vec<Line<'static>>)> = pane
        .turns
        .iter()
        .enumerate()
        .map(|(i, turn)| {
            let status = status_lines(turn, (i == last).then_some(pane), i == last, app, width);
            (cached_lines(turn, width, &app.styles, app.style_epoch), status)
        })
        .collect();
    let total: usize =
        blocks.iter().map(|(body, status)| body.lines.len() + body.tail.len() + status.len()).sum::<usize>() + last;
    let widest_code = blocks.iter().map(|(body, _)| body.lines.widest_code().max(body.tail.widest_code())).max();
    let max_code_scroll = rendered::max_offset(widest_code.unwrap_or(0), width);
    pane.max_code_scroll.set(max_code_scroll);
    let code_scroll = pane.code_scroll.min(max_code_scroll);
    let max_scroll = total.saturating_sub(height);
    pane.max_scroll.set(max_scroll);
    let mut start = pane.scroll_top.map_or(max_scroll, |top| top.min(max_scroll));
    // The picked message's lines, [from, to).
    let mut range = None;
    let mut at = 0;
    for (i, (body, status)) in blocks.iter().enumerate() {
        at += usize::from(i > 0);
        let answer_end = at + body.lines.len() + body.tail.len();
        match picked {
            Some((turn, false)) if turn == i => range = Some((at, at + body.user_rows)),
            Some((turn, true)) if turn == i => range = Some((at + body.user_rows, answer_end)),
            _ => {}
        }
        at = answer_end + status.len();
    }
    if let Some((from, to)) = range {
        // Into view: its end if it fits, else its start.
        if from < start || to > start + height {
            start = from.min(to.saturating_sub(height)).min(max_scroll);
        }
    }
    // A search's matches, top to bottom: (line, from, to) in characters of the line, and in a
    // code line, the cells of its code they cover.
    let mut hits = Vec::new();
    if let Some((query, _)) = search.filter(|(q, _)| !q.is_empty()) {
        let mut line_no = 0;
        for (i, (body, status)) in blocks.iter().enumerate() {
            line_no += usize::from(i > 0);
            for (line, code) in turn_lines(body, status) {
                let text = search::line_text(line);
                hits.extend(search::find(&text, query).into_iter().map(|(a, b)| {
                    let cells = code.then(|| (code_cells(&text, a), code_cells(&text, b)));
                    (line_no, a, b, cells)
                }));
                line_no += 1;
            }
        }
    }
    pane.search_hits.set(hits.len());
    let current = search.and_then(|(_, back)| hits.len().checked_sub(1 + back % hits.len().max(1)));
    let mut code_scroll = code_scroll;
    if let Some(&(line, _, _, cells)) = current.and_then(|k| hits.get(k)) {
        if line < start || line >= start + height {
            // Into view, in the middle where it can be.
            start = line.saturating_sub(height / 2).min(max_scroll);
        }
        // A match in code past either edge: the code shown from a little before it, for this
        // frame (the pane's own offset is where the view goes back when the search closes).
        let room = width.saturating_sub(rendered::GUTTER + 1).max(1);
        if let Some((from, to)) = cells
            && (from < code_scroll || to > code_scroll + room)
        {
            code_scroll = from.saturating_sub(room / 4).min(max_code_scroll);
        }
    }
    pane.shown_top.set(start);
    // Lines below the view (the marker's count).
    let scroll = max_scroll - start;
    let mut visible = Vec::with_capacity(height);
    let mut line_no = 0;
    for (i, (body, status)) in blocks.iter().enumerate() {
        let separator = (i > 0).then(Line::default);
        for (line, code) in separator.iter().map(|line| (line, false)).chain(turn_lines(body, status)) {
            if line_no >= start && visible.len() < height {
                let mut line = line.clone();
                if range.is_some_and(|(from, to)| (from..to).contains(&line_no)) {
                    highlight(&mut line, app.styles.selection);
                }
                let marks: Vec<(usize, usize, Style)> = hits
                    .iter()
                    .enumerate()
                    .filter(|(_, hit)| hit.0 == line_no)
                    .map(|(k, hit)| {
                        let style = if Some(k) == current { app.styles.selection } else { app.styles.search };
                        (hit.1, hit.2, style)
                    })
                    .collect();
                if !marks.is_empty() {
                    line = search::mark(&line, &marks);
                }
                if code {
                    line = rendered::code_view(line, code_scroll, width);
                }
                visible.push(line);
            }
            line_no += 1;
        }
        if visible.len() >= height {
            break;
        }
    }
    frame.render_widget(Paragraph::new(visible).style(app.styles.base), area);
    if scroll > 0 {
        let marker = format!(" ↑{scroll} ");
        let w = marker.chars().count() as u16;
        if area.width > w {
            let at = Rect { x: area.right() - w, y: area.bottom() - 1, width: w, height: 1 };
            frame.render_widget(Paragraph::new(marker).style(app.styles.accent), at);
        }
    }
}

/// A turn's lines as the view lists them (its complete lines, the unfinished tail, then its
/// status lines), each with whether it is a code line.
fn turn_lines<'a>(
    body: &'a RenderCache,
    status: &'a [Line<'static>],
) -> impl Iterator<Item = (&'a Line<'static>, bool)> {
    body.lines.iter().chain(body.tail.iter()).chain(status.iter().map(|line| (line, false)))
}

/// Cells of a code line's code (after its gutter) before its `chars`-th character.
fn code_cells(text: &str, chars: usize) -> usize {
    let before: usize = text.chars().take(chars).map(char_width).sum();
    before.saturating_sub(rendered::GUTTER)
}

/// A picked message's line: every span and the rest of the row in the selection style.
fn highlight(line: &mut Line<'static>, selection: Style) {
    line.style = line.style.patch(selection);
    for span in &mut line.spans {
        span.style = span.style.patch(selection);
    }
}

fn empty_hint(app: &App) -> Vec<Line<'static>> {
    let keys = |c| app.keymap.describe_keys(c);
    use crate::config::keymap::Command;
    vec![
        Line::from(Span::styled("Type a prompt below.", app.styles.muted)),
        Line::from(Span::styled(format!("{} sends it", keys(Command::Send)), app.styles.muted)),
        Line::from(Span::styled(format!("{} sends every pane", keys(Command::SendAll)), app.styles.muted)),
        Line::from(Span::styled(format!("{} lists all keys", keys(Command::Help)), app.styles.muted)),
    ]
}

/// The user's message and the answer, wrapped, from the turn's cache: a new width or theme
/// renders it all again; new text renders only what it added.
fn cached_lines<'t>(turn: &'t Turn, width: usize, styles: &Styles, epoch: u64) -> Ref<'t, RenderCache> {
    {
        let mut slot = turn.rendered.borrow_mut();
        let answer = turn.answer.as_str();
        let stale = slot.as_ref().is_none_or(|c| c.key != (width, epoch) || c.stable_len > answer.len());
        if stale {
            let user = user_lines(&turn.user, width, styles);
            let user_rows = user.len();
            *slot = Some(RenderCache {
                key: (width, epoch),
                lines: user.into(),
                user_rows,
                stable_len: 0,
                state: Default::default(),
                tail: Default::default(),
                tail_len: usize::MAX,
            });
        }
        let cache = slot.as_mut().expect("filled above");
        let stable = answer.rfind('\n').map(|i| i + 1).unwrap_or(0);
        if stable > cache.stable_len {
            let complete = &answer[cache.stable_len..stable - 1];
            markdown::render_into(&mut cache.state, complete, width, styles, &mut cache.lines);
            cache.stable_len = stable;
            cache.tail_len = usize::MAX;
        }
        if cache.tail_len != answer.len() {
            cache.tail.clear();
            // An answer with no text yet shows only its status line.
            if !answer.is_empty() {
                let mut state = cache.state.clone();
                markdown::render_into(&mut state, &answer[stable..], width, styles, &mut cache.tail);
                // A table still arriving is drawn with the tail, from its rows so far.
                markdown::finish(&mut state, width, styles, &mut cache.tail);
            }
            cache.tail_len = answer.len();
        }
    }
    Ref::map(turn.rendered.borrow(), |c| c.as_ref().expect("filled above"))
}

fn user_lines(text: &str, width: usize, styles: &Styles) -> Vec<Line<'static>> {
    let text = sanitize(text);
    let mut out = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let lead = if i == 0 { "› " } else { "  " };
        let mut w = Wrapper::new(width, vec![Span::styled(lead, styles.user)], vec![Span::raw("  ")]);
        w.push(line, styles.user);
        out.extend(w.finish());
    }
    out
}

/// What is happening to a turn, under its text: queued, prefill progress, cancelled, an error.
fn status_lines(turn: &Turn, live: Option<&Pane>, last: bool, app: &App, width: usize) -> Vec<Line<'static>> {
    let styles = &app.styles;
    let line = |text: String, style: Style| {
        let mut w = Wrapper::new(width, vec![], vec![Span::raw("  ")]);
        w.push(&text, style);
        w.finish()
    };
    if let Some(pane) = live
        && let Some(flight) = &pane.in_flight
    {
        let waiting = matches!(app.engine, EngineStatus::Loading { .. });
        let mut lines = match pane.state {
            RowState::Queued if waiting => {
                line("⋯ queued: waiting for the model to load".into(), styles.state(RowState::Queued))
            }
            RowState::Queued => line("⋯ queued".into(), styles.state(RowState::Queued)),
            RowState::Prefill => line(
                format!("⋯ prefill {}/{} prompt tokens", flight.prefill.0, flight.prefill.1),
                styles.state(RowState::Prefill),
            ),
            _ if flight.cancel_requested => line("⋯ cancelling".into(), styles.muted),
            _ => Vec::new(),
        };
        if let Some(queued) = &pane.queued {
            let first = sanitize(queued.lines().next().unwrap_or_default());
            let more = if queued.lines().nth(1).is_some() { " …" } else { "" };
            let mut w = Wrapper::new(width, vec![Span::styled("⏎ next: ", styles.accent)], vec![Span::raw("  ")]);
            w.push(&format!("{first}{more}"), styles.user);
            w.push(" (sent when this answer ends)", styles.muted);
            lines.extend(w.finish());
        }
        return lines;
    }
    if turn.interrupted {
        return line(
            "⊘ interrupted: the session ended before this answer finished".into(),
            styles.state(RowState::Cancelled),
        );
    }
    if turn.dropped {
        return line("⤒ left out to fit the context window: not sent with later prompts".into(), styles.muted);
    }
    let tokens = turn.stats.as_ref().map(|s| s.completion_tokens).unwrap_or(0);
    match turn.finish {
        Some(FinishReason::Cancelled) => {
            let plural = if tokens == 1 { "" } else { "s" };
            line(format!("⊘ cancelled · {tokens} token{plural} kept"), styles.state(RowState::Cancelled))
        }
        Some(FinishReason::Error) => {
            let msg = turn.error.clone().unwrap_or_else(|| "unknown error".into());
            let mut lines = line(format!("✖ error: {msg}"), styles.error);
            // The failed message is left out of what later prompts send (Pane::messages_with).
            use crate::config::keymap::Command;
            // The last one can be edited in place (f2); any can be recalled (up).
            let hint = match last {
                true => format!("{} edits it", app.keymap.describe_keys(Command::EditLast)),
                false => format!("{} recalls it", app.keymap.describe_keys(Command::HistoryPrev)),
            };
            let mut w = Wrapper::new(width, vec![Span::raw("  ")], vec![Span::raw("  ")]);
            w.push(&format!("not sent with later prompts · {hint}"), styles.muted);
            lines.extend(w.finish());
            lines
        }
        Some(FinishReason::Length) => line(format!("· {tokens} tokens (max_tokens reached)"), styles.muted),
        _ => Vec::new(),
    }
}
