//! Themes: a named palette of colours, read from TOML (`themes/dark.toml`, `themes/light.toml`
//! are built in; user themes live in `<config_dir>/themes/`). A theme may set `base = "light"` and
//! only the keys it changes. `NO_COLOR` (https://no-color.org) turns every colour off; the UI then
//! marks focus and states with bold / reverse / underline only.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use ratatui::style::Color;
use serde::Deserialize;

use crate::platform::paths::Paths;

/// Built-in themes: (name, file as shipped in `themes/`).
pub const SHIPPED: &[(&str, &str)] =
    &[("dark", include_str!("../../themes/dark.toml")), ("light", include_str!("../../themes/light.toml"))];

pub const DEFAULT_THEME: &str = "dark";

/// One list of colour keys defines the palette, the file format and the key names in errors.
macro_rules! palette {
    ($($key:ident: $doc:literal),* $(,)?) => {
        /// Every colour the UI uses, by role.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Palette { $(#[doc = $doc] pub $key: Color,)* }

        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct ThemeFile {
            name: Option<String>,
            base: Option<String>,
            $($key: Option<String>,)*
        }

        impl ThemeFile {
            /// Lay the file's colours over `base`, naming the key and value of a bad one.
            fn apply(&self, mut palette: Palette, origin: &str) -> Result<Palette> {
                $(if let Some(value) = &self.$key {
                    palette.$key = parse_color(value).with_context(|| {
                        format!("{origin}: key `{}`: bad colour \"{value}\"", stringify!($key))
                    })?;
                })*
                Ok(palette)
            }
        }

        impl Palette {
            /// Every colour replaced by the terminal's default (for `NO_COLOR`).
            fn without_colors(&self) -> Palette {
                Palette { $($key: Color::Reset,)* }
            }
        }

        /// The colour keys a theme file may set.
        pub const COLOR_KEYS: &[&str] = &[$(stringify!($key)),*];
    };
}

palette! {
    text: "Ordinary text.",
    background: "Behind everything (`reset` = the terminal's own).",
    muted: "Secondary text: hints, figures, separators.",
    border: "Pane and panel borders.",
    border_focused: "The focused pane's border.",
    title: "Pane and panel titles.",
    accent: "Highlights: key names, the cursor line, links.",
    user: "The user's messages.",
    assistant: "The model's answers.",
    heading: "Markdown headings and bold text in answers.",
    code_fg: "Code blocks and inline code.",
    code_bg: "Behind code blocks.",
    code_comment: "Comments in highlighted code blocks.",
    code_string: "Strings in highlighted code blocks.",
    code_keyword: "Keywords in highlighted code blocks.",
    code_number: "Numbers and constants in highlighted code blocks.",
    code_type: "Type names in highlighted code blocks.",
    code_function: "Function and macro names in highlighted code blocks.",
    idle: "State badge: idle.",
    queued: "State badge: queued.",
    prefill: "State badge: prefill.",
    decoding: "State badge: decoding.",
    done: "State badge: done.",
    cancelled: "State badge: cancelled.",
    error: "State badge: error, and error text.",
    bar_fg: "Status bar text.",
    bar_bg: "Status bar background.",
    spark: "Sparklines (acceptance, memory).",
    histogram: "Histogram bars.",
    selection_fg: "Selected item text (pickers).",
    selection_bg: "Selected item background (pickers).",
    popup_bg: "Behind overlays (help, picker).",
}

/// A loaded theme.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    pub name: String,
    pub palette: Palette,
    /// `NO_COLOR` is in force: every colour is `Reset`, emphasis uses modifiers only.
    pub no_color: bool,
}

impl Theme {
    /// The built-in dark theme (always parses: the shipped files are tested).
    pub fn builtin(name: &str) -> Theme {
        let (_, text) = SHIPPED.iter().find(|(n, _)| *n == name).unwrap_or(&SHIPPED[0]);
        parse_theme(text, &format!("themes/{name}.toml")).expect("shipped themes parse")
    }

    /// The same theme with colours off (`NO_COLOR`).
    pub fn without_colors(self) -> Theme {
        Theme { palette: self.palette.without_colors(), no_color: true, ..self }
    }

    /// Apply `NO_COLOR` when the environment asks for it.
    pub fn respecting_no_color(self) -> Theme {
        if no_color_requested() { self.without_colors() } else { self }
    }
}

/// `NO_COLOR` set to anything but the empty string.
pub fn no_color_requested() -> bool {
    std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty())
}

/// A colour: a name (`blue`, `lightred`, `darkgray`, `reset`), `#rrggbb`, or an index 0-255.
pub fn parse_color(text: &str) -> Result<Color> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("default") || t.eq_ignore_ascii_case("none") {
        return Ok(Color::Reset);
    }
    if t.starts_with('#') && t.len() != 7 {
        bail!("expected #rrggbb");
    }
    Color::from_str(t)
        .map_err(|_| anyhow::anyhow!("expected a colour name (e.g. blue, darkgray, reset), #rrggbb or 0-255"))
}

/// Parse a theme file's text; `origin` (a path) prefixes every error.
pub fn parse_theme(text: &str, origin: &str) -> Result<Theme> {
    let file: ThemeFile = toml::from_str(text).map_err(|e| super::profile::toml_error(origin, text, &e))?;
    let base = match file.base.as_deref() {
        None => None,
        Some(b) => match SHIPPED.iter().find(|(n, _)| *n == b) {
            Some((_, base_text)) => {
                let base_file: ThemeFile = toml::from_str(base_text).expect("shipped themes parse");
                Some(base_file.apply(fallback_palette(), &format!("themes/{b}.toml"))?)
            }
            None => bail!("{origin}: key `base`: unknown theme \"{b}\" (built in: dark, light)"),
        },
    };
    let palette = file.apply(base.unwrap_or_else(fallback_palette), origin)?;
    let name = file.name.unwrap_or_else(|| {
        Path::new(origin).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "theme".into())
    });
    Ok(Theme { name, palette, no_color: false })
}

/// What a key the file leaves out falls back to when there is no `base`: terminal defaults plus
/// the sixteen ANSI colours, which every terminal can show.
fn fallback_palette() -> Palette {
    Palette {
        text: Color::Reset,
        background: Color::Reset,
        muted: Color::DarkGray,
        border: Color::DarkGray,
        border_focused: Color::Cyan,
        title: Color::Reset,
        accent: Color::Cyan,
        user: Color::Green,
        assistant: Color::Reset,
        heading: Color::Yellow,
        code_fg: Color::LightYellow,
        code_bg: Color::Reset,
        code_comment: Color::DarkGray,
        code_string: Color::Green,
        code_keyword: Color::Magenta,
        code_number: Color::LightRed,
        code_type: Color::Yellow,
        code_function: Color::Blue,
        idle: Color::DarkGray,
        queued: Color::Yellow,
        prefill: Color::Magenta,
        decoding: Color::Cyan,
        done: Color::Green,
        cancelled: Color::Yellow,
        error: Color::Red,
        bar_fg: Color::Reset,
        bar_bg: Color::Reset,
        spark: Color::Cyan,
        histogram: Color::Blue,
        selection_fg: Color::Black,
        selection_bg: Color::Cyan,
        popup_bg: Color::Reset,
    }
}

/// Where a user theme of this name would live.
pub fn user_theme_path(paths: &Paths, name: &str) -> PathBuf {
    paths.config_dir.join("themes").join(format!("{name}.toml"))
}

/// Load a theme by name (user themes shadow built-in ones) or by path (anything with a `/` or
/// ending in `.toml`).
pub fn load_theme(spec: &str, paths: &Paths) -> Result<Theme> {
    if spec.contains('/') || spec.ends_with(".toml") {
        return read_theme_file(Path::new(spec));
    }
    let user = user_theme_path(paths, spec);
    if user.is_file() {
        return read_theme_file(&user);
    }
    match SHIPPED.iter().find(|(n, _)| *n == spec) {
        Some((_, text)) => parse_theme(text, &format!("themes/{spec}.toml")),
        None => bail!(
            "unknown theme \"{spec}\": built in are {}; user themes go in {}",
            SHIPPED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
            paths.config_dir.join("themes").display()
        ),
    }
}

fn read_theme_file(path: &Path) -> Result<Theme> {
    let text = super::read_config_text(path).with_context(|| format!("cannot read theme {}", path.display()))?;
    parse_theme(&text, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_parse_in_every_form() {
        assert_eq!(parse_color("#ff8000").unwrap(), Color::Rgb(255, 128, 0));
        assert_eq!(parse_color("light-red").unwrap(), Color::LightRed);
        assert_eq!(parse_color("236").unwrap(), Color::Indexed(236));
        assert_eq!(parse_color("default").unwrap(), Color::Reset);
        assert!(parse_color("#ff80").is_err());
        assert!(parse_color("blurple").is_err());
    }
}
