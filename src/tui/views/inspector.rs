//! The inspector: the rows, cohort, memory and queue panels together, or one of them alone.
//! All of them read `app.telemetry` (a snapshot the event loop copies from the engine).

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};

use super::{cohort, memory, queue, row, rows};
use crate::tui::app::{App, InspectorPanel, Overlay};

/// Figures and a sparkline of useful height.
const MEMORY_HEIGHT: u16 = 9;

pub fn draw(frame: &mut Frame, area: Rect, app: &App, panel: InspectorPanel) {
    // Drilled into one row, it takes the whole inspector.
    if let Some(Overlay::Row { id, .. }) = app.overlay() {
        return row::draw(frame, area, app, id);
    }
    match panel {
        InspectorPanel::Rows => rows::draw(frame, area, app),
        InspectorPanel::Cohort => cohort::draw(frame, area, app),
        InspectorPanel::Memory => memory::draw(frame, area, app),
        InspectorPanel::Queue => queue::draw(frame, area, app),
        InspectorPanel::All => draw_all(frame, area, app),
    }
}

fn draw_all(frame: &mut Frame, area: Rect, app: &App) {
    // Rows, their header, the sparklines' legend and the borders.
    let rows_height = (app.telemetry.rows.len().max(1) + 4) as u16;
    let hist = match app.telemetry.real_width_histogram.len() {
        0 => 1,
        n => n as u16 + 2,
    };
    let cohort_height = 12 + hist;
    let queue_height = queue::height(app);
    // A wide, short band (below the panes): rows on the left, the rest stacked on the right.
    if area.width >= area.height * 4 {
        let [left, right] = Layout::horizontal([Constraint::Percentage(55), Constraint::Fill(1)]).areas(area);
        rows::draw(frame, left, app);
        let [c, m, q] =
            Layout::vertical([Constraint::Fill(1), Constraint::Length(4), Constraint::Length(queue_height.min(4))])
                .areas(right);
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
        Constraint::Length(queue_height.max(4)),
    ])
    .flex(Flex::Start)
    .areas(area);
    rows::draw(frame, r, app);
    cohort::draw(frame, c, app);
    memory::draw(frame, m, app);
    queue::draw(frame, q, app);
}
