//! Errors as OpenAI clients expect them: a status and `{"error": {"message", "type", "param",
//! "code"}}`, so the official clients raise the matching exception with the message intact.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// The request field at fault, where one is.
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds a client should wait before trying again (503s).
    pub retry_after: Option<u64>,
    /// The id the request was given, when it got that far.
    pub request_id: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), param: None, code: None, retry_after: None, request_id: None }
    }

    /// The request is wrong: 400, naming the field.
    pub fn bad_field(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self { param: Some(param.into()), ..Self::new(StatusCode::BAD_REQUEST, message) }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// Not now: 503 with Retry-After.
    pub fn unavailable(message: impl Into<String>, retry_after: u64) -> Self {
        Self { retry_after: Some(retry_after), ..Self::new(StatusCode::SERVICE_UNAVAILABLE, message) }
    }

    pub fn unauthorized() -> Self {
        Self {
            code: Some("invalid_api_key"),
            ..Self::new(StatusCode::UNAUTHORIZED, "this server needs an API key: send `Authorization: Bearer <key>`")
        }
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is over this server's limit of {limit} bytes"),
        )
    }

    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within this server's {} s (--body-timeout-s)",
                limit.as_secs_f64()
            ),
        )
    }

    /// A request for a model this server does not serve: 404 naming `model`, as OpenAI and vLLM
    /// answer it.
    pub fn model_not_found(asked: &str, served: &str) -> Self {
        Self {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::new(
                StatusCode::NOT_FOUND,
                format!(
                    "the model {asked:?} is not served here: this server serves {served:?} (\"default\" also names it)"
                ),
            )
        }
    }

    /// A request that ran past `--request-timeout-s`.
    pub fn timed_out(message: String) -> Self {
        Self::new(StatusCode::GATEWAY_TIMEOUT, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    pub fn with_id(mut self, id: &str) -> Self {
        self.request_id = Some(id.to_owned());
        self
    }

    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST
            | StatusCode::PAYLOAD_TOO_LARGE
            | StatusCode::NOT_FOUND
            | StatusCode::METHOD_NOT_ALLOWED => "invalid_request_error",
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
            _ => "server_error",
        }
    }

    /// The body alone, for an error that ends a stream already under way.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind(), "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        let headers = response.headers_mut();
        if let Some(s) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if let Some(id) = self.request_id.as_deref().and_then(|id| HeaderValue::from_str(id).ok()) {
            headers.insert("x-request-id", id);
        }
        response
    }
}
