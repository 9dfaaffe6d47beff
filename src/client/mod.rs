//! A client of `cohort serve`: the same submit / cancel / snapshot shape as the in-process
//! engine handle, over HTTP. `cohort --attach URL` runs the TUI on it, so its panes chat through
//! the server's API and its inspector draws the server's telemetry (polled from `/health`).

mod stream;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::engine::api::Submission;
use crate::engine::api::Telemetry;
use crate::engine::api::{CancelFlag, CancelRegistry};
use crate::engine::api::{Prompt, Request};

/// How often the server's telemetry is fetched.
const POLL: Duration = Duration::from_millis(250);

/// What the server says about itself once it is ready.
#[derive(Debug, Clone)]
pub struct ServerInfo {
    pub model: String,
    pub mode: String,
    pub numerics: String,
    pub max_context: i32,
}

pub struct RemoteEngine {
    base: String,
    http: reqwest::Client,
    api_key: Option<String>,
    telemetry: Arc<Mutex<Option<Telemetry>>>,
    cancels: CancelRegistry,
    poller: tokio::task::JoinHandle<()>,
    pub info: ServerInfo,
}

impl RemoteEngine {
    /// Connect to the server at `url` (waiting while it loads its model), on the current tokio
    /// runtime.
    pub async fn connect(url: &str, api_key: Option<String>) -> Result<RemoteEngine> {
        let base = url.trim_end_matches('/').trim_end_matches("/v1").to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--attach {url}: give the server's address as http://HOST:PORT");
        }
        let http = reqwest::Client::builder().connect_timeout(Duration::from_secs(5)).build()?;
        let health = loop {
            let response = http
                .get(format!("{base}/health"))
                .send()
                .await
                .with_context(|| format!("cannot reach a cohort server at {base}"))?;
            let body: Value = response.json().await.with_context(|| format!("{base}/health did not answer JSON"))?;
            match body["status"].as_str() {
                Some("ready") => break body,
                Some("loading") => tokio::time::sleep(Duration::from_millis(200)).await,
                Some(other) => bail!("the server at {base} is {other}: {}", body["error"].as_str().unwrap_or("")),
                None => bail!("{base}/health is not a cohort server's: {body}"),
            }
        };
        let text = |k: &str| health[k].as_str().unwrap_or_default().to_owned();
        let info = ServerInfo {
            model: text("model"),
            mode: text("generation_mode"),
            numerics: text("numerics"),
            max_context: health["max_context"].as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0),
        };
        let telemetry = Arc::new(Mutex::new(parse_telemetry(&health)));
        let poller = tokio::spawn(poll_telemetry(http.clone(), base.clone(), telemetry.clone()));
        Ok(RemoteEngine { base, http, api_key, telemetry, cancels: CancelRegistry::default(), poller, info })
    }

    /// Send `req` as a streamed completion; its events arrive as the engine's do, ending with
    /// exactly one `Done` (with the server's figures, or the error it answered).
    pub fn submit(&self, req: Request) -> Submission {
        let (tx, events) = std::sync::mpsc::channel();
        let cancel = CancelFlag::default();
        self.cancels.register(&req.id, &cancel);
        let (path, body) = request_body(&req);
        let mut post = self.http.post(format!("{}{path}", self.base)).json(&body);
        if let Some(key) = &self.api_key {
            post = post.bearer_auth(key);
        }
        let id = req.id.clone();
        tokio::spawn(stream::run(post, id.clone(), cancel.clone(), tx));
        Submission { id, events, cancel }
    }

    /// Cancel by the id the TUI gave the request: its stream is dropped, which the server takes
    /// as the client leaving (the row is freed at its next cycle).
    pub fn cancel(&self, id: &str) {
        self.cancels.cancel(id);
    }

    /// The server's telemetry as last fetched.
    pub fn snapshot(&self) -> Option<Telemetry> {
        self.telemetry.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for RemoteEngine {
    fn drop(&mut self) {
        self.poller.abort();
    }
}

fn parse_telemetry(health: &Value) -> Option<Telemetry> {
    serde_json::from_value(health.get("telemetry")?.clone()).ok()
}

async fn poll_telemetry(http: reqwest::Client, base: String, into: Arc<Mutex<Option<Telemetry>>>) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Ok(response) = http.get(format!("{base}/health")).send().await else { continue };
        if let Ok(body) = response.json::<Value>().await {
            *into.lock().unwrap_or_else(|e| e.into_inner()) = parse_telemetry(&body);
        }
    }
}

/// The OpenAI body for an engine request (chat prompts to the chat endpoint, the rest to
/// completions), streamed with the usage chunk, so the result carries the server's figures.
fn request_body(req: &Request) -> (&'static str, Value) {
    let s = &req.sampler;
    let mut body = json!({
        "max_tokens": req.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "presence_penalty": s.presence_penalty,
        "frequency_penalty": s.frequency_penalty,
        "seed": req.seed,
        "stop": req.stop,
        "ignore_eos": req.ignore_eos,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(mode) = req.mode {
        body["generation_mode"] = json!(mode);
    }
    let path = match &req.prompt {
        Prompt::Chat(messages) => {
            body["messages"] = json!(messages);
            "/v1/chat/completions"
        }
        Prompt::Text(text) => {
            body["prompt"] = json!(text);
            "/v1/completions"
        }
        Prompt::Ids(ids) => {
            body["prompt"] = json!(ids);
            "/v1/completions"
        }
    };
    (path, body)
}
