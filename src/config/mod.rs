//! Profiles, themes, keymaps and the platform paths they live in.

pub mod paths;
