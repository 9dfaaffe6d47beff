//! From the engine's row events (a std channel fed by the owner thread) to the async handlers.
//! One blocking task per request forwards events until the request's result; if nobody listens
//! any more (the client went away) it cancels the row, which the lane acts on at its next cycle
//! boundary, and still waits for the result so the request is accounted for.

use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::api::Endpoint;
use super::state::AppState;
use crate::engine::api::RowEvent;
use crate::engine::api::Submission;
use crate::engine::api::{FinishReason, RequestResult};

/// How often a quiet request checks whether its client is still there. A cycle on the CPU takes
/// 10-40 ms, so a disconnect is seen within a cycle or two.
const LISTEN: Duration = Duration::from_millis(20);

/// Forward `sub`'s events; the last one is always a `Done`. A request still running
/// `--request-timeout-s` after it came is cancelled, and its result says so in `error`.
pub fn forward(sub: Submission, endpoint: Endpoint, state: Arc<AppState>) -> UnboundedReceiver<RowEvent> {
    let (tx, rx) = unbounded_channel();
    let limit = state.limits.request_timeout;
    tokio::task::spawn_blocking(move || {
        let mut listening = true;
        let deadline = Instant::now().checked_add(limit);
        let mut timed_out = false;
        loop {
            if !timed_out && deadline.is_some_and(|d| Instant::now() >= d) {
                timed_out = true;
                sub.cancel.cancel();
            }
            let ev = match sub.events.recv_timeout(LISTEN) {
                Ok(ev) => ev,
                Err(RecvTimeoutError::Timeout) => {
                    if listening && tx.is_closed() {
                        listening = false;
                        sub.cancel.cancel();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => RowEvent::Done(Box::new(RequestResult::error(
                    &sub.id,
                    "the engine stopped before finishing this request".into(),
                ))),
            };
            let ev = match ev {
                RowEvent::Done(mut r) => {
                    if timed_out && r.finish_reason == FinishReason::Cancelled && r.error.is_none() {
                        r.error = Some(format!(
                            "the request ran past this server's limit of {} s (--request-timeout-s) and was cancelled",
                            limit.as_secs_f64()
                        ));
                    }
                    // Accounted for before the client hears, so whoever it tells sees it gone.
                    state.metrics.record(endpoint, &r, !listening);
                    state.release(&sub.id);
                    let _ = tx.send(RowEvent::Done(r));
                    return;
                }
                other => other,
            };
            if listening && tx.send(ev).is_err() {
                listening = false;
                sub.cancel.cancel();
            }
        }
    });
    rx
}
