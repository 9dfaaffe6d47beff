//! Model files that are missing, truncated or corrupt, other than the safetensors and GGUF files
//! (tests/models/bad_model.rs, tests/models/gguf.rs): `cohort generate` exits 1 with an error naming the file.

use crate::common;

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

/// A config that never ends (a link to /dev/zero) is refused at a size bound, not read forever.
#[cfg(unix)]
#[test]
fn a_config_that_never_ends_is_refused_quickly() {
    for file in ["config.json", "tokenizer_config.json"] {
        let started = std::time::Instant::now();
        let (code, stderr) = generate_with(|m| {
            std::fs::remove_file(m.join(file)).unwrap();
            std::os::unix::fs::symlink("/dev/zero", m.join(file)).unwrap();
        });
        assert_eq!(code, Some(1), "{file}: {stderr}");
        assert!(stderr.contains(file) && stderr.contains("MB"), "{file}: {stderr}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{file}: {:?}", started.elapsed());
    }
}

/// A local path that does not exist is never taken for a hub id when it cannot be one, and the
/// error says what was tried; a symlink loop is a local path that cannot be read.
#[test]
fn a_typo_d_local_path_is_not_downloaded() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let run = |model: &str| {
        let out = cohort_command(&home)
            .args(["inspect", "-m", model])
            .current_dir(dir.path())
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    // `models/` is a folder here: `models/SmolLM2` is a local path with a typo, not a hub id.
    std::fs::create_dir(dir.path().join("models")).unwrap();
    let (code, stderr) = run("models/SmolLM2");
    assert_eq!(code, Some(1));
    assert!(stderr.contains("does not exist") && stderr.contains("local folder"), "{stderr}");
    assert!(!stderr.contains("Hugging Face") && !stderr.contains("download"), "{stderr}");
    #[cfg(unix)]
    {
        let looped = dir.path().join("a");
        std::os::unix::fs::symlink(dir.path().join("b"), &looped).unwrap();
        std::os::unix::fs::symlink(&looped, dir.path().join("b")).unwrap();
        let (code, stderr) = run(looped.to_str().unwrap());
        assert_eq!(code, Some(1));
        assert!(stderr.contains("cannot be read") && !stderr.contains("Hugging Face"), "{stderr}");
    }
}
