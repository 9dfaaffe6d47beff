//! The engine's environment switches are one table (crates/core/src/model/switches.rs): every `COHORT_`
//! name the engine's source reads is in it, docs/configuration.md's switch table is generated
//! from it, and start-up refuses a value a switch cannot take, naming it.

use crate::common;
use cohort::model::switches::{SWITCHES, markdown_table};

const BEGIN: &str =
    "<!-- switches: generated from crates/core/src/model/switches.rs, kept in step by tests/models/switches.rs -->\n";
const END: &str = "<!-- /switches -->";

/// Names that look like switches but are not read from the environment: a kernel template
/// argument, the TUI's, the server's and the paths' own variables (docs/configuration.md
/// documents those where they belong), and the chat-template helper's handshake, which cohort
/// sets for the helper process it starts (model/text/template.rs), never a user.
const NOT_ENGINE_SWITCHES: [&str; 6] =
    ["COHORT_DTYPES", "COHORT_LOG", "COHORT_HOME", "COHORT_API_KEY", "COHORT_TUI_PANIC_ON", "COHORT_TEMPLATE_HELPER"];

#[test]
fn every_cohort_variable_the_engine_reads_is_in_the_table() {
    let mut files = Vec::new();
    for dir in
        ["crates/core/src/model", "crates/core/src/engine", "crates/core/src/platform", "src/cli", "crates/lab/src"]
    {
        common::rust_files(&common::root().join(dir), &mut files);
    }
    let mut missing = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("switches.rs")) {
        let text = std::fs::read_to_string(f).unwrap();
        for (at, _) in text.match_indices("\"COHORT_") {
            let name: String = text[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // `format!("COHORT_STACK_{kind}")`: the prefix of a family the table lists member by member.
            let family = name.ends_with('_') && SWITCHES.iter().any(|s| s.name.starts_with(&name));
            if !family && !NOT_ENGINE_SWITCHES.contains(&name.as_str()) && !SWITCHES.iter().any(|s| s.name == name) {
                missing.push(format!("{name} ({})", f.strip_prefix(common::root()).unwrap().display()));
            }
        }
    }
    assert!(missing.is_empty(), "read by the engine but not in crates/core/src/model/switches.rs: {missing:?}");
    let mut names: Vec<_> = SWITCHES.iter().map(|s| s.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), SWITCHES.len(), "a switch is listed twice");
}

#[test]
fn the_configuration_docs_list_the_table() {
    let path = common::root().join("docs/configuration.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find(BEGIN).expect("docs/configuration.md has the switches markers") + BEGIN.len();
    let end = start + text[start..].find(END).expect("the switches end marker");
    let want = markdown_table();
    if text[start..end] != want && std::env::var("COHORT_UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, format!("{}{want}{}", &text[..start], &text[end..])).unwrap();
        return;
    }
    assert_eq!(&text[start..end], want, "docs/configuration.md is out of step: rerun with COHORT_UPDATE_DOCS=1");
}

#[test]
fn start_up_refuses_a_switch_value_it_cannot_take_naming_it() {
    for (name, value, says) in [
        ("COHORT_HOST_ROPE", "off", "COHORT_HOST_ROPE=off: use 1 (on) or 0 (off)"),
        ("COHORT_MTP_ALLOW_INEXACT", "yes", "COHORT_MTP_ALLOW_INEXACT=yes: use 1 (on) or 0 (off)"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["probe", "-m", "nothing"])
            .env(name, value)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{name}={value}: {err}");
    }
}
