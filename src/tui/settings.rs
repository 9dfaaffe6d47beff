//! A pane's settings form: the values every request of the pane carries (system prompt, sampler,
//! max_tokens, generation mode), typed as text, checked as the engine checks them before anything
//! is applied. A blank mode is the engine's.

use super::input::InputLine;
use crate::config::profile::ChatSettings;
use crate::engine::api::GenerationMode;
use crate::engine::api::SamplerConfig;
use crate::engine::api::VERIFY_SLACK;

/// The form's fields, top to bottom: (name as the engine and profiles spell it, label, range).
pub const FIELDS: [(&str, &str, &str); 8] = [
    ("system", "system prompt", ""),
    ("temperature", "temperature", "0 = greedy"),
    ("top_p", "top_p", "(0, 1]; 1 = off"),
    ("top_k", "top_k", "0 = off; at most 1024"),
    ("max_tokens", "max_tokens", "at least 1"),
    ("presence_penalty", "presence_penalty", "0 = off"),
    ("frequency_penalty", "frequency_penalty", "0 = off"),
    ("mode", "generation mode", "mtp or ar; blank = the engine's"),
];

pub const SYSTEM: usize = 0;
const TEMPERATURE: usize = 1;
const TOP_P: usize = 2;
const TOP_K: usize = 3;
pub const MAX_TOKENS: usize = 4;
const PRESENCE: usize = 5;
const FREQUENCY: usize = 6;
pub const MODE: usize = 7;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsForm {
    /// The pane's id (not its position, which a closed pane can shift).
    pub pane: u32,
    /// The field being edited (an index into `FIELDS`).
    pub field: usize,
    /// One input per field, as typed.
    pub inputs: Vec<InputLine>,
    /// Why the last apply was refused (cleared by the next key).
    pub error: Option<String>,
}

impl SettingsForm {
    pub fn new(pane: u32, values: &ChatSettings) -> SettingsForm {
        let mut form = SettingsForm { pane, field: SYSTEM, inputs: Vec::new(), error: None };
        form.fill(values);
        form
    }

    /// Put `values` in every field (as typed text; numbers written short: `0.6`, `1`).
    pub fn fill(&mut self, values: &ChatSettings) {
        let s = &values.sampler;
        let text = [
            values.system.clone().unwrap_or_default(),
            s.temperature.to_string(),
            s.top_p.to_string(),
            s.top_k.to_string(),
            values.max_tokens.to_string(),
            s.presence_penalty.to_string(),
            s.frequency_penalty.to_string(),
            values.mode.map(GenerationMode::name).unwrap_or_default().to_owned(),
        ];
        self.inputs = text.iter().map(|t| InputLine::new(t)).collect();
        self.error = None;
    }

    /// The next field down (`step` 1) or up (-1), wrapping around.
    pub fn move_by(&mut self, step: isize) {
        let n = FIELDS.len() as isize;
        self.field = (self.field as isize + step).rem_euclid(n) as usize;
    }

    /// The values typed, checked as the engine checks a request's (and max_tokens against a
    /// `max_context`-token window, when the model is known); else the field at fault and a
    /// message naming it.
    pub fn parse(&self, max_context: Option<i32>) -> Result<ChatSettings, (usize, String)> {
        let text = |i: usize| self.inputs[i].text().trim();
        let number = |i: usize| -> Result<f64, (usize, String)> {
            let t = text(i);
            t.parse::<f64>().map_err(|_| (i, format!("{}: \"{t}\" is not a number ({})", FIELDS[i].0, FIELDS[i].2)))
        };
        let whole = |i: usize| -> Result<usize, (usize, String)> {
            let t = text(i);
            t.parse::<usize>()
                .map_err(|_| (i, format!("{}: \"{t}\" is not a whole number ({})", FIELDS[i].0, FIELDS[i].2)))
        };
        let sampler = SamplerConfig {
            temperature: number(TEMPERATURE)?,
            top_p: number(TOP_P)?,
            top_k: whole(TOP_K)?,
            presence_penalty: number(PRESENCE)?,
            frequency_penalty: number(FREQUENCY)?,
        };
        if let Err(e) = sampler.validate() {
            let field = FIELDS.iter().position(|f| f.0 == e.setting).unwrap_or(TEMPERATURE);
            return Err((field, e.to_string()));
        }
        let max_tokens = whole(MAX_TOKENS)?;
        if max_tokens == 0 {
            return Err((MAX_TOKENS, "max_tokens = 0: must be at least 1".into()));
        }
        if let Some(most) = max_context.and_then(most_tokens)
            && max_tokens > most
        {
            let window = max_context.unwrap_or_default();
            return Err((
                MAX_TOKENS,
                format!(
                    "max_tokens = {max_tokens}: over the model's context window of {window} tokens (at most {most}, \
                     less as the conversation grows)"
                ),
            ));
        }
        let mode = match text(MODE).to_ascii_lowercase().as_str() {
            "" => None,
            "mtp" => Some(GenerationMode::Mtp),
            "ar" => Some(GenerationMode::Ar),
            _ => return Err((MODE, format!("mode: \"{}\" is not a mode ({})", text(MODE), FIELDS[MODE].2))),
        };
        let system = Some(self.inputs[SYSTEM].text().to_owned()).filter(|s| !s.trim().is_empty());
        Ok(ChatSettings { system, sampler, max_tokens, mode })
    }
}

/// The most max_tokens a `max_context`-token window allows with a one-token prompt (the engine
/// refuses prompt + max_tokens + its verify slack over the window).
pub fn most_tokens(max_context: i32) -> Option<usize> {
    let window = usize::try_from(max_context).ok().filter(|w| *w > 0)?;
    Some(window.saturating_sub(VERIFY_SLACK + 1).max(1))
}

/// A pane's settings in a few characters each, most telling first: `t0.6`, `p0.95`, `k20` (or
/// `greedy`), `max256`, the penalties when set (`pp0.5`, `fp0.5`), `sys` with a system prompt,
/// and the pane's own mode when it has one (`ar`, `mtp`).
pub fn summary(values: &ChatSettings) -> Vec<String> {
    let s = &values.sampler;
    let mut parts = Vec::new();
    if s.is_greedy() {
        parts.push("greedy".to_owned());
    } else {
        parts.extend([format!("t{}", s.temperature), format!("p{}", s.top_p), format!("k{}", s.top_k)]);
    }
    parts.push(format!("max{}", values.max_tokens));
    if s.presence_penalty != 0.0 {
        parts.push(format!("pp{}", s.presence_penalty));
    }
    if s.frequency_penalty != 0.0 {
        parts.push(format!("fp{}", s.frequency_penalty));
    }
    if values.system.is_some() {
        parts.push("sys".to_owned());
    }
    if let Some(mode) = values.mode {
        parts.push(mode.name().to_owned());
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::MAX_TOP_K;

    fn values() -> ChatSettings {
        ChatSettings { system: None, sampler: SamplerConfig::default(), max_tokens: 256, mode: None }
    }

    #[test]
    fn a_filled_form_parses_back_to_its_values() {
        let mut v = values();
        v.system = Some("line one\nline two".into());
        v.sampler.presence_penalty = -0.5;
        assert_eq!(SettingsForm::new(1, &v).parse(Some(4096)), Ok(v.clone()));
        for mode in [GenerationMode::Ar, GenerationMode::Mtp] {
            v.mode = Some(mode);
            assert_eq!(SettingsForm::new(1, &v).parse(Some(4096)), Ok(v.clone()));
        }
        let mut form = SettingsForm::new(1, &v);
        form.inputs[SYSTEM].set("   ");
        assert_eq!(form.parse(None).map(|s| s.system), Ok(None), "a blank system prompt is none");
        form.inputs[MODE].set(" AR ");
        assert_eq!(form.parse(None).map(|s| s.mode), Ok(Some(GenerationMode::Ar)));
        form.inputs[MODE].set("");
        assert_eq!(form.parse(None).map(|s| s.mode), Ok(None), "a blank mode is the engine's");
        form.inputs[MODE].set("fast");
        assert_eq!(
            form.parse(None).unwrap_err(),
            (MODE, "mode: \"fast\" is not a mode (mtp or ar; blank = the engine's)".into())
        );
    }

    #[test]
    fn the_summary_is_short_and_says_greedy() {
        assert_eq!(summary(&values()), ["t0.6", "p0.95", "k20", "max256"]);
        let mut v = values();
        v.sampler = SamplerConfig::greedy();
        v.sampler.frequency_penalty = 0.5;
        v.system = Some("x".into());
        assert_eq!(summary(&v), ["greedy", "max256", "fp0.5", "sys"]);
        v.mode = Some(GenerationMode::Ar);
        assert_eq!(summary(&v).last().map(String::as_str), Some("ar"));
    }

    #[test]
    fn the_ranges_shown_are_the_engines() {
        assert!(FIELDS[TOP_K].2.ends_with(&format!("at most {MAX_TOP_K}")));
    }

    #[test]
    fn the_window_bounds_max_tokens() {
        assert_eq!(most_tokens(4096), Some(4093));
        assert_eq!(most_tokens(0), None);
        let mut form = SettingsForm::new(1, &values());
        form.inputs[MAX_TOKENS].set("4093");
        assert!(form.parse(Some(4096)).is_ok());
        form.inputs[MAX_TOKENS].set("4094");
        assert_eq!(form.parse(Some(4096)).unwrap_err().0, MAX_TOKENS);
        assert!(form.parse(None).is_ok(), "unknown window: the engine checks it");
    }
}
