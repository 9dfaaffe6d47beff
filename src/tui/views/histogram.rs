//! A horizontal bar per bucket: `  8 ██████████ 3`. Only buckets that occurred are shown, so
//! the usual case (every cohort at one width) takes one line.

use std::collections::BTreeMap;

use ratatui::style::Style;
use ratatui::text::{Line, Span};

pub fn bars(
    counts: &BTreeMap<usize, usize>,
    label: impl Fn(usize) -> String,
    width: usize,
    bar: Style,
    text: Style,
) -> Vec<Line<'static>> {
    let max = counts.values().copied().max().unwrap_or(0).max(1);
    let count_width = max.to_string().len();
    let labels: Vec<String> = counts.keys().map(|&k| label(k)).collect();
    let label_width = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let room = width.saturating_sub(label_width + count_width + 3).max(1);
    counts
        .values()
        .zip(labels)
        .map(|(&n, l)| {
            let len = (n * room).div_ceil(max).max(usize::from(n > 0));
            Line::from(vec![
                Span::styled(format!(" {l:>label_width$} "), text),
                Span::styled("█".repeat(len), bar),
                Span::styled(format!(" {n}"), text),
            ])
        })
        .collect()
}
