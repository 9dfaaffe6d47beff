//! The rows panel: one line per live row with its offsets (target committed / physical, MTP
//! history), tokens, acceptance (rate and a sparkline of recent drafts), tokens per cycle, state,
//! how long it waited for a row; then the requests still queued.
//! Columns drop from the right end of the priority list when the panel is narrow.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use super::spark;
use crate::engine::api::{RECENT, RowTelemetry};
use crate::tui::app::App;
use crate::tui::style::state_label;

struct Column {
    header: &'static str,
    /// What an abbreviated header means, spelled out under the rows ("" where it says itself).
    legend: &'static str,
    width: usize,
    cell: fn(&App, usize, &RowTelemetry) -> String,
}

/// In priority order; `recent` (the sparkline) takes whatever width is left.
const COLUMNS: &[Column] = &[
    Column { header: "row", legend: "", width: 3, cell: |_, i, _| i.to_string() },
    Column { header: "state", legend: "", width: 9, cell: |_, _, r| state_label(r.state).to_owned() },
    Column {
        header: "commit",
        legend: "commit: positions committed",
        width: 6,
        cell: |_, _, r| r.committed_offset.to_string(),
    },
    Column { header: "tok", legend: "tok: tokens generated", width: 5, cell: |_, _, r| r.tokens.to_string() },
    Column {
        header: "acc",
        legend: "acc: drafts accepted",
        width: 4,
        cell: |_, _, r| acceptance(r).map(|a| format!("{:.0}%", a * 100.0)).unwrap_or("-".into()),
    },
    Column {
        header: "pane",
        legend: "",
        width: 4,
        cell: |app, _, r| pane_of(app, &r.id).map(|p| (p + 1).to_string()).unwrap_or("-".into()),
    },
    Column {
        header: "phys",
        legend: "phys: positions written",
        width: 6,
        cell: |_, _, r| r.physical_offset.to_string(),
    },
    Column {
        header: "t/cyc",
        legend: "t/cyc: tokens per cycle",
        width: 5,
        cell: |_, _, r| format!("{:.2}", r.tokens_per_cycle),
    },
    Column {
        header: "mtp c/p",
        legend: "mtp c/p: MTP history committed/written",
        width: 9,
        cell: |_, _, r| format!("{}/{}", r.mtp_committed_offset, r.mtp_physical_offset),
    },
    Column {
        header: "wait",
        legend: "wait: time waited for a row",
        width: 6,
        cell: |_, _, r| format!("{:.2}s", r.admission_wait_s),
    },
];

/// Narrowest sparkline worth showing.
const MIN_SPARK: usize = 4;

fn acceptance(r: &RowTelemetry) -> Option<f64> {
    let drafts = r.accepted + r.rejected;
    (drafts > 0).then(|| r.accepted as f64 / drafts as f64)
}

/// The pane whose request is (or was) this row.
pub fn pane_of(app: &App, request_id: &str) -> Option<usize> {
    app.panes.iter().position(|p| {
        p.in_flight.as_ref().is_some_and(|f| f.id == request_id)
            || p.turns.last().is_some_and(|t| t.request_id == request_id)
    })
}

pub fn draw(frame: &mut Frame, area: Rect, app: &App) {
    let s = &app.styles;
    let t = &app.telemetry;
    let route = if t.last_route.is_empty() { "-".to_owned() } else { t.last_route.clone() };
    let block = Block::bordered()
        .border_style(s.border(false))
        .title(Line::from(vec![Span::styled(" rows ", s.title), Span::styled(format!("route {route} "), s.muted)]));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let width = inner.width as usize;
    // Take columns in priority order while they fit (one space between columns).
    let mut used = 0;
    let mut columns: Vec<&Column> = Vec::new();
    for c in COLUMNS {
        if used + c.width < width {
            used += c.width + 1;
            columns.push(c);
        }
    }
    // Show them in reading order: identity, offsets, then rates.
    let order = ["row", "pane", "state", "wait", "commit", "phys", "mtp c/p", "tok", "acc", "t/cyc"];
    columns.sort_by_key(|c| order.iter().position(|h| *h == c.header));
    let spark_width = width.saturating_sub(used + 1);
    let show_spark = spark_width >= MIN_SPARK;
    let mut header: Vec<Span> =
        columns.iter().map(|c| Span::styled(format!("{:>w$} ", c.header, w = c.width), s.muted)).collect();
    if show_spark {
        header.push(Span::styled(if spark_width >= 13 { "recent drafts" } else { "recent" }, s.muted));
    }
    let mut lines = vec![Line::from(header)];
    if t.rows.is_empty() {
        // True under every profile: the latency profile runs one row at a time, never a cohort.
        let hint = if t.queued.is_empty() { " no row running: send a prompt" } else { " no row running yet" };
        lines.push(Line::from(Span::styled(hint, s.muted)));
    }
    for (i, row) in t.rows.iter().enumerate() {
        let mut spans: Vec<Span> = columns
            .iter()
            .map(|c| {
                let text = format!("{:>w$} ", (c.cell)(app, i, row), w = c.width);
                let style = if c.header == "state" { s.state(row.state) } else { s.base };
                Span::styled(text, style)
            })
            .collect();
        if show_spark {
            spans.push(Span::styled(spark::accepts(&row.recent_accepts, spark_width), s.spark));
        }
        lines.push(Line::from(spans));
    }
    if !t.queued.is_empty() {
        let ids = t.queued.iter().map(|id| pane_of(app, id).map(|p| format!("pane {}", p + 1)).unwrap_or(id.clone()));
        let text = format!(" queued ({}): {}", t.queued.len(), ids.collect::<Vec<_>>().join(", "));
        lines.push(Line::from(Span::styled(text, s.muted)));
    }
    // The sparklines' scale.
    if show_spark && !t.rows.is_empty() {
        lines.push(Line::from(vec![
            Span::styled(" recent drafts: ", s.muted),
            Span::styled("█", s.spark),
            Span::styled(" accepted ", s.muted),
            Span::styled("▁", s.spark),
            Span::styled(format!(" rejected, newest right (last {RECENT})"), s.muted),
        ]));
    }
    if !t.rows.is_empty() {
        // The shown columns' abbreviations spelled out, as many to a line as fit.
        let mut line = String::new();
        for legend in columns.iter().map(|c| c.legend).filter(|l| !l.is_empty()) {
            if !line.is_empty() && line.chars().count() + 3 + legend.chars().count() > width {
                lines.push(Line::from(Span::styled(std::mem::take(&mut line), s.muted)));
            }
            line.push_str(if line.is_empty() { " " } else { " · " });
            line.push_str(legend);
        }
        if !line.is_empty() {
            lines.push(Line::from(Span::styled(line, s.muted)));
        }
    }
    frame.render_widget(Paragraph::new(lines), inner);
}
