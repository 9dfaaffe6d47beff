//! The OpenAI request bodies cohort serves and how they become engine requests. Every refusal
//! names the field at fault (`param`), so a client sees which value to fix.

use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use crate::engine::api::SamplerConfig;
use crate::engine::api::{FinishReason, Prompt, Request, RequestResult};
use crate::engine::api::{MessageIn, Stop, chat_messages, stop_sequences};

/// Which endpoint a body came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

impl Endpoint {
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
        }
    }

    pub fn id_prefix(self) -> &'static str {
        match self {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completions => "cmpl",
        }
    }
}

/// What a request falls back on for the fields it leaves out (the profile's values).
#[derive(Debug, Clone)]
pub struct Defaults {
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
}

/// A parsed request: the engine's request (its id still to be given) and how to answer.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub request: Request,
    pub stream: bool,
    pub include_usage: bool,
    /// The model the client asked for, if it named one ([`answers_to`] decides).
    pub model: Option<String>,
}

/// Whether a request naming `asked` is for the model this server serves (`served`, as
/// `/v1/models` lists it): that name, or a placeholder clients send when any model will do
/// (`""`, `"default"`).
pub fn answers_to(asked: &str, served: &str) -> bool {
    asked.is_empty() || asked == "default" || asked == served
}

/// Both endpoints' fields; which of `messages` / `prompt` is required depends on the endpoint.
/// Unknown fields are ignored, as clients send many; fields cohort cannot honour are refused
/// when they ask for something other than the default.
#[derive(Debug, Deserialize)]
struct Body {
    model: Option<String>,
    messages: Option<Vec<MessageIn>>,
    prompt: Option<Value>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    /// Not OpenAI's: cohort's (and vLLM's) extension.
    top_k: Option<u64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    seed: Option<u64>,
    stop: Option<Stop>,
    n: Option<u64>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    /// Extension: keep going past end-of-sequence until the budget.
    #[serde(default)]
    ignore_eos: bool,
    /// Extension: `"ar"` or `"mtp"`, this request's own generation mode (unset: the engine's).
    generation_mode: Option<crate::engine::api::GenerationMode>,
    logprobs: Option<Value>,
    top_logprobs: Option<Value>,
    tools: Option<Vec<Value>>,
    response_format: Option<Value>,
    echo: Option<bool>,
    best_of: Option<u64>,
    suffix: Option<String>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// A field's type or value error said in the request's terms: what the field takes and what it
/// got, never the parser's wording (an untagged enum's name, `floating point`, `usize`).
fn in_request_terms(path: &str, serde_message: &str) -> String {
    let message = serde_message.split(" at line ").next().unwrap_or(serde_message);
    let takes = if message.contains("untagged enum Content") {
        "a string or a list of content parts ({\"type\": \"text\", \"text\": ...})"
    } else if message.contains("untagged enum Stop") {
        "a string or a list of strings"
    } else if message.contains("untagged enum") {
        "one of the shapes the API documents for it"
    } else {
        match message.rsplit(", expected ").next().filter(|_| message.contains(", expected ")) {
            Some("usize" | "u64" | "u32" | "u16" | "u8") => "a whole number, 0 or more, that fits 64 bits",
            Some("i64" | "i32") => "a whole number",
            Some("f64" | "f32") => "a number",
            Some("a boolean") => "true or false",
            Some("a string") => "a string",
            Some("a sequence") => "a list",
            Some(e) if e.starts_with("struct") || e == "a map" => "an object",
            // Anything else (a missing or unknown field) says itself in the request's terms.
            _ => return format!("{path}: {message}"),
        }
    };
    let got = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.split(", expected ").next())
        .map(|got| {
            let got = ["floating point ", "integer ", "boolean ", "string "]
                .iter()
                .find_map(|kind| got.strip_prefix(kind))
                .unwrap_or(got)
                .trim_matches('`');
            match got {
                "map" => "an object".to_owned(),
                "sequence" => "a list".to_owned(),
                "null" | "unit value" => "null".to_owned(),
                other => other.to_owned(),
            }
        });
    match got {
        Some(got) => format!("{path} must be {takes} (got {got})"),
        None => format!("{path} must be {takes}"),
    }
}

/// Parse and check a body for `endpoint`.
pub fn parse(endpoint: Endpoint, bytes: &[u8], defaults: &Defaults) -> Result<Parsed, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let body: Body = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() || path == "." {
            ApiError::bad_request(format!("the request body is not a valid request: {inner}"))
        } else {
            ApiError::bad_field(path.clone(), in_request_terms(&path, &inner.to_string()))
        }
    })?;
    refuse_unsupported(&body)?;
    let prompt = match endpoint {
        Endpoint::Chat => chat_prompt(body.messages.as_deref())?,
        Endpoint::Completions => text_prompt(body.prompt.as_ref())?,
    };
    let sampler = SamplerConfig {
        temperature: body.temperature.unwrap_or(defaults.sampler.temperature),
        top_p: body.top_p.unwrap_or(defaults.sampler.top_p),
        top_k: match body.top_k {
            Some(k) => {
                usize::try_from(k).map_err(|_| ApiError::bad_field("top_k", format!("top_k = {k} is too large")))?
            }
            None => defaults.sampler.top_k,
        },
        presence_penalty: body.presence_penalty.unwrap_or(defaults.sampler.presence_penalty),
        frequency_penalty: body.frequency_penalty.unwrap_or(defaults.sampler.frequency_penalty),
    };
    sampler.validate().map_err(|e| ApiError::bad_field(e.setting, e.to_string()))?;
    let (budget_field, budget) = match (body.max_completion_tokens, body.max_tokens) {
        (Some(n), _) => ("max_completion_tokens", Some(n)),
        (None, n) => ("max_tokens", n),
    };
    let max_tokens = match budget {
        None => defaults.max_tokens,
        Some(0) => return Err(ApiError::bad_field(budget_field, format!("{budget_field} must be at least 1"))),
        Some(n) => usize::try_from(n)
            .map_err(|_| ApiError::bad_field(budget_field, format!("{budget_field} = {n} is too large")))?,
    };
    let stop = stop_sequences(body.stop).map_err(|e| ApiError::bad_field(e.param, e.message))?;
    let request = Request {
        id: String::new(),
        prompt,
        max_tokens,
        sampler,
        seed: body.seed.unwrap_or(0),
        stop,
        ignore_eos: body.ignore_eos,
        mode: body.generation_mode,
    };
    let include_usage = body.stream_options.is_some_and(|o| o.include_usage);
    if include_usage && !body.stream {
        return Err(ApiError::bad_field("stream_options", "stream_options is only allowed with stream: true"));
    }
    Ok(Parsed { request, stream: body.stream, include_usage, model: body.model })
}

fn refuse_unsupported(body: &Body) -> Result<(), ApiError> {
    let refuse = |param: &str, why: &str| Err(ApiError::bad_field(param, format!("{param}: {why}")));
    if body.n.is_some_and(|n| n != 1) {
        return refuse("n", "cohort answers with one choice per request (n = 1)");
    }
    if body.best_of.is_some_and(|n| n != 1) {
        return refuse("best_of", "cohort answers with one choice per request (best_of = 1)");
    }
    if body.logprobs.as_ref().is_some_and(|v| !(v.is_null() || v == &Value::Bool(false))) {
        return refuse("logprobs", "log probabilities are not served");
    }
    if body.top_logprobs.as_ref().is_some_and(|v| !(v.is_null() || v == &Value::from(0))) {
        return refuse("top_logprobs", "log probabilities are not served");
    }
    if body.tools.as_ref().is_some_and(|t| !t.is_empty()) {
        return refuse("tools", "tool calls are not served");
    }
    if let Some(f) = &body.response_format
        && f.get("type").and_then(Value::as_str) != Some("text")
    {
        return refuse("response_format", "only {\"type\": \"text\"} is served");
    }
    if body.echo == Some(true) {
        return refuse("echo", "echoing the prompt is not served");
    }
    if body.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return refuse("suffix", "insertion (suffix) is not served");
    }
    Ok(())
}

fn chat_prompt(messages: Option<&[MessageIn]>) -> Result<Prompt, ApiError> {
    let messages = messages.ok_or_else(|| ApiError::bad_field("messages", "messages is required"))?;
    chat_messages(messages).map(Prompt::Chat).map_err(|e| ApiError::bad_field(e.param, e.message))
}

fn text_prompt(prompt: Option<&Value>) -> Result<Prompt, ApiError> {
    let bad = |why: &str| ApiError::bad_field("prompt", format!("prompt: {why}"));
    let prompt = match prompt {
        None | Some(Value::Null) => return Err(bad("is required")),
        Some(Value::String(s)) => Prompt::Text(s.clone()),
        Some(Value::Array(items)) => match items.as_slice() {
            [] => return Err(bad("is empty")),
            [Value::String(s)] => Prompt::Text(s.clone()),
            [Value::Array(ids)] => Prompt::Ids(token_ids(ids).ok_or_else(|| bad("token ids must be integers >= 0"))?),
            [Value::String(_) | Value::Array(_), ..] => {
                return Err(bad("one prompt per request (send several requests; they decode together)"));
            }
            ids => Prompt::Ids(token_ids(ids).ok_or_else(|| bad("token ids must be integers >= 0"))?),
        },
        Some(_) => return Err(bad("must be a string or an array of token ids")),
    };
    if prompt.is_empty() {
        return Err(bad("is empty"));
    }
    Ok(prompt)
}

fn token_ids(items: &[Value]) -> Option<Vec<u32>> {
    items.iter().map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok())).collect()
}

/// OpenAI's name for how a choice ended. A row cancelled by the server (a drain) says so.
pub fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Error => "error",
    }
}

pub fn usage(r: &RequestResult) -> Value {
    let (p, c) = (r.stats.prompt_tokens, r.stats.completion_tokens);
    // OpenAI's field for prompt tokens served from a cache; `reuse` says whether exactly.
    let mut details = serde_json::json!({"cached_tokens": r.stats.cached_tokens});
    if let Some(reuse) = r.stats.reuse {
        details["reuse"] = serde_json::json!(reuse.name());
    }
    serde_json::json!({
        "prompt_tokens": p,
        "completion_tokens": c,
        "total_tokens": p.saturating_add(c),
        "prompt_tokens_details": details,
    })
}

/// cohort's own figures for a request, in the extension field `cohort`.
pub fn cohort_stats(r: &RequestResult) -> Value {
    let s = &r.stats;
    serde_json::json!({
        "route": s.route,
        "real_width": s.real_width,
        "acceptance_rate": s.acceptance_rate,
        "tokens_per_cycle": s.tokens_per_cycle,
        "queue_wait_s": s.queue_wait_s,
        "ttft_s": s.ttft_s,
        "joined_at_cycle": s.joined_at_cycle,
        "decode_tok_s": s.decode_tok_s,
        "generation_mode": s.mode,
    })
}

/// A whole (non-streamed) answer.
pub fn completion(endpoint: Endpoint, id: &str, model: &str, created: u64, r: &RequestResult) -> Value {
    let reason = finish_reason(r.finish_reason);
    let choice = match endpoint {
        Endpoint::Chat => serde_json::json!({
            "index": 0,
            "message": {"role": "assistant", "content": r.text},
            "logprobs": null,
            "finish_reason": reason,
        }),
        Endpoint::Completions => {
            serde_json::json!({"index": 0, "text": r.text, "logprobs": null, "finish_reason": reason})
        }
    };
    let object = match endpoint {
        Endpoint::Chat => "chat.completion",
        Endpoint::Completions => "text_completion",
    };
    serde_json::json!({
        "id": id,
        "object": object,
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": usage(r),
        "cohort": cohort_stats(r),
    })
}

/// One streamed chunk: new text (`delta`), or the closing chunk (`finish`).
pub fn chunk(endpoint: Endpoint, id: &str, model: &str, created: u64, delta: Value, finish: Option<&str>) -> Value {
    match endpoint {
        Endpoint::Chat => serde_json::json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        }),
        Endpoint::Completions => serde_json::json!({
            "id": id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "text": delta.get("content").cloned().unwrap_or(Value::from("")), "logprobs": null, "finish_reason": finish}],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Defaults {
        Defaults { sampler: SamplerConfig::default(), max_tokens: 256 }
    }

    fn err(endpoint: Endpoint, body: &str) -> ApiError {
        parse(endpoint, body.as_bytes(), &defaults()).unwrap_err()
    }

    #[test]
    fn a_wrong_type_names_its_field() {
        let e = err(Endpoint::Chat, r#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#);
        assert_eq!(e.param.as_deref(), Some("temperature"));
        assert!(e.message.starts_with("temperature must be a number"), "{}", e.message);
        let e = err(Endpoint::Chat, r#"{"messages":[{"role":"user","content":5}]}"#);
        assert_eq!(e.param.as_deref(), Some("messages[0].content"), "{}", e.message);
    }

    /// Issue 58: serde's own wording reached clients ("data did not match any variant of untagged
    /// enum Content", "floating point `1.8446744073709552e+19`, expected usize"). Each is said in
    /// the request's terms, naming the field and what it takes.
    #[test]
    fn errors_say_what_the_field_takes_not_how_the_parser_failed() {
        let m = r#""messages":[{"role":"user","content":"hi"}]"#;
        for (body, param, says) in [
            (
                r#"{"messages":[{"role":"user","content":5}]}"#.to_owned(),
                "messages[0].content",
                "a string or a list of content parts",
            ),
            (format!(r#"{{{m},"stop":7}}"#), "stop", "a string or a list of strings"),
            (format!(r#"{{{m},"max_tokens":18446744073709551616}}"#), "max_tokens", "a whole number"),
            (format!(r#"{{{m},"max_tokens":-3}}"#), "max_tokens", "a whole number"),
            (format!(r#"{{{m},"temperature":"hot"}}"#), "temperature", "a number"),
            (format!(r#"{{{m},"stream":"yes"}}"#), "stream", "true or false"),
        ] {
            let e = err(Endpoint::Chat, &body);
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
            for leak in
                ["untagged", "floating point", "usize", "u64", "f32", "variant", "invalid type", "invalid value"]
            {
                assert!(!e.message.contains(leak), "{body}: {:?} leaks {leak:?}", e.message);
            }
            assert!(e.message.starts_with(&format!("{param} must be {says}")), "{body}: {}", e.message);
        }
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        let m = r#""messages":[{"role":"user","content":"hi"}]"#;
        for (extra, param) in [
            (r#""temperature":-1"#, "temperature"),
            (r#""top_p":0"#, "top_p"),
            (r#""top_k":5000"#, "top_k"),
            (r#""max_tokens":0"#, "max_tokens"),
            (r#""max_completion_tokens":0"#, "max_completion_tokens"),
            (r#""max_tokens":-3"#, "max_tokens"),
            (r#""n":2"#, "n"),
            (r#""stop":[""]"#, "stop"),
            (r#""tools":[{"type":"function"}]"#, "tools"),
            (r#""logprobs":true"#, "logprobs"),
            (r#""seed":-1"#, "seed"),
            (r#""stream_options":{"include_usage":true}"#, "stream_options"),
            (r#""generation_mode":"fast""#, "generation_mode"),
        ] {
            let e = err(Endpoint::Chat, &format!("{{{m},{extra}}}"));
            assert_eq!(e.param.as_deref(), Some(param), "{extra}: {}", e.message);
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn bad_json_and_missing_prompts_are_400s() {
        assert!(err(Endpoint::Chat, "{not json").message.contains("not a valid request"));
        assert_eq!(err(Endpoint::Chat, "{}").param.as_deref(), Some("messages"));
        assert_eq!(err(Endpoint::Chat, r#"{"messages":[]}"#).param.as_deref(), Some("messages"));
        assert_eq!(err(Endpoint::Completions, r#"{"prompt":""}"#).param.as_deref(), Some("prompt"));
        assert_eq!(err(Endpoint::Completions, r#"{"prompt":["a","b"]}"#).param.as_deref(), Some("prompt"));
        assert_eq!(err(Endpoint::Completions, r#"{"prompt":[1,-2]}"#).param.as_deref(), Some("prompt"));
        let e = err(Endpoint::Chat, r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#);
        assert_eq!(e.param.as_deref(), Some("messages[0].content[0].type"));
    }

    #[test]
    fn fields_map_onto_the_engine_request() {
        let body = r#"{"messages":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
            "temperature":0,"top_p":0.5,"top_k":7,"seed":9,"stop":"\n","max_completion_tokens":12,"max_tokens":99,
            "presence_penalty":0.25,"frequency_penalty":-0.5,"stream":true,"stream_options":{"include_usage":true},"user":"x","generation_mode":"ar"}"#;
        let p = parse(Endpoint::Chat, body.as_bytes(), &defaults()).unwrap();
        let r = p.request;
        assert_eq!(
            r.prompt,
            Prompt::Chat(vec![
                crate::model::text::tokenizer::ChatMessage::new("system", "be brief"),
                crate::model::text::tokenizer::ChatMessage::new("user", "ab"),
            ])
        );
        assert_eq!((r.max_tokens, r.seed, r.stop.clone()), (12, 9, vec!["\n".to_owned()]));
        let s = r.sampler;
        assert_eq!((s.temperature, s.top_p, s.top_k), (0.0, 0.5, 7));
        assert_eq!((s.presence_penalty, s.frequency_penalty), (0.25, -0.5));
        assert!(p.stream && p.include_usage);
        assert_eq!(r.mode, Some(crate::engine::api::GenerationMode::Ar));
        let p = parse(Endpoint::Completions, br#"{"prompt":[[5,6,7]]}"#, &defaults()).unwrap();
        assert_eq!(p.request.mode, None, "the engine's mode when none is given");
        assert_eq!(p.request.prompt, Prompt::Ids(vec![5, 6, 7]));
        assert_eq!(p.request.max_tokens, 256, "the profile's budget when none is given");
        assert_eq!(p.request.sampler, SamplerConfig::default());
    }
}
