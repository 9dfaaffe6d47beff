//! `/health`: whether the server can take requests and what the engine is doing (the fields
//! the reference server reports, and the whole telemetry the inspector draws from).

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::state::{AppState, EngineSlot};

/// The status code (200 only when requests would be taken) and the report.
pub fn report(state: &AppState) -> (StatusCode, Value) {
    let slot = state.engine.read().unwrap_or_else(|e| e.into_inner());
    let in_flight = state.in_flight();
    let engine = match &*slot {
        EngineSlot::Loading => {
            return (StatusCode::SERVICE_UNAVAILABLE, json!({"status": "loading", "model": state.model_id}));
        }
        EngineSlot::Failed(why) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"status": "failed", "model": state.model_id, "error": why}),
            );
        }
        EngineSlot::Ready(engine) => engine,
    };
    let t = engine.snapshot();
    let status = if state.is_draining() { "draining" } else { "ready" };
    let code = if status == "ready" { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let info = &engine.info;
    let body = json!({
        "status": status,
        "model": state.model_id,
        "generation_mode": format!("{:?}", info.mode).to_lowercase(),
        "numerics": info.numerics,
        "route": t.last_route,
        "real_width_histogram": t.real_width_histogram,
        "fixed_width_cycles": t.fixed_width_cycles,
        "last_error": t.last_error,
        "finalize_scope": t.finalize_scope,
        "poisoned": t.poisoned,
        "queue": {"waiting": t.pending, "active": t.active, "in_flight": in_flight, "capacity": state.limits.capacity},
        "width_now": t.width_now,
        "max_context": info.max_context,
        "prompt_cache": t.prompt_cache,
        "telemetry": t,
    });
    (code, body)
}
