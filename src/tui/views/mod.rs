//! Rendering: a pure function of the app's state. Nothing here talks to the engine, reads files
//! or changes state (beyond the panes' render caches and last-seen page sizes).

pub mod bars;
pub mod cohort;
pub mod help;
pub mod histogram;
pub mod inspector;
pub mod memory;
pub mod pane;
pub mod picker;
pub mod popup;
pub mod queue;
pub mod rows;
pub mod spark;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::widgets::Block;

use super::app::{App, Overlay};
use super::layout::pane_rects;

/// Draw the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    frame.render_widget(Block::new().style(app.styles.base), area);
    let [top, main, bottom] =
        Layout::vertical([Constraint::Length(1), Constraint::Fill(1), Constraint::Length(1)]).areas(area);
    bars::draw_top(frame, top, app);
    bars::draw_bottom(frame, bottom, app);
    let (panes_area, inspector_area) = split_inspector(main, app);
    if app.zoomed {
        pane::draw(frame, panes_area, app, app.focus);
    } else {
        for (i, rect) in pane_rects(panes_area, app.panes.len()).into_iter().enumerate() {
            pane::draw(frame, rect, app, i);
        }
    }
    if let (Some(rect), Some(panel)) = (inspector_area, app.inspector) {
        inspector::draw(frame, rect, app, panel);
    }
    match &app.overlay {
        Some(Overlay::Help { scroll }) => help::draw(frame, area, app, *scroll),
        Some(Overlay::Profiles { selected }) => picker::draw_profiles(frame, area, app, *selected),
        Some(Overlay::SaveProfile { name }) => picker::draw_save(frame, area, app, name),
        None => {}
    }
}

/// The inspector goes to the right on wide screens and below the panes on narrow ones.
fn split_inspector(main: Rect, app: &App) -> (Rect, Option<Rect>) {
    if app.inspector.is_none() {
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
