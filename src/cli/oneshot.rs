//! `cohort "prompt"`: one question to the profile's model, the answer streamed to stdout as it
//! is generated, then exit. No terminal is needed (pipes and scripts welcome); `-` reads the
//! prompt from stdin. The profile gives the model, the system prompt, the sampler and
//! max_tokens, as for a TUI pane; `--model` and `--dtype` override it.
//!
//! stdout holds the answer alone, with a newline after it; an answer cut at max_tokens says so
//! on stderr. Errors (no model, a prompt the engine refuses) go to stderr with exit code 1.

use std::io::{IsTerminal as _, Read as _};

use anyhow::{Context as _, Result, bail};

use super::exit;
use crate::config::model_args::ModelArgs;
use crate::config::profile::{Settings, load_startup_profile};
use crate::engine::request::{FinishReason, Prompt, Request};
use crate::engine::row::RowEvent;
use crate::model::text::tokenizer::ChatMessage;
use crate::platform::paths::Paths;
use crate::tui::TuiArgs;

/// The largest prompt `-` reads from stdin.
const MOST_STDIN: u64 = 32 << 20;

pub fn run(args: TuiArgs, paths: &Paths) -> Result<u8> {
    let tui_only = [
        (args.resume.is_some(), "--resume"),
        (args.attach.is_some(), "--attach"),
        (args.theme.is_some(), "--theme"),
        (args.panes.is_some(), "--panes"),
    ];
    if let Some((_, flag)) = tui_only.iter().find(|(given, _)| *given) {
        bail!(
            "{flag} is an option of the TUI; a one-shot prompt (cohort \"...\") takes --profile, --model and --dtype"
        );
    }
    if super::stdout::closed_at_start() {
        bail!("stdout is closed: the answer would go nowhere (redirect it to a file instead)");
    }
    let prompt = match args.prompt.as_deref() {
        Some("-") => read_stdin()?,
        Some(p) => p.to_owned(),
        None => bail!("no prompt"),
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    let loaded = load_startup_profile(args.profile.as_deref(), paths)?;
    let settings = Settings::resolve(&loaded, &args.overrides())?;
    settings.resolve_model()?;
    let (model, setup) = ModelArgs::from_settings(&settings);
    let engine = model.start_engine(setup)?;
    let mut messages = Vec::new();
    if let Some(system) = &settings.system {
        messages.push(ChatMessage::new("system", system));
    }
    messages.push(ChatMessage::new("user", &prompt));
    let request = Request {
        id: "oneshot".into(),
        prompt: Prompt::Chat(messages),
        max_tokens: settings.max_tokens,
        sampler: settings.sampler,
        seed: settings.seed,
        stop: Vec::new(),
        ignore_eos: settings.ignore_eos,
        mode: None,
    };
    let submission = engine.submit(request);
    let mut out = std::io::stdout().lock();
    let mut printed = String::new();
    loop {
        let event = submission.events.recv().context("the engine stopped before the answer finished")?;
        let (text, done) = match event {
            RowEvent::Delta { text, .. } => (text, None),
            // The result's text is the whole answer: what the stream has not shown yet is its tail.
            RowEvent::Done(result) => {
                let tail = result.text.strip_prefix(printed.as_str()).unwrap_or_default().to_owned();
                (tail, Some(result))
            }
            _ => continue,
        };
        if let Err(e) = write_flushed(&mut out, &text) {
            // A reader that has gone (`| head`) wants no more: stop quietly.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                engine.cancel(&submission.id);
                return Ok(exit::OK);
            }
            return Err(e).context("cannot write the answer to stdout");
        }
        printed.push_str(&text);
        let Some(result) = done else { continue };
        // A newline ends the answer (an empty one too); a failure with nothing shown prints none.
        let nothing_shown =
            printed.is_empty() && matches!(result.finish_reason, FinishReason::Error | FinishReason::Cancelled);
        if !(printed.ends_with('\n') || nothing_shown) {
            let _ = write_flushed(&mut out, "\n");
        }
        return match result.finish_reason {
            FinishReason::Stop => Ok(exit::OK),
            FinishReason::Length => {
                eprintln!(
                    "cohort: the answer stopped at max_tokens ({}); a profile's max_tokens allows more",
                    settings.max_tokens
                );
                Ok(exit::OK)
            }
            FinishReason::Error | FinishReason::Cancelled => {
                bail!("{}", result.error.unwrap_or_else(|| "the answer was cancelled".into()))
            }
        };
    }
}

fn write_flushed(out: &mut impl std::io::Write, text: &str) -> std::io::Result<()> {
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The prompt from stdin (`cohort -`), less one trailing newline.
fn read_stdin() -> Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!("cohort: reading the prompt from stdin (end it with ctrl+d)");
    }
    let mut text = String::new();
    stdin.lock().take(MOST_STDIN + 1).read_to_string(&mut text).context("cannot read the prompt from stdin")?;
    if text.len() as u64 > MOST_STDIN {
        bail!("the prompt on stdin is over 32 MB");
    }
    let text = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    Ok(text.to_owned())
}
