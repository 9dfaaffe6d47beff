//! The screen's geometry: the bars, the pane grid (1, 2, 4, 6 or 8 cells, columns x rows, the
//! smallest that holds the panes) and the inspector. Shared by the views (where each part is
//! drawn) and the app (which pane is "to the left", which pane a mouse click lands on), so what
//! is clicked is always what was drawn.

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

/// The smallest pane the start-up count opens: room for a title, a few lines of answer and a
/// hint line that is not cut.
pub const MIN_PANE: (u16, u16) = (36, 8);

/// The most panes, up to `wanted`, whose cells are each at least [`MIN_PANE`] on a terminal of
/// `area` laid out as [`screen`] lays it out (one at the least): a profile's eight panes on an
/// 80x24 terminal would be 18 columns wide each.
pub fn panes_that_fit(area: Rect, wanted: usize) -> usize {
    let panes_area = screen(area, 1, 0, false, false).panes_area;
    (1..=wanted.max(1))
        .rev()
        .find(|&n| pane_rects(panes_area, n).iter().all(|r| r.width >= MIN_PANE.0 && r.height >= MIN_PANE.1))
        .unwrap_or(1)
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

/// Where each part of the screen goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screen {
    pub top: Rect,
    pub bottom: Rect,
    /// The area the panes share (the grid, or the zoomed pane).
    pub panes_area: Rect,
    /// The panes drawn and where, as (pane index, area): every pane, or the focused one zoomed.
    pub panes: Vec<(usize, Rect)>,
    pub inspector: Option<Rect>,
}

impl Screen {
    /// The pane drawn at a cell (None over the bars, the inspector or an empty grid cell).
    pub fn pane_at(&self, column: u16, row: u16) -> Option<usize> {
        let at = ratatui::layout::Position { x: column, y: row };
        self.panes.iter().find(|(_, rect)| rect.contains(at)).map(|(i, _)| *i)
    }
}

/// The screen's layout for `n` panes: a status bar on top and one below, the panes between,
/// and the inspector (when shown) to their right on wide screens or below them on narrow ones.
pub fn screen(area: Rect, n: usize, focus: usize, zoomed: bool, inspector: bool) -> Screen {
    let [top, main, bottom] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1), Constraint::Length(1)]).areas(area);
    let (panes_area, inspector) = split_inspector(main, inspector);
    let panes =
        if zoomed { vec![(focus, panes_area)] } else { pane_rects(panes_area, n).into_iter().enumerate().collect() };
    Screen { top, bottom, panes_area, panes, inspector }
}

fn split_inspector(main: Rect, inspector: bool) -> (Rect, Option<Rect>) {
    if !inspector {
        return (main, None);
    }
    if main.width >= 120 {
        let side = (main.width * 2 / 5).clamp(48, 80);
        let [panes, inspector] = Layout::horizontal([Constraint::Fill(1), Constraint::Length(side)]).areas(main);
        (panes, Some(inspector))
    } else {
        let band = (main.height / 2).max(6).min(main.height.saturating_sub(3));
        let [panes, inspector] = Layout::vertical([Constraint::Fill(1), Constraint::Length(band)]).areas(main);
        (panes, Some(inspector))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_opens_as_many_of_the_profiles_panes_as_fit() {
        let terminal = |w, h| Rect::new(0, 0, w, h);
        // 80x24 less the two bars: four panes of 40x11, not eight of 20x11.
        assert_eq!(panes_that_fit(terminal(80, 24), 8), 4);
        assert_eq!(panes_that_fit(terminal(120, 30), 8), 6);
        assert_eq!(panes_that_fit(terminal(200, 50), 8), 8);
        assert_eq!(panes_that_fit(terminal(200, 50), 3), 3, "never more than the profile asks");
        assert_eq!(panes_that_fit(terminal(40, 12), 8), 1, "one at the least");
        assert_eq!(panes_that_fit(terminal(20, 7), 8), 1);
    }

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
