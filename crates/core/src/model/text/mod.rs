//! Text in and out of the model: the tokenizer (`tokenizer.json`) and the chat template
//! (`tokenizer_config.json` or `chat_template.jinja`), both read in `tokenizer`; the template is
//! rendered with minijinja in `template`, in a child process with its own memory and time limits
//! (`sandbox`). A GGUF's tokenizer is rebuilt as a `tokenizer.json` by
//! [`super::formats::gguf_tokenizer`] and then read here like any other.

pub mod sandbox;
pub mod template;
pub mod tokenizer;
