//! A one-line progress bar on stderr: redrawn in place on a terminal, one line every few seconds
//! otherwise (logs stay readable).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    label: String,
    total: usize,
    start: Instant,
    last: Option<Instant>,
    tty: bool,
    every: Duration,
}

impl Progress {
    pub fn new(label: &str, total: usize) -> Self {
        let tty = std::io::stderr().is_terminal();
        let every = if tty { Duration::from_millis(200) } else { Duration::from_secs(15) };
        Self { label: label.to_owned(), total, start: Instant::now(), last: None, tty, every }
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    fn line(&self, done: usize, msg: &str) -> String {
        let frac = if self.total > 0 { (done as f64 / self.total as f64).min(1.0) } else { 0.0 };
        let width = 24;
        let filled = (frac * width as f64).round() as usize;
        let secs = self.start.elapsed().as_secs_f64();
        let eta = if done > 0 && frac < 1.0 { secs / frac - secs } else { 0.0 };
        format!(
            "{} [{}{}] {done}/{} {msg} | {} elapsed, eta {}",
            self.label,
            "#".repeat(filled),
            ".".repeat(width - filled),
            self.total,
            clock(secs),
            clock(eta)
        )
    }

    /// Redraw (rate-limited).
    pub fn update(&mut self, done: usize, msg: &str) {
        let now = Instant::now();
        if self.last.is_some_and(|l| now - l < self.every) && done < self.total {
            return;
        }
        self.last = Some(now);
        let line = self.line(done, msg);
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }

    /// Final state on its own line.
    pub fn finish(&mut self, done: usize, msg: &str) {
        let line = self.line(done, msg);
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = writeln!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
    }
}

fn clock(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    if s >= 3600 { format!("{}h{:02}m", s / 3600, (s / 60) % 60) } else { format!("{}m{:02}s", s / 60, s % 60) }
}
