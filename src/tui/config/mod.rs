//! Profiles, themes and keymaps (their folders are `platform::paths`).

pub mod keymap;
pub mod profile;
pub mod theme;

/// Largest profile or theme file read (real ones are a few KB).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A profile or theme file as text, refused past [`MAX_CONFIG_BYTES`]: a file without end (a link
/// to /dev/zero) or a huge one is named, not read until memory runs out.
pub fn read_config_text(path: &std::path::Path) -> anyhow::Result<String> {
    crate::model::formats::files::read_bounded(path, MAX_CONFIG_BYTES)
}
