//! Profiles: TOML files naming a model, a batching preset, numerics, a sampler, a theme, key
//! overrides and a pane count. Built-in ones ship in `config/`; user ones live in
//! `<config_dir>/profiles/` and shadow built-in ones of the same name. Settings are resolved as
//! built-in defaults < profile < command-line flags. Unknown keys and wrong types are errors that
//! name the file and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::keymap::{KeyList, Keymap};
use super::read_config_text;
use crate::engine::api::DEFAULT_MAX_TOKENS;
use crate::engine::api::GenerationMode;
use crate::engine::api::SamplerConfig;
use crate::engine::api::{Numerics, Preset};
use crate::platform::paths::Paths;

/// Built-in profiles: (name, file as shipped in `config/`).
pub const SHIPPED: &[(&str, &str)] = &[
    ("throughput", include_str!("../../config/throughput.toml")),
    ("balanced", include_str!("../../config/balanced.toml")),
    ("b1-exact", include_str!("../../config/b1-exact.toml")),
    ("latency", include_str!("../../config/latency.toml")),
];

/// Whether `name` is a built-in profile's.
pub fn is_built_in(name: &str) -> bool {
    SHIPPED.iter().any(|(shipped, _)| *shipped == name)
}

/// The profile used when `--profile` is not given and the user has no `default` profile.
pub const FALLBACK_PROFILE: &str = "throughput";

/// Most panes on screen: one cohort's rows.
pub const MAX_PANES: usize = crate::engine::api::COHORT_WIDTH;

/// A profile file as written; every key is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Model directory or hub repo id in the local HF cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// `auto`, `quantized` or `dequantize` (see `cohort generate --help`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numerics: Option<Numerics>,
    /// `ar` or `mtp`; unset = MTP when the model has MTP weights and the exactness gate allows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<GenerationMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    /// Base seed; each pane and turn derives its own from it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Keep generating past end-of-sequence until `max_tokens` (benchmarks and tests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// A system message put before every conversation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theme: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub panes: Option<usize>,
    /// The prompt cache: `exact` (default), `inexact` or `off` (docs/configuration.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<crate::engine::api::ReusePolicy>,
    /// Bytes of row state the prompt cache may hold (warm conversations; default 1 GiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cache_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler: Option<SamplerConfig>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub keys: BTreeMap<String, KeyList>,
    /// `[pane.N]`: pane N's own system prompt, sampler values, max_tokens and mode (N from 1).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pane: BTreeMap<String, PaneProfile>,
}

/// One pane's table in a profile: each key unset is the profile's own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaneProfile {
    /// `""` = no system prompt for this pane (though the profile has one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampler: Option<SamplerOverrides>,
    /// `ar` or `mtp`: this pane's own generation mode (unset: the engine's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<GenerationMode>,
}

/// A pane's `[pane.N.sampler]`: only the values it changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplerOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
}

impl PaneProfile {
    /// Every value of `own` written out (a pane's settings saved from the app).
    pub fn from_settings(own: &ChatSettings) -> PaneProfile {
        let s = &own.sampler;
        PaneProfile {
            system: Some(own.system.clone().unwrap_or_default()),
            max_tokens: Some(own.max_tokens),
            sampler: Some(SamplerOverrides {
                temperature: Some(s.temperature),
                top_p: Some(s.top_p),
                top_k: Some(s.top_k),
                presence_penalty: Some(s.presence_penalty),
                frequency_penalty: Some(s.frequency_penalty),
            }),
            mode: own.mode,
        }
    }

    /// `base` (the profile's values) with this table's applied.
    fn resolve(&self, base: &ChatSettings) -> ChatSettings {
        let mut out = base.clone();
        if let Some(system) = &self.system {
            out.system = Some(system.clone()).filter(|s| !s.trim().is_empty());
        }
        if let Some(n) = self.max_tokens {
            out.max_tokens = n;
        }
        if self.mode.is_some() {
            out.mode = self.mode;
        }
        if let Some(o) = &self.sampler {
            let s = &mut out.sampler;
            s.temperature = o.temperature.unwrap_or(s.temperature);
            s.top_p = o.top_p.unwrap_or(s.top_p);
            s.top_k = o.top_k.unwrap_or(s.top_k);
            s.presence_penalty = o.presence_penalty.unwrap_or(s.presence_penalty);
            s.frequency_penalty = o.frequency_penalty.unwrap_or(s.frequency_penalty);
        }
        out
    }
}

/// What a pane's requests carry besides the conversation: the system prompt, the sampler, the
/// answer's length and the generation mode. Each goes with every request, so panes can differ;
/// the preset and numerics are the engine's, the same for every pane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
    /// `ar` or `mtp`; None = the engine's (an engine without MTP serves every pane AR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<GenerationMode>,
}

impl ChatSettings {
    /// The checks the engine makes on a request's values (`prepare` adds the context window's,
    /// which depends on the prompt); the message names the value.
    pub fn validate(&self) -> Result<()> {
        if self.max_tokens == 0 {
            bail!("max_tokens = 0: must be at least 1");
        }
        self.sampler.validate()?;
        Ok(())
    }
}

/// A profile and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedProfile {
    pub name: String,
    /// The file, for messages (`config/throughput.toml (built in)` or a path).
    pub origin: String,
    pub profile: Profile,
}

/// Where a profile can be found, for the picker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileEntry {
    pub name: String,
    /// None for built-in profiles.
    pub path: Option<PathBuf>,
    pub description: Option<String>,
}

/// Command-line flags that override a profile's values.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub model: Option<String>,
    pub dtype: Option<String>,
    pub theme: Option<String>,
    pub panes: Option<usize>,
    pub prompt_cache: crate::config::cache_args::PromptCacheArgs,
}

/// Everything resolved: what the app runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub profile: String,
    pub origin: String,
    /// None: the installed default model.
    pub model: Option<String>,
    pub dtype: Option<String>,
    pub weights: Option<String>,
    pub preset: Preset,
    pub numerics: Numerics,
    pub mode: Option<GenerationMode>,
    pub prompt_cache: crate::engine::api::CacheConfig,
    pub sampler: SamplerConfig,
    pub max_tokens: usize,
    pub seed: u64,
    pub ignore_eos: bool,
    pub system: Option<String>,
    pub theme: String,
    pub panes: usize,
    pub keys: BTreeMap<String, KeyList>,
    /// Panes with their own settings from the profile's `[pane.N]`, by N (from 1).
    pub pane_settings: BTreeMap<usize, ChatSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            profile: "defaults".into(),
            origin: "built-in defaults".into(),
            model: None,
            dtype: None,
            weights: None,
            preset: Preset::Throughput,
            numerics: Numerics::Throughput,
            mode: None,
            prompt_cache: crate::engine::api::CacheConfig::default(),
            sampler: SamplerConfig::default(),
            max_tokens: DEFAULT_MAX_TOKENS,
            seed: 0,
            ignore_eos: false,
            system: None,
            theme: super::theme::DEFAULT_THEME.into(),
            panes: 4,
            keys: BTreeMap::new(),
            pane_settings: BTreeMap::new(),
        }
    }
}

impl Settings {
    /// Defaults, then the profile, then the flags; checked before anything starts.
    pub fn resolve(loaded: &LoadedProfile, flags: &Overrides) -> Result<Settings> {
        // A bad flag is the flag's fault: say so before the profile's checks would blame the file.
        if let Some(n) = flags.panes.filter(|n| !(1..=MAX_PANES).contains(n)) {
            bail!("--panes {n}: must be between 1 and {MAX_PANES}");
        }
        let p = &loaded.profile;
        let d = Settings::default();
        let mut settings = Settings {
            profile: loaded.name.clone(),
            origin: loaded.origin.clone(),
            model: flags.model.clone().or_else(|| p.model.clone()),
            dtype: flags.dtype.clone().or_else(|| p.dtype.clone()),
            weights: p.weights.clone(),
            preset: p.preset.unwrap_or(d.preset),
            numerics: p.numerics.unwrap_or(d.numerics),
            mode: p.mode,
            prompt_cache: flags.prompt_cache.apply(crate::engine::api::CacheConfig {
                policy: p.prompt_cache.unwrap_or(d.prompt_cache.policy),
                bytes: p.prompt_cache_bytes.unwrap_or(d.prompt_cache.bytes),
                answers: d.prompt_cache.answers,
            }),
            sampler: p.sampler.unwrap_or(d.sampler),
            max_tokens: p.max_tokens.unwrap_or(d.max_tokens),
            seed: p.seed.unwrap_or(d.seed),
            ignore_eos: p.ignore_eos.unwrap_or(d.ignore_eos),
            system: p.system.clone().filter(|s| !s.trim().is_empty()),
            theme: flags.theme.clone().or_else(|| p.theme.clone()).unwrap_or(d.theme),
            panes: flags.panes.or(p.panes).unwrap_or(d.panes),
            keys: p.keys.clone(),
            pane_settings: BTreeMap::new(),
        };
        let base = settings.chat();
        for (key, table) in &p.pane {
            let n = key.parse::<usize>().ok().filter(|n| (1..=MAX_PANES).contains(n));
            let Some(n) = n else {
                bail!("{}: key `pane.{key}`: panes are numbered 1 to {MAX_PANES}", loaded.origin);
            };
            settings.pane_settings.insert(n, table.resolve(&base));
        }
        settings.validate()?;
        Ok(settings)
    }

    /// The profile's own system prompt, sampler and max_tokens (what a pane without settings of
    /// its own sends).
    pub fn chat(&self) -> ChatSettings {
        ChatSettings { system: self.system.clone(), sampler: self.sampler, max_tokens: self.max_tokens, mode: None }
    }

    /// What the pane at position `n` (from 1) starts with: the profile's `[pane.N]`, if any
    /// (None: the profile's own values).
    pub fn pane_start(&self, n: usize) -> Option<ChatSettings> {
        self.pane_settings.get(&n).cloned()
    }

    /// Range checks, naming the file and key of a bad value.
    pub fn validate(&self) -> Result<()> {
        let origin = &self.origin;
        if !(1..=MAX_PANES).contains(&self.panes) {
            bail!("{origin}: key `panes` = {}: must be between 1 and {MAX_PANES}", self.panes);
        }
        if self.max_tokens == 0 {
            bail!("{origin}: key `max_tokens` = 0: must be at least 1");
        }
        self.sampler.validate().map_err(|e| anyhow::anyhow!("{origin}: [sampler] {e}"))?;
        for (n, own) in &self.pane_settings {
            own.validate().map_err(|e| anyhow::anyhow!("{origin}: [pane.{n}] {e}"))?;
        }
        Keymap::with_overrides(&self.keys, origin)?;
        Ok(())
    }

    /// The model directory to load: `--model`, else the profile's `model`, else the installed
    /// default model; the error says how to configure one.
    pub fn resolve_model(&self) -> Result<PathBuf> {
        match self.model.as_deref() {
            Some(m) => crate::model::load::resolve(m),
            None => crate::model::load::default_model().with_context(|| {
                format!(
                    "no model configured: pass --model DIR, or set model = \"...\" in the profile ({})",
                    self.origin
                )
            }),
        }
    }

    /// These settings as a profile file (for "save as profile").
    pub fn to_profile(&self) -> Profile {
        Profile {
            description: Some(format!("saved from cohort (based on {})", self.profile)),
            model: self.model.clone(),
            dtype: self.dtype.clone(),
            weights: self.weights.clone(),
            preset: Some(self.preset),
            numerics: Some(self.numerics),
            mode: self.mode,
            max_tokens: Some(self.max_tokens),
            seed: Some(self.seed),
            ignore_eos: Some(self.ignore_eos),
            system: self.system.clone(),
            theme: Some(self.theme.clone()),
            panes: Some(self.panes),
            prompt_cache: Some(self.prompt_cache.policy),
            prompt_cache_bytes: Some(self.prompt_cache.bytes),
            sampler: Some(self.sampler),
            keys: self.keys.clone(),
            pane: self.pane_settings.iter().map(|(n, own)| (n.to_string(), PaneProfile::from_settings(own))).collect(),
        }
    }

    /// Whether switching to `other` needs the engine restarted (a different model or scheduler).
    pub fn engine_differs(&self, other: &Settings) -> bool {
        self.model != other.model
            || self.dtype != other.dtype
            || self.weights != other.weights
            || self.preset != other.preset
            || self.numerics != other.numerics
            || self.mode != other.mode
            || self.prompt_cache != other.prompt_cache
    }

    /// The engine's scheduling: the preset's, with the prompt cache these settings ask for.
    pub fn scheduler(&self) -> crate::engine::api::SchedulerConfig {
        crate::engine::api::SchedulerConfig { prompt_cache: self.prompt_cache, ..self.preset.config() }
    }
}

/// Parse a profile's text; `origin` (the file) prefixes every error.
pub fn parse_profile(text: &str, origin: &str) -> Result<Profile> {
    toml::from_str(text).map_err(|e| toml_error(origin, text, &e))
}

/// A TOML error naming the file, the place and the key: `p.toml, line 2, column 9: key
/// `sampler.top_p`: invalid type: string "x", expected f64`.
pub fn toml_error(origin: &str, text: &str, err: &toml::de::Error) -> anyhow::Error {
    let report = err.to_string();
    let place = report.lines().next().and_then(|l| l.strip_prefix("TOML parse error at ")).map(|p| format!(", {p}"));
    match err.span().and_then(|span| key_at(text, span.start)) {
        Some(key) => anyhow::anyhow!("{origin}{}: key `{key}`: {}", place.unwrap_or_default(), err.message()),
        None => anyhow::anyhow!("{origin}: {}", report.trim_end()),
    }
}

/// The dotted key at byte `at`: the table header above it joined to the key before `=` on its
/// line (and, inside an inline table, the inner key before `at`); on a header line, the header.
fn key_at(text: &str, at: usize) -> Option<String> {
    let mut at = at.min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let line_start = text[..at].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line = text[line_start..].lines().next().unwrap_or_default();
    if let Some(header) = table_header(line) {
        return Some(header.to_owned());
    }
    let key = line.split_once('=')?.0.trim();
    if key.is_empty() {
        return None;
    }
    let table = text[..line_start].lines().rev().find_map(table_header);
    let mut path = match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_owned(),
    };
    // `lines` drops a `\r`, so `at` may lie one past the line's end.
    let before = line.get(..at - line_start).unwrap_or(line);
    if let Some(open) = before.find('{')
        && let Some((lhs, _)) = before[open..].rsplit_once('=')
    {
        let inner = lhs.rsplit(['{', ',']).next().unwrap_or_default().trim();
        if !inner.is_empty() {
            path = format!("{path}.{inner}");
        }
    }
    Some(path)
}

/// `sampler` for a `[sampler]` or `[[sampler]]` line (a trailing comment allowed).
fn table_header(line: &str) -> Option<&str> {
    let name = line.trim().strip_prefix('[')?.trim_start_matches('[');
    let name = name.split(']').next()?.trim();
    (!name.is_empty()).then_some(name)
}

pub fn profiles_dir(paths: &Paths) -> PathBuf {
    paths.config_dir.join("profiles")
}

/// A name or a path (anything with a `/` or ending in `.toml`); user profiles shadow built-in ones.
pub fn load_profile(spec: &str, paths: &Paths) -> Result<LoadedProfile> {
    if spec.contains('/') || spec.ends_with(".toml") {
        return read_profile_file(Path::new(spec));
    }
    let user = profiles_dir(paths).join(format!("{spec}.toml"));
    if user.is_file() {
        return read_profile_file(&user);
    }
    match SHIPPED.iter().find(|(n, _)| *n == spec) {
        Some((name, text)) => {
            let origin = format!("config/{name}.toml (built in)");
            Ok(LoadedProfile { name: (*name).into(), profile: parse_profile(text, &origin)?, origin })
        }
        None => bail!(
            "unknown profile \"{spec}\": built in are {}; user profiles go in {}",
            SHIPPED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            profiles_dir(paths).display()
        ),
    }
}

/// The profile to start with: `--profile`, else the user's `default`, else the built-in fallback.
pub fn load_startup_profile(spec: Option<&str>, paths: &Paths) -> Result<LoadedProfile> {
    match spec {
        Some(s) => load_profile(s, paths),
        None if profiles_dir(paths).join("default.toml").is_file() => load_profile("default", paths),
        None => load_profile(FALLBACK_PROFILE, paths),
    }
}

fn read_profile_file(path: &Path) -> Result<LoadedProfile> {
    let text = read_config_text(path).with_context(|| format!("cannot read profile {}", path.display()))?;
    let origin = path.display().to_string();
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "profile".into());
    Ok(LoadedProfile { name, profile: parse_profile(&text, &origin)?, origin })
}

/// Built-in profiles and the user's, by name (a user profile replaces a built-in one of its name).
pub fn list_profiles(paths: &Paths) -> Vec<ProfileEntry> {
    let mut entries: Vec<ProfileEntry> = SHIPPED
        .iter()
        .map(|(name, text)| ProfileEntry {
            name: (*name).into(),
            path: None,
            description: parse_profile(text, name).ok().and_then(|p| p.description),
        })
        .collect();
    let Ok(dir) = std::fs::read_dir(profiles_dir(paths)) else { return entries };
    let mut user: Vec<ProfileEntry> = dir
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|path| ProfileEntry {
            name: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
            description: read_config_text(&path)
                .ok()
                .and_then(|t| parse_profile(&t, "").ok())
                .and_then(|p| p.description),
            path: Some(path),
        })
        .collect();
    user.sort_by(|a, b| a.name.cmp(&b.name));
    for u in user {
        entries.retain(|e| e.name != u.name);
        entries.push(u);
    }
    entries
}

/// A profile name that is safe as a file name.
pub fn check_profile_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 64 {
        bail!("a profile name needs 1 to 64 characters");
    }
    let bad = bad_name_chars(name);
    if !bad.is_empty() {
        let list: Vec<String> = bad.iter().map(|c| format!("{c:?}")).collect();
        bail!("a profile name may use letters, digits, '-' and '_' only, not {}", list.join(", "));
    }
    Ok(())
}

/// The characters of `name` a profile name cannot have, each once, in order.
pub fn bad_name_chars(name: &str) -> Vec<char> {
    let mut bad = Vec::new();
    for c in name.chars().filter(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
        if !bad.contains(&c) {
            bad.push(c);
        }
    }
    bad
}

/// Write `<config_dir>/profiles/NAME.toml` (replacing one of that name); returns the path.
pub fn save_profile(paths: &Paths, name: &str, profile: &Profile) -> Result<PathBuf> {
    check_profile_name(name)?;
    let dir = profiles_dir(paths);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{name}.toml"));
    let text = toml::to_string(profile).context("cannot write the profile as TOML")?;
    // Write then rename, so a crash never leaves half a profile behind.
    let tmp = dir.join(format!(".{name}.toml.tmp"));
    std::fs::write(&tmp, format!("# Saved by cohort. Keys: docs/configuration.md\n{text}"))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        format!("{:#}", parse_profile(text, "p.toml").expect_err("expected an error"))
    }

    #[test]
    fn errors_name_the_key_under_a_header_inside_an_inline_table_and_on_crlf_lines() {
        let e = error("[max_tokens]\na = 1\n");
        assert!(e.starts_with("p.toml, line 1, column 1: key `max_tokens`:"), "{e}");
        let e = error("[sampler.x]\ny = 1\n");
        assert!(e.contains("key `sampler.x`"), "{e}");
        let e = error("sampler = { top_k = 3, top_p = \"x\" }\n");
        assert!(e.contains("key `sampler.top_p`"), "{e}");
        let e = error("panes = 2\r\n[sampler]\r\ntop_p = \"x\"\r\n");
        assert!(e.contains("key `sampler.top_p`"), "{e}");
        let e = error("[keys]\nsend = 3\n");
        assert!(e.contains("key `keys.send`") && e.contains("a list of keys"), "{e}");
    }
}
