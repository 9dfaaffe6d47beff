//! The model-owner thread: the one thread that touches MLX. It loads the model, decides the
//! generation mode (the exactness gate) and the cohort route (the construction check), then
//! either runs the continuous lane (requests join and leave at cycle boundaries) or seals
//! pending requests into solo runs or fixed-width cohorts, and delivers every row's events.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, mpsc};
use std::time::Instant;

use anyhow::Result;

use super::cohort::{CohortConfig, FIXED_WIDTH, run_cohort};
use super::construction::{check_batched, packed_prompt_check};
use super::lane::{Lane, LaneConfig, Pending, PromptCacheSetup};
use super::loader::Loaded;
use super::prepare::{PromptLimits, prepare};
use super::probe;
use super::prompt_cache::check::split_read_check;
use super::prompt_cache::decoded::decode_read_check;
use super::prompt_cache::persist::{MadeBy, Restored};
use super::prompt_cache::{AnswerPolicy, Reuse};
use super::request::{Request, RequestResult};
use super::row::{CancelFlag, RowEvent, RowRun};
use super::scheduler::{Admission, Numerics, SchedulerConfig};
use super::solo::{GenerationMode, route_id, run_solo};
use super::telemetry::{FinalizeScope, SharedTelemetry};
use crate::model::forward::LanguageModel;
use crate::model::routes;
use crate::model::routes::BlockRoute;
use crate::model::text::tokenizer::TextTokenizer;

#[derive(Debug, Clone)]
pub struct EngineSetup {
    pub scheduler: SchedulerConfig,
    pub numerics: Numerics,
    /// None = MTP when the model has MTP weights and the gate allows.
    pub mode: Option<GenerationMode>,
    /// Run every request alone, one after another (the benchmark's serial arm).
    pub serial: bool,
    /// Keep MTP on the batched route whatever the exactness probe finds (`COHORT_MTP_ALLOW_INEXACT`,
    /// read by the command that starts the engine: [`super::probe::allow_inexact`]).
    pub allow_inexact: bool,
}

/// What the engine decided at start-up.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineInfo {
    pub dir: PathBuf,
    pub mode: GenerationMode,
    pub numerics: Numerics,
    pub probe: Option<String>,
    pub block_route: BlockRoute,
    pub construction: Option<super::telemetry::ConstructionCheck>,
    pub vocab_size: i32,
    pub max_context: i32,
    pub weights: crate::model::routes::WeightPolicy,
}

/// What the owner thread hands back once the model is loaded and checked: what the engine is,
/// and what the intake checks prompts with ([`super::intake`]).
pub struct Ready {
    pub info: EngineInfo,
    pub tokenizer: Arc<TextTokenizer>,
    pub limits: PromptLimits,
}

pub enum OwnerCommand {
    Submit {
        req: Request,
        cancel: CancelFlag,
        events: mpsc::Sender<RowEvent>,
        arrived: Instant,
    },
    /// Test hook (feature `testing`): fail the Nth cycle the owner runs from now.
    #[cfg(feature = "testing")]
    InjectFault(usize),
    /// Seal every request alone (the benchmark's serial arm) or batch again.
    SetSerial(bool),
    /// Keep the prompt cache in this file from now on: add the entries it holds (where they
    /// were made as this engine makes them) and write the cache there when the engine stops
    /// ([`super::prompt_cache::persist`]). `reply` hears a sentence for the user, or None where
    /// there is nothing to say (no file yet; an engine without a prompt cache).
    CacheFile {
        path: PathBuf,
        reply: mpsc::Sender<Option<String>>,
    },
    Shutdown,
}

pub fn run_owner(
    load: impl FnOnce() -> Result<Loaded>,
    mut setup: EngineSetup,
    rx: mpsc::Receiver<OwnerCommand>,
    tel: SharedTelemetry,
    ready: mpsc::Sender<Result<Ready>>,
) {
    let started = (|| -> Result<(Loaded, EngineInfo, BlockRoute)> {
        let loaded = load()?;
        let model = loaded.model.as_ref();
        let _in_force = routes::enter(model.routes());
        let mut probe_summary = None;
        // The block route every block takes from now on: the gate's verdict.
        let mut block_route = BlockRoute::Batched;
        // The route a batched cycle takes: MLX's products unless the gate found only cohort's
        // row-invariant kernels exact.
        let mut batched_route = BlockRoute::Batched;
        let mut mode = match setup.mode {
            Some(GenerationMode::Mtp) if !model.has_mtp() => {
                anyhow::bail!("MTP was asked for, but {} has no MTP weights", loaded.dir.display())
            }
            Some(m) => m,
            None if model.has_mtp() => GenerationMode::Mtp,
            None => GenerationMode::Ar,
        };
        if mode == GenerationMode::Mtp {
            let decision = probe::gate(model, setup.allow_inexact)?;
            tracing::info!("{}", decision.summary);
            if !decision.mtp_allowed {
                mode = GenerationMode::Ar;
            }
            batched_route = decision.batched_route();
            block_route = decision.route;
            probe_summary = Some(decision.summary);
        }
        let mut construction = None;
        let widths = match setup.scheduler.admission {
            Admission::Sealed => vec![FIXED_WIDTH],
            Admission::Continuous => setup.scheduler.width.widths(setup.scheduler.lane_width()),
        };
        let batched = widths.iter().any(|&w| w > 1);
        if mode == GenerationMode::Mtp && setup.numerics != Numerics::B1Exact && batched {
            let widest = widths.iter().copied().max().unwrap_or(1);
            let route = setup.numerics.route_id_at(&loaded.family, widest);
            let choice = check_batched(model, setup.numerics, batched_route, &route, &widths)?;
            let check = choice.check;
            batched_route = choice.route;
            if let Some(note) = choice.note {
                // The construction check kept the invariant route in place of MLX's products.
                block_route = choice.route;
                tracing::info!("{note}");
                probe_summary = probe_summary.map(|p| format!("{p}; {note}"));
            }
            tracing::info!(?check, "cohort construction check");
            if !check.passed {
                tracing::warn!("cohort route {} is over its bound; cohorts run as b1-exact serial", check.route);
                setup.numerics = Numerics::B1Exact;
            }
            construction = Some(check);
        }
        let info = EngineInfo {
            dir: loaded.dir.clone(),
            mode,
            numerics: setup.numerics,
            probe: probe_summary,
            block_route,
            construction,
            vocab_size: model.vocab_size(),
            max_context: model.max_context(),
            weights: loaded.weights(),
        };
        Ok((loaded, info, batched_route))
    })();
    let (loaded, info, batched) = match started {
        Ok(x) => x,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let tokenizer = Arc::new(loaded.tokenizer.clone());
    let limits = PromptLimits::of(loaded.model.as_ref());
    // Everything this thread runs from here on runs under the model's routes and the gate's
    // verdict (a cycle narrows its block route where its numerics ask; prompt reads keep theirs).
    let _in_force = routes::enter(loaded.model.routes().with_gate(info.block_route));
    if let Ok(mut t) = tel.lock() {
        t.probe_verdict = info.probe.clone();
        t.construction_check = info.construction.clone();
    }
    let mode = info.mode;
    if super::warm_up::wanted() {
        // A failure here costs the first long read its load time, nothing else.
        match super::warm_up::warm_long_reads(
            loaded.model.as_ref(),
            &loaded.tokenizer,
            setup.scheduler.prefill_chunk.max(1),
            mode,
        ) {
            Ok(took) => tracing::info!(?took, "the first long prompt read paid at start-up"),
            Err(e) => tracing::warn!("the start-up read of a long prompt failed: {e:#}"),
        }
    }
    if setup.scheduler.admission == Admission::Continuous {
        // The lane starts before the engine reports ready: one that cannot start fails the
        // engine's start with the reason, rather than an engine that takes requests and fails each.
        // Only a failure to run the check itself fails the start; a BLAS that keeps no row's
        // bits in a packed block only means prompts are read one at a time.
        let packed_prompts = match packed_prompt_check(loaded.model.as_ref()) {
            Ok(packed) => packed,
            Err(e) => {
                let _ = ready.send(Err(e.context("the packed prompt read check failed to run")));
                return;
            }
        };
        tracing::info!(packed_prompts, "prompt reads: several rows to a block where the model pads its chunks");
        let chunk = setup.scheduler.prefill_chunk.max(1);
        let split = match split_read_check(loaded.model.as_ref(), chunk) {
            Ok(split) => split,
            Err(e) => {
                let _ = ready.send(Err(e.context("the split-read check failed to run")));
                return;
            }
        };
        let cache = setup.scheduler.prompt_cache;
        let reuse = cache.reuse(split.exact);
        tracing::info!(?split, reuse = reuse.name(), "prompt reads split anywhere; the prompt cache");
        // Only where the cache serves exactly: a decoded answer kept in an inexact cache would add
        // a second, unmeasured difference.
        let answers_as_decoded = cache.answers == AnswerPolicy::Decoded && reuse == Reuse::Exact && {
            match decode_read_check(loaded.model.as_ref(), &loaded.tokenizer, chunk, mode) {
                Ok(check) => {
                    tracing::info!(?check, "a decoded answer against a fresh read of it");
                    check.exact
                }
                Err(e) => {
                    let _ = ready.send(Err(e.context("the decode check failed to run")));
                    return;
                }
            }
        };
        let cfg = LaneConfig {
            chunk,
            budget: setup.scheduler.prefill_budget,
            mode,
            numerics: setup.numerics,
            batched,
            width: setup.scheduler.width,
            family: loaded.family.clone(),
            packed_prefill: packed_prompts,
            drafts: setup.scheduler.drafts,
            split_exact: split.exact,
            read_order: setup.scheduler.read_order,
            prompt_cache: PromptCacheSetup {
                reuse,
                bytes: cache.bytes,
                inexact_because: split.difference,
                answers_as_decoded,
            },
        };
        let lane = match Lane::new(loaded.model.as_ref(), &loaded.tokenizer, cfg) {
            Ok(lane) => lane,
            Err(e) => {
                let _ = ready.send(Err(e.context("the engine could not start its lane")));
                return;
            }
        };
        let made_by = made_by(&loaded, &info);
        let _ = ready.send(Ok(Ready { info, tokenizer, limits }));
        return run_continuous(lane, &setup, &rx, &tel, &made_by);
    }
    let _ = ready.send(Ok(Ready { info, tokenizer, limits }));
    let model = loaded.model.as_ref();
    let tok = &loaded.tokenizer;
    let mut serial = setup.serial;
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut shutting_down = false;

    loop {
        if pending.is_empty() {
            if shutting_down {
                return;
            }
            match rx.recv() {
                Ok(cmd) => apply(cmd, &mut pending, &mut serial, &mut shutting_down),
                Err(_) => return,
            }
            continue;
        }
        while let Ok(cmd) = rx.try_recv() {
            apply(cmd, &mut pending, &mut serial, &mut shutting_down);
        }
        // Wait (at most batch_wait from the oldest arrival) for company.
        let seal = if serial { 1 } else { setup.scheduler.seal_width() };
        let deadline =
            pending[0].arrived + if serial { std::time::Duration::ZERO } else { setup.scheduler.batch_wait() };
        while pending.len() < seal && !shutting_down {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match rx.recv_timeout(deadline - now) {
                Ok(cmd) => apply(cmd, &mut pending, &mut serial, &mut shutting_down),
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => shutting_down = true,
            }
        }
        drop_cancelled(&mut pending);
        if pending.is_empty() {
            continue;
        }
        let group: Vec<Pending> = pending.drain(..seal.min(pending.len())).collect();
        set_queue(&tel, pending.len(), group.len());
        run_group(model, tok, &loaded.family, mode, &setup, batched, group, &mut pending, &tel);
        set_queue(&tel, pending.len(), 0);
    }
}

/// One command from the handle: queue a request, arm the fault hook, switch the serial arm, or
/// note that the engine is shutting down.
fn apply(cmd: OwnerCommand, queue: &mut VecDeque<Pending>, serial: &mut bool, shutting_down: &mut bool) {
    match cmd {
        OwnerCommand::Submit { req, cancel, events, arrived } => {
            queue.push_back(Pending { req, cancel, events, arrived })
        }
        #[cfg(feature = "testing")]
        OwnerCommand::InjectFault(n) => super::cohort::inject_fault_at_cycle(n),
        OwnerCommand::SetSerial(on) => *serial = on,
        OwnerCommand::Shutdown => *shutting_down = true,
        // Only the continuous lane keeps a prompt cache (it takes the command before this).
        OwnerCommand::CacheFile { reply, .. } => {
            let _ = reply.send(None);
        }
    }
}

/// Requests cancelled while queued end here.
fn drop_cancelled(pending: &mut VecDeque<Pending>) {
    pending.retain(|p| {
        if p.cancel.is_cancelled() {
            p.cancelled();
        }
        !p.cancel.is_cancelled()
    });
}

/// What made this engine's prompt cache entries: a saved cache is served again only by an
/// engine made alike ([`MadeBy`]).
fn made_by(loaded: &Loaded, info: &EngineInfo) -> MadeBy {
    let report = crate::platform::backend::RuntimeReport::collect();
    let model = loaded.model.as_ref();
    MadeBy {
        build: MadeBy::this_build(),
        device: format!(
            "MLX {} on {} ({}; {})",
            report.mlx_version, report.backend, report.device, report.float32_matmuls
        ),
        model: MadeBy::model_files(&loaded.dir),
        routes: format!("{:?}; {:?}; gate {:?}; {:?}", model.routes(), model.dtype(), info.block_route, info.mode),
    }
}

/// The continuous lane, until the engine stops; then its prompt cache goes to the file it was
/// given ([`OwnerCommand::CacheFile`]), if any.
fn run_continuous(
    mut lane: Lane,
    setup: &EngineSetup,
    rx: &mpsc::Receiver<OwnerCommand>,
    tel: &SharedTelemetry,
    made_by: &MadeBy,
) {
    let mut file = None;
    drive_lane(&mut lane, setup, rx, tel, made_by, &mut file);
    if let Some(path) = file {
        let started = Instant::now();
        match lane.save_cache(&path, made_by) {
            Ok(Some(saved)) => {
                tracing::info!(?saved, path = %path.display(), took = ?started.elapsed(), "prompt cache saved")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("the prompt cache was not saved to {}: {e:#}", path.display()),
        }
    }
}

/// Take a prompt cache file: add what it holds, and keep it as the file to save to.
fn cache_file(lane: &mut Lane, path: PathBuf, made_by: &MadeBy) -> Option<String> {
    let said = match lane.restore_cache(&path, made_by) {
        Ok(Restored::Nothing) => None,
        Ok(Restored::Added { entries, tokens }) => {
            let plural = if entries == 1 { "" } else { "s" };
            Some(format!(
                "resumed warm: the state of {entries} conversation{plural} ({tokens} positions) read from disk"
            ))
        }
        Ok(Restored::Refused(why)) => Some(format!(
            "the saved conversation state was not used ({why}): each conversation is read again on its next turn"
        )),
        Err(e) => Some(format!(
            "the saved conversation state could not be read ({e:#}): each conversation is read again on its next turn"
        )),
    };
    if let Some(said) = &said {
        tracing::info!(path = %path.display(), "{said}");
    }
    said
}

/// The continuous lane's loop: between every two cycles, take what arrived, end what was
/// cancelled while queued, give free rows to the oldest waiting requests, and run one step.
fn drive_lane(
    lane: &mut Lane,
    setup: &EngineSetup,
    rx: &mpsc::Receiver<OwnerCommand>,
    tel: &SharedTelemetry,
    made_by: &MadeBy,
    file: &mut Option<PathBuf>,
) {
    let mut serial = setup.serial;
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut shutting_down = false;
    let mut take = |cmd: OwnerCommand,
                    lane: &mut Lane,
                    queue: &mut VecDeque<Pending>,
                    serial: &mut bool,
                    shutting_down: &mut bool| match cmd {
        OwnerCommand::CacheFile { path, reply } => {
            let _ = reply.send(cache_file(lane, path.clone(), made_by));
            *file = Some(path);
        }
        other => apply(other, queue, serial, shutting_down),
    };
    loop {
        if lane.is_idle() && queue.is_empty() {
            if shutting_down {
                return;
            }
            // An idle lane with answers to read back into the prompt cache reads one piece a
            // step while nothing arrives; otherwise it waits for the next command.
            let next = if lane.has_background_work() {
                match rx.try_recv() {
                    Ok(cmd) => Some(cmd),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            } else {
                match rx.recv() {
                    Ok(cmd) => Some(cmd),
                    Err(_) => return,
                }
            };
            if let Some(cmd) = next {
                take(cmd, lane, &mut queue, &mut serial, &mut shutting_down);
            }
        }
        while let Ok(cmd) = rx.try_recv() {
            take(cmd, lane, &mut queue, &mut serial, &mut shutting_down);
        }
        drop_cancelled(&mut queue);
        // b1-exact numerics and the serial arm decode one request at a time.
        let cap = if serial || setup.numerics == Numerics::B1Exact { 1 } else { setup.scheduler.lane_width() };
        while lane.live() < cap
            && let Some(p) = queue.pop_front()
        {
            lane.admit(p);
        }
        if let Ok(mut t) = tel.lock() {
            t.pending = queue.len();
            t.queued = queue.iter().map(|p| p.req.id.clone()).collect();
        }
        if let Err(e) = lane.step(tel) {
            let msg = format!("the cohort lane was poisoned: {e:#}");
            tracing::error!("{msg}");
            if let Ok(mut t) = tel.lock() {
                t.finalize_scope = FinalizeScope::CohortOwnerFinalizeFailed;
                t.last_error = Some(format!("lane of {} failed: {e:#}", lane.live()));
                t.poisoned += 1;
            }
            lane.fail_all(&msg, tel);
        }
    }
}

fn set_queue(tel: &SharedTelemetry, pending: usize, active: usize) {
    if let Ok(mut t) = tel.lock() {
        t.pending = pending;
        t.active = active;
    }
}

/// Run one sealed group: a solo run, b1-exact serial runs, or one cohort.
#[allow(clippy::too_many_arguments)]
fn run_group(
    model: &dyn LanguageModel,
    tok: &TextTokenizer,
    family: &str,
    mode: GenerationMode,
    setup: &EngineSetup,
    batched: BlockRoute,
    group: Vec<Pending>,
    queued: &mut VecDeque<Pending>,
    tel: &SharedTelemetry,
) {
    let start = Instant::now();
    let mut members: Vec<(Pending, RowRun)> = Vec::new();
    for p in group {
        match prepare(model, tok, &p.req, p.cancel.clone()) {
            Ok(mut run) => {
                run.serve_in(mode);
                run.stats.queue_wait_s = start.duration_since(p.arrived).as_secs_f64();
                run.arrived = p.arrived;
                members.push((p, run));
            }
            Err(e) => p.done(RequestResult::refused(&p.req.id, format!("{e:#}"))),
        }
    }
    if members.is_empty() {
        return;
    }
    let width = members.len();
    if let Ok(mut t) = tel.lock() {
        *t.real_width_histogram.entry(width).or_default() += 1;
        t.last_real_width = width;
        t.last_queue_wait_s = members[0].1.stats.queue_wait_s;
    }
    let senders: HashMap<String, mpsc::Sender<RowEvent>> =
        members.iter().map(|(p, r)| (r.id.clone(), p.events.clone())).collect();
    let mut route = |ev: RowEvent| {
        let id = match &ev {
            RowEvent::Queued { id, .. } | RowEvent::Prefill { id, .. } | RowEvent::Delta { id, .. } => id.clone(),
            RowEvent::Done(r) => r.id.clone(),
        };
        if let Some(tx) = senders.get(&id) {
            let _ = tx.send(ev);
        }
    };
    let chunk = setup.scheduler.prefill_chunk;
    if width == 1 || setup.numerics == Numerics::B1Exact {
        for (p, mut run) in members {
            let route_name = if width > 1 && mode == GenerationMode::Mtp {
                Numerics::B1Exact.route_id(family)
            } else {
                route_id(run.mode, 1)
            };
            run.stats.real_width = width;
            let outcome = run_solo(model, tok, &mut run, mode, chunk, &mut route);
            if let Err(e) = outcome {
                run.fail(format!("{e:#}"));
            }
            run.stats.route = route_name.clone();
            if let Ok(mut t) = tel.lock() {
                t.solo_runs += 1;
                t.last_route = route_name.clone();
                t.verify_cycles += run.stats.verify_cycles;
                t.accepted_drafts += run.stats.accepted_drafts;
                t.rejected_drafts += run.stats.rejected_drafts;
            }
            let _ = mlx_rs::memory::clear_cache();
            let result = run.result(tok);
            p.done(result);
        }
        return;
    }
    // One cohort. Successful results are staged until cleanup has run on this thread.
    // The cohort's numerics mode decides its projections, whatever route the B1 probe chose:
    // throughput batches every projection over the rows (the probe's row-by-row route would run
    // a B8 verify as 16 M=1 products, each reading every weight).
    let route_name = match mode {
        GenerationMode::Mtp => setup.numerics.route_id(family),
        GenerationMode::Ar => format!("{family}_ar_batch_b8_t1_m8"),
    };
    let (pendings, mut runs): (Vec<Pending>, Vec<RowRun>) = members.into_iter().unzip();
    let cfg = CohortConfig { chunk, route_id: route_name.clone(), mode };
    let outcome = routes::with_block(setup.numerics.block_route(batched), || {
        run_cohort(model, tok, &mut runs, &cfg, tel, &mut route)
    });
    let cleanup = outcome.and_then(|()| mlx_rs::memory::clear_cache().map_err(anyhow::Error::from));
    if let Ok(mut t) = tel.lock() {
        t.cohorts += 1;
        t.last_route = route_name;
        match &cleanup {
            Ok(()) => t.finalize_scope = FinalizeScope::CohortOwnerAfterDecode,
            Err(e) => {
                t.finalize_scope = FinalizeScope::CohortOwnerFinalizeFailed;
                t.last_error = Some(format!("cohort of {width} failed: {e:#}"));
                t.poisoned += 1;
            }
        }
    }
    match cleanup {
        Ok(()) => {
            for (p, mut run) in pendings.into_iter().zip(runs) {
                if !run.delivered {
                    p.done(run.result(tok));
                }
            }
        }
        Err(e) => {
            // Poison: this cohort's rows and everything queued behind it fail with the reason;
            // the lane is then reset, so later requests run normally.
            let msg = format!("the cohort lane was poisoned: {e:#}");
            tracing::error!("{msg}");
            for (p, mut run) in pendings.into_iter().zip(runs) {
                if !run.delivered {
                    run.finish = None;
                    run.fail(msg.clone());
                    p.done(run.result(tok));
                }
            }
            for p in queued.drain(..) {
                p.done(RequestResult::error(&p.req.id, msg.clone()));
            }
            let _ = mlx_rs::memory::clear_cache();
        }
    }
}
