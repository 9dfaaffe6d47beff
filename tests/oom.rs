//! Out of memory (docs/reliability.md, Faults). On MLX 0.32.2's CPU backend `allocator::malloc`
//! does not check `std::malloc`'s result (allocator.h), so an allocation it cannot make writes
//! through a null buffer and the process dies with SIGSEGV, reporting nothing; and the memory
//! limit is recorded but not enforced. So cohort checks first (src/engine/memory_guard.rs): a
//! request whose KV cache would not fit in the memory available, or a benchmark whose operands
//! would not, is refused with an "out of memory" error before MLX allocates; other rows run on.

mod common;

use std::io::Write;

use cohort::engine::runtime::Backend;
use common::{cohort_command, fixture, result_lines};
use mlx_rs::Dtype;

fn on_cpu(test: &str) -> bool {
    let cpu = Backend::detect() == Backend::Cpu;
    if !cpu {
        eprintln!("SKIPPED {test}: characterised on MLX's CPU backend only");
    }
    cpu
}

#[test]
fn an_impossible_matmul_is_refused_as_out_of_memory() {
    // Each operand of a 2^20 x 2^20 float32 matmul is 4 TiB: MLX would crash allocating it.
    let home = tempfile::tempdir().unwrap();
    let out = cohort_command(home.path()).args(["device", "--matmul", "1048576", "--iters", "1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("out of memory") && stderr.contains("1048576 x 1048576"), "{stderr}");
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
    let r = result_lines(&out.stdout);
    assert_eq!(r.len(), 3);
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
