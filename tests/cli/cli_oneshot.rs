//! `cohort "prompt"` (issue 40, item 4): one question, the answer streamed to stdout, then
//! exit; no terminal needed. The answer is the model's, as `generate` gives it for the same chat
//! request; errors go to stderr with exit code 1; a prompt named like a subcommand goes after
//! `--`, and `-` reads the prompt from stdin.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{cohort_command, fixture};

fn cohort(home: &Path) -> Command {
    cohort_command(home)
}

/// A profile on the fixture model: greedy, `max_tokens` long.
fn profile(dir: &Path, max_tokens: usize, extra: &str) -> PathBuf {
    let path = dir.join("oneshot.toml");
    let text = format!(
        "model = \"{}\"\nmax_tokens = {max_tokens}\n{extra}\n[sampler]\ntemperature = 0.0\n",
        fixture("qwen35_moe_4bit").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// What `cohort generate` answers to `prompt` as a chat message, greedy, `max_tokens` long
/// (past end-of-sequence with `ignore_eos`).
fn generated(home: &Path, prompt: &str, max_tokens: usize, ignore_eos: bool) -> String {
    let input = home.join("in.jsonl");
    let line = serde_json::json!({
        "id": "one",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": ignore_eos,
    });
    std::fs::write(&input, format!("{line}\n")).unwrap();
    let out = cohort(home).args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    result["text"].as_str().unwrap().to_owned()
}

#[test]
fn a_prompt_prints_the_models_answer_and_exits_0() {
    let home = tempfile::tempdir().unwrap();
    let profile = profile(home.path(), 12, "ignore_eos = true");
    let out = cohort(home.path()).arg("--profile").arg(&profile).arg("The boat sails").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let want = generated(home.path(), "The boat sails", 12, true);
    assert!(!want.is_empty());
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{want}\n"), "the answer, then a newline");
    // Cut at max_tokens: said on stderr, not mixed into the answer.
    assert!(stderr.contains("max_tokens (12)"), "{stderr}");
    // No session folder is left behind (nothing of the TUI runs).
    let transcripts = home.path().join("data").join("transcripts");
    assert!(std::fs::read_dir(&transcripts).map(|mut d| d.next().is_none()).unwrap_or(true));
}

/// The answer streams: its first bytes arrive while the model is still generating.
#[test]
fn the_answer_streams_to_stdout() {
    let home = tempfile::tempdir().unwrap();
    let profile = profile(home.path(), 3000, "ignore_eos = true");
    let mut child = cohort(home.path())
        .arg("--profile")
        .arg(&profile)
        .arg("Tell me a long story")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    assert!(child.try_wait().unwrap().is_none(), "the first bytes came before the answer ended");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn errors_go_to_stderr_with_exit_1() {
    let home = tempfile::tempdir().unwrap();
    let out = cohort(home.path()).args(["-m", "/nonexistent/model", "hello"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model"));
    // A prompt over the model's context window (4096 tokens) is refused by the engine.
    let profile = profile(home.path(), 8, "");
    let long = "word ".repeat(6000);
    let out = cohort(home.path()).arg("--profile").arg(&profile).arg(&long).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty() && stderr.contains("context window"), "{stderr}");
    // Options that belong to the TUI are refused, not ignored.
    let out = cohort(home.path()).arg("--profile").arg(&profile).args(["--resume", "x", "hello"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--resume"));
}

/// Subcommands keep their names: `cohort serve --help` is the server's help; after `--` the same
/// word is a prompt (and so is one that starts with a dash).
#[test]
fn a_prompt_named_like_a_subcommand_goes_after_a_double_dash() {
    let home = tempfile::tempdir().unwrap();
    let out = cohort(home.path()).args(["serve", "--help"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--port"), "the serve subcommand's help");
    let profile = profile(home.path(), 6, "");
    for prompt in ["serve", "--help"] {
        let out = cohort(home.path()).arg("--profile").arg(&profile).args(["--", prompt]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{}\n", generated(home.path(), prompt, 6, false)));
    }
}

/// `-` reads the prompt from stdin (a pipe).
#[test]
fn a_dash_reads_the_prompt_from_stdin() {
    let home = tempfile::tempdir().unwrap();
    let profile = profile(home.path(), 6, "");
    let mut child = cohort(home.path())
        .arg("--profile")
        .arg(&profile)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"The boat sails\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", generated(home.path(), "The boat sails", 6, false))
    );
}
