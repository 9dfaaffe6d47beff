//! Running a computation whose memory and time cannot be bounded from inside it (a chat template
//! that came with a model) in a forked child process with its own limits, so that exceeding them
//! ends the child, never this process.
//!
//! The child is a `fork` of the calling thread: it computes, writes its answer to a pipe as one
//! length-prefixed message and leaves with `_exit`, running no destructor and flushing no buffer of
//! this process. Its address space may grow by [`Limits::memory`] bytes beyond what it inherits
//! (`RLIMIT_AS`, enforced by Linux; macOS does not enforce it, so there a runaway child is stopped
//! by its failed allocation or its time), and it may use [`Limits::cpu`] of CPU time
//! (`RLIMIT_CPU`); the caller waits at most [`Limits::wall`] and then kills it. The child writes
//! nothing to stderr (an allocation it cannot make would otherwise print there, over the TUI), and
//! dumps no core.
//!
//! What runs in the child must not take a lock another thread of this process may have held at
//! the fork (no logging, no stdout): only memory allocation (malloc is reset for the child by
//! glibc and by macOS's libc) and its own computation.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// What one sandboxed computation may use.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of address space the child may add to what it inherits.
    pub memory: u64,
    /// CPU time of the child (whole seconds count: `RLIMIT_CPU`).
    pub cpu: Duration,
    /// Time the caller waits for the answer before it kills the child.
    pub wall: Duration,
    /// Largest answer taken back.
    pub max_answer: usize,
}

/// How a sandboxed computation ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It finished: its own answer, success or error message.
    Done(Result<String, String>),
    /// It died from an allocation it could not make (the memory limit), or was killed for memory.
    OutOfMemory,
    /// It ran past its CPU or wall time and was stopped.
    OutOfTime,
    /// It died otherwise (a signal or exit status, described).
    Died(String),
}

/// Run `f` in a forked child under `limits`. `Err` only when the child could not be started
/// (no fork or pipe: the caller decides whether to run `f` here instead).
#[cfg(unix)]
pub fn run<F: FnOnce() -> Result<String, String>>(limits: Limits, f: F) -> std::io::Result<Outcome> {
    let (mut reader, writer) = std::io::pipe()?;
    let address_space = address_space_now();
    // SAFETY: fork duplicates this thread only. The child runs `f` and `child_main`, which touch
    // no lock another thread may hold (see the module comment), and leaves with _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if pid == 0 {
        drop(reader);
        child_main(limits, address_space, writer, f);
    }
    drop(writer);
    let mut child = Child { pid, reaped: None };
    let started = Instant::now();
    let mut answer = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let complete = |a: &[u8]| frame_len(a).is_some_and(|n| a.len() >= n);
    while !complete(&answer) {
        let left = limits.wall.saturating_sub(started.elapsed());
        if left.is_zero() {
            child.kill();
            return Ok(Outcome::OutOfTime);
        }
        // Short waits, so a child that died while a sibling fork still holds the pipe's write
        // end (which would keep EOF away) is noticed by its exit.
        let slice = left.min(Duration::from_millis(50));
        if readable(reader.as_raw_fd(), slice) {
            match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => answer.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
            if answer.len() > limits.max_answer.saturating_add(HEADER) {
                child.kill();
                return Ok(Outcome::Died(format!("its answer passed {} bytes", limits.max_answer)));
            }
        } else if child.exited() && !readable(reader.as_raw_fd(), Duration::ZERO) {
            break;
        }
    }
    if complete(&answer) {
        child.wait();
        return Ok(match Outcome::from_frame(&answer) {
            done @ Outcome::Done(_) => done,
            _ => Outcome::Died("it answered with no answer".into()),
        });
    }
    // No whole answer: the child has ended, or is about to (its end of the pipe is closed). A
    // child that has not (stuck in a lock some thread held at the fork) is killed at the deadline.
    while !child.exited() {
        if started.elapsed() >= limits.wall {
            child.kill();
            return Ok(Outcome::OutOfTime);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(match child.wait() {
        Some(Ended::Signal(libc::SIGXCPU)) => Outcome::OutOfTime,
        Some(Ended::Signal(libc::SIGABRT | libc::SIGSEGV | libc::SIGBUS | libc::SIGKILL)) => Outcome::OutOfMemory,
        Some(Ended::Signal(s)) => Outcome::Died(format!("signal {s}")),
        Some(Ended::Exit(c)) => Outcome::Died(format!("exit status {c} before answering")),
        None => Outcome::Died("it ended before answering".into()),
    })
}

#[cfg(not(unix))]
pub fn run<F: FnOnce() -> Result<String, String>>(_limits: Limits, _f: F) -> std::io::Result<Outcome> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "no fork here"))
}

/// A frame: a tag byte, the payload's length (8 bytes, little-endian), the payload.
pub(crate) const HEADER: usize = 9;

/// The whole frame's length, once its header is in `a`.
pub(crate) fn frame_len(a: &[u8]) -> Option<usize> {
    let len = u64::from_le_bytes(a.get(1..HEADER)?.try_into().ok()?);
    usize::try_from(len).ok()?.checked_add(HEADER)
}

pub(crate) fn frame(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.push(tag);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

impl Outcome {
    /// As one frame, for a process that reports an outcome to another.
    pub(crate) fn to_frame(&self) -> Vec<u8> {
        match self {
            Outcome::Done(Ok(t)) => frame(b'o', t.as_bytes()),
            Outcome::Done(Err(t)) => frame(b'e', t.as_bytes()),
            Outcome::OutOfMemory => frame(b'm', b""),
            Outcome::OutOfTime => frame(b't', b""),
            Outcome::Died(why) => frame(b'd', why.as_bytes()),
        }
    }

    /// From one whole frame (as [`Outcome::to_frame`] writes it).
    pub(crate) fn from_frame(a: &[u8]) -> Outcome {
        let n = frame_len(a).unwrap_or(HEADER).min(a.len());
        let text = String::from_utf8_lossy(a.get(HEADER..n).unwrap_or_default()).into_owned();
        match a.first() {
            Some(b'o') => Outcome::Done(Ok(text)),
            Some(b'e') => Outcome::Done(Err(text)),
            Some(b'm') => Outcome::OutOfMemory,
            Some(b't') => Outcome::OutOfTime,
            _ => Outcome::Died(text),
        }
    }
}

#[cfg(unix)]
fn child_main<F: FnOnce() -> Result<String, String>>(
    limits: Limits,
    address_space: Option<u64>,
    mut writer: std::io::PipeWriter,
    f: F,
) -> ! {
    // SAFETY: plain system calls on this process's own descriptors and limits.
    unsafe {
        libc::close(2);
        set_limit(libc::RLIMIT_CORE, 0);
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_DUMPABLE, 0);
        set_limit(libc::RLIMIT_CPU, limits.cpu.as_secs().max(1));
        if let Some(now) = address_space {
            set_limit(libc::RLIMIT_AS, now.saturating_add(limits.memory));
        }
    }
    // A panic is an answer too; the process's own hook (the TUI's restores the terminal, which
    // this child shares) must not run here.
    std::panic::set_hook(Box::new(|_| {}));
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("the computation panicked".into()));
    let _ = writer.write_all(&Outcome::Done(answer).to_frame());
    // SAFETY: leaves the child at once, running nothing of the parent's.
    unsafe { libc::_exit(0) }
}

/// Lower the soft limit `resource` to `value` (never raise it, never past the hard limit).
#[cfg(unix)]
unsafe fn set_limit(resource: LimitResource, value: u64) {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: r is a valid rlimit for getrlimit/setrlimit to read and write.
    unsafe {
        if libc::getrlimit(resource, &mut r) != 0 {
            return;
        }
        let want = (value as libc::rlim_t).min(r.rlim_max);
        if want < r.rlim_cur {
            r.rlim_cur = want;
            libc::setrlimit(resource, &r);
        }
    }
}

#[cfg(all(unix, target_os = "linux"))]
type LimitResource = libc::__rlimit_resource_t;
#[cfg(all(unix, not(target_os = "linux")))]
type LimitResource = libc::c_int;

/// This process's address space in bytes, where the system enforces a limit on it (Linux).
fn address_space_now() -> Option<u64> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().next()?.parse().ok()?;
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.checked_mul(u64::try_from(page).ok()?)
}

#[cfg(unix)]
fn readable(fd: i32, wait: Duration) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: p is one valid pollfd.
    let n = unsafe { libc::poll(&mut p, 1, ms) };
    n > 0 && p.revents != 0
}

#[cfg(unix)]
enum Ended {
    Exit(i32),
    Signal(i32),
}

#[cfg(unix)]
struct Child {
    pid: libc::pid_t,
    /// Set once waited for: how it ended, or None where that could not be learnt.
    reaped: Option<Option<Ended>>,
}

#[cfg(unix)]
impl Child {
    fn wait_with(&mut self, flags: i32) -> bool {
        if self.reaped.is_some() {
            return true;
        }
        let mut status = 0;
        loop {
            // SAFETY: waits for this process's own child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, flags) };
            if r == self.pid {
                self.reaped = Some(Some(if libc::WIFSIGNALED(status) {
                    Ended::Signal(libc::WTERMSIG(status))
                } else {
                    Ended::Exit(libc::WEXITSTATUS(status))
                }));
                return true;
            }
            if r == 0 {
                return false;
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                // ECHILD: reaped elsewhere (SIGCHLD ignored); how it ended cannot be known.
                self.reaped = Some(None);
                return true;
            }
        }
    }

    fn exited(&mut self) -> bool {
        self.wait_with(libc::WNOHANG)
    }

    fn wait(&mut self) -> Option<Ended> {
        self.wait_with(0);
        self.reaped.take().flatten()
    }

    fn kill(&mut self) {
        if self.reaped.is_none() {
            // SAFETY: signals this process's own child, not yet reaped (so its pid is not reused).
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            self.wait_with(0);
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { memory: 64 << 20, cpu: Duration::from_secs(1), wall: Duration::from_secs(20), max_answer: 1 << 20 }
    }

    #[test]
    fn answers_and_errors_come_back_whole() {
        let big = "é".repeat(100_000);
        assert_eq!(run(limits(), || Ok(big.clone())).unwrap(), Outcome::Done(Ok(big.clone())));
        assert_eq!(run(limits(), || Err("no".into())).unwrap(), Outcome::Done(Err("no".into())));
        assert_eq!(run(limits(), || Ok(String::new())).unwrap(), Outcome::Done(Ok(String::new())));
    }

    #[test]
    fn an_allocation_past_the_limit_ends_the_child_only() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let out = run(limits(), || Ok("x".repeat(1 << 30))).unwrap();
        assert_eq!(out, Outcome::OutOfMemory);
    }

    #[test]
    fn a_child_that_spins_is_stopped() {
        let out = run(limits(), || {
            let mut x = 0u64;
            loop {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
        .unwrap();
        assert_eq!(out, Outcome::OutOfTime);
    }

    #[test]
    fn a_panic_is_an_answer() {
        let out = run(limits(), || panic!("boom")).unwrap();
        assert_eq!(out, Outcome::Done(Err("the computation panicked".into())));
    }

    #[test]
    fn an_answer_too_large_is_refused() {
        let out = run(Limits { max_answer: 1000, ..limits() }, || Ok("x".repeat(5000))).unwrap();
        assert!(matches!(out, Outcome::Died(_)), "{out:?}");
    }
}
