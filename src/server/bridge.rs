//! From the engine's row events (a std channel fed by the owner thread) to the async handlers.
//! One blocking task per request forwards events until the request's result; if nobody listens
//! any more (the client went away) it cancels the row, which the lane acts on at its next cycle
//! boundary, and still waits for the result so the request is accounted for.

use std::sync::Arc;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::api::Endpoint;
use super::state::AppState;
use crate::engine::handle::Submission;
use crate::engine::request::RequestResult;
use crate::engine::row::RowEvent;

/// How often a quiet request checks whether its client is still there. A cycle on the CPU takes
/// 10-40 ms, so a disconnect is seen within a cycle or two.
const LISTEN: Duration = Duration::from_millis(20);

/// Forward `sub`'s events; the last one is always a `Done`.
pub fn forward(sub: Submission, endpoint: Endpoint, state: Arc<AppState>) -> UnboundedReceiver<RowEvent> {
    let (tx, rx) = unbounded_channel();
    tokio::task::spawn_blocking(move || {
        let mut listening = true;
        loop {
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
            if let RowEvent::Done(r) = &ev {
                // Accounted for before the client hears, so whoever it tells sees it gone.
                state.metrics.record(endpoint, r, !listening);
                state.release(&sub.id);
                let _ = tx.send(ev);
                return;
            }
            if listening && tx.send(ev).is_err() {
                listening = false;
                sub.cancel.cancel();
            }
        }
    });
    rx
}
