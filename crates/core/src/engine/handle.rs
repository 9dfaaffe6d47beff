//! The engine handle: the only way in. `submit` returns a stream of row events, `cancel` flips a
//! row's flag (polled by the owner), `snapshot` copies the telemetry. Everything MLX lives on the
//! owner thread (engine/owner.rs).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result};

use super::intake::run_intake;
use super::loader::Loaded;
use super::owner::{EngineSetup, OwnerCommand, Ready, run_owner};
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
    /// The intake, then the owner: joined in that order, so the owner sees every command the
    /// intake passed on before its sender goes.
    threads: Vec<JoinHandle<()>>,
    pub info: super::owner::EngineInfo,
}

/// Model-owner threads that have not ended. One that runs when the process ends (a model still
/// loading when the TUI quit) is inside MLX, and an exit that runs MLX's static destructors under
/// it crashed (SIGSEGV, "double free or corruption") or hung: see [`owners_running`].
static OWNERS: AtomicUsize = AtomicUsize::new(0);

/// Counts one owner thread for as long as it runs, ending included when it unwinds.
struct OwnerRunning;

impl Drop for OwnerRunning {
    fn drop(&mut self) {
        OWNERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How many model-owner threads still run: where any does, the process must end without tearing
/// MLX down under it (`main` then leaves through `_exit`, after everything of cohort's is flushed).
pub fn owners_running() -> usize {
    OWNERS.load(Ordering::SeqCst)
}

impl EngineHandle {
    /// Start the owner thread; `load` runs on it (MLX state never crosses threads). Returns once
    /// the model has loaded, or with the loader's error.
    pub fn start(load: impl FnOnce() -> Result<Loaded> + Send + 'static, setup: EngineSetup) -> Result<Self> {
        let (tx, rx) = mpsc::channel();
        let telemetry: SharedTelemetry = Arc::new(Mutex::new(Telemetry::default()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let tel = telemetry.clone();
        OWNERS.fetch_add(1, Ordering::SeqCst);
        let thread = std::thread::Builder::new()
            .name("cohort-model-owner".into())
            .spawn(move || {
                let _running = OwnerRunning;
                run_owner(load, setup, rx, tel, ready_tx)
            })
            .inspect_err(|_| {
                OWNERS.fetch_sub(1, Ordering::SeqCst);
            })
            .context("cannot start the model-owner thread")?;
        let Ready { info, tokenizer, limits } =
            ready_rx.recv().context("the model-owner thread ended during load")??;
        let (intake_tx, intake_rx) = mpsc::channel();
        let intake = std::thread::Builder::new()
            .name("cohort-intake".into())
            .spawn(move || run_intake(tokenizer, limits, intake_rx, tx))
            .context("cannot start the intake thread")?;
        Ok(Self { tx: intake_tx, telemetry, cancels: Default::default(), threads: vec![intake, thread], info })
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

    /// Keep the prompt cache in `path` (a TUI session's folder): the entries saved there are
    /// added now, where this engine made them alike, and the cache is written there when the
    /// engine stops. The receiver hears a sentence for the user once the file was read (None:
    /// nothing to say).
    pub fn keep_cache_in(&self, path: std::path::PathBuf) -> mpsc::Receiver<Option<String>> {
        let (reply, said) = mpsc::channel();
        let _ = self.tx.send(OwnerCommand::CacheFile { path, reply });
        said
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
        // The intake ends when this sender goes, after passing the shutdown on.
        let (dead, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, dead));
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
