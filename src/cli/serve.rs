//! `cohort serve`: bind first (a taken port fails at once), load the model in the background
//! while `/health` says "loading", then serve until SIGTERM or Ctrl-C and drain.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;

use crate::config::model_args::ModelArgs;
use crate::config::profile::{Overrides, Settings, load_startup_profile};
use crate::engine::owner::EngineSetup;
use crate::engine::scheduler::SchedulerConfig;
use crate::platform::paths::Paths;
use crate::server::api::Defaults;
use crate::server::connections::default_max_connections;
use crate::server::state::{AppState, EngineSlot, Limits};
use crate::server::{Cors, router, serve, shutdown_signal};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on. The default keeps the server to this machine.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0: any free port; the one taken is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Profile (as the TUI's --profile): model, preset, numerics, and the sampler and max_tokens
    /// a request falls back on.
    #[arg(long, short = 'p', value_name = "NAME|PATH")]
    profile: Option<String>,
    /// Model directory (or hub repo id in the local HF cache). Overrides the profile's.
    #[arg(long, short = 'm')]
    model: Option<String>,
    /// Activation dtype. Overrides the profile's.
    #[arg(long)]
    dtype: Option<String>,
    /// Require `Authorization: Bearer <KEY>` on /v1 (/health and /metrics stay open).
    #[arg(long, env = "COHORT_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Allow cross-origin requests from this origin (repeatable; `*` for any). Off by default.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    cors: Vec<String>,
    /// Requests that may wait for a row beyond those decoding; more get 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    max_waiting: usize,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_body_bytes: usize,
    /// Seconds a connection may take to send a request's whole header, counted from when it
    /// opened or its last response ended (so idle keep-alive connections close after it too).
    #[arg(long, default_value_t = 15.0)]
    header_timeout_s: f64,
    /// Seconds a request's body may take to arrive once its header has (408 after).
    #[arg(long, default_value_t = 30.0)]
    body_timeout_s: f64,
    /// Seconds a request may run, waiting for a row included; past it, it is cancelled and its
    /// client told why (a whole answer: 504; a stream: an error event before `[DONE]`).
    #[arg(long, default_value_t = 1800.0)]
    request_timeout_s: f64,
    /// Connections held at once; past it the one idle longest is closed to make room. Default:
    /// the descriptor limit (raised to its hard limit) less 64.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Seconds requests in flight get to finish after SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 30.0)]
    grace_s: f64,
    /// Whether greedy MTP cohorts may take plain steps while those measure faster (measured,
    /// the default), or draft every cycle (always).
    #[arg(long, value_enum, default_value = "measured")]
    drafts: crate::engine::draft_policy::DraftPolicy,
    #[command(flatten)]
    prompt_cache: crate::config::cache_args::PromptCacheArgs,
}

pub fn run(args: ServeArgs, paths: &Paths) -> Result<()> {
    if args.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
        anyhow::bail!(
            "--api-key (or COHORT_API_KEY) is empty: an empty key would turn authentication off; give a key, or unset it to serve without one"
        );
    }
    let loaded = load_startup_profile(args.profile.as_deref(), paths)?;
    let overrides = Overrides {
        model: args.model.clone(),
        dtype: args.dtype.clone(),
        prompt_cache: args.prompt_cache.clone(),
        ..Default::default()
    };
    let settings = Settings::resolve(&loaded, &overrides)?;
    let grace = seconds("--grace-s", args.grace_s, 0.0)?;
    let header_timeout = seconds("--header-timeout-s", args.header_timeout_s, 0.001)?;
    let body_timeout = seconds("--body-timeout-s", args.body_timeout_s, 0.001)?;
    let request_timeout = seconds("--request-timeout-s", args.request_timeout_s, 0.001)?;
    if args.max_connections == Some(0) {
        anyhow::bail!("--max-connections 0: the server needs at least one connection");
    }
    let scheduler = SchedulerConfig { drafts: args.drafts, ..settings.scheduler() };
    let capacity = scheduler
        .lane_width()
        .checked_add(args.max_waiting)
        .with_context(|| format!("--max-waiting {} is too large", args.max_waiting))?;
    let model_args =
        ModelArgs { model: settings.model.clone(), dtype: settings.dtype.clone(), weights: settings.weights.clone() };
    let model_id = model_name(&model_args);
    let state = Arc::new(AppState::new(
        model_id,
        Defaults { sampler: settings.sampler, max_tokens: settings.max_tokens },
        Limits {
            capacity,
            max_body_bytes: args.max_body_bytes,
            retry_after_s: 1,
            header_timeout,
            body_timeout,
            request_timeout,
            max_connections: args.max_connections.unwrap_or_else(default_max_connections),
        },
        args.api_key.clone(),
    ));
    let app = router(state.clone(), &Cors(args.cors.clone()))?;
    let setup = EngineSetup {
        scheduler,
        numerics: settings.numerics,
        mode: settings.mode,
        serial: false,
        allow_inexact: crate::engine::probe::allow_inexact(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
        let addr: SocketAddr = listener.local_addr()?;
        eprintln!("cohort: listening on http://{addr} (profile {}; loading the model)", settings.profile);
        if !addr.ip().is_loopback() && state.api_key.is_none() {
            let warning = format!(
                "listening on {} without --api-key: anyone who can reach this port can use the model",
                addr.ip()
            );
            eprintln!("cohort: warning: {warning}");
            tracing::warn!("{warning}");
        }
        let loading = state.clone();
        // A model that cannot load leaves nothing to serve: the server stops with its reason.
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            match model_args.start_engine(setup) {
                Ok(engine) => {
                    eprintln!(
                        "cohort: ready in {:.1} s: {} ({:?}, {})",
                        started.elapsed().as_secs_f64(),
                        loading.model_id,
                        engine.info.mode,
                        engine.info.probe.as_deref().unwrap_or("no MTP probe")
                    );
                    loading.set_engine(EngineSlot::Ready(Box::new(engine)));
                }
                Err(e) => {
                    loading.set_engine(EngineSlot::Failed(format!("{e:#}")));
                    let _ = failed_tx.send(());
                }
            }
        });
        let stop = async move {
            tokio::select! {
                () = shutdown_signal() => {},
                Ok(()) = failed_rx => {},
            }
        };
        serve(listener, app, state.clone(), stop, grace).await?;
        // Taking the engine out joins its owner thread, after the last request ended.
        if let EngineSlot::Failed(why) = state.replace_engine(EngineSlot::Failed("the server stopped".into())) {
            anyhow::bail!("the model failed to load: {why}");
        }
        eprintln!("cohort: stopped");
        anyhow::Ok(())
    })
}

/// What `/v1/models` calls the model: the name given, or the default model's folder name.
fn model_name(args: &ModelArgs) -> String {
    match &args.model {
        Some(m) => {
            std::path::Path::new(m).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| m.clone())
        }
        None => crate::model::load::default_model()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "cohort-default".into()),
    }
}

/// A flag's seconds as a Duration, refusing NaN, values below `least` and values no Duration
/// holds (1e300 once panicked after the server was listening).
fn seconds(flag: &str, value: f64, least: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| d.as_secs_f64() >= least)
        .with_context(|| format!("{flag} {value}: must be a number of seconds from {least} to {}", u64::MAX))
}
