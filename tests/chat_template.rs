//! Chat templates come with the model, from anyone: one that loops without end or renders
//! gigabytes is stopped with a clear error instead of taking the process's memory and the
//! owner thread with it.

mod common;

use std::time::{Duration, Instant};

use cohort::model::tokenizer::{ChatMessage, TextTokenizer};
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
