//! Key bindings: the commands a key can trigger, their default keys, and a profile's `[keys]`
//! overrides (`send_all = ["ctrl+g", "f5"]`). Text editing keys (letters, arrows inside the
//! input, backspace) are not commands: whatever no binding claims goes to the focused input.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Result, bail};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use serde::{Deserialize, Serialize};

/// Everything a key binding can do, named as in a profile's `[keys]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Command {
    Send,
    SendAll,
    Newline,
    /// Put the pane's last message back in the box; sent, it replaces that turn.
    EditLast,
    /// Ask the pane's last question again, in place of its answer.
    Regenerate,
    /// Write the focused pane's input in an external editor.
    Editor,
    Cancel,
    /// Cancel every running answer at once.
    CancelAll,
    Interrupt,
    Quit,
    FocusNext,
    FocusPrev,
    FocusLeft,
    FocusRight,
    FocusUp,
    FocusDown,
    /// Focus pane N (0-based here, `focus_1`..`focus_8` in files).
    FocusPane(u8),
    Zoom,
    Inspector,
    InspectorPanel,
    /// Drill into one row of the inspector.
    InspectRow,
    Help,
    Copy,
    /// Pick any message of the focused pane to copy.
    Select,
    /// Start a new pane from any message of the focused pane's conversation.
    Branch,
    /// Find text in the focused pane's conversation.
    Search,
    /// Write the focused pane's conversation to a Markdown file.
    Export,
    /// The focused pane's own settings (system prompt, sampler, max_tokens).
    Settings,
    NewPane,
    ClosePane,
    ClearPane,
    ScrollUp,
    ScrollDown,
    ScrollBottom,
    /// Scroll the focused pane's code blocks sideways (code is cut at the pane edge, not wrapped).
    CodeLeft,
    CodeRight,
    HistoryPrev,
    HistoryNext,
    Profiles,
    SaveProfile,
    /// The saved sessions: open, rename or delete one.
    Sessions,
}

impl Command {
    /// Every command, in the order the help overlay lists them.
    pub fn all() -> Vec<Command> {
        let mut all = vec![
            Command::Send,
            Command::SendAll,
            Command::Newline,
            Command::EditLast,
            Command::Regenerate,
            Command::Editor,
            Command::Cancel,
            Command::CancelAll,
            Command::Interrupt,
            Command::Quit,
            Command::FocusNext,
            Command::FocusPrev,
            Command::FocusLeft,
            Command::FocusRight,
            Command::FocusUp,
            Command::FocusDown,
        ];
        all.extend((0..8).map(Command::FocusPane));
        all.extend([
            Command::Zoom,
            Command::Inspector,
            Command::InspectorPanel,
            Command::InspectRow,
            Command::Help,
            Command::Copy,
            Command::Select,
            Command::Branch,
            Command::Search,
            Command::Export,
            Command::Settings,
            Command::NewPane,
            Command::ClosePane,
            Command::ClearPane,
            Command::ScrollUp,
            Command::ScrollDown,
            Command::ScrollBottom,
            Command::CodeLeft,
            Command::CodeRight,
            Command::HistoryPrev,
            Command::HistoryNext,
            Command::Profiles,
            Command::SaveProfile,
            Command::Sessions,
        ]);
        all
    }

    /// The name used in profiles.
    pub fn name(self) -> String {
        let fixed = match self {
            Command::Send => "send",
            Command::SendAll => "send_all",
            Command::Newline => "newline",
            Command::EditLast => "edit_last",
            Command::Regenerate => "regenerate",
            Command::Editor => "editor",
            Command::Cancel => "cancel",
            Command::CancelAll => "cancel_all",
            Command::Interrupt => "interrupt",
            Command::Quit => "quit",
            Command::FocusNext => "focus_next",
            Command::FocusPrev => "focus_prev",
            Command::FocusLeft => "focus_left",
            Command::FocusRight => "focus_right",
            Command::FocusUp => "focus_up",
            Command::FocusDown => "focus_down",
            Command::FocusPane(n) => return format!("focus_{}", n + 1),
            Command::Zoom => "zoom",
            Command::Inspector => "inspector",
            Command::InspectorPanel => "inspector_panel",
            Command::InspectRow => "inspect_row",
            Command::Help => "help",
            Command::Copy => "copy",
            Command::Select => "select",
            Command::Branch => "branch",
            Command::Search => "search",
            Command::Export => "export",
            Command::Settings => "settings",
            Command::NewPane => "new_pane",
            Command::ClosePane => "close_pane",
            Command::ClearPane => "clear_pane",
            Command::ScrollUp => "scroll_up",
            Command::ScrollDown => "scroll_down",
            Command::ScrollBottom => "scroll_bottom",
            Command::CodeLeft => "code_left",
            Command::CodeRight => "code_right",
            Command::HistoryPrev => "history_prev",
            Command::HistoryNext => "history_next",
            Command::Profiles => "profiles",
            Command::SaveProfile => "save_profile",
            Command::Sessions => "sessions",
        };
        fixed.to_owned()
    }

    pub fn from_name(name: &str) -> Option<Command> {
        Command::all().into_iter().find(|c| c.name() == name)
    }

    /// One line for the help overlay.
    pub fn describe(self) -> String {
        let fixed = match self {
            Command::Send => "send the focused pane's input (while it answers: queued until the answer ends)",
            Command::SendAll => "send every pane's input at once (or the focused input to all)",
            Command::Newline => "new line in the input",
            Command::EditLast => "edit the focused pane's last message: sent, it replaces that message and its answer",
            Command::Regenerate => "ask the last question again: a new answer replaces the last one",
            Command::Editor => "write the input in $VISUAL / $EDITOR (else vi); what it saves comes back to the box",
            Command::Cancel => "cancel the focused pane's generation (keeps the partial answer); in zoom: back",
            Command::CancelAll => "cancel every pane's running answer (partial answers kept)",
            Command::Interrupt => {
                "cancel the focused generation; else quit (twice within 2 s if anything is on screen)"
            }
            Command::Quit => "quit (running generations are cancelled, answers kept)",
            Command::FocusNext => "focus the next pane",
            Command::FocusPrev => "focus the previous pane",
            Command::FocusLeft => "focus the pane to the left",
            Command::FocusRight => "focus the pane to the right",
            Command::FocusUp => "focus the pane above",
            Command::FocusDown => "focus the pane below",
            Command::FocusPane(n) => return format!("focus pane {}", n + 1),
            Command::Zoom => "zoom the focused pane to full screen (again: back to the grid)",
            Command::Inspector => "show or hide the inspector",
            Command::InspectorPanel => "inspector: all panels, or rows / cohort / memory / queue alone",
            Command::InspectRow => {
                "drill into one row of the inspector, the focused pane's (up/down other rows, esc back)"
            }
            Command::Help => "this help",
            Command::Copy => "copy the focused pane's last answer (OSC 52 and a file)",
            Command::Select => "pick any message of the focused pane to copy (up/down choose, enter copies, esc back)",
            Command::Branch => {
                "branch: a new pane carries the focused pane's conversation up to a message you pick (up/down choose, \
                 enter branches, esc back)"
            }
            Command::Search => {
                "find text in the focused pane's conversation: every match marked, up (enter) / down jump to the one \
                 above / below, esc closes there"
            }
            Command::Export => "save the focused pane's conversation as Markdown (in the session's folder)",
            Command::Settings => {
                "the focused pane's settings: system prompt, temperature, top_p, top_k, max_tokens, penalties"
            }
            Command::NewPane => "add a pane (up to 8)",
            Command::ClosePane => "close the focused pane",
            Command::ClearPane => "start a new conversation in the focused pane",
            Command::ScrollUp => "scroll the conversation up (it holds still while text streams in)",
            Command::ScrollDown => "scroll the conversation down (at the bottom: follow new text)",
            Command::ScrollBottom => "back to the newest text, following it",
            Command::CodeLeft => "scroll code blocks back to the left (their lines are cut at the pane edge)",
            Command::CodeRight => "scroll code blocks right, to show code past the pane edge",
            Command::HistoryPrev => "previous prompt of this pane",
            Command::HistoryNext => "next prompt of this pane",
            Command::Profiles => "pick a profile",
            Command::SaveProfile => "save the current settings as a profile",
            Command::Sessions => "the saved sessions: open one in place of this one, rename or delete one",
        };
        fixed.to_owned()
    }

    /// The keys a command has unless a profile says otherwise.
    pub fn default_keys(self) -> Vec<&'static str> {
        match self {
            Command::Send => vec!["enter"],
            Command::SendAll => vec!["f5", "ctrl+g"],
            // shift+enter reaches the app only where the terminal reports it (the kitty keyboard
            // protocol); alt+enter and ctrl+j work everywhere.
            Command::Newline => vec!["alt+enter", "shift+enter", "ctrl+j"],
            Command::EditLast => vec!["f2"],
            Command::Regenerate => vec!["ctrl+r"],
            Command::Editor => vec!["ctrl+o"],
            Command::Cancel => vec!["esc"],
            Command::CancelAll => vec!["alt+c", "f8"],
            Command::Interrupt => vec!["ctrl+c"],
            Command::Quit => vec!["ctrl+q"],
            Command::FocusNext => vec!["tab"],
            Command::FocusPrev => vec!["shift+tab"],
            Command::FocusLeft => vec!["alt+left"],
            Command::FocusRight => vec!["alt+right"],
            Command::FocusUp => vec!["alt+up"],
            Command::FocusDown => vec!["alt+down"],
            Command::FocusPane(n) => {
                vec![["alt+1", "alt+2", "alt+3", "alt+4", "alt+5", "alt+6", "alt+7", "alt+8"][n as usize]]
            }
            Command::Zoom => vec!["ctrl+z", "f11"],
            Command::Inspector => vec!["ctrl+t", "f3"],
            Command::InspectorPanel => vec!["f4"],
            Command::InspectRow => vec!["alt+i", "f12"],
            Command::Help => vec!["f1"],
            Command::Copy => vec!["ctrl+y"],
            Command::Select => vec!["alt+y", "f7"],
            Command::Branch => vec!["alt+b"],
            Command::Search => vec!["ctrl+f"],
            Command::Export => vec!["alt+s", "f9"],
            Command::Settings => vec!["alt+,", "f6"],
            Command::NewPane => vec!["ctrl+n"],
            Command::ClosePane => vec!["ctrl+x"],
            Command::ClearPane => vec!["ctrl+l"],
            Command::ScrollUp => vec!["pageup"],
            Command::ScrollDown => vec!["pagedown"],
            Command::ScrollBottom => vec!["ctrl+end"],
            Command::CodeLeft => vec!["shift+left"],
            Command::CodeRight => vec!["shift+right"],
            Command::HistoryPrev => vec!["up"],
            Command::HistoryNext => vec!["down"],
            Command::Profiles => vec!["ctrl+p"],
            Command::SaveProfile => vec!["ctrl+s"],
            Command::Sessions => vec!["alt+o"],
        }
    }
}

/// One key with its modifiers, e.g. `ctrl+c`, `alt+enter`, `f5`, `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyChord {
    pub code: KeyCode,
    pub mods: KeyModifiers,
}

impl KeyChord {
    pub fn parse(text: &str) -> Result<KeyChord> {
        let lower = text.trim().to_lowercase();
        if lower.is_empty() {
            bail!("an empty key");
        }
        // `+` alone (or as the last part, `ctrl++`) is the plus key, not a separator.
        let (mod_part, key_part) = match lower.strip_suffix("++") {
            Some(rest) => (rest, "+"),
            None if lower == "+" => ("", "+"),
            None => match lower.rsplit_once('+') {
                Some((m, k)) => (m, k),
                None => ("", lower.as_str()),
            },
        };
        let mut mods = KeyModifiers::NONE;
        for m in mod_part.split('+').filter(|m| !m.is_empty()) {
            mods |= match m {
                "ctrl" | "control" => KeyModifiers::CONTROL,
                "alt" | "meta" | "option" => KeyModifiers::ALT,
                "shift" => KeyModifiers::SHIFT,
                other => bail!("unknown modifier `{other}` in `{text}` (use ctrl, alt or shift)"),
            };
        }
        let code = match key_part {
            "enter" | "return" => KeyCode::Enter,
            "esc" | "escape" => KeyCode::Esc,
            "tab" if mods.contains(KeyModifiers::SHIFT) => {
                mods.remove(KeyModifiers::SHIFT);
                KeyCode::BackTab
            }
            "tab" => KeyCode::Tab,
            "backtab" => {
                // Terminals report back-tab with or without shift; `matches` ignores it, so a
                // kept shift would make the chord unreachable.
                mods.remove(KeyModifiers::SHIFT);
                KeyCode::BackTab
            }
            "space" => KeyCode::Char(' '),
            "backspace" => KeyCode::Backspace,
            "delete" | "del" => KeyCode::Delete,
            "insert" | "ins" => KeyCode::Insert,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            "pageup" | "pgup" => KeyCode::PageUp,
            "pagedown" | "pgdn" => KeyCode::PageDown,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            f if f.len() > 1 && f.starts_with('f') && f[1..].parse::<u8>().is_ok_and(|n| (1..=24).contains(&n)) => {
                KeyCode::F(f[1..].parse().expect("checked above"))
            }
            k if k.chars().count() == 1 => {
                let c = text.trim().chars().last().expect("one char");
                // Shift is carried by the character itself (`?`, `A`), so it is not kept.
                mods.remove(KeyModifiers::SHIFT);
                KeyCode::Char(if mods.is_empty() { c } else { c.to_ascii_lowercase() })
            }
            other => bail!("unknown key `{other}` in `{text}`"),
        };
        Ok(KeyChord { code, mods })
    }

    /// Whether a terminal key event is this chord.
    pub fn matches(&self, ev: &KeyEvent) -> bool {
        normalize(ev.code, ev.modifiers) == (self.code, self.mods)
    }
}

/// Terminals report `?` as shift+`?` and ctrl+C as ctrl+`c`; compare without those differences.
fn normalize(code: KeyCode, mods: KeyModifiers) -> (KeyCode, KeyModifiers) {
    let mods = mods & (KeyModifiers::CONTROL | KeyModifiers::ALT | KeyModifiers::SHIFT);
    match code {
        KeyCode::Char(c) => {
            let mods = mods - KeyModifiers::SHIFT;
            let c = if mods.is_empty() { c } else { c.to_ascii_lowercase() };
            (KeyCode::Char(c), mods)
        }
        KeyCode::BackTab => (KeyCode::BackTab, mods - KeyModifiers::SHIFT),
        other => (other, mods),
    }
}

impl fmt::Display for KeyChord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mods.contains(KeyModifiers::CONTROL) {
            f.write_str("ctrl+")?;
        }
        if self.mods.contains(KeyModifiers::ALT) {
            f.write_str("alt+")?;
        }
        if self.mods.contains(KeyModifiers::SHIFT) {
            f.write_str("shift+")?;
        }
        match self.code {
            KeyCode::Enter => f.write_str("enter"),
            KeyCode::Esc => f.write_str("esc"),
            KeyCode::Tab => f.write_str("tab"),
            KeyCode::BackTab => f.write_str("shift+tab"),
            KeyCode::Char(' ') => f.write_str("space"),
            KeyCode::Char(c) => write!(f, "{c}"),
            KeyCode::Backspace => f.write_str("backspace"),
            KeyCode::Delete => f.write_str("delete"),
            KeyCode::Insert => f.write_str("insert"),
            KeyCode::Home => f.write_str("home"),
            KeyCode::End => f.write_str("end"),
            KeyCode::PageUp => f.write_str("pageup"),
            KeyCode::PageDown => f.write_str("pagedown"),
            KeyCode::Up => f.write_str("up"),
            KeyCode::Down => f.write_str("down"),
            KeyCode::Left => f.write_str("left"),
            KeyCode::Right => f.write_str("right"),
            KeyCode::F(n) => write!(f, "f{n}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A profile's value for one command: one key or a list (an empty list unbinds it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum KeyList {
    One(String),
    Many(Vec<String>),
}

/// By hand rather than `untagged`, whose error ("data did not match any variant") names neither
/// the value nor what was expected.
impl<'de> Deserialize<'de> for KeyList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = KeyList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key such as \"ctrl+c\" or a list of keys")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<KeyList, E> {
                Ok(KeyList::One(v.to_owned()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<KeyList, A::Error> {
                let mut keys = Vec::new();
                while let Some(key) = seq.next_element::<String>()? {
                    keys.push(key);
                }
                Ok(KeyList::Many(keys))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl KeyList {
    pub fn keys(&self) -> Vec<String> {
        match self {
            KeyList::One(k) => vec![k.clone()],
            KeyList::Many(ks) => ks.clone(),
        }
    }
}

/// The active bindings.
#[derive(Debug, Clone)]
pub struct Keymap {
    bindings: Vec<(Command, Vec<KeyChord>)>,
}

impl Default for Keymap {
    fn default() -> Self {
        let bindings = Command::all()
            .into_iter()
            .map(|c| {
                let keys = c.default_keys().iter().map(|k| KeyChord::parse(k).expect("default keys parse")).collect();
                (c, keys)
            })
            .collect();
        Keymap { bindings }
    }
}

impl Keymap {
    /// The defaults with a profile's `[keys]` table applied. `origin` (the file) names the source
    /// in errors, with the command name as the key: `profile.toml: [keys] sendall: unknown command`.
    pub fn with_overrides(overrides: &BTreeMap<String, KeyList>, origin: &str) -> Result<Keymap> {
        let mut map = Keymap::default();
        for (name, list) in overrides {
            let Some(command) = Command::from_name(name) else {
                let names: Vec<String> = Command::all().into_iter().map(Command::name).collect();
                bail!("{origin}: [keys] unknown command `{name}` (commands: {})", names.join(", "));
            };
            let mut chords = Vec::new();
            for key in list.keys() {
                let chord =
                    KeyChord::parse(&key).map_err(|e| anyhow::anyhow!("{origin}: [keys] {name} = \"{key}\": {e}"))?;
                chords.push(chord);
            }
            map.set(command, chords);
        }
        // A key the table gives one command leaves a command the table does not name, which had
        // it by default: a profile written before that default existed keeps working (zoom = f2
        // from before edit_last took f2), and help shows what is left.
        let named: Vec<Command> = overrides.keys().filter_map(|n| Command::from_name(n)).collect();
        let taken: Vec<KeyChord> = map
            .bindings
            .iter()
            .filter(|(c, _)| named.contains(c))
            .flat_map(|(_, chords)| chords.iter().copied())
            .collect();
        for (command, chords) in &mut map.bindings {
            if !named.contains(command) {
                chords.retain(|chord| !taken.contains(chord));
            }
        }
        map.check_conflicts(origin)?;
        Ok(map)
    }

    fn set(&mut self, command: Command, chords: Vec<KeyChord>) {
        if let Some(entry) = self.bindings.iter_mut().find(|(c, _)| *c == command) {
            entry.1 = chords;
        }
    }

    /// One key doing two things would make one of them unreachable: refuse it.
    fn check_conflicts(&self, origin: &str) -> Result<()> {
        let mut seen: Vec<(KeyChord, Command)> = Vec::new();
        for (command, chords) in &self.bindings {
            for chord in chords {
                if let Some((_, other)) = seen.iter().find(|(c, _)| c == chord) {
                    bail!(
                        "{origin}: [keys] `{chord}` is bound to both {} and {} (rebind one of them)",
                        other.name(),
                        command.name()
                    );
                }
                seen.push((*chord, *command));
            }
        }
        Ok(())
    }

    /// The command a key event triggers, if any.
    pub fn lookup(&self, ev: &KeyEvent) -> Option<Command> {
        self.bindings.iter().find(|(_, chords)| chords.iter().any(|c| c.matches(ev))).map(|(c, _)| *c)
    }

    pub fn keys_for(&self, command: Command) -> &[KeyChord] {
        self.bindings.iter().find(|(c, _)| *c == command).map(|(_, k)| k.as_slice()).unwrap_or(&[])
    }

    /// "esc / ctrl+c" for the help overlay and hints; "unbound" when a profile removed every key.
    pub fn describe_keys(&self, command: Command) -> String {
        let keys = self.keys_for(command);
        if keys.is_empty() {
            return "unbound".into();
        }
        keys.iter().map(ToString::to_string).collect::<Vec<_>>().join(" / ")
    }

    /// Every command with its keys, in help order.
    pub fn entries(&self) -> &[(Command, Vec<KeyChord>)] {
        &self.bindings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chords_parse_and_print_back() {
        for k in ["ctrl+c", "alt+enter", "f5", "shift+tab", "shift+backtab", "pageup", "alt+1", "?", "esc", "ctrl++"] {
            let chord = KeyChord::parse(k).unwrap();
            assert_eq!(KeyChord::parse(&chord.to_string()).unwrap(), chord, "{k}");
        }
        assert!(KeyChord::parse("hyper+x").is_err());
        assert!(KeyChord::parse("f99").is_err());
    }

    #[test]
    fn shifted_characters_match_without_shift() {
        let chord = KeyChord::parse("?").unwrap();
        assert!(chord.matches(&KeyEvent::new(KeyCode::Char('?'), KeyModifiers::SHIFT)));
        let ctrl_c = KeyChord::parse("ctrl+c").unwrap();
        assert!(ctrl_c.matches(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)));
        assert!(!ctrl_c.matches(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::NONE)));
    }

    #[test]
    fn a_key_given_in_a_profile_leaves_the_command_that_had_it_by_default() {
        let keys = BTreeMap::from([("zoom".to_owned(), KeyList::Many(vec!["f2".into(), "ctrl+z".into()]))]);
        let map = Keymap::with_overrides(&keys, "p.toml").unwrap();
        let f2 = KeyEvent::new(KeyCode::F(2), KeyModifiers::NONE);
        assert_eq!(map.lookup(&f2), Some(Command::Zoom));
        assert_eq!(map.describe_keys(Command::EditLast), "unbound");
        // Two commands the table names with one key are still an error.
        let keys = BTreeMap::from([
            ("zoom".to_owned(), KeyList::One("f2".into())),
            ("help".to_owned(), KeyList::One("f2".into())),
        ]);
        let err = Keymap::with_overrides(&keys, "p.toml").unwrap_err().to_string();
        assert!(err.contains("`f2` is bound to both"), "{err}");
    }

    #[test]
    fn defaults_have_no_conflicts() {
        Keymap::default().check_conflicts("defaults").unwrap();
    }
}
