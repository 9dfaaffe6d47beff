//! A horizontal bar per bucket: `  8 ██████████ 3`, under a header naming the two axes and over a
//! scale (`0` where the bars start, the largest count where the longest ends). Only buckets that
//! occurred are shown, so the usual case (every cohort at one width) takes one line.

use std::collections::BTreeMap;

use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// `axes`: what the labels are and what the bars count (`("width", "cycles")`).
pub fn bars(
    counts: &BTreeMap<usize, usize>,
    label: impl Fn(usize) -> String,
    width: usize,
    bar: Style,
    text: Style,
    axes: (&str, &str),
) -> Vec<Line<'static>> {
    if counts.is_empty() {
        return Vec::new();
    }
    let max = counts.values().copied().max().unwrap_or(0).max(1);
    let count_width = max.to_string().len();
    let labels: Vec<String> = counts.keys().map(|&k| label(k)).collect();
    let label_width = labels.iter().map(|l| l.chars().count()).chain([axes.0.chars().count()]).max().unwrap_or(0);
    let room = width.saturating_sub(label_width + count_width + 3).max(1);
    let mut lines = vec![Line::from(Span::styled(format!(" {:>label_width$} {}", axes.0, axes.1), text))];
    lines.extend(counts.values().zip(labels).map(|(&n, l)| {
        let len = (n * room).div_ceil(max).max(usize::from(n > 0));
        Line::from(vec![
            Span::styled(format!(" {l:>label_width$} "), text),
            Span::styled("█".repeat(len), bar),
            Span::styled(format!(" {n}"), text),
        ])
    }));
    // The scale: 0 under the bars' start, the largest count under the longest bar's end.
    let top = max.to_string();
    let gap = room.saturating_sub(1 + top.len());
    lines.push(Line::from(Span::styled(format!(" {:label_width$} 0{}{top}", "", " ".repeat(gap)), text)));
    lines
}
