//! Property tests (proptest) over every parser that reads user or file input: whatever bytes or
//! values arrive, the result is a value or an error, never a panic. Case counts are stated here
//! and recorded with their run time in docs/reliability.md.

mod common;

use std::path::Path;

use cohort::engine::request::RequestLine;
use cohort::engine::sampler::SamplerConfig;
use cohort::model::config::Qwen35Config;
use cohort::model::gguf::GgufFile;
use cohort::model::weights::validate_safetensors;
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
