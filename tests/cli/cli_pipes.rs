//! A headless command whose reader stops early (`cohort inspect M | head -1`) ends as Unix tools
//! do, quietly, instead of panicking with "failed printing to stdout: Broken pipe" (exit 101;
//! issue 37).

use crate::common;

use std::process::Stdio;

#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    let home = tempfile::tempdir().unwrap();
    let model = common::fixture("llama");
    let commands: [Vec<&str>; 4] =
        [vec!["--version"], vec!["data-dir"], vec!["device", "--routes"], vec!["inspect", model.to_str().unwrap()]];
    for args in commands {
        let mut child = common::cohort_command(home.path())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the command has printed anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
    }
}
