//! Column charts in text with their scales: the y axis labelled at the top and the bottom, the
//! x axis under the columns with a label at each end. Used by the memory panel and a drilled
//! row's acceptance history, so no chart is drawn without saying what it measures.

use ratatui::style::Style;
use ratatui::text::{Line, Span};

const EIGHTHS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The labels around a chart.
pub struct Axes {
    /// The y axis at the top row (the value a full column stands for) and at the bottom.
    pub top: String,
    pub bottom: String,
    /// The x axis at its left (oldest) and right (newest) end.
    pub left: String,
    pub right: String,
}

/// `values` (oldest first; the newest that fit are shown, newest on the right) as columns from
/// 0 to `max`, `rows` rows high, in `width` cells including the y labels; then the x axis and
/// its labels (`rows` + 2 lines in all).
pub fn columns(
    values: &[f64],
    max: f64,
    rows: usize,
    width: usize,
    axes: &Axes,
    bar: Style,
    text: Style,
) -> Vec<Line<'static>> {
    let label = axes.top.chars().count().max(axes.bottom.chars().count());
    let plot = width.saturating_sub(label + 2).max(1);
    let shown = &values[values.len().saturating_sub(plot)..];
    let max = if max > 0.0 { max } else { 1.0 };
    // Each column's height in eighths of a row.
    let heights: Vec<usize> =
        shown.iter().map(|v| ((v / max).clamp(0.0, 1.0) * (rows * 8) as f64).round() as usize).collect();
    let mut lines = Vec::with_capacity(rows + 2);
    for r in 0..rows {
        let floor = (rows - 1 - r) * 8;
        let cells: String = heights
            .iter()
            .map(|&h| match h.saturating_sub(floor) {
                0 => ' ',
                n if n >= 8 => '█',
                n => EIGHTHS[n - 1],
            })
            .collect();
        let (name, tick) = match r {
            0 => (axes.top.as_str(), '┤'),
            _ if r + 1 == rows => (axes.bottom.as_str(), '┤'),
            _ => ("", '│'),
        };
        lines.push(Line::from(vec![Span::styled(format!("{name:>label$} {tick}"), text), Span::styled(cells, bar)]));
    }
    let drawn = shown.len().max(1);
    lines.push(Line::from(Span::styled(format!("{:label$} └{}", "", "─".repeat(drawn)), text)));
    let gap = drawn.saturating_sub(axes.left.chars().count() + axes.right.chars().count()).max(1);
    lines
        .push(Line::from(Span::styled(format!("{:label$}  {}{}{}", "", axes.left, " ".repeat(gap), axes.right), text)));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn columns_rise_to_scale_with_labelled_axes() {
        let axes = Axes { top: "4".into(), bottom: "0".into(), left: "-4".into(), right: "now".into() };
        let lines = columns(&[0.0, 1.0, 2.0, 4.0], 4.0, 2, 12, &axes, Style::new(), Style::new());
        assert_eq!(text(&lines), ["4 ┤   █", "0 ┤ ▄██", "  └────", "   -4 now"]);
        // More values than room: the newest are kept.
        let lines = columns(&[4.0; 20], 4.0, 1, 8, &axes, Style::new(), Style::new());
        assert_eq!(text(&lines)[0], "4 ┤█████");
    }
}
