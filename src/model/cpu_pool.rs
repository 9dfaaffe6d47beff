//! The threads the CPU kernel splits a product over: the calling thread plus one helper per
//! other core.
//!
//! A decode step makes ~120 kernel calls, each 20-400 us long, separated by MLX ops of similar
//! length. A general pool called from outside its workers (rayon's `scope`/`join`) parks the
//! caller and wakes workers through futexes on every call; on this 2-core machine that
//! scheduling cost was a third of the step. Here the caller computes its own share, and a
//! helper spins for a short while after each job before it parks, so calls that come in bursts
//! hand over through two atomics.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a helper keeps looking for the next job before it parks.
const SPIN: Duration = Duration::from_micros(300);

type Job = dyn Fn(usize) + Sync;

struct Slot {
    /// Jobs posted to this helper; it runs each once, then publishes the count in `done`.
    posted: AtomicU64,
    done: AtomicU64,
    /// The posted job (a `*const Job` split into two words: a fat pointer).
    job: [AtomicPtr<()>; 2],
    thread: OnceLock<Thread>,
}

pub struct Pool {
    helpers: Vec<Arc<Slot>>,
    /// One job at a time: a second caller (tests run in parallel threads) runs its parts alone.
    busy: std::sync::Mutex<()>,
}

impl Pool {
    /// The process's pool: `COHORT_CPU_THREADS` threads in all when set, else one per core.
    pub fn global() -> &'static Pool {
        static POOL: OnceLock<Pool> = OnceLock::new();
        POOL.get_or_init(|| {
            let threads = std::env::var("COHORT_CPU_THREADS")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&n| n > 0)
                .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
            Pool::new(threads)
        })
    }

    fn new(threads: usize) -> Self {
        let helpers = (1..threads)
            .filter_map(|i| {
                let slot = Arc::new(Slot {
                    posted: AtomicU64::new(0),
                    done: AtomicU64::new(0),
                    job: [AtomicPtr::new(std::ptr::null_mut()), AtomicPtr::new(std::ptr::null_mut())],
                    thread: OnceLock::new(),
                });
                let s = slot.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("cohort-cpu-{i}"))
                    .spawn(move || helper_loop(&s, i))
                    .map_err(|e| tracing::warn!("could not start CPU kernel helper {i}: {e}"))
                    .ok()?;
                slot.thread.set(handle.thread().clone()).ok();
                Some(slot)
            })
            .collect();
        Self { helpers, busy: std::sync::Mutex::new(()) }
    }

    /// Threads a job is split over (the caller included).
    pub fn threads(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Run `job(0)` on the calling thread and `job(i)` on helper i, for i < `parts`; returns when
    /// every part has finished. Parts beyond the pool's size run on the caller.
    pub fn run(&self, parts: usize, job: &(dyn Fn(usize) + Sync)) {
        let Ok(_turn) = self.busy.try_lock() else {
            (0..parts).for_each(job);
            return;
        };
        let helpers = &self.helpers[..parts.saturating_sub(1).min(self.helpers.len())];
        // SAFETY: the job is only read by helpers until they publish `done`, and this function
        // does not return before every posted part is done, so the borrow outlives every use.
        let raw: [*mut (); 2] = unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), [*mut (); 2]>(job) };
        let mut tickets = Vec::with_capacity(helpers.len());
        for slot in helpers {
            slot.job[0].store(raw[0], Ordering::Relaxed);
            slot.job[1].store(raw[1], Ordering::Relaxed);
            tickets.push(slot.posted.fetch_add(1, Ordering::SeqCst) + 1);
            if let Some(t) = slot.thread.get() {
                t.unpark();
            }
        }
        job(0);
        for i in helpers.len() + 1..parts {
            job(i);
        }
        for (slot, ticket) in helpers.iter().zip(tickets) {
            let mut spins = 0u32;
            while slot.done.load(Ordering::Acquire) < ticket {
                spins += 1;
                if spins < 4096 { std::hint::spin_loop() } else { std::thread::yield_now() }
            }
        }
    }
}

fn helper_loop(slot: &Slot, index: usize) {
    let mut seen = 0u64;
    loop {
        let mut since = Instant::now();
        let mut spins = 0u32;
        let posted = loop {
            let p = slot.posted.load(Ordering::SeqCst);
            if p > seen {
                break p;
            }
            spins += 1;
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
            } else if since.elapsed() > SPIN {
                std::thread::park_timeout(Duration::from_millis(50));
                since = Instant::now();
            }
        };
        let raw = [slot.job[0].load(Ordering::Relaxed), slot.job[1].load(Ordering::Relaxed)];
        // SAFETY: `run` stored a live `*const Job` before bumping `posted` (SeqCst orders it) and
        // keeps it alive until `done` reaches this ticket.
        let job: &Job = unsafe { &*std::mem::transmute::<[*mut (); 2], *const Job>(raw) };
        job(index);
        seen = posted;
        slot.done.store(posted, Ordering::Release);
    }
}

/// An output buffer the parts of one [`Pool::run`] write into, each its own disjoint elements.
pub struct Disjoint(pub *mut f32);

// SAFETY: parts only write disjoint elements, and the buffer outlives the `run` that uses it.
unsafe impl Sync for Disjoint {}

/// Whether a host route serves: on MLX's CPU backend, unless the environment variable `switch`
/// is "0".
pub fn host_route_on(switch: &str) -> bool {
    crate::engine::runtime::Backend::detect() == crate::engine::runtime::Backend::Cpu
        && std::env::var(switch).map(|v| v != "0").unwrap_or(true)
}
