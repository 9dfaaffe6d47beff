//! Rendering: a pure function of the app's state. Nothing here talks to the engine, reads files
//! or changes state (beyond the panes' render caches and last-seen page sizes).

pub mod bars;
pub mod chart;
pub mod cohort;
pub mod help;
pub mod histogram;
pub mod inspector;
pub mod memory;
pub mod pane;
pub mod picker;
pub mod popup;
pub mod queue;
pub mod row;
pub mod rows;
pub mod sessions;
pub mod settings;
pub mod spark;

use ratatui::Frame;
use ratatui::widgets::Block;

use super::app::{App, Overlay};

/// Draw the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    frame.render_widget(Block::new().style(app.styles.base), area);
    let screen = app.screen(area);
    bars::draw_top(frame, screen.top, app);
    for &(i, rect) in &screen.panes {
        pane::draw(frame, rect, app, i);
    }
    // After the panes: a search's count is what the focused pane found drawing itself.
    bars::draw_bottom(frame, screen.bottom, app);
    if let (Some(rect), Some(panel)) = (screen.inspector, app.inspector) {
        inspector::draw(frame, rect, app, panel);
    }
    // Every overlay open, bottom first, so the one on top is drawn over those beneath.
    for overlay in app.popups.iter() {
        match overlay {
            Overlay::Help { scroll } => help::draw(frame, area, app, *scroll),
            Overlay::Profiles { selected } => picker::draw_profiles(frame, area, app, *selected),
            Overlay::SaveProfile { name } => picker::draw_save(frame, area, app, name),
            Overlay::Settings(form) => settings::draw(frame, area, app, form),
            Overlay::Sessions(open) => sessions::draw(frame, area, app, open),
            // Drawn in the pane itself (the picked message highlighted), or the inspector (the
            // drilled row), and the bottom bar.
            Overlay::Select { .. } | Overlay::Branch { .. } | Overlay::Row { .. } | Overlay::Search { .. } => {}
        }
    }
}
