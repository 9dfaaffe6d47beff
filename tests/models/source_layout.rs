//! The tree's import rules that the compiler does not hold: the TUI, the server and the client
//! reach the engine only through its facade (`engine::api`), so the rest of the engine can change
//! behind it. (Cargo holds the crates' order: core imports neither the product nor the lab.)

use crate::common;

/// Every `engine::` path in `text` that does not go through `engine::api`, comments left out.
fn engine_paths_past_the_facade(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("engine::") {
            let rest = &code[at + "engine::".len()..];
            if !rest.starts_with("api::") && !rest.starts_with("api;") {
                found.push(line.trim().to_owned());
            }
        }
    }
    found
}

#[test]
fn the_terminal_the_server_and_the_client_reach_the_engine_only_through_its_api() {
    // The check finds what it is for.
    assert_eq!(engine_paths_past_the_facade("use crate::engine::lane::Lane; // engine::x").len(), 1);
    assert!(engine_paths_past_the_facade("use crate::engine::api::Request; // see engine::lane").is_empty());
    let root = common::root();
    let mut files = Vec::new();
    for dir in ["src/tui", "src/server", "src/client"] {
        common::rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 30, "{} files", files.len());
    let mut past = Vec::new();
    for f in &files {
        for line in engine_paths_past_the_facade(&std::fs::read_to_string(f).unwrap()) {
            past.push(format!("{}: {line}", f.strip_prefix(&root).unwrap().display()));
        }
    }
    assert!(past.is_empty(), "engine paths past engine::api: {past:#?}");
}
