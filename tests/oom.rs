//! Out of memory (docs/reliability.md, Faults). On MLX 0.32.2's CPU backend `allocator::malloc`
//! does not check `std::malloc`'s result (allocator.h), so an allocation it cannot make writes
//! through a null buffer and the process dies with SIGSEGV, reporting nothing; and the memory
//! limit is recorded but not enforced. So cohort checks first (crates/core/src/platform/memory.rs): a
//! request whose KV cache would not fit in the memory available, or a benchmark whose operands
//! would not, is refused with an "out of memory" error before MLX allocates; other rows run on.

mod common;

use std::io::Write;

use cohort::platform::backend::Backend;
use common::{cohort_command, fixture, results_by_id};
use mlx_rs::Dtype;

fn on_cpu(test: &str) -> bool {
    let cpu = Backend::detect() == Backend::Cpu;
    if !cpu {
        common::skip(test, "characterised on MLX's CPU backend only");
    }
    cpu
}

#[test]
fn a_request_whose_kv_cache_does_not_fit_fails_alone_as_out_of_memory() {
    let model = cohort::model::load::load(&fixture("qwen35_moe_4bit"), Dtype::Float32).unwrap();
    let per_position = model.kv_bytes_per_position() as u64;
    // Room for 512 positions: the short request (256 after rounding) fits, 2000 tokens do not.
    let available = 512 * per_position;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    writeln!(f, r#"{{"id":"small","prompt":"The boat","max_tokens":4,"temperature":0}}"#).unwrap();
    writeln!(f, r#"{{"id":"large","prompt":"The boat","max_tokens":2000,"temperature":0}}"#).unwrap();
    writeln!(f, r#"{{"id":"small2","prompt":"A heron","max_tokens":4,"temperature":0}}"#).unwrap();
    drop(f);
    let out = cohort_command(dir.path())
        .env("COHORT_MEMORY_AVAILABLE", available.to_string())
        .args(["generate", "-m"])
        .arg(fixture("qwen35_moe_4bit"))
        .arg("-i")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let r = results_by_id(&out.stdout, &["small", "large", "small2"]);
    assert_eq!(r[0]["finish_reason"], "length");
    assert_eq!(r[2]["finish_reason"], "length");
    assert_eq!(r[1]["finish_reason"], "error");
    let err = r[1]["error"].as_str().unwrap();
    assert!(err.contains("out of memory") && err.contains("max_tokens 2000"), "{err}");
}

#[test]
fn the_memory_limit_is_not_enforced_on_the_cpu() {
    if !on_cpu("the_memory_limit_is_not_enforced_on_the_cpu") {
        return;
    }
    // The CPU allocator records the limit (it reads back) but never checks it: 16 MiB under a
    // 1 MiB limit evaluates, so a limit cannot turn a runaway allocation into a caught error.
    let previous = mlx_rs::memory::set_memory_limit(1 << 20).unwrap();
    let limit = mlx_rs::memory::memory_limit().unwrap();
    let a = mlx_rs::ops::zeros_dtype(&[1 << 22], Dtype::Float32).unwrap();
    let evaluated = a.eval();
    mlx_rs::memory::set_memory_limit(previous).unwrap();
    assert_eq!(limit, 1 << 20);
    assert!(evaluated.is_ok(), "the CPU allocator now enforces its limit: {evaluated:?}; update docs/reliability.md");
    assert!(mlx_rs::memory::active_memory().unwrap() >= 1 << 24);
}

/// Every log line the binary wrote under `home`.
fn logs(home: &std::path::Path) -> String {
    let mut text = String::new();
    let mut dirs = vec![home.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("cohort.log")) {
                text.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    text
}

#[test]
fn a_cohort_whose_packed_kv_does_not_fit_keeps_per_row_kv_and_gives_the_same_answers() {
    let model = cohort::model::load::load(&fixture("qwen35_moe_4bit"), Dtype::Float32).unwrap();
    let per_position = model.kv_bytes_per_position() as u64;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    for (i, p) in ["The boat", "A heron", "Rain on the", "In the morning"].iter().enumerate() {
        writeln!(f, r#"{{"id":"r{i}","prompt":"{p}","max_tokens":24,"temperature":0}}"#).unwrap();
    }
    drop(f);
    let run = |available: Option<u64>| {
        let home = tempfile::tempdir().unwrap();
        let mut cmd = cohort_command(home.path());
        if let Some(a) = available {
            cmd.env("COHORT_MEMORY_AVAILABLE", a.to_string());
        }
        let out = cmd.args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output().unwrap();
        assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
        (results_by_id(&out.stdout, &["r0", "r1", "r2", "r3"]), logs(home.path()))
    };
    // Each request needs 256 positions (one KV step); the lane packs the live rows only, so 4
    // packed slots need 1024: room for 768.
    let (tight, tight_log) = run(Some(768 * per_position));
    let (roomy, roomy_log) = run(None);
    let refused = "the rows keep their own KV and attend one by one";
    assert!(tight_log.contains(refused), "no packing refusal in the log:\n{tight_log}");
    assert!(!roomy_log.contains(refused), "packing refused with room to spare:\n{roomy_log}");
    assert_eq!(tight.len(), 4);
    for (a, b) in tight.iter().zip(&roomy) {
        assert_eq!(a["stats"]["real_width"], 4, "{a}");
        assert_eq!(a["finish_reason"], b["finish_reason"]);
        assert_eq!(a["token_ids"], b["token_ids"], "{} differs with and without packing", a["id"]);
    }
}
