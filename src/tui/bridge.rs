//! The event loop's side of the engine: submits requests, cancels them, and drains every
//! in-flight request's events with `try_recv` (never blocking the UI). Requests sent while the
//! model is still loading are held and submitted once it is ready, or failed if it never is.
//! The engine is in this process, or a `cohort serve` the TUI is attached to: both give the
//! same submissions and telemetry.

use std::sync::mpsc::TryRecvError;
use std::time::Instant;

use super::action::Action;
use crate::client::RemoteEngine;
use crate::engine::api::RowEvent;
use crate::engine::api::Telemetry;
use crate::engine::api::{EngineHandle, Submission};
use crate::engine::api::{FinishReason, Request, RequestResult};

struct Live {
    pane: u32,
    id: String,
    events: std::sync::mpsc::Receiver<RowEvent>,
}

/// Where requests go.
pub enum Backend {
    Local(EngineHandle),
    Remote(RemoteEngine),
}

impl Backend {
    fn submit(&self, request: Request) -> Submission {
        match self {
            Backend::Local(e) => e.submit(request),
            Backend::Remote(r) => r.submit(request),
        }
    }

    fn cancel(&self, id: &str) {
        match self {
            Backend::Local(e) => e.cancel(id),
            Backend::Remote(r) => r.cancel(id),
        }
    }

    fn telemetry(&self) -> Option<Telemetry> {
        match self {
            Backend::Local(e) => Some(e.snapshot()),
            Backend::Remote(r) => r.snapshot(),
        }
    }
}

#[derive(Default)]
pub struct Bridge {
    engine: Option<Backend>,
    /// Sent before the engine was ready.
    held: Vec<(u32, Request)>,
    live: Vec<Live>,
    /// Events made up here (a held request cancelled or failed), delivered on the next drain.
    synthetic: Vec<(u32, RowEvent)>,
    load_error: Option<String>,
}

impl Bridge {
    pub fn submit(&mut self, pane: u32, request: Request) {
        match (&self.engine, &self.load_error) {
            (Some(engine), _) => {
                let sub = engine.submit(request);
                self.live.push(Live { pane, id: sub.id, events: sub.events });
            }
            (None, Some(err)) => {
                let result = RequestResult::error(&request.id, format!("no model: {err}"));
                self.synthetic.push((pane, RowEvent::Done(Box::new(result))));
            }
            (None, None) => self.held.push((pane, request)),
        }
    }

    /// Cancel by request id: a held request ends here; a submitted one is flagged for the owner,
    /// which ends it at its next poll point (its Done then arrives as usual).
    pub fn cancel(&mut self, id: &str) {
        if let Some(i) = self.held.iter().position(|(_, r)| r.id == id) {
            let (pane, request) = self.held.remove(i);
            let result = RequestResult::ended(&request.id, FinishReason::Cancelled);
            self.synthetic.push((pane, RowEvent::Done(Box::new(result))));
        } else if let Some(engine) = &self.engine {
            engine.cancel(id);
        }
    }

    /// The model loaded (or the server answered): submit what was held.
    pub fn attach(&mut self, engine: Backend) {
        self.engine = Some(engine);
        self.load_error = None;
        for (pane, request) in std::mem::take(&mut self.held) {
            self.submit(pane, request);
        }
    }

    /// The model failed to load: fail what was held, and what is sent later.
    pub fn fail(&mut self, message: &str) {
        self.load_error = Some(message.to_owned());
        for (pane, request) in std::mem::take(&mut self.held) {
            self.submit(pane, request);
        }
    }

    /// Take the engine out (to restart it); requests sent meanwhile are held.
    pub fn detach(&mut self) -> Option<Backend> {
        self.load_error = None;
        self.engine.take()
    }

    /// The engine in use, once it has loaded.
    pub fn backend(&self) -> Option<&Backend> {
        self.engine.as_ref()
    }

    pub fn is_remote(&self) -> bool {
        matches!(self.engine, Some(Backend::Remote(_)))
    }

    /// Every event that has arrived, as actions, in arrival order per request.
    pub fn drain(&mut self) -> Vec<Action> {
        let at = Instant::now();
        let mut actions: Vec<Action> =
            self.synthetic.drain(..).map(|(pane, event)| Action::Row { pane, event, at }).collect();
        self.live.retain(|live| {
            loop {
                match live.events.try_recv() {
                    Ok(event) => {
                        let done = matches!(event, RowEvent::Done(_));
                        actions.push(Action::Row { pane: live.pane, event, at });
                        if done {
                            return false;
                        }
                    }
                    Err(TryRecvError::Empty) => return true,
                    Err(TryRecvError::Disconnected) => {
                        let result =
                            RequestResult::error(&live.id, "the engine stopped before this answer finished".into());
                        actions.push(Action::Row { pane: live.pane, event: RowEvent::Done(Box::new(result)), at });
                        return false;
                    }
                }
            }
        });
        actions
    }

    pub fn telemetry(&self) -> Option<Telemetry> {
        self.engine.as_ref().and_then(Backend::telemetry)
    }

    /// Requests not finished yet (held or submitted).
    pub fn pending(&self) -> usize {
        self.held.len() + self.live.len() + self.synthetic.len()
    }
}
