//! What an allocation MLX cannot make does, on the backend this runs on (docs/reliability.md,
//! Faults). On MLX 0.32.2's CPU backend `allocator::malloc` does not check `std::malloc`'s result
//! (allocator.h, `inline Buffer malloc(size_t)`), so an impossible allocation hands a null
//! buffer to the kernel, which writes through it: the process dies with SIGSEGV on MLX's stream
//! thread and nothing reaches cohort to report. These tests pin that down, so that an MLX that
//! starts reporting the failure (as the Metal allocator does) shows up here: the engine's error
//! must then say "out of memory" and the docs change.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use cohort::engine::runtime::Backend;
use mlx_rs::Dtype;

const SIGSEGV: i32 = 11;

fn on_cpu(test: &str) -> bool {
    let cpu = Backend::detect() == Backend::Cpu;
    if !cpu {
        eprintln!("SKIPPED {test}: characterised on MLX's CPU backend only");
    }
    cpu
}

#[test]
fn an_impossible_allocation_kills_the_process_unreported_on_the_cpu() {
    if !on_cpu("an_impossible_allocation_kills_the_process_unreported_on_the_cpu") {
        return;
    }
    // A public path to a 4 TiB allocation: each operand of a 2^20 x 2^20 float32 matmul. The
    // shell turns core dumps off for the crash it expects.
    let home = tempfile::tempdir().unwrap();
    let out = Command::new("sh")
        .args(["-c", "ulimit -c 0; exec \"$0\" device --matmul 1048576 --iters 1"])
        .arg(env!("CARGO_BIN_EXE_cohort"))
        .env("COHORT_HOME", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(SIGSEGV),
        "MLX no longer crashes on an impossible allocation (exit {:?}, stderr {stderr}): make the engine's error say \
         \"out of memory\" and update docs/reliability.md",
        out.status.code()
    );
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
