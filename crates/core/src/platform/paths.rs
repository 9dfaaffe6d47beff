//! Where cohort keeps its files: the platform's config and data directories (`directories`),
//! overridable with `COHORT_HOME` (one folder holding both) for tests and portable installs.

use std::path::PathBuf;

use anyhow::{Context, Result};

/// The folders cohort reads and writes.
#[derive(Debug, Clone)]
pub struct Paths {
    /// User profiles, themes and keymaps.
    pub config_dir: PathBuf,
    /// Imported models, transcripts and logs.
    pub data_dir: PathBuf,
}

impl Paths {
    /// Resolve the folders; nothing is created until a caller needs it.
    pub fn resolve() -> Result<Self> {
        if let Some(home) = std::env::var_os("COHORT_HOME") {
            let home = PathBuf::from(home);
            return Ok(Self { config_dir: home.join("config"), data_dir: home.join("data") });
        }
        let dirs = directories::ProjectDirs::from("", "", "cohort")
            .context("no home directory to keep cohort's files in (set COHORT_HOME)")?;
        Ok(Self { config_dir: dirs.config_dir().to_path_buf(), data_dir: dirs.data_dir().to_path_buf() })
    }

    /// The folder log files go to.
    pub fn log_dir(&self) -> PathBuf {
        self.data_dir.join("logs")
    }
}
