//! A benchmark whose operands would not fit is refused as out of memory before MLX allocates
//! (MLX's CPU allocator does not check malloc's result: tests/oom.rs says more).

use crate::common;

use common::cohort_command;

#[test]
fn an_impossible_matmul_is_refused_as_out_of_memory() {
    // Each operand of a 2^20 x 2^20 float32 matmul is 4 TiB: MLX would crash allocating it.
    let home = tempfile::tempdir().unwrap();
    let out = cohort_command(home.path()).args(["device", "--matmul", "1048576", "--iters", "1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("out of memory") && stderr.contains("1048576 x 1048576"), "{stderr}");
}
