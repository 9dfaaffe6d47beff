//! The inspector: the rows, cohort, memory and queue panels together, or one of them alone.
//! All of them read `app.telemetry` (a snapshot the event loop copies from the engine).

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};

use super::{cohort, memory, queue, rows};
use crate::tui::app::{App, InspectorPanel};

/// Figures and a sparkline of useful height.
const MEMORY_HEIGHT: u16 = 9;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, panel: InspectorPanel) {
    match panel {
        InspectorPanel::Rows => rows::draw(frame, area, app),
        InspectorPanel::Cohort => cohort::draw(frame, area, app),
        InspectorPanel::Memory => memory::draw(frame, area, app),
        InspectorPanel::Queue => queue::draw(frame, area, app),
        InspectorPanel::All => draw_all(frame, area, app),
    }
}

fn draw_all(frame: &mut Frame, area: Rect, app: &App) {
    let rows_height = (app.telemetry.rows.len().max(1) + 3) as u16;
    let hist = app.telemetry.real_width_histogram.len().max(1) as u16;
    let cohort_height = 12 + hist;
    // A wide, short band (below the panes): rows on the left, the rest stacked on the right.
    if area.width >= area.height * 4 {
        let [left, right] = Layout::horizontal([Constraint::Percentage(55), Constraint::Fill(1)]).areas(area);
        rows::draw(frame, left, app);
        let [c, m, q] =
            Layout::vertical([Constraint::Fill(1), Constraint::Length(4), Constraint::Length(3)]).areas(right);
        cohort::draw(frame, c, app);
        memory::draw(frame, m, app);
        queue::draw(frame, q, app);
        return;
    }
    // Extra height stays empty at the bottom rather than stretching a panel.
    let [r, c, m, q] = Layout::vertical([
        Constraint::Length(rows_height),
        Constraint::Max(cohort_height),
        Constraint::Length(MEMORY_HEIGHT),
        Constraint::Length(3),
    ])
    .flex(Flex::Start)
    .areas(area);
    rows::draw(frame, r, app);
    cohort::draw(frame, c, app);
    memory::draw(frame, m, app);
    queue::draw(frame, q, app);
}
