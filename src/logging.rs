//! Logs go to a file through `tracing`, never to the terminal the TUI owns.

use std::path::Path;

use anyhow::{Context, Result};
use tracing_appender::non_blocking::WorkerGuard;

/// Start logging to `dir/cohort.log` (daily rotation). Keep the guard alive for the whole run:
/// dropping it flushes and stops the writer. The filter comes from `COHORT_LOG` (default `info`).
pub fn init(dir: &Path) -> Result<WorkerGuard> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create log folder {}", dir.display()))?;
    let appender = tracing_appender::rolling::daily(dir, "cohort.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = tracing_subscriber::EnvFilter::try_from_env("COHORT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(false).try_init().ok();
    Ok(guard)
}
