//! Import a llama-architecture GGUF (e.g. SmolLM2's Q4_1 file) as an MLX checkpoint that both
//! cohort and mlx-lm load: `config.json`, `model.safetensors`, `tokenizer.json`,
//! `tokenizer_config.json`.
//!
//! Conversions (all exact):
//! - Q4_1 block (d f16, m f16, 16 bytes: byte i = element i low nibble, element i+16 high
//!   nibble) -> MLX affine 4-bit, group 32: the same nibbles packed eight to a uint32, element j
//!   in bits [4j, 4j+4), scale = d, bias = m (float16, so bit-identical).
//! - Q4_0 (d, nibbles with w = d*(q-8)) -> 4-bit g32 with scale d, bias -8d.
//! - Q8_0 (d f16, 32 int8 q, w = d*q) -> MLX affine 8-bit g32 with the stored byte q+128
//!   (i.e. `q as u8 ^ 0x80`), scale d and bias -128d. Multiplying by a power of two is exact in
//!   float16 unless it overflows (|d| > 511.75), in which case that tensor's scales and biases are
//!   written as float32 instead.
//! - F32/F16/BF16 tensors are copied with their dtype.
//! - attn_q / attn_k rows: llama.cpp's converter permutes HF's rotate-half layout into the
//!   interleaved (GPT-J) layout, `reshape(n_head, 2, hd/2, in).swapaxes(1, 2)`. The importer
//!   undoes it: HF row `h*hd + j*hd/2 + i` is GGUF row `h*hd + 2i + j`. Rows are whole quantized
//!   blocks, so this reorders packed rows without touching any value.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use safetensors::tensor::{Dtype as StDtype, TensorView};
use serde_json::{Value, json};

use super::gguf::{GgmlType, GgufFile, TensorInfo, f16_to_f32, f32_to_f16};
use super::gguf_tokenizer::GgufVocab;

/// What an import did.
#[derive(Debug, Clone)]
pub struct ImportReport {
    pub gguf: PathBuf,
    pub out_dir: PathBuf,
    pub architecture: String,
    /// GGUF tensors by ggml type name.
    pub tensor_types: BTreeMap<String, usize>,
    /// Tensors written to model.safetensors.
    pub tensors_written: usize,
    /// Parameters (logical elements) of the model.
    pub parameters: u64,
    /// Bytes of model.safetensors.
    pub safetensors_bytes: u64,
    /// The config.json written.
    pub config: Value,
    /// Things worth telling the user (e.g. scales widened to float32).
    pub notes: Vec<String>,
}

/// The llama hyper-parameters read from GGUF metadata.
#[derive(Debug, Clone)]
pub struct LlamaHparams {
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub context: usize,
    pub rope_theta: f32,
    pub rms_eps: f32,
}

impl LlamaHparams {
    pub fn read(g: &GgufFile) -> Result<Self> {
        let path = g.path.display();
        let arch = g.get_str("general.architecture").with_context(|| format!("{path}: no general.architecture"))?;
        if arch != "llama" {
            bail!("{path}: architecture \"{arch}\" is not supported by import-gguf (only \"llama\")");
        }
        let u = |k: &str| -> Result<usize> {
            let v = g.require_i64(&format!("llama.{k}"))?;
            if v <= 0 {
                bail!("{path}: llama.{k} = {v} must be positive");
            }
            Ok(v as usize)
        };
        let hidden = u("embedding_length")?;
        let heads = u("attention.head_count")?;
        let kv_heads = g.get_i64("llama.attention.head_count_kv").map(|v| v as usize).unwrap_or(heads);
        let head_dim = g.get_i64("llama.attention.key_length").map(|v| v as usize).unwrap_or(hidden / heads);
        if let Some(vl) = g.get_i64("llama.attention.value_length")
            && vl as usize != head_dim
        {
            bail!("{path}: key_length {head_dim} != value_length {vl} is not supported");
        }
        if kv_heads == 0 || heads % kv_heads != 0 {
            bail!("{path}: {heads} attention heads are not a multiple of {kv_heads} KV heads");
        }
        if !head_dim.is_multiple_of(2) {
            bail!("{path}: head dimension {head_dim} is odd");
        }
        if let Some(rd) = g.get_i64("llama.rope.dimension_count")
            && rd as usize != head_dim
        {
            bail!("{path}: partial RoPE (rope.dimension_count {rd} of head dim {head_dim}) is not supported");
        }
        if let Some(kind) = g.get_str("llama.rope.scaling.type")
            && kind != "none"
        {
            bail!("{path}: RoPE scaling \"{kind}\" is not supported");
        }
        if g.tensor("rope_freqs.weight").is_some() {
            bail!("{path}: Llama-3-style RoPE frequency factors (rope_freqs.weight) are not supported");
        }
        if g.get_i64("llama.expert_count").unwrap_or(0) > 0 {
            bail!("{path}: mixture-of-experts llama GGUFs are not supported");
        }
        let vocab = match g.get_i64("llama.vocab_size") {
            Some(v) => v as usize,
            None => g.get_str_array("tokenizer.ggml.tokens")?.map(|t| t.len()).context("no vocabulary size")?,
        };
        Ok(Self {
            n_layers: u("block_count")?,
            hidden,
            ffn: u("feed_forward_length")?,
            heads,
            kv_heads,
            head_dim,
            vocab,
            context: g.get_i64("llama.context_length").unwrap_or(4096) as usize,
            rope_theta: g.get_f64("llama.rope.freq_base").unwrap_or(10000.0) as f32,
            rms_eps: g.get_f64("llama.attention.layer_norm_rms_epsilon").unwrap_or(1e-5) as f32,
        })
    }
}

/// The HF row that GGUF row `gguf_row` of a permuted q/k weight belongs to, and back:
/// `hf_to_gguf_row(r)` is the GGUF row holding HF row `r`.
pub fn hf_to_gguf_row(r: usize, head_dim: usize) -> usize {
    let (h, w) = (r / head_dim, r % head_dim);
    let half = head_dim / 2;
    let (j, i) = (w / half, w % half);
    h * head_dim + 2 * i + j
}

/// The MLX module path (without `.weight`) for a GGUF tensor name, and whether it is a
/// q (Some(false)) or k (Some(true)) projection that needs un-permuting.
fn map_name(name: &str) -> Option<(String, Option<bool>)> {
    match name {
        "token_embd.weight" => return Some(("model.embed_tokens".into(), None)),
        "output_norm.weight" => return Some(("model.norm".into(), None)),
        "output.weight" => return Some(("lm_head".into(), None)),
        _ => {}
    }
    let rest = name.strip_prefix("blk.")?;
    let (layer, tail) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let tail = tail.strip_suffix(".weight")?;
    let p = format!("model.layers.{layer}");
    Some(match tail {
        "attn_norm" => (format!("{p}.input_layernorm"), None),
        "ffn_norm" => (format!("{p}.post_attention_layernorm"), None),
        "attn_q" => (format!("{p}.self_attn.q_proj"), Some(false)),
        "attn_k" => (format!("{p}.self_attn.k_proj"), Some(true)),
        "attn_v" => (format!("{p}.self_attn.v_proj"), None),
        "attn_output" => (format!("{p}.self_attn.o_proj"), None),
        "ffn_gate" => (format!("{p}.mlp.gate_proj"), None),
        "ffn_up" => (format!("{p}.mlp.up_proj"), None),
        "ffn_down" => (format!("{p}.mlp.down_proj"), None),
        _ => return None,
    })
}

/// One converted tensor's bytes and safetensors dtype/shape.
struct OutTensor {
    dtype: StDtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// A GGUF matrix converted to MLX's quantized layout, row by row.
struct Quantized {
    bits: i32,
    weight: Vec<u8>, // [rows, cols*bits/32] uint32, little-endian
    scales: Vec<u8>, // [rows, cols/32], f16 or f32
    biases: Vec<u8>,
    wide: bool, // scales/biases are f32
}

/// Convert Q4_0 / Q4_1 / Q8_0 data of `rows` x `cols` to MLX affine g32.
fn convert_quantized(ty: GgmlType, data: &[u8], rows: usize, cols: usize) -> Result<Quantized> {
    let (_, block_bytes) = ty.block().unwrap();
    let block_bytes = block_bytes as usize;
    let nblocks = rows * cols / 32;
    if data.len() != nblocks * block_bytes {
        bail!("{} data has {} bytes, expected {}", ty.name(), data.len(), nblocks * block_bytes);
    }
    let bits = if ty == GgmlType::Q8_0 { 8 } else { 4 };
    let mut weight = Vec::with_capacity(nblocks * 32 * bits / 8);
    let mut scales: Vec<u16> = Vec::with_capacity(nblocks);
    let mut biases: Vec<f32> = Vec::with_capacity(nblocks);
    let mut bias_bits: Vec<u16> = Vec::with_capacity(nblocks);
    for b in data.chunks_exact(block_bytes) {
        let d = u16::from_le_bytes([b[0], b[1]]);
        scales.push(d);
        match ty {
            GgmlType::Q4_1 | GgmlType::Q4_0 => {
                let qs = if ty == GgmlType::Q4_1 { &b[4..20] } else { &b[2..18] };
                // Element e (0..32): low nibble of qs[e] for e < 16, high nibble of qs[e-16].
                for word in 0..4 {
                    let mut u: u32 = 0;
                    for j in 0..8 {
                        let e = word * 8 + j;
                        let nib = if e < 16 { qs[e] & 0xf } else { qs[e - 16] >> 4 };
                        u |= (nib as u32) << (4 * j);
                    }
                    weight.extend_from_slice(&u.to_le_bytes());
                }
                if ty == GgmlType::Q4_1 {
                    let m = u16::from_le_bytes([b[2], b[3]]);
                    bias_bits.push(m);
                    biases.push(f16_to_f32(m));
                } else {
                    biases.push(-8.0 * f16_to_f32(d));
                }
            }
            GgmlType::Q8_0 => {
                // Byte order in a uint32 is little-endian, element j in bits [8j, 8j+8).
                weight.extend(b[2..34].iter().map(|&q| q ^ 0x80));
                biases.push(-128.0 * f16_to_f32(d));
            }
            _ => unreachable!(),
        }
    }
    // Biases in float16 when every one is exact there (always for Q4_1: they are the stored m).
    let exact16 = ty == GgmlType::Q4_1
        || biases.iter().all(|&x| {
            let h = f32_to_f16(x);
            f16_to_f32(h) == x || (x.is_nan() && f16_to_f32(h).is_nan())
        });
    let (scales_b, biases_b) = if exact16 {
        let bb: Vec<u16> =
            if ty == GgmlType::Q4_1 { bias_bits } else { biases.iter().map(|&x| f32_to_f16(x)).collect() };
        (scales.iter().flat_map(|s| s.to_le_bytes()).collect(), bb.iter().flat_map(|s| s.to_le_bytes()).collect())
    } else {
        (
            scales.iter().flat_map(|&s| f16_to_f32(s).to_le_bytes()).collect(),
            biases.iter().flat_map(|s| s.to_le_bytes()).collect(),
        )
    };
    Ok(Quantized { bits: bits as i32, weight, scales: scales_b, biases: biases_b, wide: !exact16 })
}

/// Reorder the rows of a row-major byte matrix: output row r is input row `src(r)`.
fn permute_rows(data: &[u8], rows: usize, src: impl Fn(usize) -> usize) -> Vec<u8> {
    let rb = data.len() / rows;
    let mut out = Vec::with_capacity(data.len());
    for r in 0..rows {
        let s = src(r);
        out.extend_from_slice(&data[s * rb..(s + 1) * rb]);
    }
    out
}

/// The shortest decimal of an f32 as a JSON number (1e-5 rather than 9.999999747378752e-6).
fn f32_json(x: f32) -> Value {
    let s = format!("{x:?}");
    s.parse::<f64>().map(|v| json!(v)).unwrap_or(json!(x as f64))
}

/// Import `gguf` into `out_dir` (created if needed; the four files are overwritten).
pub fn import_gguf(gguf: &Path, out_dir: &Path) -> Result<ImportReport> {
    let g = GgufFile::open(gguf)?;
    let path = gguf.display();
    let hp = LlamaHparams::read(&g)?;
    let vocab = GgufVocab::read(&g)?;
    if vocab.tokens.len() != hp.vocab {
        bail!("{path}: llama.vocab_size is {} but the tokenizer has {} tokens", hp.vocab, vocab.tokens.len());
    }
    let mut notes = Vec::new();

    // Expected shapes (outermost first, HF [out, in]) for every tensor the model needs.
    let (h, hd) = (hp.hidden, hp.head_dim);
    let mut expected: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    expected.insert("model.embed_tokens".into(), vec![hp.vocab, h]);
    expected.insert("model.norm".into(), vec![h]);
    for l in 0..hp.n_layers {
        let p = format!("model.layers.{l}");
        expected.insert(format!("{p}.input_layernorm"), vec![h]);
        expected.insert(format!("{p}.post_attention_layernorm"), vec![h]);
        expected.insert(format!("{p}.self_attn.q_proj"), vec![hp.heads * hd, h]);
        expected.insert(format!("{p}.self_attn.k_proj"), vec![hp.kv_heads * hd, h]);
        expected.insert(format!("{p}.self_attn.v_proj"), vec![hp.kv_heads * hd, h]);
        expected.insert(format!("{p}.self_attn.o_proj"), vec![h, hp.heads * hd]);
        expected.insert(format!("{p}.mlp.gate_proj"), vec![hp.ffn, h]);
        expected.insert(format!("{p}.mlp.up_proj"), vec![hp.ffn, h]);
        expected.insert(format!("{p}.mlp.down_proj"), vec![h, hp.ffn]);
    }
    let tied = g.tensor("output.weight").is_none();
    if !tied {
        expected.insert("lm_head".into(), vec![hp.vocab, h]);
    }

    let mut out: BTreeMap<String, OutTensor> = BTreeMap::new();
    // Module path -> bits for quantized modules, None for dense matrices.
    let mut module_bits: BTreeMap<String, Option<i32>> = BTreeMap::new();
    let mut parameters = 0u64;
    let mut seen: HashMap<String, &TensorInfo> = HashMap::new();
    for t in &g.tensors {
        let Some((module, qk)) = map_name(&t.name) else {
            bail!("{path}: tensor \"{}\" is not part of a llama model this importer knows", t.name);
        };
        let Some(want) = expected.get(&module) else {
            bail!("{path}: tensor \"{}\" ({module}) is beyond the model's {} layers", t.name, hp.n_layers);
        };
        let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        if &shape != want {
            bail!("{path}: tensor \"{}\" has shape {shape:?}, expected {want:?} for {module}", t.name);
        }
        seen.insert(module.clone(), t);
        parameters += t.n_elements();
        let data = g.tensor_bytes(t)?;
        let rows = if shape.len() == 2 { shape[0] } else { 1 };
        let cols = *shape.last().unwrap();
        // q rows come in n_head groups, k rows in n_kv_head groups; both of head_dim.
        let unpermute = |bytes: &[u8]| -> Vec<u8> {
            match qk {
                Some(_) => permute_rows(bytes, rows, |r| hf_to_gguf_row(r, hd)),
                None => bytes.to_vec(),
            }
        };
        match t.ggml_type {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                let dtype = match t.ggml_type {
                    GgmlType::F32 => StDtype::F32,
                    GgmlType::F16 => StDtype::F16,
                    _ => StDtype::BF16,
                };
                if shape.len() == 2 {
                    module_bits.insert(module.clone(), None);
                }
                out.insert(
                    format!("{module}.weight"),
                    OutTensor { dtype, shape: shape.clone(), data: unpermute(&data) },
                );
            }
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q8_0 => {
                if shape.len() != 2 {
                    bail!("{path}: quantized tensor \"{}\" is not a matrix", t.name);
                }
                let q = convert_quantized(t.ggml_type, &data, rows, cols)
                    .with_context(|| format!("{path}: tensor \"{}\"", t.name))?;
                if q.wide {
                    notes.push(format!("{module}: -128*d overflows float16, scales and biases kept as float32"));
                }
                let sd = if q.wide { StDtype::F32 } else { StDtype::F16 };
                let packed = cols * q.bits as usize / 32;
                module_bits.insert(module.clone(), Some(q.bits));
                out.insert(
                    format!("{module}.weight"),
                    OutTensor { dtype: StDtype::U32, shape: vec![rows, packed], data: unpermute(&q.weight) },
                );
                out.insert(
                    format!("{module}.scales"),
                    OutTensor { dtype: sd, shape: vec![rows, cols / 32], data: unpermute(&q.scales) },
                );
                out.insert(
                    format!("{module}.biases"),
                    OutTensor { dtype: sd, shape: vec![rows, cols / 32], data: unpermute(&q.biases) },
                );
            }
            other => bail!(
                "{path}: tensor \"{}\" has type {}, which import-gguf does not support (supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0)",
                t.name,
                other.name()
            ),
        }
    }
    for module in expected.keys() {
        if !seen.contains_key(module) {
            bail!("{path}: the model needs {module}, which the GGUF does not have");
        }
    }

    // Quantization block: the most common bit width is the default, other modules get entries.
    let mut counts: BTreeMap<i32, usize> = BTreeMap::new();
    for b in module_bits.values().flatten() {
        *counts.entry(*b).or_insert(0) += 1;
    }
    let default_bits = counts.iter().max_by_key(|(b, n)| (**n, -**b)).map(|(b, _)| *b);
    let quantization = default_bits.map(|bits| {
        let mut q = serde_json::Map::new();
        q.insert("group_size".into(), json!(32));
        q.insert("bits".into(), json!(bits));
        q.insert("mode".into(), json!("affine"));
        for (module, b) in &module_bits {
            match b {
                Some(b) if *b == bits => {}
                Some(b) => {
                    q.insert(module.clone(), json!({"group_size": 32, "bits": b, "mode": "affine"}));
                }
                None => {
                    q.insert(module.clone(), json!(false));
                }
            }
        }
        Value::Object(q)
    });

    let eos = vocab.eos_ids();
    let mut config = json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hp.hidden,
        "num_hidden_layers": hp.n_layers,
        "intermediate_size": hp.ffn,
        "num_attention_heads": hp.heads,
        "num_key_value_heads": hp.kv_heads,
        "head_dim": hp.head_dim,
        "rms_norm_eps": f32_json(hp.rms_eps),
        "vocab_size": hp.vocab,
        "rope_theta": f32_json(hp.rope_theta),
        "rope_traditional": false,
        "rope_scaling": null,
        "max_position_embeddings": hp.context,
        "tie_word_embeddings": tied,
        "attention_bias": false,
        "mlp_bias": false,
        "hidden_act": "silu",
        "bos_token_id": vocab.bos,
        "eos_token_id": if eos.len() == 1 { json!(eos[0]) } else { json!(eos) },
        "pad_token_id": vocab.pad,
        "gguf_source": {
            "file": gguf.file_name().and_then(|n| n.to_str()).unwrap_or(""),
            "name": g.get_str("general.name"),
            "file_type": g.get_i64("general.file_type"),
            "tensor_types": g.type_counts(),
        },
    });
    if let Some(q) = &quantization {
        config["quantization"] = q.clone();
        config["quantization_config"] = q.clone();
    }

    std::fs::create_dir_all(out_dir).with_context(|| format!("cannot create {}", out_dir.display()))?;
    // A shard index would make loaders ignore the single model.safetensors written here.
    let index = out_dir.join("model.safetensors.index.json");
    if index.exists() {
        bail!("{} exists: import-gguf writes a single model.safetensors; remove it first", index.display());
    }
    let write = |name: &str, text: String| -> Result<()> {
        let p = out_dir.join(name);
        std::fs::write(&p, text).with_context(|| format!("cannot write {}", p.display()))
    };
    let views: Vec<(String, TensorView)> = out
        .iter()
        .map(|(k, t)| {
            TensorView::new(t.dtype, t.shape.clone(), &t.data)
                .map(|v| (k.clone(), v))
                .map_err(|e| anyhow::anyhow!("tensor {k}: {e:?}"))
        })
        .collect::<Result<_>>()?;
    let st_path = out_dir.join("model.safetensors");
    let tmp = out_dir.join("model.safetensors.partial");
    let meta: HashMap<String, String> = [("format".to_string(), "mlx".to_string())].into();
    safetensors::tensor::serialize_to_file(views, &Some(meta), &tmp)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e:?}", tmp.display()))?;
    std::fs::rename(&tmp, &st_path).with_context(|| format!("cannot rename to {}", st_path.display()))?;
    write("config.json", serde_json::to_string_pretty(&config)? + "\n")?;
    write("tokenizer.json", serde_json::to_string_pretty(&vocab.tokenizer_json()?)? + "\n")?;
    write(
        "tokenizer_config.json",
        serde_json::to_string_pretty(&vocab.tokenizer_config(Some(hp.context as i64)))? + "\n",
    )?;
    let safetensors_bytes = std::fs::metadata(&st_path)?.len();
    Ok(ImportReport {
        gguf: gguf.to_path_buf(),
        out_dir: out_dir.to_path_buf(),
        architecture: "llama".into(),
        tensor_types: g.type_counts(),
        tensors_written: out.len(),
        parameters,
        safetensors_bytes,
        config,
        notes,
    })
}
