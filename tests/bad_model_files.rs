//! Model files that are missing, truncated or corrupt, other than the safetensors and GGUF files
//! (tests/bad_model.rs, tests/gguf.rs): `cohort generate` exits 1 with an error naming the file.

mod common;

use std::path::Path;

use common::{cohort_command, fixture_copy};

/// A copy of the fixture model with `damage` done to it; `cohort generate`'s exit code and stderr.
fn generate_with(damage: impl FnOnce(&Path)) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture_copy("qwen35_moe_4bit", dir.path());
    damage(&model);
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\",\"max_tokens\":2}\n").unwrap();
    let out = cohort_command(&dir.path().join("home"))
        .args(["generate", "-m"])
        .arg(&model)
        .arg("-i")
        .arg(&input)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn truncate(file: &Path, keep: usize) {
    let bytes = std::fs::read(file).unwrap();
    std::fs::write(file, &bytes[..keep.min(bytes.len())]).unwrap();
}

#[test]
fn a_missing_tokenizer_is_named() {
    let (code, stderr) = generate_with(|m| std::fs::remove_file(m.join("tokenizer.json")).unwrap());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("tokenizer.json"), "{stderr}");
}

#[test]
fn a_truncated_tokenizer_is_named() {
    let (code, stderr) = generate_with(|m| truncate(&m.join("tokenizer.json"), 1000));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("tokenizer.json"), "{stderr}");
}

#[test]
fn a_truncated_config_is_named() {
    let (code, stderr) = generate_with(|m| truncate(&m.join("config.json"), 100));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("config.json") && stderr.contains("not valid JSON"), "{stderr}");
}
