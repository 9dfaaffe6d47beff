//! Profiles, themes, keymaps and the platform paths they live in.

pub mod keymap;
pub mod paths;
pub mod profile;
pub mod theme;
