//! The intake: every command for the model-owner thread passes through a thread of its own,
//! which tokenizes and checks a submitted prompt before the request is queued. A long prompt
//! (a pasted document, a 4 MB request body) is then tokenized beside the rows the engine runs,
//! not between two of their steps; a request that cannot run is refused at once, whatever
//! the queue holds; and a request that waits for a row hears at once that it is queued
//! ([`RowEvent::Queued`]: a server sends a stream's headers on it). Commands keep their order.

use std::sync::Arc;
use std::sync::mpsc;

use super::owner::OwnerCommand;
use super::prepare::{PromptLimits, checked_prompt};
use super::request::{Prompt, RequestResult};
use super::row::RowEvent;
use crate::model::text::tokenizer::TextTokenizer;

/// Run until the handle lets go of its sender: pass every command on to the owner, a submitted
/// prompt as its token ids once checked.
pub fn run_intake(
    tok: Arc<TextTokenizer>,
    limits: PromptLimits,
    rx: mpsc::Receiver<OwnerCommand>,
    owner: mpsc::Sender<OwnerCommand>,
) {
    for cmd in rx {
        let cmd = match cmd {
            OwnerCommand::Submit { mut req, cancel, events, arrived } => {
                // A request cancelled before it got here goes on as it is: the owner ends it.
                if !cancel.is_cancelled() {
                    match checked_prompt(&tok, limits, &req) {
                        Ok((ids, _)) => {
                            let _ = events.send(RowEvent::Queued { id: req.id.clone(), prompt_tokens: ids.len() });
                            req.prompt = Prompt::Ids(ids);
                        }
                        Err(e) => {
                            let _ = events
                                .send(RowEvent::Done(Box::new(RequestResult::refused(&req.id, format!("{e:#}")))));
                            continue;
                        }
                    }
                }
                OwnerCommand::Submit { req, cancel, events, arrived }
            }
            other => other,
        };
        if let Err(mpsc::SendError(OwnerCommand::Submit { req, events, .. })) = owner.send(cmd) {
            let _ =
                events.send(RowEvent::Done(Box::new(RequestResult::error(&req.id, "the engine has stopped".into()))));
        }
    }
}
