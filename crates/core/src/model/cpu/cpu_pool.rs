//! The threads the CPU kernel splits a product over: the calling thread plus one helper per
//! other core.
//!
//! A decode step makes ~120 kernel calls, each 20-400 us long, separated by MLX ops of similar
//! length. A general pool called from outside its workers (rayon's `scope`/`join`) parks the
//! caller and wakes workers through futexes on every call; on this 2-core machine that
//! scheduling cost was a third of the step. Here the caller works too, and a helper spins for a
//! short while after each job before it parks, so calls that come in bursts hand over through
//! one atomic per helper.
//!
//! A job is cut into more chunks than there are threads. Each thread has a contiguous share of
//! them with its own counter (claims on it stay in the thread's cache), and when its share is
//! done it claims what is left of the others' through their counters, so a thread the OS
//! deschedules for a while simply ends up with fewer chunks instead of holding the others up at
//! the end of the call. A helper that has not started by the time the caller has finished every
//! chunk is not waited for at all: it must claim its ticket before it touches the job, and the
//! caller revokes a ticket still unclaimed.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a helper keeps looking for the next job before it parks.
const SPIN: Duration = Duration::from_micros(300);

/// One call's work as a helper sees it, given its share: claim chunks, its own first, until none
/// is left.
type Job = dyn Fn(usize) + Sync;

/// The phase in a slot's state (its low two bits; the ticket is the rest).
const IDLE: u64 = 0;
const POSTED: u64 = 1;
const CLAIMED: u64 = 2;
const PHASE: u64 = 3;

struct Slot {
    /// `ticket << 2 | phase`. The caller posts a ticket (IDLE -> POSTED) and takes back one that
    /// is still posted (POSTED -> IDLE); only the helper moves POSTED -> CLAIMED, then
    /// CLAIMED -> IDLE when it has finished. Tickets grow by one per call, so a helper's claim
    /// can only succeed on the ticket it saw.
    state: AtomicU64,
    /// The posted job (a `*const Job` split into two words: a fat pointer).
    job: [AtomicPtr<()>; 2],
    thread: OnceLock<Thread>,
}

impl Slot {
    fn new() -> Self {
        Self {
            state: AtomicU64::new(IDLE),
            job: [AtomicPtr::new(std::ptr::null_mut()), AtomicPtr::new(std::ptr::null_mut())],
            thread: OnceLock::new(),
        }
    }
}

pub struct Pool {
    helpers: Vec<Arc<Slot>>,
    /// One job at a time (a second caller, as when tests run in parallel threads, runs its
    /// chunks alone); holds the last ticket.
    busy: Mutex<u64>,
}

/// One thread's share of a [`Pool::run_chunks`] call: chunks `next..end`, claimed one at a time
/// by the thread itself, then by any other that has finished its own. A cache line of its own,
/// so claims on different shares do not contend.
#[repr(align(128))]
struct Share {
    next: AtomicUsize,
    end: usize,
}

/// The chunks one thread of a [`Pool::run_chunks`] call claims: those left of its own share,
/// then those left of the others', in turn.
pub struct Chunks<'a> {
    shares: &'a [Share],
    /// The share being claimed from, and how many shares (this one included) are still to try.
    at: usize,
    left: usize,
}

impl<'a> Chunks<'a> {
    fn of(shares: &'a [Share], thread: usize) -> Self {
        Self { shares, at: thread, left: shares.len() }
    }
}

impl Iterator for Chunks<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.left > 0 {
            let share = &self.shares[self.at];
            // Relaxed: the counters only have to hand out distinct chunks; what the chunks write
            // is published through the slots' states. The load spares a finished share's cache
            // line a write.
            if share.next.load(Ordering::Relaxed) < share.end {
                let c = share.next.fetch_add(1, Ordering::Relaxed);
                if c < share.end {
                    return Some(c);
                }
            }
            self.at = (self.at + 1) % self.shares.len();
            self.left -= 1;
        }
        None
    }
}

/// Threads beyond this many per core only add switching (and 100,000 of them stall the machine).
const MAX_THREADS_PER_CORE: usize = 4;

/// The pool's size for a `COHORT_CPU_THREADS` setting: a whole number from 1 to 4 threads a core;
/// anything else falls back to one per core (or is capped), with a warning in the log.
fn pool_threads(setting: Option<&str>, cores: usize) -> usize {
    let Some(text) = setting else { return cores };
    let most = cores.saturating_mul(MAX_THREADS_PER_CORE);
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=most).contains(&n) => n,
        Ok(n) if n > most => {
            tracing::warn!("COHORT_CPU_THREADS={n} is more than {most} ({MAX_THREADS_PER_CORE} a core): using {most}");
            most
        }
        _ => {
            tracing::warn!("COHORT_CPU_THREADS={text:?} is not a whole number >= 1: using one thread per core");
            cores
        }
    }
}

impl Pool {
    /// The process's pool: `COHORT_CPU_THREADS` threads in all when set, else one per core.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
            Pool::new(pool_threads(std::env::var("COHORT_CPU_THREADS").ok().as_deref(), cores))
        })
    }

    fn new(threads: usize) -> Self {
        let mut helpers = Vec::new();
        for i in 1..threads {
            let slot = Arc::new(Slot::new());
            let s = slot.clone();
            // The share a helper starts on is its place among the helpers that did start (the
            // caller's is 0), so the shares of a call always belong to running helpers.
            let share = helpers.len() + 1;
            match std::thread::Builder::new().name(format!("cohort-cpu-{i}")).spawn(move || helper_loop(&s, share)) {
                Ok(handle) => {
                    slot.thread.set(handle.thread().clone()).ok();
                    helpers.push(slot);
                }
                Err(e) => tracing::warn!("could not start CPU kernel helper {i}: {e}"),
            }
        }
        Self { helpers, busy: Mutex::new(0) }
    }

    /// Threads a job is split over (the caller included).
    pub fn threads(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Run chunks `0..chunks` of a job, each exactly once, on the calling thread and the
    /// helpers: every thread that takes part calls `job` once with the chunks it claims, one at
    /// a time, until none is left. Returns when every chunk has finished. Which thread runs a
    /// chunk depends on timing, so a chunk's result must not depend on it.
    pub fn run_chunks(&self, chunks: usize, job: &(dyn Fn(Chunks<'_>) + Sync)) {
        let Ok(mut ticket) = self.busy.try_lock() else {
            job(Chunks::of(&[Share { next: AtomicUsize::new(0), end: chunks }], 0));
            return;
        };
        // More helpers than chunks - 1 would leave a share empty.
        let helpers = &self.helpers[..chunks.saturating_sub(1).min(self.helpers.len())];
        let n = helpers.len() + 1;
        let shares: Vec<Share> =
            (0..n).map(|t| Share { next: AtomicUsize::new(t * chunks / n), end: (t + 1) * chunks / n }).collect();
        let claim = |thread: usize| job(Chunks::of(&shares, thread));
        *ticket += 1;
        let posted = *ticket << 2 | POSTED;
        let shared: &(dyn Fn(usize) + Sync) = &claim;
        // Declared after `claim`, `shares` and the ticket's guard, so dropped before them (on
        // return or unwinding): it revokes every ticket still posted and waits for every
        // claimed one to finish.
        let _collect = Collect { helpers, posted };
        // SAFETY: a helper reads the job only after claiming this ticket (POSTED -> CLAIMED) and
        // until it marks it finished, and `_collect` ends every ticket before the borrow of
        // `claim` (and of `shares` and `job` inside it) ends, so no helper uses a dead job.
        let raw: [*mut (); 2] =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), [*mut (); 2]>(shared) };
        for slot in helpers {
            // Every slot is IDLE here: the previous call collected its helpers before returning.
            slot.job[0].store(raw[0], Ordering::Relaxed);
            slot.job[1].store(raw[1], Ordering::Relaxed);
            // Release: a helper that claims the ticket (Acquire) sees the pointer stored above.
            slot.state.store(posted, Ordering::Release);
            if let Some(t) = slot.thread.get() {
                t.unpark();
            }
        }
        claim(0);
    }
}

/// The end of a [`Pool::run_chunks`] call: helpers that never claimed their ticket lose it,
/// those that did are waited for.
struct Collect<'a> {
    helpers: &'a [Arc<Slot>],
    posted: u64,
}

impl Drop for Collect<'_> {
    fn drop(&mut self) {
        let (idle, claimed) = (self.posted & !PHASE | IDLE, self.posted & !PHASE | CLAIMED);
        for slot in self.helpers {
            // A helper still at POSTED has not read the job: taking its ticket back means it never
            // will, so a helper descheduled for the whole call costs the caller nothing.
            // Relaxed on success: nothing the helper did needs to be seen. Acquire on failure:
            // the ticket may already be finished, and the chunks it ran must be visible.
            let Err(mut now) = slot.state.compare_exchange(self.posted, idle, Ordering::Relaxed, Ordering::Acquire)
            else {
                continue;
            };
            let mut spins = 0u32;
            while now == claimed {
                spins += 1;
                if spins < 4096 {
                    std::hint::spin_loop()
                } else {
                    std::thread::yield_now()
                }
                // Acquire: pairs with the helper's Release when it finishes.
                now = slot.state.load(Ordering::Acquire);
            }
        }
    }
}

fn helper_loop(slot: &Slot, share: usize) {
    loop {
        let mut since = Instant::now();
        let mut spins = 0u32;
        let posted = loop {
            let s = slot.state.load(Ordering::Relaxed);
            if s & PHASE == POSTED {
                break s;
            }
            spins += 1;
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
            } else if since.elapsed() > SPIN {
                std::thread::park_timeout(Duration::from_millis(50));
                since = Instant::now();
            }
        };
        // Claim the ticket before touching the job; failing means the caller took it back.
        let claimed = posted & !PHASE | CLAIMED;
        if slot.state.compare_exchange(posted, claimed, Ordering::Acquire, Ordering::Relaxed).is_err() {
            continue;
        }
        let raw = [slot.job[0].load(Ordering::Relaxed), slot.job[1].load(Ordering::Relaxed)];
        // SAFETY: the caller stored a live `*const Job` before posting the ticket (Release, seen
        // through the claim's Acquire), and keeps it alive until this ticket is marked finished.
        let job: &Job = unsafe { &*std::mem::transmute::<[*mut (); 2], *const Job>(raw) };
        job(share);
        // Release: the caller's Acquire sees everything the chunks wrote.
        slot.state.store(posted & !PHASE | IDLE, Ordering::Release);
    }
}

/// An output buffer the chunks of one [`Pool::run_chunks`] write into, each its own disjoint
/// elements.
pub struct Disjoint(pub *mut f32);

// SAFETY: chunks only write disjoint elements, and the buffer outlives the call that uses it.
unsafe impl Sync for Disjoint {}

#[cfg(test)]
mod tests {

    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn the_thread_setting_is_bounded_and_checked() {
        assert_eq!(pool_threads(None, 2), 2);
        assert_eq!(pool_threads(Some("3"), 2), 3);
        assert_eq!(pool_threads(Some("100000"), 2), 8);
        assert_eq!(pool_threads(Some("0"), 2), 2);
        assert_eq!(pool_threads(Some("-4"), 2), 2);
        assert_eq!(pool_threads(Some("lots"), 16), 16);
    }

    /// Runs `chunks` chunks on `pool`, each counting its own runs (and sleeping first when it
    /// is `slow`), and checks that every one ran exactly once.
    fn each_once(pool: &Pool, chunks: usize, slow: Option<usize>) {
        let runs: Vec<AtomicU32> = (0..chunks).map(|_| AtomicU32::new(0)).collect();
        pool.run_chunks(chunks, &|mine| {
            for c in mine {
                if slow == Some(c) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                runs[c].fetch_add(1, Ordering::Relaxed);
            }
        });
        let runs: Vec<u32> = runs.iter().map(|r| r.load(Ordering::Relaxed)).collect();
        assert!(runs.iter().all(|&r| r == 1), "{chunks} chunks on {} threads ran {runs:?} times", pool.threads());
    }

    #[test]
    fn every_chunk_runs_exactly_once_whatever_the_counts() {
        for threads in [1, 2, 3, 4, 8] {
            let pool = Pool::new(threads);
            for chunks in [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 100] {
                for _ in 0..200 {
                    each_once(&pool, chunks, None);
                }
            }
        }
    }

    #[test]
    fn a_slow_chunk_still_leaves_every_chunk_run_once() {
        for threads in [2, 3] {
            let pool = Pool::new(threads);
            for (chunks, slow) in [(2, 0), (2, 1), (8, 0), (8, 5), (8, 7), (33, 3)] {
                each_once(&pool, chunks, Some(slow));
            }
        }
    }

    /// A helper that never starts (a slot with no thread, as a descheduled one looks) does not
    /// hold the caller up, and once it does start it never runs the job it was too late for.
    #[test]
    fn the_caller_does_not_wait_for_a_helper_that_has_not_started() {
        let pool: &'static Pool =
            Box::leak(Box::new(Pool { helpers: vec![Arc::new(Slot::new())], busy: Mutex::new(0) }));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for _ in 0..100 {
                each_once(pool, 8, None);
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("the caller waited for a helper that never started");
        let slot = pool.helpers[0].clone();
        assert_eq!(slot.state.load(Ordering::Relaxed) & PHASE, IDLE, "an unclaimed ticket was left posted");
        std::thread::spawn(move || helper_loop(&slot, 1));
        std::thread::sleep(Duration::from_millis(5));
        for _ in 0..100 {
            each_once(pool, 8, None);
        }
        each_once(pool, 8, Some(0));
    }
}
