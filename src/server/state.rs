//! What every handler shares: the engine (or why there is none yet), the profile's defaults,
//! the requests in flight, and whether the server is draining.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::api::Defaults;
use super::connections::Connections;
use super::error::ApiError;
use super::metrics::Metrics;
use crate::engine::api::CancelFlag;
use crate::engine::api::EngineHandle;

/// The engine as the server sees it: loading in the background, ready, or failed to load.
pub enum EngineSlot {
    Loading,
    Ready(Box<EngineHandle>),
    Failed(String),
}

/// Limits a server owes its clients.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Requests in flight (decoding or waiting for a row) beyond which new ones get 503.
    pub capacity: usize,
    pub max_body_bytes: usize,
    /// Seconds a 503 asks the client to wait.
    pub retry_after_s: u64,
    /// A connection must send a request's whole header within this, counted from when it
    /// opened or its last response ended (so it also bounds keep-alive idling).
    pub header_timeout: std::time::Duration,
    /// A request's body must have arrived whole within this once its header has.
    pub body_timeout: std::time::Duration,
    /// A request still running this long after it came is cancelled (`--request-timeout-s`).
    pub request_timeout: std::time::Duration,
    /// Connections held at once; past it the longest-idle one is closed ([`Connections`]).
    pub max_connections: usize,
}

pub struct AppState {
    pub engine: RwLock<EngineSlot>,
    /// The name `/v1/models` lists and answers carry.
    pub model_id: String,
    pub defaults: Defaults,
    pub limits: Limits,
    /// The bearer token /v1 requires, if any.
    pub api_key: Option<String>,
    /// Requests submitted and not yet ended, by id (a drain cancels them through these).
    /// (None between taking the place and the engine's accepting the request).
    in_flight: Mutex<HashMap<String, Option<CancelFlag>>>,
    draining: AtomicBool,
    next: AtomicU64,
    /// Makes ids unique across restarts of the server.
    epoch: u64,
    pub metrics: Metrics,
    pub connections: Arc<Connections>,
}

impl AppState {
    pub fn new(model_id: String, defaults: Defaults, limits: Limits, api_key: Option<String>) -> Self {
        Self {
            engine: RwLock::new(EngineSlot::Loading),
            model_id,
            defaults,
            api_key,
            in_flight: Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            next: AtomicU64::new(0),
            epoch: unix_now(),
            metrics: Metrics::default(),
            connections: Connections::new(limits.max_connections),
            limits,
        }
    }

    pub fn set_engine(&self, slot: EngineSlot) {
        self.replace_engine(slot);
    }

    /// Put `slot` in the engine's place and return what was there.
    pub fn replace_engine(&self, slot: EngineSlot) -> EngineSlot {
        std::mem::replace(&mut *self.engine.write().unwrap_or_else(|e| e.into_inner()), slot)
    }

    /// A fresh response id, e.g. `chatcmpl-674f1c2a-17`.
    pub fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}-{:x}-{}", self.epoch, self.next.fetch_add(1, Ordering::Relaxed))
    }

    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Take a place for request `id`, or say why not (draining, or the queue is full).
    pub fn admit(&self, id: &str) -> Result<(), ApiError> {
        if self.is_draining() {
            return Err(ApiError::unavailable("the server is shutting down", self.limits.retry_after_s));
        }
        let mut live = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if live.len() >= self.limits.capacity {
            return Err(ApiError::unavailable(
                format!("the queue is full ({} requests in flight); try again shortly", live.len()),
                self.limits.retry_after_s,
            ));
        }
        live.insert(id.to_owned(), None);
        Ok(())
    }

    /// The engine took request `id`: this flag cancels it.
    pub fn submitted(&self, id: &str, cancel: CancelFlag) {
        if let Some(slot) = self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).get_mut(id) {
            *slot = Some(cancel);
        }
    }

    /// The request ended (its result is in, whether or not anyone was still listening).
    pub fn release(&self, id: &str) {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    pub fn cancel_all(&self) {
        for flag in self.in_flight.lock().unwrap_or_else(|e| e.into_inner()).values().flatten() {
            flag.cancel();
        }
    }
}

pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
