//! The request and result contract shared by `cohort generate`, the scheduler and the TUI.
//! Request lines: `{"id", "prompt" | "prompt_ids" | "messages", "chat", "max_tokens",
//! "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos", "presence_penalty",
//! "frequency_penalty", "mode"}`; messages and stop sequences as [`super::chat_input`] reads them.

use serde::{Deserialize, Serialize};

use super::sampler::SamplerConfig;
use crate::model::text::tokenizer::ChatMessage;

/// What to generate from.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    Chat(Vec<ChatMessage>),
}

impl Prompt {
    /// Bytes of text the prompt holds (its messages' contents summed); None for token ids.
    pub fn text_bytes(&self) -> Option<usize> {
        match self {
            Prompt::Text(t) => Some(t.len()),
            Prompt::Chat(messages) => Some(messages.iter().map(|m| m.content.len()).sum()),
            Prompt::Ids(_) => None,
        }
    }

    /// No text, no ids or no messages.
    pub fn is_empty(&self) -> bool {
        match self {
            Prompt::Text(t) => t.is_empty(),
            Prompt::Ids(i) => i.is_empty(),
            Prompt::Chat(m) => m.is_empty(),
        }
    }
}

/// How a row decodes: depth-one MTP (a draft and a T=2 verify a cycle) or plain autoregressive
/// steps. Both give the same tokens for a row; MTP only changes how many a cycle can commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum GenerationMode {
    Ar,
    Mtp,
}

impl GenerationMode {
    /// The mode a row asking for `asked` runs in an engine of this mode: an AR engine (a model
    /// without MTP weights, or MTP declined by the exactness gate) serves every row AR; an MTP
    /// engine serves each row the mode it asks for, MTP when it asks for none.
    pub fn serving(self, asked: Option<GenerationMode>) -> GenerationMode {
        match self {
            GenerationMode::Ar => GenerationMode::Ar,
            GenerationMode::Mtp => asked.unwrap_or(GenerationMode::Mtp),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            GenerationMode::Ar => "ar",
            GenerationMode::Mtp => "mtp",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Request {
    pub id: String,
    pub prompt: Prompt,
    pub max_tokens: usize,
    pub sampler: SamplerConfig,
    pub seed: u64,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// The row's own generation mode; None = the engine's.
    pub mode: Option<GenerationMode>,
}

pub const DEFAULT_MAX_TOKENS: usize = 256;

/// One line of a `generate` input file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLine {
    pub id: Option<String>,
    pub prompt: Option<String>,
    pub prompt_ids: Option<Vec<u32>>,
    pub messages: Option<Vec<super::chat_input::MessageIn>>,
    #[serde(default)]
    pub chat: bool,
    pub max_tokens: Option<usize>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<usize>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub seed: Option<u64>,
    /// A string or a list ([`super::chat_input::stop_sequences`]).
    pub stop: Option<super::chat_input::Stop>,
    #[serde(default)]
    pub ignore_eos: bool,
    /// `"ar"` or `"mtp"`: this request's own generation mode (unset: the engine's).
    pub mode: Option<GenerationMode>,
}

impl RequestLine {
    /// Validate and fill defaults. `line_no` (1-based) names the line in errors.
    pub fn into_request(self, line_no: usize, defaults: &SamplerConfig) -> anyhow::Result<Request> {
        let id = self.id.unwrap_or_else(|| format!("line-{line_no}"));
        let prompt = match (self.prompt, self.prompt_ids, self.messages) {
            (Some(p), None, None) if self.chat => Prompt::Chat(vec![ChatMessage::new("user", &p)]),
            (Some(p), None, None) => Prompt::Text(p),
            (None, Some(ids), None) => Prompt::Ids(ids),
            (None, None, Some(m)) => Prompt::Chat(
                super::chat_input::chat_messages(&m)
                    .map_err(|e| anyhow::anyhow!("line {line_no} (id {id}): {}", e.message))?,
            ),
            (None, None, None) => {
                anyhow::bail!("line {line_no} (id {id}): no \"prompt\", \"prompt_ids\" or \"messages\"")
            }
            _ => anyhow::bail!("line {line_no} (id {id}): give only one of \"prompt\", \"prompt_ids\", \"messages\""),
        };
        if prompt.is_empty() {
            anyhow::bail!("line {line_no} (id {id}): the prompt is empty");
        }
        let sampler = SamplerConfig {
            temperature: self.temperature.unwrap_or(defaults.temperature),
            top_p: self.top_p.unwrap_or(defaults.top_p),
            top_k: self.top_k.unwrap_or(defaults.top_k),
            presence_penalty: self.presence_penalty.unwrap_or(defaults.presence_penalty),
            frequency_penalty: self.frequency_penalty.unwrap_or(defaults.frequency_penalty),
        };
        sampler.validate().map_err(|e| anyhow::anyhow!("line {line_no} (id {id}): {e}"))?;
        let stop = super::chat_input::stop_sequences(self.stop)
            .map_err(|e| anyhow::anyhow!("line {line_no} (id {id}): {}", e.message))?;
        let max_tokens = self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if max_tokens == 0 {
            anyhow::bail!("line {line_no} (id {id}): max_tokens must be at least 1");
        }
        Ok(Request {
            id,
            prompt,
            max_tokens,
            sampler,
            seed: self.seed.unwrap_or(0),
            stop,
            ignore_eos: self.ignore_eos,
            mode: self.mode,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FinishReason {
    Stop,
    Length,
    Cancelled,
    Error,
}

/// Per-request figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub route: String,
    pub prefill_s: f64,
    pub decode_s: f64,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    pub verify_cycles: usize,
    pub accepted_drafts: usize,
    pub rejected_drafts: usize,
    pub acceptance_rate: f64,
    pub tokens_per_cycle: f64,
    /// The widest cohort the row decoded in (1 = alone).
    pub real_width: usize,
    /// Arrival to admission.
    pub queue_wait_s: f64,
    /// Arrival to the first token.
    #[serde(default)]
    pub ttft_s: f64,
    /// The lane's cycle count when the row began decoding (0 outside a continuous lane).
    #[serde(default)]
    pub joined_at_cycle: u64,
    /// The mode the row decoded in (what it asked for, or AR where the engine has no MTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<GenerationMode>,
    /// Prompt tokens resumed from the prompt cache rather than read (0: read from scratch).
    #[serde(default)]
    pub cached_tokens: usize,
    /// How the cached prefix serves, where one did: `exact` (the bits of a fresh read) or
    /// `inexact` (allowed by the user where a resumed read may differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<super::prompt_cache::Reuse>,
}

/// One line of `generate` output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestResult {
    pub id: String,
    pub token_ids: Vec<u32>,
    pub text: String,
    pub finish_reason: FinishReason,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The request was refused before any model work, for a fault of its own (bad sampler
    /// values, a prompt over the context window or memory): a server answers it with 400.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
    pub stats: Stats,
}

impl RequestResult {
    /// A result with no tokens that ended for `reason` without an error (cancelled before it
    /// ran, or the start a client fills in).
    pub fn ended(id: &str, reason: FinishReason) -> Self {
        Self {
            id: id.to_owned(),
            token_ids: Vec::new(),
            text: String::new(),
            finish_reason: reason,
            error: None,
            refused: false,
            stats: Stats::default(),
        }
    }

    pub fn error(id: &str, message: String) -> Self {
        Self { error: Some(message), ..Self::ended(id, FinishReason::Error) }
    }

    /// The request itself cannot run (see [`RequestResult::refused`]).
    pub fn refused(id: &str, message: String) -> Self {
        Self { refused: true, ..Self::error(id, message) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40: a request line may name its own generation mode; an engine without MTP serves
    /// every row AR, an MTP engine each row the mode it asks for.
    #[test]
    fn a_request_may_ask_for_its_own_mode() {
        let line: RequestLine = serde_json::from_str(r#"{"prompt":"hi","mode":"ar"}"#).unwrap();
        assert_eq!(line.into_request(1, &SamplerConfig::default()).unwrap().mode, Some(GenerationMode::Ar));
        let line: RequestLine = serde_json::from_str(r#"{"prompt":"hi"}"#).unwrap();
        assert_eq!(line.into_request(1, &SamplerConfig::default()).unwrap().mode, None);
        assert!(serde_json::from_str::<RequestLine>(r#"{"prompt":"hi","mode":"fast"}"#).is_err());
        use GenerationMode::{Ar, Mtp};
        let served: Vec<_> = [(Mtp, None), (Mtp, Some(Ar)), (Mtp, Some(Mtp)), (Ar, None), (Ar, Some(Mtp))]
            .into_iter()
            .map(|(engine, asked)| engine.serving(asked))
            .collect();
        assert_eq!(served, [Mtp, Ar, Mtp, Ar, Ar]);
    }
}
