//! The engine handle: the only way in. `submit` returns a stream of row events, `cancel` flips a
//! row's flag (polled by the owner), `snapshot` copies the telemetry. Everything MLX lives on the
//! owner thread (src/engine/owner.rs).

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result};

use super::loader::Loaded;
use super::owner::{EngineSetup, OwnerCommand, run_owner};
use super::request::Request;
use super::row::{CancelFlag, CancelRegistry, RowEvent};
use super::telemetry::{SharedTelemetry, Telemetry};

/// A submitted request: its events arrive on `events`, ending with exactly one `Done`.
pub struct Submission {
    pub id: String,
    pub events: mpsc::Receiver<RowEvent>,
    pub cancel: CancelFlag,
}

pub struct EngineHandle {
    tx: mpsc::Sender<OwnerCommand>,
    telemetry: SharedTelemetry,
    cancels: CancelRegistry,
    thread: Option<JoinHandle<()>>,
    pub info: super::owner::EngineInfo,
}

impl EngineHandle {
    /// Start the owner thread; `load` runs on it (MLX state never crosses threads). Returns once
    /// the model has loaded, or with the loader's error.
    pub fn start(load: impl FnOnce() -> Result<Loaded> + Send + 'static, setup: EngineSetup) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let telemetry: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let tel = telemetry.clone();
        let thread = std::thread::Builder::new()
            .name("cohort-model-owner".into())
            .spawn(move || run_owner(load, setup, rx, tel, ready_tx))
            .context("cannot start the model-owner thread")?;
        let info = ready_rx.recv().context("the model-owner thread ended during load")??;
        Ok(Self { tx, telemetry, cancels: Default::default(), thread: Some(thread), info })
    }

    pub fn submit(&self, req: Request) -> Submission {
        let (events_tx, events) = mpsc::channel();
        let cancel = CancelFlag::default();
        self.cancels.register(&req.id, &cancel);
        let id = req.id.clone();
        if self
            .tx
            .send(OwnerCommand::Submit {
                req,
                cancel: cancel.clone(),
                events: events_tx.clone(),
                arrived: Instant::now(),
            })
            .is_err()
        {
            let _ = events_tx.send(RowEvent::Done(Box::new(super::request::RequestResult::error(
                &id,
                "the engine has stopped".into(),
            ))));
        }
        Submission { id, events, cancel }
    }

    /// Cancel a request by id (queued, prefilling or decoding); unknown ids are ignored.
    pub fn cancel(&self, id: &str) {
        self.cancels.cancel(id);
    }

    pub fn snapshot(&self) -> Telemetry {
        let mut t = self.telemetry.lock().map(|t| t.clone()).unwrap_or_default();
        t.memory = crate::platform::backend::MemoryStats::read();
        t
    }

    /// Seal every request alone (serial) or batch again.
    pub fn set_serial(&self, on: bool) {
        let _ = self.tx.send(OwnerCommand::SetSerial(on));
    }

    /// Requests the handle still keeps an entry for.
    pub fn tracked(&self) -> usize {
        self.cancels.len()
    }

    /// Test hook: fail the Nth cohort cycle the owner runs from now.
    #[cfg(feature = "testing")]
    pub fn inject_fault_at_cycle(&self, n: usize) {
        let _ = self.tx.send(OwnerCommand::InjectFault(n));
    }
}

impl Drop for EngineHandle {
    fn drop(&mut self) {
        let _ = self.tx.send(OwnerCommand::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
