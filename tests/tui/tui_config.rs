//! Profiles, themes and keymaps: the shipped files parse, user files shadow them, and bad files
//! fail with errors naming the file, the key and (for colours) the value.

use std::collections::BTreeMap;
use std::path::Path;

use cohort::config::keymap::{KeyList, Keymap};
use cohort::config::profile::{self, Overrides, Settings};
use cohort::config::theme::{self, COLOR_KEYS};
use cohort::engine::scheduler::{Numerics, Preset};
use cohort::platform::paths::Paths;

fn temp_paths() -> (tempfile::TempDir, Paths) {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths { config_dir: dir.path().join("config"), data_dir: dir.path().join("data") };
    (dir, paths)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn error_of<T: std::fmt::Debug>(r: anyhow::Result<T>) -> String {
    format!("{:#}", r.expect_err("expected an error"))
}

#[test]
fn every_shipped_profile_parses_and_resolves() {
    let (_dir, paths) = temp_paths();
    for (name, _) in profile::SHIPPED {
        let loaded = profile::load_profile(name, &paths).unwrap();
        let settings = Settings::resolve(&loaded, &Overrides::default()).unwrap();
        assert_eq!(settings.profile, *name);
        theme::load_theme(&settings.theme, &paths).unwrap();
    }
    let throughput = Settings::resolve(&profile::load_profile("throughput", &paths).unwrap(), &Overrides::default());
    let throughput = throughput.unwrap();
    assert_eq!(
        (throughput.preset, throughput.numerics, throughput.panes),
        (Preset::Throughput, Numerics::Throughput, 8)
    );
    let latency = Settings::resolve(&profile::load_profile("latency", &paths).unwrap(), &Overrides::default()).unwrap();
    assert_eq!(latency.preset, Preset::Latency);
    let exact = Settings::resolve(&profile::load_profile("b1-exact", &paths).unwrap(), &Overrides::default()).unwrap();
    assert_eq!(exact.numerics, Numerics::B1Exact);
}

#[test]
fn every_file_in_config_and_themes_is_shipped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (dir, shipped) in [("config", profile::SHIPPED), ("themes", theme::SHIPPED)] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let stem = path.file_stem().unwrap().to_str().unwrap().to_owned();
            let (_, text) =
                shipped.iter().find(|(n, _)| *n == stem).unwrap_or_else(|| panic!("{path:?} is not built in"));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), *text);
        }
    }
}

#[test]
fn shipped_themes_parse_and_set_every_colour() {
    for (name, text) in theme::SHIPPED {
        let table: toml::Table = toml::from_str(text).unwrap();
        for key in COLOR_KEYS {
            assert!(table.contains_key(*key), "themes/{name}.toml does not set `{key}`");
        }
        let theme = theme::parse_theme(text, name).unwrap();
        assert_eq!(theme.name, *name);
    }
}

#[test]
fn flags_override_the_profile() {
    let (_dir, paths) = temp_paths();
    let loaded = profile::load_profile("balanced", &paths).unwrap();
    let flags = Overrides {
        model: Some("m".into()),
        theme: Some("light".into()),
        panes: Some(2),
        dtype: Some("float16".into()),
        prompt_cache: cohort::config::cache_args::PromptCacheArgs {
            prompt_cache: None,
            prompt_cache_bytes: Some(64 << 20),
            prompt_cache_answers: Some(cohort::engine::prompt_cache::AnswerPolicy::Decoded),
        },
    };
    let s = Settings::resolve(&loaded, &flags).unwrap();
    assert_eq!((s.model.as_deref(), s.theme.as_str(), s.panes), (Some("m"), "light", 2));
    assert_eq!(s.numerics, Numerics::Balanced, "what the flags leave alone comes from the profile");
    assert_eq!(s.prompt_cache.bytes, 64 << 20);
    assert_eq!(s.prompt_cache.answers, cohort::engine::prompt_cache::AnswerPolicy::Decoded);
    assert_eq!(s.scheduler().prompt_cache, s.prompt_cache, "the engine starts with the settings' cache");
}

#[test]
fn a_profile_sets_the_prompt_cache_and_a_flag_overrides_it() {
    use cohort::engine::prompt_cache::ReusePolicy;
    let (dir, paths) = temp_paths();
    let file = dir.path().join("cache.toml");
    write(&file, "prompt_cache = \"inexact\"\nprompt_cache_bytes = 1048576\n");
    let loaded = profile::load_profile(file.to_str().unwrap(), &paths).unwrap();
    let s = Settings::resolve(&loaded, &Overrides::default()).unwrap();
    assert_eq!((s.prompt_cache.policy, s.prompt_cache.bytes), (ReusePolicy::Inexact, 1 << 20));
    let off = Overrides {
        prompt_cache: cohort::config::cache_args::PromptCacheArgs {
            prompt_cache: Some(ReusePolicy::Off),
            prompt_cache_bytes: None,
            prompt_cache_answers: None,
        },
        ..Default::default()
    };
    let s2 = Settings::resolve(&loaded, &off).unwrap();
    assert_eq!((s2.prompt_cache.policy, s2.prompt_cache.bytes), (ReusePolicy::Off, 1 << 20));
    assert!(s.engine_differs(&s2), "another cache policy restarts the engine");
    write(&file, "prompt_cache = \"sometimes\"\n");
    let err = error_of(profile::load_profile(file.to_str().unwrap(), &paths));
    assert!(err.contains("cache.toml") && err.contains("prompt_cache"), "{err}");
}

#[test]
fn an_unknown_key_names_the_key_and_the_file() {
    let (dir, paths) = temp_paths();
    let file = dir.path().join("mine.toml");
    write(&file, "preset = \"throughput\"\nmax_tokenz = 10\n");
    let err = error_of(profile::load_profile(file.to_str().unwrap(), &paths));
    assert!(err.contains("mine.toml") && err.contains("max_tokenz"), "{err}");

    write(&file, "[sampler]\ntemprature = 0.5\n");
    let err = error_of(profile::load_profile(file.to_str().unwrap(), &paths));
    assert!(err.contains("mine.toml") && err.contains("temprature"), "{err}");
}

#[test]
fn a_wrong_type_names_the_key_and_the_file() {
    let (dir, paths) = temp_paths();
    let file = dir.path().join("typed.toml");
    write(&file, "max_tokens = \"lots\"\n");
    let err = error_of(profile::load_profile(file.to_str().unwrap(), &paths));
    assert!(err.contains("typed.toml") && err.contains("max_tokens"), "{err}");
    write(&file, "preset = \"warp\"\n");
    let err = error_of(profile::load_profile(file.to_str().unwrap(), &paths));
    assert!(err.contains("typed.toml") && err.contains("preset") && err.contains("warp"), "{err}");
}

#[test]
fn out_of_range_values_name_the_key_and_the_file() {
    let (dir, paths) = temp_paths();
    let file = dir.path().join("range.toml");
    for (text, key) in
        [("panes = 9\n", "panes"), ("max_tokens = 0\n", "max_tokens"), ("[sampler]\ntop_p = 1.5\n", "top_p")]
    {
        write(&file, text);
        let loaded = profile::load_profile(file.to_str().unwrap(), &paths).unwrap();
        let err = error_of(Settings::resolve(&loaded, &Overrides::default()));
        assert!(err.contains("range.toml") && err.contains(key), "{err}");
    }
}

#[test]
fn keymap_errors_name_the_command_and_the_key() {
    let bad_command = BTreeMap::from([("sendall".to_owned(), KeyList::One("f5".into()))]);
    let err = error_of(Keymap::with_overrides(&bad_command, "p.toml"));
    assert!(err.contains("p.toml") && err.contains("sendall"), "{err}");
    let bad_key = BTreeMap::from([("send_all".to_owned(), KeyList::One("hyper+q".into()))]);
    let err = error_of(Keymap::with_overrides(&bad_key, "p.toml"));
    assert!(err.contains("send_all") && err.contains("hyper"), "{err}");
    let clash = BTreeMap::from([
        ("send_all".to_owned(), KeyList::Many(vec!["ctrl+c".into()])),
        ("interrupt".to_owned(), KeyList::One("ctrl+c".into())),
    ]);
    let err = error_of(Keymap::with_overrides(&clash, "p.toml"));
    assert!(err.contains("ctrl+c") && err.contains("interrupt") && err.contains("send_all"), "{err}");
    // A key the table gives one command is taken from a command that only had it by default (so
    // a profile keeps loading when a later version binds its key to a new command).
    let taken = BTreeMap::from([("send_all".to_owned(), KeyList::Many(vec!["ctrl+c".into()]))]);
    let keymap = Keymap::with_overrides(&taken, "p.toml").unwrap();
    assert_eq!(keymap.describe_keys(cohort::config::keymap::Command::Interrupt), "unbound");
    let unbind = BTreeMap::from([("zoom".to_owned(), KeyList::Many(vec![]))]);
    let keymap = Keymap::with_overrides(&unbind, "p.toml").unwrap();
    assert_eq!(keymap.describe_keys(cohort::config::keymap::Command::Zoom), "unbound");
}

#[test]
fn a_bad_colour_names_the_file_key_and_value() {
    let (dir, paths) = temp_paths();
    let file = dir.path().join("themes").join("loud.toml");
    write(&file, "base = \"dark\"\nborder_focused = \"blurple\"\n");
    std::fs::create_dir_all(&paths.config_dir).unwrap();
    std::fs::rename(dir.path().join("themes"), paths.config_dir.join("themes")).unwrap();
    let err = error_of(theme::load_theme("loud", &paths));
    assert!(err.contains("loud.toml") && err.contains("border_focused") && err.contains("blurple"), "{err}");
}

#[test]
fn theme_unknown_keys_and_partial_themes() {
    let err = error_of(theme::parse_theme("bordr = \"red\"\n", "t.toml"));
    assert!(err.contains("t.toml") && err.contains("bordr"), "{err}");
    let light = theme::Theme::builtin("light");
    let tweaked = theme::parse_theme("base = \"light\"\naccent = \"#ff0000\"\n", "tweak.toml").unwrap();
    assert_eq!(tweaked.palette.accent, ratatui::style::Color::Rgb(255, 0, 0));
    assert_eq!(tweaked.palette.border, light.palette.border, "the rest comes from the base");
    assert_eq!(tweaked.name, "tweak");
}

#[test]
fn no_color_turns_every_colour_off() {
    let theme = theme::Theme::builtin("dark").without_colors();
    assert!(theme.no_color);
    assert_eq!(theme.palette.accent, ratatui::style::Color::Reset);
    assert_eq!(theme.palette.code_bg, ratatui::style::Color::Reset);
}

#[test]
fn saved_profiles_load_back_and_shadow_built_in_ones() {
    let (_dir, paths) = temp_paths();
    let mut settings =
        Settings::resolve(&profile::load_profile("throughput", &paths).unwrap(), &Overrides::default()).unwrap();
    settings.model = Some("some/model".into());
    settings.panes = 3;
    settings.sampler.temperature = 0.0;
    settings.keys = BTreeMap::from([("zoom".to_owned(), KeyList::Many(vec!["f2".into(), "ctrl+z".into()]))]);
    let path = profile::save_profile(&paths, "throughput", &settings.to_profile()).unwrap();
    assert_eq!(path, paths.config_dir.join("profiles").join("throughput.toml"));
    let back = profile::load_profile("throughput", &paths).unwrap();
    assert_eq!(back.origin, path.display().to_string(), "the user's file shadows the built-in one");
    let resolved = Settings::resolve(&back, &Overrides::default()).unwrap();
    assert_eq!((resolved.model.as_deref(), resolved.panes), (Some("some/model"), 3));
    assert_eq!(resolved.sampler, settings.sampler);
    assert_eq!(resolved.keys, settings.keys);
    let listed = profile::list_profiles(&paths);
    let entry = listed.iter().find(|p| p.name == "throughput").unwrap();
    assert_eq!(entry.path.as_deref(), Some(path.as_path()));
    assert_eq!(listed.iter().filter(|p| p.name == "throughput").count(), 1);
    assert!(profile::save_profile(&paths, "../evil", &settings.to_profile()).is_err());
}

#[test]
fn the_user_default_profile_is_the_startup_profile() {
    let (_dir, paths) = temp_paths();
    assert_eq!(profile::load_startup_profile(None, &paths).unwrap().name, profile::FALLBACK_PROFILE);
    write(&paths.config_dir.join("profiles").join("default.toml"), "panes = 2\n");
    let loaded = profile::load_startup_profile(None, &paths).unwrap();
    assert_eq!((loaded.name.as_str(), loaded.profile.panes), ("default", Some(2)));
    let err = error_of(profile::load_startup_profile(Some("nope"), &paths));
    assert!(err.contains("nope") && err.contains("throughput"), "{err}");
}

/// `--panes 0` is the flag's fault, not the profile's: the error names the flag.
#[test]
fn a_bad_panes_flag_names_the_flag() {
    let (_dir, paths) = temp_paths();
    let loaded = profile::load_profile("throughput", &paths).unwrap();
    for n in [0, 9] {
        let err = error_of(Settings::resolve(&loaded, &Overrides { panes: Some(n), ..Overrides::default() }));
        assert!(err.contains(&format!("--panes {n}")) && err.contains("between 1 and 8"), "{err}");
        assert!(!err.contains("throughput.toml"), "the profile is not at fault: {err}");
    }
}

/// `--profile` or `--theme` naming a file without end (a link to /dev/zero) was read until
/// allocation failed ("cannot read profile …: out of memory" under the 2 GB address-space cap
/// used here; without one, until the machine ran out). Profiles and themes are read with a bound
/// now and such a file is refused at once, naming it.
#[test]
fn a_profile_or_theme_without_end_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let endless = dir.path().join("endless.toml");
    std::os::unix::fs::symlink("/dev/zero", &endless).unwrap();
    for flag in ["--profile", "--theme"] {
        let started = std::time::Instant::now();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"ulimit -v 2000000 && exec "$@""#)
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_cohort"))
            .env("COHORT_HOME", dir.path().join("home"))
            .arg(flag)
            .arg(&endless)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{flag}: {stderr}");
        assert!(stderr.contains("endless.toml is over 1 MB"), "{flag}: {stderr}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{flag}: took {:?}", started.elapsed());
    }
}

/// Issue 40 (item 2): `[pane.N]` gives pane N its own system prompt, sampler values and
/// max_tokens, each unset one the profile's; bad tables are errors naming the file and the key.
#[test]
fn a_profile_sets_each_panes_own_settings() {
    let (_dir, paths) = temp_paths();
    let file = paths.config_dir.join("panes.toml");
    write(
        &file,
        "system = \"Be kind.\"\nmax_tokens = 300\n[sampler]\ntop_p = 0.8\n\
         [pane.2]\nsystem = \"Answer in French.\"\n[pane.2.sampler]\ntemperature = 0.0\n\
         [pane.3]\nsystem = \"\"\nmax_tokens = 40\n",
    );
    let loaded = profile::load_profile(file.to_str().unwrap(), &paths).unwrap();
    let settings = Settings::resolve(&loaded, &Overrides::default()).unwrap();
    assert_eq!(settings.pane_settings.keys().copied().collect::<Vec<_>>(), [2, 3]);
    let two = &settings.pane_settings[&2];
    assert_eq!(two.system.as_deref(), Some("Answer in French."));
    assert_eq!((two.sampler.temperature, two.sampler.top_p, two.max_tokens), (0.0, 0.8, 300), "unset: the profile's");
    let three = &settings.pane_settings[&3];
    assert_eq!((three.system.as_deref(), three.max_tokens, three.sampler), (None, 40, settings.sampler), "\"\" = none");

    for (text, words) in [
        ("[pane.9]\nmax_tokens = 5\n", &["panes.toml", "pane.9", "1 to 8"][..]),
        ("[pane.x]\nmax_tokens = 5\n", &["pane.x", "1 to 8"][..]),
        ("[pane.2.sampler]\ntop_p = 2.0\n", &["panes.toml", "[pane.2]", "top_p = 2", "(0, 1]"][..]),
        ("[pane.2]\nmax_tokens = 0\n", &["[pane.2]", "max_tokens = 0"][..]),
        ("[pane.2]\ntemp = 1\n", &["panes.toml", "pane.2", "unknown field `temp`"][..]),
    ] {
        write(&file, text);
        let err = error_of(
            profile::load_profile(file.to_str().unwrap(), &paths)
                .and_then(|l| Settings::resolve(&l, &Overrides::default())),
        );
        assert!(words.iter().all(|w| err.contains(w)), "{text}: {err}");
    }
}

/// Issue 40 (item 2): a profile saved from the app with panes' own settings loads back with them.
#[test]
fn a_saved_profile_keeps_each_panes_own_settings() {
    let (_dir, paths) = temp_paths();
    let mut settings = cohort::tui::fixture::settings(2);
    let mut own = settings.chat();
    own.system = None;
    own.sampler.temperature = 0.0;
    own.max_tokens = 33;
    settings.system = Some("Be kind.".into());
    let mut profile = settings.to_profile();
    profile.pane.insert("2".into(), profile::PaneProfile::from_settings(&own));
    profile::save_profile(&paths, "mine", &profile).unwrap();
    let back = Settings::resolve(&profile::load_profile("mine", &paths).unwrap(), &Overrides::default()).unwrap();
    assert_eq!(back.pane_settings.get(&2), Some(&own), "no system prompt for pane 2, though the profile has one");
    assert_eq!(back.system.as_deref(), Some("Be kind."));
}
