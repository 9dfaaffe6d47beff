//! Chat templates come with the model, from anyone: one that loops without end, renders
//! gigabytes or builds one huge value is stopped with a clear error instead of taking the
//! process's memory and the owner thread with it.

use crate::common;

use std::time::{Duration, Instant};

use cohort::model::text::template;
use cohort::model::text::tokenizer::{ChatMessage, TextTokenizer};
use common::fixture;

/// The fixture's tokenizer with `template` as its chat template.
fn tokenizer_with(template: &str) -> (tempfile::TempDir, TextTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(fixture("qwen35_moe_4bit").join(f), dir.path().join(f)).unwrap();
    }
    let path = dir.path().join("tokenizer_config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["chat_template"] = template.into();
    std::fs::write(&path, cfg.to_string()).unwrap();
    let tok = TextTokenizer::load(dir.path()).unwrap();
    (dir, tok)
}

fn render(template: &str) -> (Result<String, String>, Duration) {
    let (_dir, tok) = tokenizer_with(template);
    let started = Instant::now();
    let out = tok.apply_chat_template(&[ChatMessage::new("user", &"word ".repeat(200))], true);
    (out.map_err(|e| format!("{e:#}")), started.elapsed())
}

#[test]
fn a_template_that_loops_without_end_runs_out_of_fuel() {
    let (out, took) = render("{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}");
    let err = out.unwrap_err();
    assert!(err.contains("chat template") && err.contains("too much work"), "{err}");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
}

#[test]
fn a_template_that_renders_too_much_text_is_stopped() {
    // Few steps, much text: a thousand-character message doubled 16 times (64 MB).
    let (out, took) = render(
        "{% set ns = namespace(s=messages[0].content) %}{% for i in range(16) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    );
    let err = out.unwrap_err();
    assert!(err.contains("chat template") && err.contains("MB"), "{err}");
    assert!(took < Duration::from_secs(10), "stopped after {took:?}");
}

#[test]
fn the_fixture_templates_still_render_long_conversations() {
    let (_dir, tok) = tokenizer_with(
        &serde_json::from_str::<serde_json::Value>(
            &std::fs::read_to_string(fixture("qwen35_moe_4bit").join("tokenizer_config.json")).unwrap(),
        )
        .unwrap()["chat_template"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| {
                std::fs::read_to_string(fixture("qwen35_moe_4bit").join("chat_template.jinja")).unwrap()
            }),
    );
    let turns: Vec<ChatMessage> = (0..2000)
        .map(|i| ChatMessage::new(if i % 2 == 0 { "user" } else { "assistant" }, &format!("turn {i}")))
        .collect();
    let text = tok.apply_chat_template(&turns, true).unwrap();
    assert!(text.contains("turn 1999"));
}

/// One step that builds one huge string: fuel counts steps and the output cap counts what is
/// written, so neither stops a string that doubles in a loop and is never written, a filter
/// given a huge width, or a join over a list repeated a billion times (minijinja refuses only
/// `"x" * n` past 100 MB). Each request fails alone, within seconds, with an error naming the
/// chat template and the limit it passed, and the plain request beside it is answered. Before
/// the template rendered in a child process with its own limits (minijinja 2.24 bounds no
/// value's size) the first two aborted the process ("memory allocation of … bytes failed", under
/// the 3 GB address-space cap used here; without it they take the machine's memory) and the
/// third held the owner thread for about a minute while it built 2 GB.
#[test]
fn a_template_that_builds_one_huge_string_fails_its_request_alone() {
    let templates = [
        "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        "{{ messages[0].content|indent(1000000000000, true) }}",
        "{{ (['x'] * 1000000000)|join }}",
    ];
    for template in templates {
        let dir = tempfile::tempdir().unwrap();
        let model = common::fixture_copy("qwen35_moe_4bit", dir.path());
        let path = model.join("tokenizer_config.json");
        let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        cfg["chat_template"] = template.into();
        std::fs::write(&path, cfg.to_string()).unwrap();
        let input = dir.path().join("in.jsonl");
        std::fs::write(
            &input,
            "{\"id\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":2}\n\
             {\"id\":\"plain\",\"prompt\":\"The boat\",\"max_tokens\":2,\"temperature\":0}\n",
        )
        .unwrap();
        let started = Instant::now();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v 3000000 && exec timeout 60 "$@""#)
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_cohort"))
            .env("COHORT_HOME", dir.path().join("home"))
            .args(["generate", "-m"])
            .arg(&model)
            .arg("-i")
            .arg(&input)
            .output()
            .unwrap();
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{template}: {:?}: {}", out.status, stderr.lines().next().unwrap_or(""));
        let r = common::results_by_id(&out.stdout, &["chat", "plain"]);
        let err = r[0]["error"].as_str().unwrap_or_default();
        assert!(err.contains("chat template") && err.contains("refused"), "{template}: {err}");
        assert!(err.contains(" MB of memory") || err.contains(" s: refused"), "{template}: names no limit: {err}");
        assert_eq!(r[1]["finish_reason"], "length", "{template}");
        assert!(took < Duration::from_secs(10), "{template}: took {took:?}");
    }
}

/// The helper processes of this process that serve template renders (Linux: read from /proc).
#[cfg(target_os = "linux")]
fn template_helpers() -> Vec<u32> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let (Ok(stat), Ok(cmdline)) =
            (std::fs::read_to_string(entry.path().join("stat")), std::fs::read(entry.path().join("cmdline")))
        else {
            continue;
        };
        // The parent pid is the second field after the command's closing parenthesis.
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if parent == Some(me.as_str()) && String::from_utf8_lossy(&cmdline).contains(template::HELPER_ARG) {
            out.push(pid);
        }
    }
    out
}

/// Renders run in a helper process started once (a fork of a process holding a loaded model
/// costs about 25 ms per GB it holds; the helper's costs well under a millisecond), and a helper
/// that dies is replaced at the next render, which still answers.
#[cfg(target_os = "linux")]
#[test]
fn renders_run_in_a_helper_that_is_replaced_when_it_dies() {
    let (_dir, tok) = tokenizer_with("{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}");
    let hi = [ChatMessage::new("user", "hi")];
    assert_eq!(tok.apply_chat_template(&hi, true).unwrap(), "[user] hi");
    let first = template_helpers();
    assert!(!first.is_empty(), "no helper process serves the renders");
    for &pid in &first {
        std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    }
    // The render that meets the dead helper is answered (by a fork of this process), and the
    // one after it by a new helper.
    for _ in 0..2 {
        assert_eq!(tok.apply_chat_template(&hi, true).unwrap(), "[user] hi");
    }
    let now = template_helpers();
    assert!(now.iter().any(|pid| !first.contains(pid)), "no new helper: before {first:?}, now {now:?}");
    let started = Instant::now();
    for _ in 0..50 {
        tok.apply_chat_template(&hi, true).unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(5), "50 renders took {:?}", started.elapsed());
}
