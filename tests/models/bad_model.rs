//! Broken checkpoints get errors that name the file and the tensor, never a panic.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cohort::model::families::qwen3_5::Qwen35Model;
use common::fixture;
use mlx_rs::{Array, Dtype};

fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    (tmp, dir)
}

fn load_err(dir: &Path) -> String {
    match Qwen35Model::load(dir, Dtype::Float32) {
        Ok(_) => panic!("{} loaded although it is broken", dir.display()),
        Err(e) => format!("{e:#}"),
    }
}

fn rewrite(file: &Path, edit: impl FnOnce(&mut HashMap<String, Array>)) {
    let mut tensors = Array::load_safetensors(file).unwrap();
    edit(&mut tensors);
    std::fs::remove_file(file).unwrap();
    Array::save_safetensors(tensors.iter().map(|(k, v)| (k.as_str(), v)), None, file).unwrap();
}

const MODEL: &str = "qwen35_dense_8bit";

#[test]
fn missing_config_is_named() {
    let (_t, dir) = copy_fixture(MODEL);
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("config.json"), "{e}");
}

#[test]
fn missing_shard_is_named() {
    let (_t, dir) = copy_fixture(MODEL);
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("model.safetensors") && e.contains("missing"), "{e}");
}

#[test]
fn missing_tensor_is_named() {
    let (_t, dir) = copy_fixture(MODEL);
    rewrite(&dir.join("model.safetensors"), |t| {
        t.remove("language_model.model.layers.1.linear_attn.A_log").expect("fixture layout");
    });
    let e = load_err(&dir);
    assert!(e.contains("model.layers.1.linear_attn.A_log") && e.contains("missing"), "{e}");
}

#[test]
fn wrong_shape_names_tensor_file_and_shapes() {
    let (_t, dir) = copy_fixture(MODEL);
    rewrite(&dir.join("model.safetensors"), |t| {
        t.insert("language_model.model.norm.weight".into(), Array::from_slice(&[1.0f32; 63], &[63]));
    });
    let e = load_err(&dir);
    assert!(
        e.contains("model.norm.weight") && e.contains("[63]") && e.contains("[64]") && e.contains("model.safetensors"),
        "{e}"
    );
}

#[test]
fn unknown_model_type_is_named() {
    let (_t, dir) = copy_fixture(MODEL);
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap().replace("\"qwen3_5\"", "\"qwen9_banana\"");
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("qwen9_banana") && e.contains("model_type"), "{e}");
}

#[test]
fn corrupt_and_truncated_safetensors_are_named() {
    let (_t, dir) = copy_fixture(MODEL);
    let file = dir.join("mtp.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[8] = b'#'; // the header's opening brace
    std::fs::write(&file, &bytes).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("mtp.safetensors") && e.contains("corrupt safetensors header"), "{e}");

    let (_t2, dir) = copy_fixture(MODEL);
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("model.safetensors") && e.contains("truncated or corrupt"), "{e}");

    std::fs::write(&file, [1u8, 2, 3]).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("model.safetensors") && e.contains("truncated"), "{e}");
}

#[test]
fn quantization_that_does_not_fit_the_tensors_is_named() {
    let (_t, dir) = copy_fixture(MODEL);
    let cfg = std::fs::read_to_string(dir.join("config.json")).unwrap().replace("\"bits\": 8", "\"bits\": 4");
    std::fs::write(dir.join("config.json"), cfg).unwrap();
    let e = load_err(&dir);
    assert!(e.contains("4-bit") && e.contains("8-bit"), "{e}");
}

#[test]
fn wrong_dtype_of_a_packed_weight_is_named() {
    let (_t, dir) = copy_fixture(MODEL);
    rewrite(&dir.join("model.safetensors"), |t| {
        let key = "language_model.model.layers.0.mlp.down_proj.weight";
        let shape = t[key].shape().to_vec();
        t.insert(key.into(), mlx_rs::ops::zeros_dtype(&shape, Dtype::Int32).unwrap());
    });
    let e = load_err(&dir);
    assert!(e.contains("model.layers.0.mlp.down_proj.weight") && e.contains("uint32"), "{e}");
}

#[test]
fn mtp_weights_that_do_not_fit_are_named() {
    let (_t, dir) = copy_fixture("qwen35_dense_bf16");
    rewrite(&dir.join("mtp.safetensors"), |t| {
        t.insert("mtp.fc.weight".into(), mlx_rs::ops::zeros::<f32>(&[64, 100]).unwrap());
    });
    let e = load_err(&dir);
    assert!(e.contains("mtp.fc.weight") && e.contains("mtp.safetensors") && e.contains("[64, 128]"), "{e}");
}

/// NaN or infinite weights would load and decode nonsense: refused at load, naming the tensor.
#[test]
fn non_finite_weights_are_named() {
    for bad in [f32::NAN, f32::INFINITY] {
        let (_t, dir) = copy_fixture(MODEL);
        rewrite(&dir.join("model.safetensors"), |t| {
            let key = "language_model.model.layers.1.linear_attn.A_log";
            let a = t.get(key).expect("fixture layout");
            let mut v: Vec<f32> = a.as_dtype(Dtype::Float32).unwrap().as_slice().to_vec();
            v[0] = bad;
            let replaced = Array::from_slice(&v, a.shape()).as_dtype(a.dtype()).unwrap();
            t.insert(key.to_owned(), replaced);
        });
        let e = load_err(&dir);
        assert!(e.contains("model.layers.1.linear_attn.A_log") && e.contains("not finite"), "{bad}: {e}");
    }
}

/// Issue 58: values no model has loaded and answered runs of U+FFFD (a norm epsilon or RoPE base
/// of zero or below), misled (an end-of-sequence id outside the vocabulary or not an id, layer
/// types that disagree with the layers), wrapped (`vocab_size` 2^40 became 0) or aborted on a
/// 392 GB allocation (`num_hidden_layers` 10^9). Each is refused at load, naming the key.
#[test]
fn config_values_out_of_range_are_refused_naming_the_key() {
    use serde_json::{Value, json};
    let cases: Vec<(&str, &[&str], Value, &str)> = vec![
        ("qwen35_moe_4bit", &["text_config", "rms_norm_eps"], json!(-1), "rms_norm_eps"),
        ("qwen35_moe_4bit", &["text_config", "rope_parameters", "rope_theta"], json!(0), "rope_theta"),
        ("qwen35_moe_4bit", &["text_config", "rope_parameters", "rope_theta"], json!(-5), "rope_theta"),
        ("qwen35_moe_4bit", &["eos_token_id"], json!(999_999), "eos_token_id"),
        ("qwen35_moe_4bit", &["eos_token_id"], json!("2"), "eos_token_id"),
        ("qwen35_moe_4bit", &["eos_token_id"], json!([1, -1]), "eos_token_id"),
        (
            "qwen35_moe_4bit",
            &["text_config", "layer_types"],
            json!(["linear_attention", "full_attention"]),
            "layer_types",
        ),
        (
            "qwen35_moe_4bit",
            &["text_config", "layer_types"],
            json!(["full_attention", "linear_attention", "linear_attention", "full_attention"]),
            "layer_types",
        ),
        ("qwen35_moe_4bit", &["text_config", "vocab_size"], json!(1u64 << 40), "vocab_size"),
        ("qwen35_moe_4bit", &["text_config", "num_hidden_layers"], json!(1_000_000_000), "num_hidden_layers"),
        ("llama/tiny_llama_mlx", &["rms_norm_eps"], json!(0), "rms_norm_eps"),
        ("llama/tiny_llama_mlx", &["rope_theta"], json!(-5), "rope_theta"),
        ("llama/tiny_llama_mlx", &["eos_token_id"], json!(999_999), "eos_token_id"),
        ("llama/tiny_llama_mlx", &["vocab_size"], json!(1u64 << 40), "vocab_size"),
        ("llama/tiny_llama_mlx", &["num_hidden_layers"], json!(1_000_000_000), "num_hidden_layers"),
    ];
    for (name, path, value, key) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = common::fixture_copy(name, tmp.path());
        let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        let (last, parents) = path.split_last().unwrap();
        let mut at = &mut cfg;
        for p in parents {
            at = at.as_object_mut().unwrap().entry(p.to_string()).or_insert_with(|| json!({}));
        }
        at.as_object_mut().unwrap().insert(last.to_string(), value.clone());
        std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
        let e = match cohort::model::load::load(&dir, Dtype::Float32) {
            Ok(_) => panic!("{name} with {path:?} = {value} loaded"),
            Err(e) => format!("{e:#}"),
        };
        assert!(e.contains(key), "{name} with {path:?} = {value}: {e}");
    }
}

/// The Qwen3.5 reader names what it reads, not every family: a Llama config given to it was
/// "unknown model_type llama (supported: ..., llama)".
#[test]
fn a_config_of_another_family_is_named_as_such() {
    use cohort::model::config::Qwen35Config;
    let llama = serde_json::json!({"model_type": "llama", "hidden_size": 8});
    let err = format!("{:#}", Qwen35Config::from_json(&llama).unwrap_err());
    assert!(err.contains("\"llama\""), "{err}");
    assert!(err.contains("not a Qwen3.5-family"), "{err}");
    let unknown = format!("{:#}", Qwen35Config::from_json(&serde_json::json!({"model_type": "gpt2"})).unwrap_err());
    assert!(unknown.contains("\"gpt2\"") && unknown.contains("qwen3_5_moe"), "{unknown}");
}
