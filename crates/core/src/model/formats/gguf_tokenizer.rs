//! A HuggingFace `tokenizer.json` (and `tokenizer_config.json`) rebuilt from a GGUF file's
//! `tokenizer.*` metadata, for byte-level BPE vocabularies (`tokenizer.ggml.model = "gpt2"`).
//!
//! The pre-tokenizer follows llama.cpp's reading of `tokenizer.ggml.pre` (llama-vocab.cpp):
//! - `smollm` (and `starcoder`, `refact`, `command-r`, `codeshell`, `exaone`, `minerva`, which
//!   llama.cpp treats the same way): first every `\p{N}` code point is its own piece, then the
//!   GPT-2 regex `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)` (plus
//!   tokenizers' trailing `\s+`). In `tokenizers` terms that is HF SmolLM2's own pipeline:
//!   `Digits(individual_digits)` then `ByteLevel(add_prefix_space=false, use_regex=true)`;
//! - `gpt-2` / `gpt2` / `default`: ByteLevel with its GPT-2 regex;
//! - `llama-bpe` (Llama 3) and `qwen2`: their split regexes, then ByteLevel without a regex.
//!
//! Tokens of type CONTROL (3) become special added tokens, USER_DEFINED (4) non-special added
//! tokens; everything else is the BPE vocabulary. Merges are copied as they are.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::gguf::GgufFile;

/// llama.cpp token types.
pub const TOKEN_TYPE_NORMAL: i64 = 1;
pub const TOKEN_TYPE_CONTROL: i64 = 3;
pub const TOKEN_TYPE_USER_DEFINED: i64 = 4;

const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_REGEX: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizers` pre-tokenizer for a `tokenizer.ggml.pre` value.
pub fn pre_tokenizer_for(pre: &str) -> Result<Value> {
    let byte_level_regex =
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
    let byte_level_plain =
        json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false});
    let split = |re: &str| json!({"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false});
    Ok(match pre {
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => json!({
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": true}, byte_level_regex],
        }),
        "gpt-2" | "gpt2" | "default" => byte_level_regex,
        "llama-bpe" | "llama3" => json!({"type": "Sequence", "pretokenizers": [split(LLAMA3_REGEX), byte_level_plain]}),
        "qwen2" => json!({"type": "Sequence", "pretokenizers": [split(QWEN2_REGEX), byte_level_plain]}),
        other => bail!(
            "tokenizer.ggml.pre \"{other}\" is not supported (supported: smollm, starcoder, refact, command-r, codeshell, exaone, minerva, gpt-2, llama-bpe, qwen2)"
        ),
    })
}

/// The tokenizer facts a GGUF carries.
#[derive(Debug, Clone)]
pub struct GgufVocab {
    /// The GGUF file they were read from, which every error names.
    pub path: PathBuf,
    pub tokens: Vec<String>,
    pub token_types: Vec<i64>,
    pub merges: Vec<String>,
    pub pre: String,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub unk: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub chat_template: Option<String>,
}

impl GgufVocab {
    pub fn read(g: &GgufFile) -> Result<Self> {
        let path = g.path.display();
        let model = g.get_str("tokenizer.ggml.model").with_context(|| format!("{path}: no tokenizer.ggml.model"))?;
        if model != "gpt2" {
            bail!("{path}: tokenizer.ggml.model \"{model}\" is not supported (only \"gpt2\", byte-level BPE)");
        }
        let tokens: Vec<String> = g
            .get_str_array("tokenizer.ggml.tokens")?
            .with_context(|| format!("{path}: no tokenizer.ggml.tokens"))?
            .into_iter()
            .map(str::to_owned)
            .collect();
        let token_types =
            g.get_int_array("tokenizer.ggml.token_type")?.unwrap_or_else(|| vec![TOKEN_TYPE_NORMAL; tokens.len()]);
        if token_types.len() != tokens.len() {
            bail!("{path}: {} token types for {} tokens", token_types.len(), tokens.len());
        }
        let merges: Vec<String> = g
            .get_str_array("tokenizer.ggml.merges")?
            .with_context(|| format!("{path}: a gpt2 tokenizer needs tokenizer.ggml.merges"))?
            .into_iter()
            .map(str::to_owned)
            .collect();
        let id = |k: &str| -> Result<Option<u32>> {
            match g.get_i64(k) {
                None => Ok(None),
                Some(v) if v >= 0 && (v as usize) < tokens.len() => Ok(Some(v as u32)),
                Some(v) => bail!("{path}: {k} = {v} is outside the vocabulary of {}", tokens.len()),
            }
        };
        let flag = |k: &str, d: bool| g.get(k).and_then(|v| v.as_bool()).unwrap_or(d);
        Ok(Self {
            path: g.path.clone(),
            pre: g.get_str("tokenizer.ggml.pre").unwrap_or("default").to_owned(),
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            pad: id("tokenizer.ggml.padding_token_id")?,
            add_bos: flag("tokenizer.ggml.add_bos_token", false),
            add_eos: flag("tokenizer.ggml.add_eos_token", false),
            chat_template: g.get_str("tokenizer.chat_template").map(str::to_owned),
            tokens,
            token_types,
            merges,
        })
    }

    fn token(&self, id: Option<u32>) -> Value {
        id.map(|i| Value::String(self.tokens[i as usize].clone())).unwrap_or(Value::Null)
    }

    /// `tokenizer.json` for the HF `tokenizers` library.
    pub fn tokenizer_json(&self) -> Result<Value> {
        let path = self.path.display();
        let mut vocab = serde_json::Map::with_capacity(self.tokens.len());
        for (i, t) in self.tokens.iter().enumerate() {
            if vocab.insert(t.clone(), json!(i)).is_some() {
                bail!("{path}: token {t:?} appears twice in tokenizer.ggml.tokens (second at id {i})");
            }
        }
        let mut added = Vec::new();
        for (i, (t, &ty)) in self.tokens.iter().zip(&self.token_types).enumerate() {
            if ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED {
                added.push(json!({
                    "id": i,
                    "content": t,
                    "single_word": false,
                    "lstrip": false,
                    "rstrip": false,
                    "normalized": false,
                    "special": ty == TOKEN_TYPE_CONTROL,
                }));
            }
        }
        for m in &self.merges {
            let parts: Vec<&str> = m.split(' ').collect();
            if parts.len() != 2 || parts.iter().any(|p| !vocab.contains_key(*p)) {
                bail!(
                    "{path}: merge {m:?} in tokenizer.ggml.merges is not two vocabulary tokens separated by one space"
                );
            }
        }
        let post_processor = match (self.add_bos, self.bos) {
            (true, Some(bos)) => {
                let b = &self.tokens[bos as usize];
                json!({
                    "type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [
                        {"SpecialToken": {"id": b, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                        {"SpecialToken": {"id": b, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}
                    ],
                    "special_tokens": {b: {"id": b, "ids": [bos], "tokens": [b]}},
                })
            }
            _ => Value::Null,
        };
        Ok(json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": pre_tokenizer_for(&self.pre).map_err(|e| anyhow::anyhow!("{path}: {e:#}"))?,
            "post_processor": post_processor,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {
                "type": "BPE",
                "dropout": null,
                "unk_token": null,
                "continuing_subword_prefix": null,
                "end_of_word_suffix": null,
                "fuse_unk": false,
                "byte_fallback": false,
                "ignore_merges": false,
                "vocab": vocab,
                "merges": self.merges,
            },
        }))
    }

    /// `tokenizer_config.json`: special tokens, BOS/EOS handling and the chat template.
    /// `tokenizer_class` is `PreTrainedTokenizerFast` so that transformers (and so mlx-lm)
    /// use tokenizer.json as it is rather than rebuilding a pipeline from vocab and merges.
    pub fn tokenizer_config(&self, model_max_length: Option<i64>) -> Value {
        let mut decoder = serde_json::Map::new();
        for (i, (t, &ty)) in self.tokens.iter().zip(&self.token_types).enumerate() {
            if ty == TOKEN_TYPE_CONTROL || ty == TOKEN_TYPE_USER_DEFINED {
                decoder.insert(
                    i.to_string(),
                    json!({"content": t, "lstrip": false, "normalized": false, "rstrip": false,
                           "single_word": false, "special": ty == TOKEN_TYPE_CONTROL}),
                );
            }
        }
        let mut cfg = json!({
            "add_bos_token": self.add_bos,
            "add_eos_token": self.add_eos,
            "add_prefix_space": false,
            "added_tokens_decoder": decoder,
            "bos_token": self.token(self.bos),
            "eos_token": self.token(self.eos),
            "unk_token": self.token(self.unk),
            "pad_token": self.token(self.pad),
            "clean_up_tokenization_spaces": false,
            "tokenizer_class": "PreTrainedTokenizerFast",
        });
        if let Some(n) = model_max_length {
            cfg["model_max_length"] = json!(n);
        }
        if let Some(t) = &self.chat_template {
            cfg["chat_template"] = json!(t);
        }
        cfg
    }

    /// The ids generation stops at: EOS, plus `<|im_end|>` / `<|endoftext|>` / `<|eot_id|>`
    /// when they are control tokens (chat models end turns with them).
    pub fn eos_ids(&self) -> Vec<u32> {
        let mut out: Vec<u32> = self.eos.into_iter().collect();
        for (i, (t, &ty)) in self.tokens.iter().zip(&self.token_types).enumerate() {
            if ty == TOKEN_TYPE_CONTROL
                && matches!(t.as_str(), "<|im_end|>" | "<|eot_id|>")
                && !out.contains(&(i as u32))
            {
                out.push(i as u32);
            }
        }
        out
    }
}

/// The tokenizer of a GGUF file as a ready `tokenizers::Tokenizer`.
pub fn load_tokenizer(g: &GgufFile) -> Result<tokenizers::Tokenizer> {
    let json = GgufVocab::read(g)?.tokenizer_json()?;
    let text = serde_json::to_string(&json)?;
    text.parse::<tokenizers::Tokenizer>()
        .map_err(|e| anyhow::anyhow!("{}: the rebuilt tokenizer does not load: {e}", g.path.display()))
}
