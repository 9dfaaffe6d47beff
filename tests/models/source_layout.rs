//! The tree's import rules that the compiler does not hold: the TUI, the server and the client
//! reach the engine only through its facade (`engine::api`), so the rest of the engine can change
//! behind it; the CUDA wrappers take arrays and shapes, not the layers' types, and carry no checks
//! (those are the lab's). (Cargo holds the crates' order: core imports neither the product nor
//! the lab.)

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

/// Lines of `text` (comments left out) that reach into the layers or define a check.
fn wrapper_lines_out_of_place(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .filter(|code| code.contains("layers::") || code.contains("pub fn check") || code.contains("fn rows_differing"))
        .map(|code| code.trim().to_owned())
        .collect()
}

#[test]
fn the_cuda_wrappers_hold_kernels_only() {
    // The check finds what it is for.
    assert_eq!(wrapper_lines_out_of_place("use crate::model::layers::rope;\npub fn check(x: i32) {}").len(), 2);
    assert!(wrapper_lines_out_of_place("use crate::model::config::RopeSpec; // not layers::rope").is_empty());
    let root = common::root();
    let mut files = Vec::new();
    common::rust_files(&root.join("crates/core/src/model/cuda"), &mut files);
    assert!(files.len() >= 8, "{} files", files.len());
    let mut found = Vec::new();
    for f in &files {
        for line in wrapper_lines_out_of_place(&std::fs::read_to_string(f).unwrap()) {
            found.push(format!("{}: {line}", f.strip_prefix(&root).unwrap().display()));
        }
    }
    assert!(found.is_empty(), "layer types or checks in the CUDA wrappers: {found:#?}");
}
