//! One streamed completion: SSE chunks in, the engine's row events out.

use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource;
use futures_util::StreamExt;
use serde_json::Value;

use crate::engine::api::{CancelFlag, RowEvent};
use crate::engine::api::{FinishReason, RequestResult, Stats};

/// How often a quiet stream checks whether the user cancelled it.
const CANCEL_POLL: Duration = Duration::from_millis(20);

pub async fn run(post: reqwest::RequestBuilder, id: String, cancel: CancelFlag, tx: Sender<RowEvent>) {
    let sent = Instant::now();
    let mut text = String::new();
    let result = follow(post, &id, &cancel, &tx, &mut text, sent).await;
    let result = match result {
        Ok(r) => r,
        Err(message) => RequestResult { text: text.clone(), ..RequestResult::error(&id, message) },
    };
    let _ = tx.send(RowEvent::Done(Box::new(result)));
}

async fn follow(
    post: reqwest::RequestBuilder,
    id: &str,
    cancel: &CancelFlag,
    tx: &Sender<RowEvent>,
    text: &mut String,
    sent: Instant,
) -> Result<RequestResult, String> {
    let response = post.send().await.map_err(|e| format!("the server did not answer: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        let body: Value = response.json().await.unwrap_or_default();
        let message = body["error"]["message"].as_str().unwrap_or("no message").to_owned();
        return Err(format!("the server refused the request ({status}): {message}"));
    }
    let _ = tx.send(RowEvent::Prefill { id: id.to_owned(), done: 0, total: 0 });
    let mut events = response.bytes_stream().eventsource();
    let mut result = RequestResult::ended(id, FinishReason::Length);
    let mut first_token = None;
    loop {
        let next = tokio::select! {
            ev = events.next() => ev,
            () = tokio::time::sleep(CANCEL_POLL) => {
                if cancel.is_cancelled() {
                    // Dropping the stream closes the connection: the server cancels the row.
                    result.finish_reason = FinishReason::Cancelled;
                    result.text = text.clone();
                    return Ok(result);
                }
                continue;
            }
        };
        let Some(ev) = next else { return Err("the server closed the stream before its end".into()) };
        let ev = ev.map_err(|e| format!("the stream broke: {e}"))?;
        if ev.data == "[DONE]" {
            result.text = text.clone();
            if result.stats.ttft_s == 0.0 {
                // An older server without cohort's figures: the client's own measure.
                result.stats.ttft_s = first_token.unwrap_or(0.0);
            }
            return Ok(result);
        }
        let chunk: Value = serde_json::from_str(&ev.data).map_err(|e| format!("a chunk is not JSON: {e}"))?;
        if let Some(message) = chunk["error"]["message"].as_str() {
            return Err(message.to_owned());
        }
        let choice = &chunk["choices"][0];
        let piece = choice["delta"]["content"].as_str().or_else(|| choice["text"].as_str()).unwrap_or("");
        if !piece.is_empty() {
            first_token.get_or_insert(sent.elapsed().as_secs_f64());
            text.push_str(piece);
            let _ = tx.send(RowEvent::Delta { id: id.to_owned(), text: piece.to_owned(), ids: Vec::new() });
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            result.finish_reason = match reason {
                "stop" => FinishReason::Stop,
                "cancelled" => FinishReason::Cancelled,
                _ => FinishReason::Length,
            };
        }
        if chunk["usage"].is_object() {
            result.stats = server_stats(&chunk);
        }
    }
}

/// The usage chunk's figures (and cohort's extension) as the engine's stats.
fn server_stats(chunk: &Value) -> Stats {
    let n = |v: &Value| v.as_u64().unwrap_or(0) as usize;
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let c = &chunk["cohort"];
    Stats {
        prompt_tokens: n(&chunk["usage"]["prompt_tokens"]),
        completion_tokens: n(&chunk["usage"]["completion_tokens"]),
        route: c["route"].as_str().unwrap_or_default().to_owned(),
        real_width: n(&c["real_width"]),
        acceptance_rate: f(&c["acceptance_rate"]),
        tokens_per_cycle: f(&c["tokens_per_cycle"]),
        queue_wait_s: f(&c["queue_wait_s"]),
        ttft_s: f(&c["ttft_s"]),
        joined_at_cycle: c["joined_at_cycle"].as_u64().unwrap_or(0),
        decode_tok_s: f(&c["decode_tok_s"]),
        mode: serde_json::from_value(c["generation_mode"].clone()).ok(),
        ..Stats::default()
    }
}
