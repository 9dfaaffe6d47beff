//! The app's side of the context window (`tui::window`): counting each idle pane's draft once
//! it settles, refusing a message that would not fit and offering to leave the oldest turns out
//! (recorded in the transcript, never done silently).

use super::{App, EngineStatus};
use crate::config::keymap::Command;
use crate::tui::action::Effect;
use crate::tui::pane::Turn;
use crate::tui::transcript::Record;
use crate::tui::window::{DropOffer, PromptCounter, draft_key, needed, turns_to_drop};

/// Template tokens a turn adds around its two messages (role markers, ends of turn): an estimate
/// on the side of leaving out enough.
const TURN_OVERHEAD: usize = 12;

impl App {
    /// Count each idle pane's draft once it settles, so the pane shows it against the window
    /// before it is sent.
    pub(in crate::tui) fn count_drafts(&mut self, fx: &mut Vec<Effect>) {
        let EngineStatus::Ready(summary) = &self.engine else { return };
        if summary.counter.is_none() {
            return;
        }
        for index in 0..self.panes.len() {
            if self.panes[index].input.is_blank() || self.panes[index].is_busy() {
                self.panes[index].window.clear();
                continue;
            }
            let key = self.draft_key_of(index);
            let tick = self.tick;
            if self.panes[index].window.wants_count(key, tick) {
                let chat = self.chat_settings(index);
                let pane = &self.panes[index];
                let messages = pane.messages_with(chat.system.as_deref(), pane.input.text());
                fx.push(Effect::CountDraft { pane: pane.id, key, messages });
            }
        }
    }

    /// The key of pane `index`'s draft as it would be sent now.
    pub fn draft_key_of(&self, index: usize) -> u64 {
        let pane = &self.panes[index];
        let chat = self.chat_settings(index);
        let turns: Vec<(&str, &str)> = pane.sent_turns().map(|t| (t.user.as_str(), t.answer.as_str())).collect();
        draft_key(chat.system.as_deref(), &turns, pane.input.text(), chat.max_tokens)
    }

    /// Before pane `index` sends: true to stop here. A draft counted over the window is not sent;
    /// the first send offers to leave out the fewest oldest turns that make room, a second send
    /// of the same draft does so (marked in the pane and the transcript) and goes on. A draft not
    /// counted yet goes (the engine still checks it).
    pub(in crate::tui) fn stop_for_window(&mut self, index: usize, fx: &mut Vec<Effect>) -> bool {
        let EngineStatus::Ready(summary) = &self.engine else { return false };
        let Some(counter) = summary.counter.clone() else { return false };
        let window = usize::try_from(summary.max_context).unwrap_or(0);
        let key = self.draft_key_of(index);
        let max_tokens = self.chat_settings(index).max_tokens;
        let Some(counted) = self.panes[index].window.count_of(key) else { return false };
        let need = needed(counted.prompt, max_tokens);
        if need <= window {
            return false;
        }
        if let Some(offer) = self.panes[index].window.offer.filter(|o| o.key == key) {
            self.leave_out_oldest(index, offer.turns, fx);
            return false;
        }
        let sizes: Vec<usize> = self.panes[index].sent_turns().map(|t| turn_size(&counter, t)).collect();
        let number = index + 1;
        match turns_to_drop(&sizes, counted.prompt, max_tokens, window) {
            Some(turns) if turns > 0 => {
                let send = self.keymap.describe_keys(Command::Send);
                let cancel = self.keymap.describe_keys(Command::Cancel);
                let plural = if turns == 1 { "" } else { "s" };
                self.panes[index].window.offer = Some(DropOffer { key, turns });
                self.notify_long(
                    format!(
                        "pane {number}: this message needs {need} tokens with max_tokens {max_tokens}, over the \
                         {window}-token context window: {send} again leaves out the oldest {turns} turn{plural} \
                         (kept on screen), {cancel} keeps editing"
                    ),
                    true,
                );
            }
            _ => self.notify_long(
                format!(
                    "pane {number}: this message needs {need} tokens with max_tokens {max_tokens}, over the \
                     {window}-token context window even without the earlier turns: shorten it or lower max_tokens"
                ),
                true,
            ),
        }
        true
    }

    /// Leave the `turns` oldest turns of pane `index` out of what it sends from now on.
    fn leave_out_oldest(&mut self, index: usize, turns: usize, fx: &mut Vec<Effect>) {
        let pane = &mut self.panes[index];
        let left_out: Vec<String> = pane.sent_turns().take(turns).map(|t| t.request_id.clone()).collect();
        for turn in pane.turns.iter_mut().filter(|t| left_out.contains(&t.request_id)) {
            turn.dropped = true;
        }
        for request in left_out {
            fx.push(Effect::Record { pane: pane.id, record: Record::Dropped { request } });
        }
        pane.window.offer = None;
        let plural = if turns == 1 { "" } else { "s" };
        self.notify(
            format!("pane {}: the oldest {turns} turn{plural} left out to fit the context window", index + 1),
            false,
        );
    }

    /// Esc while an offer stands: nothing is left out. True when there was one.
    pub(in crate::tui) fn withdraw_offer(&mut self) -> bool {
        let focus = self.focus;
        if self.panes[focus].window.offer.take().is_none() {
            return false;
        }
        self.notify(format!("pane {}: nothing left out; the message stays in the box", focus + 1), false);
        true
    }
}

/// A turn's size in the prompt, estimated: its two messages' tokens and the template's.
fn turn_size(counter: &PromptCounter, turn: &Turn) -> usize {
    let text = |s: &str| counter.text(s).unwrap_or(s.len());
    text(&turn.user) + text(&turn.answer) + TURN_OVERHEAD
}
