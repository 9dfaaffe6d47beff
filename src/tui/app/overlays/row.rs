//! The inspector's drill-down into one row: opened on the focused pane's row, up/down (k/j),
//! home/end (g/G) move to another row, esc, q or the key again go back (hiding the inspector
//! where the drill-down showed it). Drawn by `tui::views::inspector` and the bottom bar.

use crossterm::event::{KeyCode, KeyEvent};

use super::super::{App, InspectorPanel};
use super::Overlay;
use crate::config::keymap::Command;

impl App {
    /// Drill into the focused pane's row of the inspector (else the first row), opening the
    /// inspector if it is hidden.
    pub(in crate::tui::app) fn inspect_row(&mut self) {
        let rows = &self.telemetry.rows;
        let pane = self.focused();
        let flight = pane.in_flight.as_ref().map(|f| f.id.clone());
        let mine = [flight.clone(), pane.turns.last().map(|t| t.request_id.clone())];
        let row = mine.iter().flatten().find_map(|id| rows.iter().find(|r| r.id == *id)).or(rows.first()).cloned();
        // A request just sent may not be in the last report yet (telemetry is polled a few times a
        // second): drill into it all the same; the next report fills the view in.
        let id = match (&row, flight) {
            (Some(row), _) if mine.iter().flatten().any(|id| *id == row.id) => row.id.clone(),
            (_, Some(flight)) => flight,
            (Some(row), None) => row.id.clone(),
            (None, None) => {
                let send = self.keymap.describe_keys(Command::Send);
                let any_ran = self.panes.iter().any(|p| !p.turns.is_empty()) || self.telemetry.lane_cycles > 0;
                let text = if any_ran {
                    format!("no row is running now: a row shows here while its request runs ({send} sends one)")
                } else {
                    format!("no row to inspect yet: the lane has had no request ({send} sends one)")
                };
                return self.notify(text, true);
            }
        };
        let opened = self.inspector.is_none();
        if opened {
            self.inspector = Some(InspectorPanel::All);
        }
        // The bottom bar shows the drill-down's keys.
        self.notice = None;
        self.row_seen = row.filter(|r| r.id == id);
        self.popups.open(Overlay::Row { id, opened });
    }

    pub(super) fn row_key(&mut self, id: String, opened: bool, key: KeyEvent) -> Option<Overlay> {
        let back = self.keymap.keys_for(Command::InspectRow).iter().any(|c| c.matches(&key));
        if back || matches!(key.code, KeyCode::Esc | KeyCode::Char('q')) {
            if opened {
                self.inspector = None;
            }
            return None;
        }
        let rows = &self.telemetry.rows;
        let at = rows.iter().position(|r| r.id == id);
        let to = match key.code {
            KeyCode::Up | KeyCode::Char('k') => at.map(|i| i.saturating_sub(1)).or(rows.len().checked_sub(1)),
            KeyCode::Down | KeyCode::Char('j') => at.map(|i| (i + 1).min(rows.len().saturating_sub(1))).or(Some(0)),
            KeyCode::Home | KeyCode::Char('g') => Some(0),
            KeyCode::End | KeyCode::Char('G') => rows.len().checked_sub(1),
            _ => None,
        };
        let id = match to.and_then(|i| rows.get(i)) {
            Some(row) if row.id != id => {
                self.row_seen = Some(row.clone());
                row.id.clone()
            }
            _ => id,
        };
        Some(Overlay::Row { id, opened })
    }
}
