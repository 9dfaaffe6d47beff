//! Whether the process started with its stdout closed (`cohort generate ... >&-`).
//!
//! Before `main`, Rust's runtime opens /dev/null on any of fds 0-2 that is closed, after which a
//! closed stdout can no longer be told from `>/dev/null`: every write succeeds and goes nowhere.
//! An initializer (run by the loader before the runtime's) records the state fd 1 started in.

use std::sync::atomic::{AtomicBool, Ordering};

static CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

/// True when fd 1 was not open when the process started (false where this cannot be known).
pub fn closed_at_start() -> bool {
    CLOSED_AT_START.load(Ordering::Relaxed)
}

#[cfg(any(target_os = "linux", target_os = "macos"))]
#[used]
#[cfg_attr(target_os = "linux", unsafe(link_section = ".init_array"))]
#[cfg_attr(target_os = "macos", unsafe(link_section = "__DATA,__mod_init_func"))]
static RECORD_AT_START: extern "C" fn() = record;

#[cfg(any(target_os = "linux", target_os = "macos"))]
extern "C" fn record() {
    unsafe extern "C" {
        fn fcntl(fd: i32, cmd: i32, ...) -> i32;
    }
    const F_GETFD: i32 = 1;
    // SAFETY: F_GETFD only reads the descriptor's flags; -1 (EBADF) means fd 1 is not open.
    if unsafe { fcntl(1, F_GETFD) } == -1 {
        CLOSED_AT_START.store(true, Ordering::Relaxed);
    }
}
