//! The model's tokenizer (`tokenizer.json`) and chat template (`tokenizer_config.json` or
//! `chat_template.jinja`), rendered with minijinja the way HF's Jinja templates expect.

use std::path::Path;

use std::str::FromStr;

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;

/// One chat turn.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        Self { role: role.to_owned(), content: content.to_owned() }
    }
}

#[derive(Clone)]
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    chat_template: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    eos_ids: Vec<u32>,
    /// The most input bytes one token can stand for, where the tokenizer covers every byte of
    /// its input with tokens (byte-level BPE, no normalizer that drops text): the vocabulary's
    /// longest entry. None where a pre-tokenizer or normalizer may drop input (whitespace split).
    longest_token_bytes: Option<usize>,
}

/// Whether a tokenizer covers every input byte with a token: a byte-level pre-tokenizer, and no
/// normalizer other than Unicode composition (which shrinks text by well under the margin
/// [`TextTokenizer::fewest_tokens`] allows). Read from the loaded tokenizer's own parts, as its
/// tokenizer.json writes them.
fn covers_every_byte(inner: &tokenizers::Tokenizer) -> bool {
    let as_json = |part: Option<Value>| part.unwrap_or(Value::Null);
    let pre = as_json(inner.get_pre_tokenizer().and_then(|p| serde_json::to_value(p).ok()));
    let normalizer = as_json(inner.get_normalizer().and_then(|n| serde_json::to_value(n).ok()));
    let byte_level = pre.to_string().contains("\"ByteLevel\"");
    let types: Vec<&str> = std::iter::once(&normalizer)
        .chain(normalizer.get("normalizers").and_then(Value::as_array).into_iter().flatten())
        .filter_map(|x| x.get("type").and_then(Value::as_str))
        .collect();
    let normalizer_kept = types.iter().all(|t| matches!(*t, "NFC" | "NFKC" | "NFD" | "NFKD" | "Sequence"));
    byte_level && normalizer_kept
}

fn token_text(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Object(o)) => o.get("content").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    }
}

impl TextTokenizer {
    pub fn load(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            bail!("no tokenizer.json in {}", dir.display());
        }
        let text =
            crate::model::formats::files::read_bounded(&path, crate::model::formats::files::MAX_TOKENIZER_BYTES)?;
        let inner = tokenizers::Tokenizer::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: cannot read tokenizer: {e}", path.display()))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: Value = if cfg_path.exists() {
            let text = crate::model::formats::files::read_text(&cfg_path)?;
            serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", cfg_path.display()))?
        } else {
            Value::Null
        };
        let mut chat_template = cfg.get("chat_template").and_then(Value::as_str).map(str::to_owned);
        let jinja = dir.join("chat_template.jinja");
        if chat_template.is_none() && jinja.exists() {
            chat_template = Some(crate::model::formats::files::read_text(&jinja)?);
        }
        let bos_token = token_text(cfg.get("bos_token"));
        let eos_token = token_text(cfg.get("eos_token"));
        let mut eos_ids = Vec::new();
        if let Some(eos) = &eos_token
            && let Some(id) = inner.token_to_id(eos)
        {
            eos_ids.push(id);
        }
        let longest_token_bytes = covers_every_byte(&inner)
            .then(|| inner.get_vocab(true).keys().map(String::len).max())
            .flatten()
            .map(|n| n.max(1));
        Ok(Self { inner, chat_template, bos_token, eos_token, eos_ids, longest_token_bytes })
    }

    /// At least how many tokens `bytes` bytes of text become, known without tokenizing them
    /// (None where the tokenizer may drop input). A fourfold margin covers Unicode normalization.
    pub fn fewest_tokens(&self, bytes: usize) -> Option<usize> {
        self.longest_token_bytes.map(|longest| bytes / (4 * longest))
    }

    /// A tokenizer whose token i is the word `t{i}`, for synthetic models: they have weights
    /// but no vocabulary, and the engine still decodes what it emits.
    pub fn numbered(vocab: usize) -> Result<Self> {
        let words: serde_json::Map<String, Value> = (0..vocab).map(|i| (format!("t{i}"), Value::from(i))).collect();
        let spec = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": words, "unk_token": "t0"},
        });
        let inner = tokenizers::Tokenizer::from_str(&spec.to_string())
            .map_err(|e| anyhow::anyhow!("cannot build a numbered tokenizer of {vocab} tokens: {e}"))?;
        Ok(Self {
            inner,
            chat_template: None,
            bos_token: None,
            eos_token: None,
            eos_ids: Vec::new(),
            longest_token_bytes: None,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Ids that end generation (the tokenizer's eos; the model config may add more).
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn has_chat_template(&self) -> bool {
        self.chat_template.is_some()
    }

    /// Encode text as it stands (special tokens written in it are recognised; none are added).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Render the chat template over `messages`, bounded in steps, output, memory and time
    /// (`template`): a template that exceeds a bound fails this request, never the process.
    pub fn apply_chat_template(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let template = self.chat_template.as_deref().context("this model's tokenizer has no chat template")?;
        super::template::render(&super::template::Job {
            template,
            messages,
            add_generation_prompt,
            bos_token: self.bos_token.as_deref().unwrap_or_default(),
            eos_token: self.eos_token.as_deref().unwrap_or_default(),
        })
    }
}

/// Turns a growing list of ids into text deltas without splitting a multi-byte character, and
/// without re-decoding the whole answer each token: only a short window of recent ids is decoded
/// (byte-level BPE needs a little left context to place spaces), so each token costs O(1).
pub struct StreamDecoder {
    ids: Vec<u32>,
    /// Start of the decoding window.
    prefix: usize,
    /// End of what has been emitted.
    read: usize,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamDecoder {
    pub fn new() -> Self {
        Self { ids: Vec::new(), prefix: 0, read: 0 }
    }

    /// Add ids; returns the new text, possibly empty while a character is incomplete.
    pub fn push(&mut self, tok: &TextTokenizer, ids: &[u32]) -> Result<String> {
        self.ids.extend_from_slice(ids);
        let seen = tok.decode(&self.ids[self.prefix..self.read], true)?;
        let now = tok.decode(&self.ids[self.prefix..], true)?;
        if now.len() <= seen.len()
            || now.ends_with('\u{FFFD}')
            || !now.is_char_boundary(seen.len())
            || !now.starts_with(&seen)
        {
            return Ok(String::new());
        }
        let delta = now[seen.len()..].to_owned();
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(delta)
    }

    /// Whatever is left (a trailing incomplete character comes out as U+FFFD).
    pub fn finish(&mut self, tok: &TextTokenizer) -> Result<String> {
        let seen = tok.decode(&self.ids[self.prefix..self.read], true)?;
        let now = tok.decode(&self.ids[self.prefix..], true)?;
        self.prefix = self.read;
        self.read = self.ids.len();
        Ok(if now.len() > seen.len() && now.is_char_boundary(seen.len()) {
            now[seen.len()..].to_owned()
        } else {
            String::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture_tokenizer() -> TextTokenizer {
        TextTokenizer::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/qwen35_moe_4bit"),
        )
        .unwrap()
    }

    #[test]
    fn streamed_deltas_concatenate_to_the_full_decode() {
        let tok = fixture_tokenizer();
        let text = "Numbers 12345 and   spaces, café naïve — 漢字 emoji 🙂 end.";
        let ids = tok.encode(text).unwrap();
        let mut dec = StreamDecoder::new();
        let mut out = String::new();
        for id in &ids {
            out.push_str(&dec.push(&tok, &[*id]).unwrap());
        }
        out.push_str(&dec.finish(&tok).unwrap());
        assert_eq!(out, tok.decode(&ids, true).unwrap());
        assert_eq!(out, text);
    }

    #[test]
    fn chat_template_renders_chatml_turns() {
        let tok = fixture_tokenizer();
        let s = tok
            .apply_chat_template(
                &[
                    ChatMessage::new("user", "Hi"),
                    ChatMessage::new("assistant", "Hello"),
                    ChatMessage::new("user", "Bye"),
                ],
                true,
            )
            .unwrap();
        assert!(s.contains("<|im_start|>user\nHi<|im_end|>"), "{s}");
        assert!(s.contains("<|im_start|>assistant\nHello<|im_end|>"), "{s}");
        assert!(s.ends_with("<|im_start|>assistant\n"), "{s}");
    }
}
