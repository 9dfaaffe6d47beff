//! Property tests (proptest) over every parser that reads user or file input: whatever bytes or
//! values arrive, the result is a value or an error, never a panic. Case counts are stated here
//! and recorded with their run time in docs/reliability.md. The config parsers (profiles, themes,
//! keymaps) must also name the file, and for a well-formed TOML document the key, in every error.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use cohort::config::keymap::{Command, KeyChord, KeyList, Keymap};
use cohort::config::profile::{self, LoadedProfile, Overrides, Settings};
use cohort::config::theme::{self, COLOR_KEYS};
use cohort::engine::request::RequestLine;
use cohort::engine::sampler::SamplerConfig;
use cohort::model::config::Qwen35Config;
use cohort::model::formats::gguf::GgufFile;
use cohort::model::formats::gguf_import::import_gguf;
use cohort::model::formats::weights::validate_safetensors;
use cohort::model::text::tokenizer::{ChatMessage, TextTokenizer};
use cohort::server::api::{Defaults, Endpoint, parse};
use proptest::prelude::*;

fn mutate(base: &[u8], flips: &[(usize, u8)], cut: Option<usize>, insert: Option<(usize, Vec<u8>)>) -> Vec<u8> {
    let mut b = base.to_vec();
    for (i, v) in flips {
        if !b.is_empty() {
            let n = b.len();
            b[i % n] = *v;
        }
    }
    if let Some((at, bytes)) = insert {
        let at = at % (b.len() + 1);
        b.splice(at..at, bytes);
    }
    if let Some(c) = cut {
        b.truncate(c % (b.len() + 1));
    }
    b
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Byte flips, an optional truncation point and an optional insertion.
type Mutation = (Vec<(usize, u8)>, Option<usize>, Option<(usize, Vec<u8>)>);

fn bytes_strategy() -> impl Strategy<Value = Mutation> {
    (
        prop::collection::vec((any::<usize>(), any::<u8>()), 0..12),
        prop::option::of(any::<usize>()),
        prop::option::of((any::<usize>(), prop::collection::vec(any::<u8>(), 1..64))),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn gguf_reader_never_panics(m in bytes_strategy()) {
        let base = std::fs::read(common::fixture("llama/tiny_llama.gguf")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = write_tmp(dir.path(), "x.gguf", &mutate(&base, &m.0, m.1, m.2));
        if let Ok(g) = GgufFile::open(&p) {
            for t in &g.tensors {
                let _ = g.tensor_f32(t);
            }
        }
    }

    /// `import-gguf` on a damaged GGUF: an error, or a checkpoint whose tokenizer and weights
    /// either load or are refused with an error; never a panic.
    #[test]
    fn gguf_import_never_panics(m in bytes_strategy()) {
        let base = std::fs::read(common::fixture("llama/tiny_llama.gguf")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = write_tmp(dir.path(), "x.gguf", &mutate(&base, &m.0, m.1, m.2));
        let out = dir.path().join("model");
        match import_gguf(&p, &out) {
            Ok(_) => {
                if let Err(e) = TextTokenizer::load(&out) {
                    let e = format!("{e:#}");
                    prop_assert!(e.contains("tokenizer"), "{e}");
                }
                if let Err(e) = cohort::model::load::load(&out, mlx_rs::Dtype::Float32) {
                    let e = format!("{e:#}");
                    prop_assert!(!e.is_empty());
                }
            }
            Err(e) => {
                // Every refusal names the GGUF file it came from.
                let e = format!("{e:#}");
                prop_assert!(e.contains(&p.display().to_string()), "{e}");
            }
        }
    }

    #[test]
    fn safetensors_headers_never_panic(m in bytes_strategy()) {
        let base = std::fs::read(common::fixture("qwen35_dense_8bit/mtp.safetensors")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = write_tmp(dir.path(), "x.safetensors", &mutate(&base, &m.0, m.1, m.2));
        // What passes validation must also load in MLX without crashing.
        if validate_safetensors(&p).is_ok() {
            let _ = mlx_rs::Array::load_safetensors(&p);
        }
    }

    #[test]
    fn model_configs_never_panic(json in json_value(4)) {
        let _ = Qwen35Config::from_json(&json);
        if let serde_json::Value::Object(mut m) = json {
            m.insert("model_type".into(), "qwen3_5".into());
            let _ = Qwen35Config::from_json(&serde_json::Value::Object(m));
        }
    }

    #[test]
    fn request_lines_never_panic(line in any::<String>(), json in json_value(3)) {
        for text in [line, json.to_string()] {
            if let Ok(l) = serde_json::from_str::<RequestLine>(&text) {
                let _ = l.into_request(1, &SamplerConfig::default());
            }
        }
    }

    /// A `generate` line that starts with its id keeps that id whatever follows: the request, or
    /// the refusal of a line damaged anywhere after the id (cut, junk, bad numbers, bad UTF-8).
    #[test]
    fn generate_lines_keep_their_id(id in "[A-Za-z0-9_.-]{1,12}", tail in prop::collection::vec(any::<u8>(), 0..48), json in json_value(2)) {
        let defaults = SamplerConfig::default();
        let mut whole = format!("{{\"id\":\"{id}\",").into_bytes();
        whole.extend_from_slice(json.to_string().trim_start_matches('{').as_bytes());
        let mut damaged = format!("{{\"id\":\"{id}\",").into_bytes();
        damaged.extend_from_slice(&tail);
        for line in [whole, damaged] {
            let kept = match cohort::cli::generate::parse_line(Path::new("in.jsonl"), 7, line.clone(), &defaults) {
                Some(Ok(request)) => request.id,
                Some(Err(refused)) => refused.id,
                None => unreachable!("the line is not blank"),
            };
            prop_assert_eq!(&kept, &id, "{}", String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn server_request_bodies_never_panic(json in json_value(4), m in bytes_strategy()) {
        // Any JSON built from the API's field names, and byte-level damage to a valid body, on
        // both endpoints: a request or a 400 with a message, never a panic.
        let defaults = Defaults { sampler: SamplerConfig::default(), max_tokens: 256 };
        let valid = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"prompt":["hi"],"max_tokens":8,"temperature":0.5,"top_p":0.9,"stream":true,"stream_options":{"include_usage":true},"stop":["x"],"seed":3}"#;
        for bytes in [json.to_string().into_bytes(), mutate(valid, &m.0, m.1, m.2)] {
            for endpoint in [Endpoint::Chat, Endpoint::Completions] {
                if let Err(e) = parse(endpoint, &bytes, &defaults) {
                    prop_assert_eq!(e.status.as_u16(), 400, "{:?}", e);
                    prop_assert!(!e.message.is_empty());
                    prop_assert!(e.param.as_deref() != Some(""), "{:?}", e);
                }
            }
        }
    }

    #[test]
    fn profile_text_never_panics(text in any::<String>(), m in bytes_strategy(), base in 0..profile::SHIPPED.len()) {
        // Anything at all, and byte-level damage to a shipped profile.
        for t in [text, damaged(profile::SHIPPED, base, m)] {
            if let Some(e) = read_profile(&t) {
                prop_assert!(e.starts_with(PROFILE_ORIGIN), "the error does not name the file: {e}");
            }
        }
    }

    #[test]
    fn mutated_profiles_name_the_file_and_key(base in 0..profile::SHIPPED.len(), edits in edits()) {
        let Some((text, touched)) = edited(profile::SHIPPED, base, &edits) else { return Ok(()) };
        if let Some(e) = read_profile(&text) {
            prop_assert!(names_file_and_key(&e, PROFILE_ORIGIN, &touched), "{e}\n--- edited {touched:?}:\n{text}");
        }
    }

    #[test]
    fn theme_text_never_panics(text in any::<String>(), m in bytes_strategy(), base in 0..theme::SHIPPED.len()) {
        for t in [text, damaged(theme::SHIPPED, base, m)] {
            if let Some(e) = read_theme(&t) {
                prop_assert!(e.starts_with(THEME_ORIGIN), "the error does not name the file: {e}");
            }
        }
    }

    #[test]
    fn mutated_themes_name_the_file_and_key(base in 0..theme::SHIPPED.len(), edits in edits()) {
        let Some((text, touched)) = edited(theme::SHIPPED, base, &edits) else { return Ok(()) };
        if let Some(e) = read_theme(&text) {
            prop_assert!(names_file_and_key(&e, THEME_ORIGIN, &touched), "{e}\n--- edited {touched:?}:\n{text}");
        }
    }

    #[test]
    fn keymaps_never_panic(overrides in prop::collection::btree_map(config_key(), key_list(), 0..6), chord in chord_text())
    {
        let overrides: BTreeMap<String, KeyList> = overrides;
        match Keymap::with_overrides(&overrides, PROFILE_ORIGIN) {
            Ok(map) => {
                for (name, list) in &overrides {
                    let command = Command::from_name(name).expect("only commands are accepted");
                    prop_assert_eq!(map.keys_for(command).len(), list.keys().len());
                }
            }
            Err(e) => {
                let e = format!("{e:#}");
                let names: Vec<String> = overrides.keys().cloned().collect();
                prop_assert!(names_file_and_key(&e, PROFILE_ORIGIN, &names), "{e}");
            }
        }
        // What a chord prints (help overlay, saved profiles) must read back as the same chord.
        if let Ok(parsed) = KeyChord::parse(&chord) {
            prop_assert_eq!(KeyChord::parse(&parsed.to_string()).ok(), Some(parsed), "{} printed as {}", chord, parsed);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// Chat templates from anyone: the constructs real templates use, the ones that found the fuel
    /// and output limits (loops nested to 10^10 steps, strings repeated to 400 MB) and the render's
    /// memory limit (a string doubled in a loop, widths and joins of up to 10^12), and byte-level
    /// damage to a real template, over arbitrary conversations. Rendered text within the output
    /// limit, or an error that says it is the chat template's; never a panic, never unbounded time.
    #[test]
    fn chat_templates_never_panic_and_stay_bounded(
        template in template_text(3),
        m in light_damage(),
        messages in prop::collection::vec(chat_message(), 0..6),
        add_generation_prompt in any::<bool>(),
    ) {
        let real = fixture_template();
        let damaged = String::from_utf8_lossy(&mutate(real.as_bytes(), &m.0, m.1, m.2)).into_owned();
        for template in [template, damaged] {
            let (_dir, tok) = tokenizer_with(&template);
            let started = std::time::Instant::now();
            match tok.apply_chat_template(&messages, add_generation_prompt) {
                Ok(text) => prop_assert!(text.len() <= 32 << 20, "{} bytes from {:?}", text.len(), template),
                Err(e) => {
                    let e = format!("{e:#}");
                    prop_assert!(e.contains("chat template"), "{} from {:?}", e, template);
                }
            }
            prop_assert!(started.elapsed().as_secs() < 20, "{:?} on {template:?}", started.elapsed());
        }
    }
}

/// The fixture model's tokenizer with `template` as its chat template.
fn tokenizer_with(template: &str) -> (tempfile::TempDir, TextTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::fixture("qwen35_moe_4bit/tokenizer.json"), dir.path().join("tokenizer.json")).unwrap();
    let config = serde_json::json!({ "chat_template": template, "eos_token": "<|im_end|>" });
    std::fs::write(dir.path().join("tokenizer_config.json"), config.to_string()).unwrap();
    let tok = TextTokenizer::load(dir.path()).unwrap();
    (dir, tok)
}

fn fixture_template() -> String {
    let cfg: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture("qwen35_moe_4bit/tokenizer_config.json")).unwrap(),
    )
    .unwrap();
    cfg["chat_template"].as_str().unwrap().to_owned()
}

/// One to three byte flips and perhaps a short insertion: most damaged templates still parse.
fn light_damage() -> impl Strategy<Value = Mutation> {
    (
        prop::collection::vec((any::<usize>(), any::<u8>()), 1..3),
        Just(None),
        prop::option::of((any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))),
    )
}

fn chat_message() -> impl Strategy<Value = ChatMessage> {
    let role = prop_oneof![
        prop::sample::select(vec!["system", "user", "assistant", "tool"]).prop_map(str::to_owned),
        ".{0,8}",
    ];
    (role, ".{0,64}").prop_map(|(role, content)| ChatMessage { role, content })
}

/// A count for a loop or a repetition: mostly small, sometimes at the limits.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0..5u64,
        1 => prop::sample::select(vec![100, 1000, 100_000, 1_000_000, 50_000_000, 200_000_000, u32::MAX as u64]),
    ]
}

/// A width a filter builds at once: mostly small, sometimes a million, or a trillion (an
/// allocation no machine makes).
fn width() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0..5u64, 1 => prop::sample::select(vec![1_000_000, 1_000_000_000_000])]
}

/// A loop's length: mostly short, sometimes the most `range` gives (100,000) or one past it.
fn loop_count() -> impl Strategy<Value = u64> {
    prop_oneof![2 => 0..5u64, 1 => prop::sample::select(vec![1000, 100_000, 100_001])]
}

/// Jinja text: literals, expressions over the template's context, loops, conditionals,
/// namespaces, repetition, filters, raised exceptions, and fragments of syntax.
fn template_text(depth: u32) -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        "[a-z<>|_ ]{0,12}",
        Just("{{ messages[0].content }}".to_owned()),
        Just("{{ messages|length }}".to_owned()),
        Just("{{ (messages|last).role|upper }}".to_owned()),
        Just("{{ bos_token }}{{ eos_token }}".to_owned()),
        Just("{{ raise_exception('refused by the template') }}".to_owned()),
        Just("{{ nothing.here }}".to_owned()),
        Just("{{ messages[0].content|trim|replace('a', 'bb') }}".to_owned()),
        Just("{{ messages|map(attribute='content')|join(', ') }}".to_owned()),
        count().prop_map(|n| format!("{{{{ 'ab' * {n} }}}}")),
        count().prop_map(|n| format!("{{{{ range({n})|length }}}}")),
        Just("{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ m.content %}{% endfor %}{{ ns.s }}".to_owned()),
        // One huge value in few steps, never written: what fuel and the output cap cannot see,
        // and the render's own memory and time limits stop.
        (count(), loop_count()).prop_map(|(n, k)| format!(
            "{{% set ns = namespace(s='x' * {n}) %}}{{% for i in range({k}) %}}{{% set ns.s = ns.s ~ ns.s %}}{{% endfor %}}{{{{ ns.s|length }}}}"
        )),
        width().prop_map(|w| format!("{{{{ messages[0].content|indent({w}, true) }}}}")),
        width().prop_map(|w| format!("{{{{ '%{w}s'|format('x')|length }}}}")),
        // A million items; a billion runs into the CPU limit, two seconds a case, so only
        // chat_template's own test tries it.
        prop::sample::select(vec![0u64, 3, 1_000_000]).prop_map(|n| format!("{{{{ (['x'] * {n})|join|length }}}}")),
        prop::sample::select(vec!["{{", "}}", "{%", "%}", "{% endfor %}", "{% if %}", "{{ 1/0 }}", "{{ [1,2][5] }}"])
            .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(depth, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| v.concat()),
            inner.clone().prop_map(|b| format!("{{% for message in messages %}}{b}{{% endfor %}}")),
            (loop_count(), inner.clone()).prop_map(|(n, b)| format!("{{% for i in range({n}) %}}{b}{{% endfor %}}")),
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| format!("{{% if add_generation_prompt %}}{a}{{% else %}}{b}{{% endif %}}")),
            inner.prop_map(|b| format!("{{% if messages and messages[0].role == 'system' %}}{b}{{% endif %}}")),
        ]
    })
}

const PROFILE_ORIGIN: &str = "/fuzz/profiles/p.toml";
const THEME_ORIGIN: &str = "/fuzz/themes/t.toml";

/// A profile's text through everything that reads it before the app starts: the parser, then
/// the range, sampler and keymap checks. The error's full message, if any.
fn read_profile(text: &str) -> Option<String> {
    let profile = match profile::parse_profile(text, PROFILE_ORIGIN) {
        Ok(p) => p,
        Err(e) => return Some(format!("{e:#}")),
    };
    let loaded = LoadedProfile { name: "p".into(), origin: PROFILE_ORIGIN.into(), profile };
    Settings::resolve(&loaded, &Overrides::default()).err().map(|e| format!("{e:#}"))
}

fn read_theme(text: &str) -> Option<String> {
    theme::parse_theme(text, THEME_ORIGIN).err().map(|e| format!("{e:#}"))
}

/// A shipped file (profile or theme) with byte-level damage, read as text.
fn damaged(files: &[(&str, &str)], base: usize, m: Mutation) -> String {
    String::from_utf8_lossy(&mutate(files[base].1.as_bytes(), &m.0, m.1, m.2)).into_owned()
}

/// A shipped file with structural edits, written back as TOML, and the keys the edits touched;
/// None when the edited table has no TOML spelling.
fn edited(files: &[(&str, &str)], base: usize, edits: &[Edit]) -> Option<(String, Vec<String>)> {
    let mut doc: toml::Table = toml::from_str(files[base].1).expect("shipped files parse");
    let touched = apply_edits(&mut doc, edits);
    Some((toml::to_string(&doc).ok()?, touched))
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(edit_strategy(), 1..4)
}

/// A `[keys]` value: one chord or a list of them.
fn key_list() -> impl Strategy<Value = KeyList> {
    prop_oneof![chord_text().prop_map(KeyList::One), prop::collection::vec(chord_text(), 0..4).prop_map(KeyList::Many)]
}

/// One structural edit of a TOML document.
#[derive(Debug, Clone)]
enum Edit {
    /// Drop the n-th entry.
    Remove(usize),
    /// Give the n-th entry a value of any type.
    Replace(usize, toml::Value),
    /// Add (or overwrite) an entry, under a known, misspelt or arbitrary key.
    Insert(String, toml::Value),
    /// Add an entry to the n-th sub-table (`[sampler]`, `[keys]`), creating `[keys]` if none.
    Nested(usize, String, toml::Value),
    /// Give the n-th entry (inside a sub-table: its n-th entry) another value of its own type,
    /// which is what reaches the range checks, colour and key parsers rather than serde.
    Tweak(usize, String, i64, f64),
}

fn edit_strategy() -> impl Strategy<Value = Edit> {
    prop_oneof![
        1 => any::<usize>().prop_map(Edit::Remove),
        1 => (any::<usize>(), toml_value()).prop_map(|(i, v)| Edit::Replace(i, v)),
        1 => (config_key(), toml_value()).prop_map(|(k, v)| Edit::Insert(k, v)),
        1 => (any::<usize>(), config_key(), toml_value()).prop_map(|(i, k, v)| Edit::Nested(i, k, v)),
        3 => (any::<usize>(), config_string(), -3i64..2000, edge_float())
            .prop_map(|(i, text, int, float)| Edit::Tweak(i, text, int, float)),
    ]
}

fn edge_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-1.0),
        Just(0.0),
        Just(1.0),
        Just(1.5),
        -0.5f64..1.5,
        any::<f64>()
    ]
}

/// Apply the edits; returns every key an edit put into the document (its value's keys too),
/// which is what an error may rightly name.
fn apply_edits(doc: &mut toml::Table, edits: &[Edit]) -> Vec<String> {
    fn value_keys(v: &toml::Value, out: &mut Vec<String>) {
        match v {
            toml::Value::Table(t) => {
                for (k, v) in t {
                    out.push(k.clone());
                    value_keys(v, out);
                }
            }
            toml::Value::Array(a) => a.iter().for_each(|v| value_keys(v, out)),
            _ => {}
        }
    }
    let mut touched = Vec::new();
    for edit in edits {
        let nth = |doc: &toml::Table, i: usize| (!doc.is_empty()).then(|| doc.keys().nth(i % doc.len()).cloned());
        match edit {
            Edit::Remove(i) => {
                if let Some(Some(k)) = nth(doc, *i) {
                    doc.remove(&k);
                }
            }
            Edit::Replace(i, v) => {
                if let Some(Some(k)) = nth(doc, *i) {
                    value_keys(v, &mut touched);
                    touched.push(k.clone());
                    doc.insert(k, v.clone());
                }
            }
            Edit::Insert(k, v) => {
                value_keys(v, &mut touched);
                touched.push(k.clone());
                doc.insert(k.clone(), v.clone());
            }
            Edit::Tweak(i, text, int, float) => {
                let Some(Some(k)) = nth(doc, *i) else { continue };
                let (key, slot) = match doc.get_mut(&k) {
                    Some(toml::Value::Table(t)) if !t.is_empty() => {
                        let inner = t.keys().nth(i / 7 % t.len()).cloned().expect("not empty");
                        touched.push(k.clone());
                        (inner.clone(), t.get_mut(&inner).expect("listed"))
                    }
                    Some(v) => (k.clone(), v),
                    None => continue,
                };
                touched.push(key);
                match slot {
                    toml::Value::String(s) => *s = text.clone(),
                    toml::Value::Integer(n) => *n = *int,
                    toml::Value::Float(f) => *f = *float,
                    toml::Value::Boolean(b) => *b = !*b,
                    _ => {}
                }
            }
            Edit::Nested(i, k, v) => {
                let tables: Vec<String> = doc.iter().filter(|(_, v)| v.is_table()).map(|(k, _)| k.clone()).collect();
                let table = if tables.is_empty() { "keys".to_owned() } else { tables[i % tables.len()].clone() };
                let entry = doc.entry(table.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(t) = entry {
                    value_keys(v, &mut touched);
                    touched.extend([table, k.clone()]);
                    t.insert(k.clone(), v.clone());
                }
            }
        }
    }
    touched
}

/// An error for a well-formed document must say, on its first line (not only in a quoted
/// snippet), which file and which key it is about. A blank or one-character key would match
/// anywhere, so it counts only quoted in backticks.
fn names_file_and_key(message: &str, origin: &str, touched: &[String]) -> bool {
    let first = message.lines().next().unwrap_or_default();
    let named = |k: &String| match k.trim().chars().count() {
        0 | 1 => first.contains(&format!("`{k}`")),
        _ => first.contains(k.as_str()),
    };
    first.contains(origin) && touched.iter().any(named)
}

/// Keys the config files use (profile, sampler, theme, command names), near misses, and
/// anything at all.
fn config_key() -> impl Strategy<Value = String> {
    let mut known: Vec<String> = [
        "description",
        "model",
        "dtype",
        "weights",
        "preset",
        "numerics",
        "mode",
        "max_tokens",
        "seed",
        "ignore_eos",
        "system",
        "theme",
        "panes",
        "sampler",
        "keys",
        "temperature",
        "top_p",
        "top_k",
        "presence_penalty",
        "frequency_penalty",
        "name",
        "base",
        "max_tokenz",
        "temprature",
        "bordr",
        "focus_9",
        "sendall",
    ]
    .map(String::from)
    .to_vec();
    known.extend(COLOR_KEYS.iter().map(|k| k.to_string()));
    known.extend(Command::all().into_iter().map(Command::name));
    prop_oneof![6 => prop::sample::select(known), 1 => "[a-z_]{1,10}", 1 => ".{0,6}"]
}

/// Strings the config parsers give meaning to (presets, modes, themes, colours, key chords) and
/// near misses of them, or anything at all.
fn config_string() -> impl Strategy<Value = String> {
    let meaningful = prop::sample::select(vec![
        "throughput",
        "latency",
        "balanced",
        "b1-exact",
        "ar",
        "mtp",
        "auto",
        "dark",
        "light",
        "nope",
        "#ff8000",
        "#FF8000",
        "#ff80",
        "#ff800g",
        "#\u{e9}\u{e9}\u{e9}",
        "blue",
        "light-red",
        "bright_blue",
        "grey",
        "blurple",
        "reset",
        "default",
        "255",
        "256",
        "-1",
        "+5",
        "ctrl+c",
        "alt+enter",
        "f5",
        "F24",
        "f25",
        "f0",
        "shift+tab",
        "shift+backtab",
        "ctrl++",
        "+",
        "++",
        "ctrl+",
        "hyper+x",
        "alt+shift+ctrl+z",
        "space",
        "\u{130}",
        "?",
        "",
        " ",
    ]);
    prop_oneof![3 => meaningful.prop_map(String::from), 1 => ".{0,10}"]
}

/// A TOML value of any type (NaN and infinities, datetimes, nested arrays and tables included).
fn toml_value() -> impl Strategy<Value = toml::Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(toml::Value::Boolean),
        any::<i64>().prop_map(toml::Value::Integer),
        (-3i64..12).prop_map(toml::Value::Integer),
        any::<f64>().prop_map(toml::Value::Float),
        (-0.5f64..1.5).prop_map(toml::Value::Float),
        config_string().prop_map(toml::Value::String),
        Just(toml::Value::Datetime("1979-05-27T07:32:00Z".parse().unwrap())),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
            prop::collection::vec((config_key(), inner), 0..4)
                .prop_map(|kv| toml::Value::Table(kv.into_iter().collect())),
        ]
    })
}

/// A key chord as a profile might spell it: modifiers, separators and key names, or anything.
fn chord_text() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => config_string(),
        2 => "((ctrl|alt|shift|meta|option|control|hyper|)\\+){0,3}(enter|tab|backtab|esc|space|f[0-9]{1,2}|[a-z?+]|.)",
        1 => any::<String>(),
    ]
}

/// Arbitrary JSON, biased towards the keys the parsers look for.
fn json_value(depth: u32) -> impl Strategy<Value = serde_json::Value> {
    let keys = prop::sample::select(vec![
        "model_type",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "text_config",
        "quantization",
        "bits",
        "group_size",
        "mode",
        "num_experts",
        "num_experts_per_tok",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "rope_parameters",
        "full_attention_interval",
        "prompt",
        "prompt_ids",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "stop",
        "id",
        "chat",
        "role",
        "content",
        "stream",
        "stream_options",
        "include_usage",
        "n",
        "max_completion_tokens",
        "ignore_eos",
        "type",
        "text",
        "logprobs",
        "tools",
        "frequency_penalty",
        "response_format",
    ]);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        (-5i64..300).prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        ".{0,12}".prop_map(serde_json::Value::from),
        prop::sample::select(vec!["qwen3_5", "qwen3_5_moe", "qwen3_next", "llama", "affine"])
            .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(depth, 48, 8, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::vec((keys.clone(), inner), 0..10)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}
