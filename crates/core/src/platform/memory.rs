//! Refusing work that cannot fit in memory before MLX tries: MLX's CPU allocator does not check
//! `malloc` (docs/reliability.md, Faults), so an allocation it cannot make kills the process
//! instead of failing one request. A request whose KV cache (or a benchmark whose operands) would
//! not fit in the memory available now gets an "out of memory" error naming what it needed.

use anyhow::{Result, bail};

use super::backend::{Backend, human_bytes};

/// Memory available for new allocations: `COHORT_MEMORY_AVAILABLE` (bytes) when set, else on the
/// CPU backend the kernel's MemAvailable; unknown (no check) on GPUs, whose allocators report
/// failures themselves.
pub fn available_bytes() -> Option<u64> {
    // The setting is read once (start-up has checked it is a whole number); MemAvailable is read
    // at every call, as it changes.
    static SET: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let set = SET.get_or_init(|| std::env::var("COHORT_MEMORY_AVAILABLE").ok().and_then(|v| v.trim().parse().ok()));
    if let Some(bytes) = set {
        return Some(*bytes);
    }
    if Backend::detect() != Backend::Cpu {
        return None;
    }
    meminfo_bytes("MemAvailable")
}

/// A field of Linux's /proc/meminfo (`MemTotal`, `MemAvailable`, ...) in bytes.
pub fn meminfo_bytes(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Fail with an out-of-memory error when `needed` bytes exceed what is available.
pub fn ensure_fits(needed: u64, what: &str) -> Result<()> {
    if let Some(available) = available_bytes()
        && needed > available
    {
        bail!(
            "out of memory: {what} needs {} and {} is available",
            human_bytes(needed as usize),
            human_bytes(available as usize)
        );
    }
    Ok(())
}
