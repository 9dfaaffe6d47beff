//! Frame render time with eight panes streaming and the inspector open, on ratatui's
//! `TestBackend` (the same drawing and diffing as a real terminal, minus the terminal's write).
//! Run by `cargo test --release --test tui tui_bench -- --ignored --nocapture`.

use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::action::Action;
use super::app::InspectorPanel;
use super::{fixture, views};
use crate::engine::api::RowEvent;

#[derive(Debug, Clone)]
pub struct FrameTimes {
    pub width: u16,
    pub height: u16,
    pub frames: usize,
    /// Bytes of answer text per pane when the measurement ended.
    pub answer_bytes: usize,
    pub mean: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl std::fmt::Display for FrameTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "{}x{}: {} frames, mean {:.3} ms, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} bytes of answer per pane)",
            self.width,
            self.height,
            self.frames,
            ms(self.mean),
            ms(self.p50),
            ms(self.p99),
            ms(self.max),
            self.answer_bytes
        )
    }
}

/// Eight panes each already holding a long answer (code blocks included) and still decoding;
/// every frame adds one token to every pane (one cohort cycle) and a telemetry snapshot every
/// fourth frame, as the event loop does; only the draw is timed.
pub fn measure(width: u16, height: u16, frames: usize) -> FrameTimes {
    let t0 = Instant::now();
    let mut app = fixture::app(8, "dark");
    let long: String = (0..12).map(|_| format!("{}\n\n{}\n\n", fixture::PROSE_ANSWER, fixture::CODE_ANSWER)).collect();
    for i in 0..8 {
        fixture::play(&mut app, i, "Tell me everything about cohorts", &long, None, t0);
    }
    app.inspector = Some(InspectorPanel::All);
    fixture::feed_telemetry(&mut app, 64);
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    let mut times = Vec::with_capacity(frames);
    let words = ["token ", "stream ", "`code` ", "**bold** ", "word\n"];
    for frame in 0..frames + 5 {
        for p in 0..app.panes.len() {
            let pane = app.panes[p].id;
            let id = app.panes[p].in_flight.as_ref().map(|f| f.id.clone()).unwrap_or_default();
            let text = words[(frame + p) % words.len()].to_owned();
            let at = t0 + Duration::from_millis(15 * frame as u64);
            app.update(Action::Row { pane, event: RowEvent::Delta { id, text, ids: vec![1] }, at });
        }
        if frame % 4 == 0 {
            app.update(Action::Telemetry(Box::new(fixture::telemetry(&app))));
        }
        app.update(Action::Tick);
        let start = Instant::now();
        terminal.draw(|f| views::draw(f, &app)).expect("draw");
        // The first frames fill the caches; they are not what a streaming frame costs.
        if frame >= 5 {
            times.push(start.elapsed());
        }
    }
    let answer_bytes = app.panes[0].turns.last().map(|t| t.answer.len()).unwrap_or(0);
    let mut sorted = times.clone();
    sorted.sort();
    let pick = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    FrameTimes {
        width,
        height,
        frames,
        answer_bytes,
        mean: times.iter().sum::<Duration>() / times.len() as u32,
        p50: pick(0.5),
        p99: pick(0.99),
        max: *sorted.last().expect("frames > 0"),
    }
}
