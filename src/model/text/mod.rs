//! Text in and out of the model: the tokenizer (`tokenizer.json`) and the chat template
//! (`tokenizer_config.json` or `chat_template.jinja`, rendered with minijinja), both in
//! `tokenizer`. A GGUF's tokenizer is rebuilt as a `tokenizer.json` by
//! [`super::formats::gguf_tokenizer`] and then read here like any other.

pub mod tokenizer;
