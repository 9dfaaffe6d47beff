//! Logging is not a reason to refuse work: a data dir where the log cannot be written (its
//! `logs` is a file, or today's log file is a folder) leaves every command running, quietly.

use crate::common;

use std::path::Path;

use common::{cohort_command, fixture};

fn version_and_inspect(home: &Path) {
    let out = cohort_command(home).arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "--version: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("cohort "));
    let out = cohort_command(home).args(["inspect", "-m"]).arg(fixture("qwen35_moe_4bit")).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "inspect: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_logs_path_that_is_a_file_does_not_stop_commands() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("data")).unwrap();
    std::fs::write(home.path().join("data/logs"), "not a folder").unwrap();
    version_and_inspect(home.path());
}

#[test]
fn a_log_file_that_cannot_be_opened_does_not_stop_commands() {
    let home = tempfile::tempdir().unwrap();
    let logs = home.path().join("data/logs");
    // Whatever name today's file gets, it cannot be created: every candidate is a folder.
    let today = std::process::Command::new("date").arg("-u").arg("+%Y-%m-%d").output().unwrap();
    let today = String::from_utf8_lossy(&today.stdout).trim().to_owned();
    for name in ["cohort.log".to_owned(), format!("cohort.log.{today}")] {
        std::fs::create_dir_all(logs.join(name)).unwrap();
    }
    version_and_inspect(home.path());
}
