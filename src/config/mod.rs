//! The program's settings, read by the TUI, the headless commands and the server alike:
//! profiles (every setting a session starts with, `profile`), the model and prompt-cache
//! arguments every command that loads a model takes (`model_args`, `cache_args`), and the TUI's
//! themes and keymaps that profiles name. Their folders are `platform::paths`.

pub mod cache_args;
pub mod keymap;
pub mod model_args;
pub mod profile;
pub mod theme;

/// Largest profile or theme file read (real ones are a few KB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A profile or theme file as text, refused past [`MAX_CONFIG_BYTES`]: a file without end (a link
/// to /dev/zero) or a huge one is named, not read until memory runs out.
pub fn read_config_text(path: &std::path::Path) -> anyhow::Result<String> {
    crate::model::formats::files::read_bounded(path, MAX_CONFIG_BYTES)
}
