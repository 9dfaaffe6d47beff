//! The endpoints: completions (whole or streamed), models, health and metrics.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;

use super::api::{self, Endpoint, Parsed};
use super::bridge;
use super::error::ApiError;
use super::state::{AppState, EngineSlot};
use crate::engine::api::RowEvent;
use crate::engine::api::{FinishReason, RequestResult};

pub async fn chat(state: State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    complete(state.0, Endpoint::Chat, body).await
}

pub async fn completions(state: State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    complete(state.0, Endpoint::Completions, body).await
}

async fn complete(state: Arc<AppState>, endpoint: Endpoint, body: Result<Bytes, BytesRejection>) -> Response {
    let bytes = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return ApiError::too_large(state.limits.max_body_bytes).into_response();
        }
        Err(e) if timed_out(&e) => return ApiError::body_timeout(state.limits.body_timeout).into_response(),
        Err(e) => return ApiError::bad_request(format!("cannot read the request body: {e}")).into_response(),
    };
    let parsed = match api::parse(endpoint, &bytes, &state.defaults) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    if let Some(asked) = parsed.model.as_deref().filter(|m| !api::answers_to(m, &state.model_id)) {
        return ApiError::model_not_found(asked, &state.model_id).into_response();
    }
    let id = state.next_id(endpoint.id_prefix());
    match start(&state, endpoint, &id, parsed).await {
        Ok(response) => response,
        Err(e) => e.with_id(&id).into_response(),
    }
}

/// Whether the body stopped arriving for longer than `--body-timeout-s` (tower-http's timeout,
/// somewhere in the rejection's chain of causes).
fn timed_out(e: &BytesRejection) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Submit the request and wait for the engine to take it (its first event): a request it
/// refuses is answered 400 before any stream begins.
async fn start(state: &Arc<AppState>, endpoint: Endpoint, id: &str, parsed: Parsed) -> Result<Response, ApiError> {
    let Parsed { mut request, stream, include_usage, .. } = parsed;
    request.id = id.to_owned();
    state.admit(id)?;
    let submission = {
        let slot = state.engine.read().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            EngineSlot::Ready(engine) => Ok(engine.submit(request)),
            EngineSlot::Loading => Err(ApiError::unavailable("the model is still loading", 5)),
            EngineSlot::Failed(why) => Err(ApiError::unavailable(format!("the model failed to load: {why}"), 60)),
        }
    };
    let submission = match submission {
        Ok(s) => s,
        Err(e) => {
            state.release(id);
            return Err(e);
        }
    };
    state.submitted(id, submission.cancel.clone());
    let mut events = bridge::forward(submission, endpoint, state.clone());
    let first = events.recv().await.ok_or_else(|| ApiError::internal("the engine dropped the request"))?;
    if let RowEvent::Done(r) = &first
        && r.finish_reason == FinishReason::Error
    {
        return Err(refusal(endpoint, r));
    }
    let answer =
        Answer { endpoint, id: id.to_owned(), model: state.model_id.clone(), created: super::state::unix_now() };
    let mut response = if stream {
        answer.stream(first, events, include_usage).into_response()
    } else {
        answer.whole(first, events).await?.into_response()
    };
    if let Ok(v) = HeaderValue::from_str(id) {
        response.headers_mut().insert("x-request-id", v);
    }
    Ok(response)
}

/// A request that ended in an error: 400 when it was refused for a fault of its own, else 500.
/// A refusal names the field at fault: the prompt is `messages` on chat and `prompt` on text
/// completions.
fn refusal(endpoint: Endpoint, r: &RequestResult) -> ApiError {
    let message = r.error.clone().unwrap_or_else(|| "the request failed".into());
    if r.refused {
        let param = if message.contains("max_tokens") {
            "max_tokens"
        } else if message.contains("sampler") {
            "temperature"
        } else if endpoint == Endpoint::Completions {
            "prompt"
        } else {
            "messages"
        };
        ApiError::bad_field(param, message)
    } else {
        ApiError::internal(message)
    }
}

/// What a request that ended without its answer tells its client: the refusal or failure, or the
/// request timeout that cancelled it (504). None for an answer (cancelled ones included).
fn failure(endpoint: Endpoint, r: &RequestResult) -> Option<ApiError> {
    match r.finish_reason {
        FinishReason::Error => Some(refusal(endpoint, r)),
        FinishReason::Cancelled => r.error.as_ref().map(|why| ApiError::timed_out(why.clone())),
        _ => None,
    }
}

struct Answer {
    endpoint: Endpoint,
    id: String,
    model: String,
    created: u64,
}

impl Answer {
    async fn whole(
        &self,
        first: RowEvent,
        mut events: UnboundedReceiver<RowEvent>,
    ) -> Result<axum::Json<Value>, ApiError> {
        let mut ev = first;
        loop {
            if let RowEvent::Done(r) = ev {
                if let Some(e) = failure(self.endpoint, &r) {
                    return Err(e);
                }
                return Ok(axum::Json(api::completion(self.endpoint, &self.id, &self.model, self.created, &r)));
            }
            ev = events.recv().await.ok_or_else(|| ApiError::internal("the engine dropped the request"))?;
        }
    }

    /// What one engine event sends: a text chunk, or the closing chunks and `[DONE]`.
    /// `sent` counts the answer's bytes streamed so far: text the decoder held back to the end (a
    /// character `max_tokens` cut short comes out as U+FFFD) goes out before the closing chunk,
    /// so the stream says what the whole answer says.
    fn events_for(&self, ev: RowEvent, include_usage: bool, sent: &mut usize, out: &mut Vec<Event>) {
        match ev {
            RowEvent::Delta { text, .. } if !text.is_empty() => {
                *sent += text.len();
                out.push(self.chunk(json!({"content": text}), None))
            }
            RowEvent::Done(r) => {
                if let Some(e) = failure(self.endpoint, &r) {
                    out.push(Event::default().data(e.body().to_string()));
                } else {
                    if let Some(rest) = r.text.get(*sent..).filter(|rest| !rest.is_empty()) {
                        out.push(self.chunk(json!({"content": rest}), None));
                    }
                    out.push(self.chunk(json!({}), Some(api::finish_reason(r.finish_reason))));
                    if include_usage {
                        let mut usage = api::chunk(self.endpoint, &self.id, &self.model, self.created, json!({}), None);
                        usage["choices"] = json!([]);
                        usage["usage"] = api::usage(&r);
                        usage["cohort"] = api::cohort_stats(&r);
                        out.push(Event::default().data(usage.to_string()));
                    }
                }
                out.push(Event::default().data("[DONE]"));
            }
            _ => {}
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        Event::default().data(api::chunk(self.endpoint, &self.id, &self.model, self.created, delta, finish).to_string())
    }

    /// Server-sent events: a role chunk (chat), one chunk per piece of text, a closing chunk with
    /// the finish reason, the usage chunk when asked, then `[DONE]`. If the client goes away the
    /// sender fails, the engine events are dropped and the bridge cancels the row.
    fn stream(
        self,
        first: RowEvent,
        mut events: UnboundedReceiver<RowEvent>,
        include_usage: bool,
    ) -> impl IntoResponse {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, Infallible>>(64);
        tokio::spawn(async move {
            let mut out = Vec::new();
            if self.endpoint == Endpoint::Chat {
                out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
            }
            let mut next = Some(first);
            let mut sent = 0;
            loop {
                let ev = match next.take() {
                    Some(ev) => Some(ev),
                    None => events.recv().await,
                };
                let Some(ev) = ev else { return };
                let done = matches!(ev, RowEvent::Done(_));
                self.events_for(ev, include_usage, &mut sent, &mut out);
                for e in out.drain(..) {
                    if tx.send(Ok(e)).await.is_err() {
                        return;
                    }
                }
                if done {
                    return;
                }
            }
        });
        Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
            .keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
    }
}

pub async fn models(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": state.model_id, "object": "model", "created": 0, "owned_by": "cohort"}],
    }))
}

pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    let (status, body) = super::health::report(&state);
    (status, axum::Json(body)).into_response()
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let telemetry = match &*state.engine.read().unwrap_or_else(|e| e.into_inner()) {
        EngineSlot::Ready(engine) => Some(engine.snapshot()),
        _ => None,
    };
    let server = super::metrics::ServerView {
        in_flight: state.in_flight(),
        connections_open: state.connections.count(),
        connections_max: state.connections.max(),
        connections_shed: state.connections.shed_total(),
    };
    let text = state.metrics.render(telemetry, server);
    let content_type = HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8");
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

pub async fn not_found() -> ApiError {
    ApiError { status: StatusCode::NOT_FOUND, ..ApiError::bad_request("no such endpoint") }
}
