//! The connections the server holds: each counted while open and marked busy while a request
//! on it runs (until its response's last byte). When the table is full (`--max-connections`,
//! a little under the process's descriptor limit), the connection that has been idle longest is
//! closed to make room, so clients that connect and send nothing, or hold keep-alive
//! connections open, can never keep a normal request out; hyper's header timeout closes such
//! connections anyway after `--header-timeout-s`.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, HttpBody};
use tokio::sync::Notify;

/// Descriptors kept back from connections: the model's files, the log, the listener, MLX's own.
const RESERVED_DESCRIPTORS: u64 = 64;
/// The fewest connections `--max-connections` defaults to, whatever the descriptor limit.
const MIN_CONNECTIONS: u64 = 16;

pub struct Connections {
    table: Mutex<Table>,
    max: usize,
    shed: AtomicU64,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Entry>,
}

struct Entry {
    busy: usize,
    idle_since: Instant,
    close: Arc<Notify>,
}

impl Connections {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { table: Mutex::new(Table::default()), max: max.max(1), shed: AtomicU64::new(0) })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a connection just accepted; over the limit, the longest-idle other one is told to
    /// close. Returns the connection's place (dropped when it ends) and what tells it to close.
    pub fn open(self: &Arc<Self>) -> (Open, Arc<Notify>) {
        let close = Arc::new(Notify::new());
        let (id, over) = {
            let mut t = self.table();
            t.next += 1;
            let id = t.next;
            t.open.insert(id, Entry { busy: 0, idle_since: Instant::now(), close: close.clone() });
            (id, t.open.len() > self.max)
        };
        if over {
            self.shed_one(Some(id));
        }
        (Open { conns: self.clone(), id }, close)
    }

    /// Tell the connection idle longest (never `keep`) to close. False when every one is busy.
    pub fn shed_one(&self, keep: Option<u64>) -> bool {
        let t = self.table();
        let oldest = t
            .open
            .iter()
            .filter(|(id, e)| e.busy == 0 && Some(**id) != keep)
            .min_by_key(|(_, e)| e.idle_since)
            .map(|(_, e)| e.close.clone());
        drop(t);
        match oldest {
            Some(close) => {
                close.notify_one();
                self.shed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("closed the longest-idle connection to make room");
                true
            }
            None => false,
        }
    }

    /// Tell every idle connection to close (the drain: nothing new will be served on them).
    pub fn close_idle(&self) {
        for e in self.table().open.values().filter(|e| e.busy == 0) {
            e.close.notify_one();
        }
    }

    pub fn count(&self) -> usize {
        self.table().open.len()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections closed to make room, since the server started.
    pub fn shed_total(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }
}

/// A connection's place in the table; leaving it (the connection ended) frees the place.
pub struct Open {
    conns: Arc<Connections>,
    id: u64,
}

impl Open {
    /// Mark the connection busy until the returned guard goes (with the response's body).
    pub fn busy(&self) -> Busy {
        if let Some(e) = self.conns.table().open.get_mut(&self.id) {
            e.busy += 1;
        }
        Busy { conns: self.conns.clone(), id: self.id }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.conns.table().open.remove(&self.id);
    }
}

pub struct Busy {
    conns: Arc<Connections>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(e) = self.conns.table().open.get_mut(&self.id) {
            e.busy = e.busy.saturating_sub(1);
            e.idle_since = Instant::now();
        }
    }
}

/// A response body that keeps its connection marked busy until it is sent or dropped.
pub struct BusyBody {
    inner: Body,
    _busy: Busy,
}

impl BusyBody {
    pub fn wrap(inner: Body, busy: Busy) -> Body {
        Body::new(Self { inner, _busy: busy })
    }
}

impl HttpBody for BusyBody {
    type Data = <Body as HttpBody>::Data;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The connection limit when none is given: the process's descriptor limit (raised to its hard
/// limit first, as far as the system allows) less what the rest of the process needs.
pub fn default_max_connections() -> usize {
    let limit = raise_descriptor_limit();
    usize::try_from(limit.saturating_sub(RESERVED_DESCRIPTORS).max(MIN_CONNECTIONS)).unwrap_or(usize::MAX)
}

/// Raise the soft descriptor limit to the hard one; returns the soft limit in force after.
#[cfg(unix)]
fn raise_descriptor_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    lim.rlim_cur
}

#[cfg(not(unix))]
fn raise_descriptor_limit() -> u64 {
    1024
}

/// Whether an accept failed for want of descriptors (a place may be made by shedding one).
pub fn out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == libc::EMFILE || code == libc::ENFILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_closes_the_longest_idle_connection_never_a_busy_one() {
        let conns = Connections::new(2);
        let (a, close_a) = conns.open();
        let (b, close_b) = conns.open();
        let busy_a = a.busy();
        // Full: the third asks for room; `a` is busy, so `b` goes.
        let (_c, close_c) = conns.open();
        assert_eq!(conns.shed_total(), 1);
        let woken = |n: &Arc<Notify>| futures_ready(n);
        assert!(!woken(&close_a) && woken(&close_b) && !woken(&close_c));
        drop(b);
        drop(busy_a); // `a` idles from now, after `c`
        let (_d, _) = conns.open();
        assert!(woken(&close_c), "c has idled longest");
        assert_eq!(conns.count(), 3, "a, c and d are open until their tasks end");
        drop(a);
        assert_eq!(conns.count(), 2);
    }

    /// Whether a notification is stored (a permit the connection's task would take at once).
    fn futures_ready(n: &Arc<Notify>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let fut = n.notified();
        tokio::pin!(fut);
        fut.poll(&mut cx).is_ready()
    }
}
