//! Logs go to a file through `tracing`, never to the terminal the TUI owns. A log that cannot be
//! written is not a reason to refuse work: cohort then runs without one.

use std::path::Path;

use tracing_appender::non_blocking::WorkerGuard;
use tracing_appender::rolling::{RollingFileAppender, Rotation};

/// Start logging to `dir/cohort.log.<date>` (daily rotation). Keep the guard alive for the whole
/// run: dropping it flushes and stops the writer. The filter comes from `COHORT_LOG` (default
/// `info`). None when the folder or the file cannot be created: nothing is logged, nothing fails.
pub fn init(dir: &Path) -> Option<WorkerGuard> {
    std::fs::create_dir_all(dir).ok()?;
    let appender =
        RollingFileAppender::builder().rotation(Rotation::DAILY).filename_prefix("cohort.log").build(dir).ok()?;
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = tracing_subscriber::EnvFilter::try_from_env("COHORT_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(false).try_init().ok();
    Some(guard)
}
