//! Chat messages and stop sequences as clients write them, checked one way for every way in
//! (`cohort generate`'s lines, `cohort serve`'s bodies), so the two never disagree on what a
//! request means: content as a string or as text parts (joined), OpenAI's "developer" role as the
//! system role, a stop sequence as a string or a list; an empty role, a part that is not text and
//! an empty stop sequence are refused naming the field.

use serde::Deserialize;

use crate::model::text::tokenizer::ChatMessage;

/// One message as a client writes it.
#[derive(Debug, Deserialize)]
pub struct MessageIn {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

/// Stop sequences: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// What is wrong with a request, and the field it is in as the request names it
/// (`messages[2].content[0].type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub param: String,
    pub message: String,
}

impl FieldError {
    fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { param: param.into(), message: message.into() }
    }
}

/// The messages as the chat template takes them.
pub fn chat_messages(messages: &[MessageIn]) -> Result<Vec<ChatMessage>, FieldError> {
    if messages.is_empty() {
        return Err(FieldError::new("messages", "messages must hold at least one message"));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if m.role.trim().is_empty() {
            return Err(FieldError::new(format!("messages[{i}].role"), format!("messages[{i}].role is empty")));
        }
        // OpenAI's newer name for the system role; chat templates know "system".
        let role = if m.role == "developer" { "system" } else { m.role.as_str() };
        let content = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => text.push_str(t),
                        ("text", None) => {
                            let param = format!("messages[{i}].content[{j}].text");
                            return Err(FieldError::new(param.clone(), format!("{param} is required")));
                        }
                        (other, _) => {
                            let param = format!("messages[{i}].content[{j}].type");
                            let message = format!("{param} = {other:?}: only text parts are served");
                            return Err(FieldError::new(param, message));
                        }
                    }
                }
                text
            }
        };
        out.push(ChatMessage::new(role, &content));
    }
    Ok(out)
}

/// The stop sequences, none empty.
pub fn stop_sequences(stop: Option<Stop>) -> Result<Vec<String>, FieldError> {
    let stop = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stop.iter().any(String::is_empty) {
        return Err(FieldError::new("stop", "stop sequences must not be empty strings"));
    }
    Ok(stop)
}
