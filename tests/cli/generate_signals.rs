//! `cohort generate` killed at random moments (SIGKILL, SIGTERM, SIGINT), then run again on the
//! requests it had not answered: across the runs every request is answered exactly once and no
//! result line is torn, because each result is written whole and flushed the moment it ends.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cohort::platform::rng::Rng;
use common::{cohort_command, fixture, with_default_sigint};

const REQUESTS: usize = 200;
const RUNS: usize = 20;

#[test]
fn generate_killed_at_random_then_rerun_answers_every_request_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let mut rng = Rng::new(36);
    let lines: BTreeMap<String, String> = (0..REQUESTS)
        .map(|i| {
            let id = format!("r{i}");
            let max_tokens = 8 + rng.next_u64() % 50;
            let line = format!(r#"{{"id":"{id}","prompt":"The boat {i}","max_tokens":{max_tokens},"temperature":0}}"#);
            (id, line)
        })
        .collect();
    let mut answered: BTreeMap<String, usize> = BTreeMap::new();
    // Runs stopped after some results and before the last: the case under test.
    let mut cut_partway = 0;
    for run in 0..=RUNS {
        let remaining: Vec<&String> = lines.keys().filter(|id| !answered.contains_key(*id)).collect();
        if remaining.is_empty() {
            break;
        }
        let input = dir.path().join(format!("in-{run}.jsonl"));
        let body: String = remaining.iter().map(|id| format!("{}\n", lines[*id])).collect();
        std::fs::write(&input, body).unwrap();
        let output = dir.path().join(format!("out-{run}.jsonl"));
        let mut child = with_default_sigint(&mut cohort_command(&home))
            .args(["generate", "-m"])
            .arg(fixture("qwen35_moe_4bit"))
            .arg("-i")
            .arg(&input)
            .arg("-o")
            .arg(&output)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The last run is left to finish; the others are stopped 0.3 to 2.5 s in.
        if run < RUNS {
            let at = Duration::from_millis(300 + rng.next_u64() % 2200);
            let started = Instant::now();
            while started.elapsed() < at && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
            let signal = ["-KILL", "-TERM", "-INT"][run % 3];
            let _ = Command::new("kill").args([signal, &child.id().to_string()]).status();
        }
        let status = child.wait().unwrap();
        if run == RUNS {
            assert!(status.success(), "the final run finished: {status:?}");
        }
        let text = std::fs::read_to_string(&output).unwrap_or_default();
        let got = text.lines().count();
        if got > 0 && got < remaining.len() {
            cut_partway += 1;
        }
        for line in text.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("run {run}: a torn result line ({e}): {line:?}"));
            assert!(v["finish_reason"] == "length" || v["finish_reason"] == "stop", "run {run}: {line}");
            *answered.entry(v["id"].as_str().unwrap().to_owned()).or_default() += 1;
        }
    }
    assert_eq!(answered.len(), REQUESTS, "every request answered");
    assert!(cut_partway >= 3, "only {cut_partway} runs were stopped between two results");
    let twice: Vec<_> = answered.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "answered more than once: {twice:?}");
}
