//! The pane grid: 1, 2, 4, 6 or 8 cells (columns x rows), the smallest that holds the panes.
//! Shared by the views (where each pane goes) and the app (which pane is "to the left").

use ratatui::layout::{Constraint, Layout, Rect};

/// (columns, rows) for `n` panes.
pub fn grid_shape(n: usize) -> (usize, usize) {
    match n {
        0 | 1 => (1, 1),
        2 => (2, 1),
        3 | 4 => (2, 2),
        5 | 6 => (3, 2),
        _ => (4, 2),
    }
}

/// The pane a direction leads to from `from` (None at the grid's edge or an empty cell).
pub fn neighbour(from: usize, n: usize, dx: i32, dy: i32) -> Option<usize> {
    let (cols, rows) = grid_shape(n);
    let (col, row) = ((from % cols) as i32 + dx, (from / cols) as i32 + dy);
    if col < 0 || row < 0 || col >= cols as i32 || row >= rows as i32 {
        return None;
    }
    let to = row as usize * cols + col as usize;
    (to < n).then_some(to)
}

/// Screen areas of `n` panes in `area`, in pane order.
pub fn pane_rects(area: Rect, n: usize) -> Vec<Rect> {
    let (cols, rows) = grid_shape(n);
    let row_areas = Layout::vertical(vec![Constraint::Fill(1); rows]).split(area);
    let mut rects = Vec::with_capacity(cols * rows);
    for row in row_areas.iter() {
        rects.extend(Layout::horizontal(vec![Constraint::Fill(1); cols]).split(*row).iter().copied());
    }
    rects.truncate(n);
    rects
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_follow_the_grid() {
        // 8 panes: 4 columns, 2 rows.
        assert_eq!(neighbour(0, 8, 1, 0), Some(1));
        assert_eq!(neighbour(1, 8, 0, 1), Some(5));
        assert_eq!(neighbour(3, 8, 1, 0), None);
        // 3 panes in a 2x2 grid: below pane 2 is an empty cell.
        assert_eq!(neighbour(1, 3, 0, 1), None);
    }
}
