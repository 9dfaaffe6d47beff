//! `cohort serve`: the engine behind an OpenAI-compatible HTTP API (axum on tokio), with
//! `/health` and Prometheus `/metrics`. This layer only translates: JSON in, engine requests
//! out, the engine's row events back as JSON or server-sent events. The engine is the one the
//! TUI drives, so requests from any number of clients join the running lane as rows.

pub mod api;
mod bridge;
pub mod connections;
pub mod error;
mod handlers;
mod health;
pub mod metrics;
pub mod state;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use error::ApiError;
use state::AppState;

/// Cross-origin requests: refused (no CORS headers) unless origins are named; `*` allows any.
#[derive(Debug, Clone, Default)]
pub struct Cors(pub Vec<String>);

/// The routes, with authentication on `/v1`, the body limit, and CORS when asked.
/// The endpoints taken by POST (every other one by GET): routed here, and named in a 405.
const CHAT_PATH: &str = "/v1/chat/completions";
const COMPLETIONS_PATH: &str = "/v1/completions";

pub fn router(state: Arc<AppState>, cors: &Cors) -> anyhow::Result<Router> {
    let v1 = Router::new()
        .route(CHAT_PATH, post(handlers::chat))
        .route(COMPLETIONS_PATH, post(handlers::completions))
        .route("/v1/models", get(handlers::models))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_key));
    let mut app = Router::new()
        .merge(v1)
        .route("/health", get(handlers::health))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(state.limits.body_timeout))
        .layer(middleware::from_fn_with_state(state.clone(), every_response))
        .with_state(state);
    if !cors.0.is_empty() {
        let origins = if cors.0.iter().any(|o| o == "*") {
            AllowOrigin::from(Any)
        } else {
            let list = cors
                .0
                .iter()
                .map(|o| {
                    HeaderValue::from_str(o).map_err(|_| anyhow::anyhow!("--cors-origin {o:?} is not a valid origin"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            AllowOrigin::list(list)
        };
        app = app.layer(CorsLayer::new().allow_origin(origins).allow_methods(Any).allow_headers(Any));
    }
    Ok(app)
}

/// Every response is counted by status in /metrics, and one that would go out with an empty body
/// (axum's 405 for a wrong method) says what went wrong in the error shape clients parse.
async fn every_response(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    let status = response.status();
    state.metrics.count_response(status.as_u16());
    if status == axum::http::StatusCode::METHOD_NOT_ALLOWED
        && axum::body::HttpBody::size_hint(response.body()).exact() == Some(0)
    {
        // axum sets `Allow` outside this layer: the endpoints' methods are named here.
        let allowed = if [CHAT_PATH, COMPLETIONS_PATH].contains(&path.as_str()) { "POST" } else { "GET" };
        let message = format!("{method} is not served on {path}: use {allowed}");
        return ApiError { status, ..ApiError::bad_request(message) }.into_response();
    }
    response
}

/// `Authorization: Bearer <key>` on /v1 when the server has a key.
async fn require_key(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        // Compared in full whatever the input, so timing says nothing about the key.
        let ok = given.is_some_and(|g| {
            g.len() == key.len() && g.bytes().zip(key.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
        });
        if !ok {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// How long connections may stay open once the drain has ended: enough for a client to read its
/// last bytes; a connection that never sent its whole request would otherwise hold the server.
const LINGER: Duration = Duration::from_secs(2);

/// Serve until `stop` resolves, then drain: no new requests (503), those in flight get `grace`
/// to finish, the rest are cancelled (their clients get what was generated, finish reason
/// "cancelled"), and the server returns once every connection has closed, or [`LINGER`] after
/// the drain. A second SIGTERM or SIGINT during the drain cancels what runs and returns at once.
/// Connections are served by hyper with the header timeout of `state.limits`, counted in
/// `state.connections`, and shed longest-idle first when the table is full.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    state: Arc<AppState>,
    stop: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> anyhow::Result<()> {
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let draining = state.clone();
    let drained = async move {
        stop.await;
        let _ = stopping_tx.send(());
        let state = draining;
        state.start_draining();
        let n = state.in_flight();
        tracing::info!(in_flight = n, grace_s = grace.as_secs_f64(), "draining");
        if n > 0 {
            eprintln!("cohort: draining: no new requests; {n} in flight get {:.0} s to finish", grace.as_secs_f64());
        }
        let deadline = Instant::now() + grace;
        while state.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if state.in_flight() > 0 {
            eprintln!("cohort: cancelling {} requests still in flight", state.in_flight());
            state.cancel_all();
            while state.in_flight() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let accepting = accept(listener, app, state.clone(), &graceful);
    // A second signal while draining (or while connections close) stops the server at once.
    let second_signal = async {
        if stopping_rx.await.is_ok() {
            shutdown_signal().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(second_signal);
    tokio::select! {
        served = accepting => served?,
        () = drained => {}
        () = &mut second_signal => {
            stop_now(&state).await;
            return Ok(());
        }
    }
    // No more connections are taken; those open finish their responses and close.
    state.connections.close_idle();
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(LINGER) => {
            tracing::warn!("connections still open {} s after the drain closed", LINGER.as_secs());
            eprintln!("cohort: closing connections that never sent a whole request");
        }
        () = &mut second_signal => stop_now(&state).await,
    }
    Ok(())
}

/// A second signal: cancel what runs, give its clients [`LINGER`] to hear it, and stop.
async fn stop_now(state: &AppState) {
    eprintln!("cohort: a second signal: stopping now ({} in flight cancelled)", state.in_flight());
    state.start_draining();
    state.cancel_all();
    let deadline = Instant::now() + LINGER;
    while state.in_flight() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Take connections until the caller stops polling: each served on a task of its own under
/// hyper's header timeout, its requests through `app` with its place marked busy until the
/// response's last byte. Out of descriptors, the longest-idle connection is closed to make room.
async fn accept(
    listener: tokio::net::TcpListener,
    app: Router,
    state: Arc<AppState>,
    graceful: &hyper_util::server::graceful::GracefulShutdown,
) -> anyhow::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(state.limits.header_timeout);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) if connections::out_of_descriptors(&e) => {
                if !state.connections.shed_one(None) {
                    tracing::warn!("out of descriptors with every connection busy: {e}");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            Err(e) => {
                tracing::warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (open, close) = state.connections.open();
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let busy = open.busy();
            let app = app.clone();
            async move {
                let response = tower::ServiceExt::oneshot(app, request.map(axum::body::Body::new)).await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| connections::BusyBody::wrap(body, busy)))
            }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            tokio::select! {
                served = connection => {
                    if let Err(e) = served {
                        tracing::debug!("a connection ended: {e}");
                    }
                }
                // Shed: closed where it stands (it had no request running).
                () = close.notified() => {}
            }
        });
    }
}

/// SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
