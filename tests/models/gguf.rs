//! The GGUF reader, importer and tokenizer against independent references: GGUF files this
//! test writes byte by byte, a block dequantizer and an MLX-layout decoder written here (f16 via
//! the `half` crate), tiny_llama.gguf (written by llama.cpp's gguf-py, see
//! tests/fixtures/llama/README.md) and, when present, the real SmolLM2 Q4_1 file.

use crate::common;

use std::path::{Path, PathBuf};

use cohort::model::formats::gguf::{GgmlType, GgufFile, GgufValue};
use cohort::model::formats::gguf_import::import_gguf;
use cohort::model::formats::gguf_tokenizer::load_tokenizer;
use common::{smollm2_gguf, smollm2_gguf_required};
use half::f16;
use safetensors::SafeTensors;
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama")
}

fn tiny_gguf() -> PathBuf {
    fixtures().join("tiny_llama.gguf")
}

// ------------------------------------------------------------------ a GGUF writer for tests

#[derive(Clone)]
enum V {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    Arr(u32, Vec<V>),
    U64(u64),
    I64(i64),
    F64(f64),
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

fn put_val(b: &mut Vec<u8>, v: &V) {
    match v {
        V::U8(x) => b.push(*x),
        V::I8(x) => b.push(*x as u8),
        V::U16(x) => b.extend(x.to_le_bytes()),
        V::I16(x) => b.extend(x.to_le_bytes()),
        V::U32(x) => b.extend(x.to_le_bytes()),
        V::I32(x) => b.extend(x.to_le_bytes()),
        V::F32(x) => b.extend(x.to_le_bytes()),
        V::Bool(x) => b.push(*x as u8),
        V::Str(s) => put_str(b, s),
        V::Arr(ty, items) => {
            b.extend(ty.to_le_bytes());
            b.extend((items.len() as u64).to_le_bytes());
            for i in items {
                put_val(b, i);
            }
        }
        V::U64(x) => b.extend(x.to_le_bytes()),
        V::I64(x) => b.extend(x.to_le_bytes()),
        V::F64(x) => b.extend(x.to_le_bytes()),
    }
}

fn type_of(v: &V) -> u32 {
    match v {
        V::U8(_) => 0,
        V::I8(_) => 1,
        V::U16(_) => 2,
        V::I16(_) => 3,
        V::U32(_) => 4,
        V::I32(_) => 5,
        V::F32(_) => 6,
        V::Bool(_) => 7,
        V::Str(_) => 8,
        V::Arr(..) => 9,
        V::U64(_) => 10,
        V::I64(_) => 11,
        V::F64(_) => 12,
    }
}

struct Tensor {
    name: String,
    /// ggml order (innermost first).
    dims: Vec<u64>,
    ty: u32,
    data: Vec<u8>,
}

/// A GGUF v`version` file with the given metadata and tensors (offsets padded to `alignment`).
fn gguf_bytes(version: u32, alignment: u64, kvs: &[(&str, V)], tensors: &[Tensor]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(version.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((kvs.len() as u64).to_le_bytes());
    for (k, v) in kvs {
        put_str(&mut b, k);
        b.extend(type_of(v).to_le_bytes());
        put_val(&mut b, v);
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for t in tensors {
        put_str(&mut b, &t.name);
        b.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            b.extend(d.to_le_bytes());
        }
        b.extend(t.ty.to_le_bytes());
        b.extend(offset.to_le_bytes());
        offsets.push(offset);
        offset = (offset + t.data.len() as u64).div_ceil(alignment) * alignment;
    }
    while !(b.len() as u64).is_multiple_of(alignment) {
        b.push(0);
    }
    let start = b.len();
    for (t, off) in tensors.iter().zip(offsets) {
        b.resize(start + off as usize, 0);
        b.extend(&t.data);
    }
    b
}

/// Small deterministic generator (xorshift) for test data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 24) as u8
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// A float16 scale: mostly ordinary, sometimes subnormal, negative or large.
    fn scale(&mut self, large: bool) -> u16 {
        match self.next() % 10 {
            0 => (self.next() % 0x3ff) as u16 + 1,                              // subnormal
            1 => f16::from_f32(-(0.001 + 0.05 * self.unit())).to_bits(),        // negative
            2 if large => f16::from_f32(600.0 + 100.0 * self.unit()).to_bits(), // -128*d overflows f16
            _ => f16::from_f32(0.001 + 0.05 * self.unit()).to_bits(),
        }
    }
}

/// Random blocks of a ggml type for `n` elements.
fn random_data(rng: &mut Rng, ty: u32, n: usize, large: bool) -> Vec<u8> {
    let mut out = Vec::new();
    match ty {
        0 => (0..n).for_each(|_| out.extend((rng.unit() * 2.0 - 1.0).to_le_bytes())),
        1 => (0..n).for_each(|_| out.extend(f16::from_f32(rng.unit() * 2.0 - 1.0).to_bits().to_le_bytes())),
        2 | 3 | 8 => {
            for _ in 0..n / 32 {
                out.extend(rng.scale(large).to_le_bytes());
                if ty == 3 {
                    out.extend(f16::from_f32(-0.2 + 0.1 * rng.unit()).to_bits().to_le_bytes());
                }
                let nq = if ty == 8 { 32 } else { 16 };
                (0..nq).for_each(|_| out.push(rng.byte()));
            }
        }
        _ => unreachable!(),
    }
    out
}

// ------------------------------------------------------------------ independent decoders

/// ggml's reference dequantization of one row-major tensor (ggml-quants.c dequantize_row_*).
fn ref_dequant(ty: u32, data: &[u8]) -> Vec<f32> {
    let h = |b: &[u8], i: usize| f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]])).to_f32();
    let mut y = Vec::new();
    match ty {
        0 => data.chunks(4).for_each(|c| y.push(f32::from_le_bytes(c.try_into().unwrap()))),
        1 => data.chunks(2).for_each(|c| y.push(h(c, 0))),
        2 => {
            for b in data.chunks(18) {
                let d = h(b, 0);
                let mut blk = [0f32; 32];
                for j in 0..16 {
                    blk[j] = ((b[2 + j] & 0x0f) as i32 - 8) as f32 * d;
                    blk[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
                }
                y.extend(blk);
            }
        }
        3 => {
            for b in data.chunks(20) {
                let (d, m) = (h(b, 0), h(b, 2));
                let mut blk = [0f32; 32];
                for j in 0..16 {
                    blk[j] = (b[4 + j] & 0x0f) as f32 * d + m;
                    blk[j + 16] = (b[4 + j] >> 4) as f32 * d + m;
                }
                y.extend(blk);
            }
        }
        8 => {
            for b in data.chunks(34) {
                let d = h(b, 0);
                y.extend(b[2..34].iter().map(|&q| q as i8 as f32 * d));
            }
        }
        _ => unreachable!(),
    }
    y
}

fn floats_of(view: &safetensors::tensor::TensorView) -> Vec<f32> {
    use safetensors::Dtype;
    match view.dtype() {
        Dtype::F32 => view.data().chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect(),
        Dtype::F16 => {
            view.data().chunks(2).map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32()).collect()
        }
        other => panic!("unexpected float dtype {other:?}"),
    }
}

/// A module of the imported checkpoint as f32 [rows, cols], decoding MLX's affine layout by
/// hand (element j of each uint32 in bits [bits*j, bits*(j+1)), w = scale * q + bias).
fn mlx_module(st: &SafeTensors, module: &str) -> (Vec<usize>, Vec<f32>, Option<u32>) {
    let w = st.tensor(&format!("{module}.weight")).unwrap();
    let Ok(scales) = st.tensor(&format!("{module}.scales")) else {
        return (w.shape().to_vec(), floats_of(&w), None);
    };
    let biases = st.tensor(&format!("{module}.biases")).unwrap();
    let (s, bi) = (floats_of(&scales), floats_of(&biases));
    let rows = w.shape()[0];
    let groups = scales.shape()[1];
    let cols = groups * 32;
    let bits = (w.shape()[1] * 32 / cols) as u32;
    let words: Vec<u32> = w.data().chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let per = 32 / bits as usize;
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for c in 0..cols {
            let word = words[r * (cols / per) + c / per];
            let q = (word >> (bits as usize * (c % per))) & ((1 << bits) - 1);
            let g = r * groups + c / 32;
            out.push(s[g] * q as f32 + bi[g]);
        }
    }
    (vec![rows, cols], out, Some(bits))
}

/// Bit-identical, except that ggml's `d*(q-8)` / `d*q` give -0.0 for q = 8 / q = 0 when d < 0
/// where the affine form `d*q' + b` gives +0.0 (equal values).
fn same(x: f32, y: f32) -> bool {
    x.to_bits() == y.to_bits() || (x == 0.0 && y == 0.0)
}

/// GGUF row that holds HF row `r` of a q/k projection: llama.cpp's converter does
/// `w.reshape(n_head, 2, hd/2, in).swapaxes(1, 2)`, so GGUF[h, i, j] = HF[h, j, i].
fn gguf_row_of_hf(r: usize, hd: usize) -> usize {
    let (h, rest) = (r / hd, r % hd);
    let (j, i) = (rest / (hd / 2), rest % (hd / 2));
    h * hd + i * 2 + j
}

const MODULES: [(&str, &str); 9] = [
    ("attn_norm", "input_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Check that every imported tensor equals the independent dequantization of its GGUF blocks,
/// bit for bit, both through the hand decoder above and through MLX's own `dequantize` (with
/// scales/biases cast to float32 as the CPU model does). `only` limits the tensors checked.
fn check_import_exact(gguf: &Path, only: Option<&dyn Fn(&str) -> bool>) -> usize {
    let dir = tempfile::tempdir().unwrap();
    import_gguf(gguf, dir.path()).unwrap();
    let bytes = std::fs::read(dir.path().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let g = GgufFile::open(gguf).unwrap();
    let heads = g.get_i64("llama.attention.head_count").unwrap() as usize;
    let hidden = g.get_i64("llama.embedding_length").unwrap() as usize;
    let hd = hidden / heads;
    let mut checked = 0;
    for t in &g.tensors {
        if let Some(f) = only
            && !f(&t.name)
        {
            continue;
        }
        let module = match t.name.as_str() {
            "token_embd.weight" => "model.embed_tokens".to_string(),
            "output_norm.weight" => "model.norm".to_string(),
            n => {
                let parts: Vec<&str> = n.split('.').collect();
                let hf = MODULES.iter().find(|(g, _)| *g == parts[2]).unwrap().1;
                format!("model.layers.{}.{hf}", parts[1])
            }
        };
        let want = ref_dequant(t.ggml_type.id(), &g.tensor_bytes(t).unwrap());
        let (shape, got, bits) = mlx_module(&st, &module);
        let gshape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
        assert_eq!(shape, gshape, "{module}: shape");
        let cols = *shape.last().unwrap();
        let permuted = t.name.contains("attn_q") || t.name.contains("attn_k");
        for r in 0..(got.len() / cols) {
            let src = if permuted { gguf_row_of_hf(r, hd) } else { r };
            let (a, b) = (&got[r * cols..(r + 1) * cols], &want[src * cols..(src + 1) * cols]);
            for (c, (x, y)) in a.iter().zip(b).enumerate() {
                assert!(same(*x, *y), "{module}[{r},{c}]: imported {x:e} != GGUF {y:e} ({})", t.ggml_type.name());
            }
        }
        if let Some(bits) = bits {
            // MLX's dequantize of the stored tensors gives the same values.
            let w = st.tensor(&format!("{module}.weight")).unwrap();
            let words: Vec<u32> = w.data().chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
            let sc = floats_of(&st.tensor(&format!("{module}.scales")).unwrap());
            let bi = floats_of(&st.tensor(&format!("{module}.biases")).unwrap());
            let rows = shape[0] as i32;
            let wa = mlx_rs::Array::from_slice(&words, &[rows, w.shape()[1] as i32]);
            let sa = mlx_rs::Array::from_slice(&sc, &[rows, (cols / 32) as i32]);
            let ba = mlx_rs::Array::from_slice(&bi, &[rows, (cols / 32) as i32]);
            let dq = mlx_rs::ops::dequantize(&wa, &sa, &ba, 32, bits as i32).unwrap();
            dq.eval().unwrap();
            let dq = dq.as_slice::<f32>();
            let mismatch = dq.iter().zip(&got).position(|(a, b)| !same(*a, *b));
            assert!(mismatch.is_none(), "{module}: MLX dequantize differs at {mismatch:?}");
        }
        checked += 1;
    }
    checked
}

// ------------------------------------------------------------------ the synthetic llama

const SYN_TEMPLATE: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// A one-layer llama GGUF (hidden 32, 2 heads of 16, 1 KV head, FFN 64, vocab 64) covering
/// every supported type, with random blocks (subnormal, negative and overflow-sized scales).
fn synthetic_llama(version: u32, alignment: u64) -> Vec<u8> {
    synthetic_llama_with(version, alignment, |_| {})
}

/// [`synthetic_llama`] with its metadata edited by `edit` before the file is written.
fn synthetic_llama_with(version: u32, alignment: u64, edit: impl FnOnce(&mut Vec<(&str, V)>)) -> Vec<u8> {
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let (h, ffn, vocab) = (32u64, 64u64, 64u64);
    let mut tokens: Vec<V> =
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].iter().map(|s| V::Str(s.to_string())).collect();
    let mut types = vec![V::I32(3), V::I32(3), V::I32(3)];
    for c in 0x21u8..(0x21 + vocab as u8 - 3) {
        tokens.push(V::Str((c as char).to_string()));
        types.push(V::I32(1));
    }
    let mut kvs: Vec<(&str, V)> = vec![
        ("general.architecture", V::Str("llama".into())),
        ("general.alignment", V::U32(alignment as u32)),
        ("general.name", V::Str("synthetic".into())),
        ("llama.block_count", V::U32(1)),
        ("llama.context_length", V::U64(512)),
        ("llama.embedding_length", V::U32(h as u32)),
        ("llama.feed_forward_length", V::U32(ffn as u32)),
        ("llama.attention.head_count", V::U32(2)),
        ("llama.attention.head_count_kv", V::U32(1)),
        ("llama.rope.freq_base", V::F32(10000.0)),
        ("llama.attention.layer_norm_rms_epsilon", V::F32(1e-5)),
        ("llama.vocab_size", V::U32(vocab as u32)),
        ("tokenizer.ggml.model", V::Str("gpt2".into())),
        ("tokenizer.ggml.pre", V::Str("smollm".into())),
        ("tokenizer.ggml.tokens", V::Arr(8, tokens)),
        ("tokenizer.ggml.token_type", V::Arr(5, types)),
        ("tokenizer.ggml.merges", V::Arr(8, vec![V::Str("! \"".into())])),
        ("tokenizer.ggml.bos_token_id", V::U32(1)),
        ("tokenizer.ggml.eos_token_id", V::U32(2)),
        ("tokenizer.chat_template", V::Str(SYN_TEMPLATE.into())),
        // Every other value type, for the reader.
        ("test.u8", V::U8(200)),
        ("test.i8", V::I8(-7)),
        ("test.u16", V::U16(65000)),
        ("test.i16", V::I16(-30000)),
        ("test.i32", V::I32(-123456)),
        ("test.bool", V::Bool(true)),
        ("test.i64", V::I64(-(1 << 40))),
        ("test.f64", V::F64(std::f64::consts::PI)),
        ("test.f32s", V::Arr(6, vec![V::F32(0.5), V::F32(-2.25)])),
        ("test.empty", V::Arr(4, vec![])),
    ];
    edit(&mut kvs);
    let mut tensors = Vec::new();
    let mut t = |name: &str, dims: Vec<u64>, ty: u32, large: bool| {
        let n = dims.iter().product::<u64>() as usize;
        tensors.push(Tensor { name: name.into(), data: random_data(&mut rng, ty, n, large), dims, ty });
    };
    t("token_embd.weight", vec![h, vocab], 8, true); // Q8_0 with float16-overflowing -128*d
    t("blk.0.attn_norm.weight", vec![h], 0, false);
    t("blk.0.attn_q.weight", vec![h, 32], 3, false); // Q4_1
    t("blk.0.attn_k.weight", vec![h, 16], 2, false); // Q4_0
    t("blk.0.attn_v.weight", vec![h, 16], 1, false); // F16
    t("blk.0.attn_output.weight", vec![32, h], 8, false); // Q8_0
    t("blk.0.ffn_norm.weight", vec![h], 0, false);
    t("blk.0.ffn_gate.weight", vec![h, ffn], 3, false);
    t("blk.0.ffn_up.weight", vec![h, ffn], 0, false); // F32 matrix
    t("blk.0.ffn_down.weight", vec![ffn, h], 3, false);
    t("output_norm.weight", vec![h], 0, false);
    gguf_bytes(version, alignment, &kvs, &tensors)
}

fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

// ------------------------------------------------------------------ tests

#[test]
fn reader_parses_every_metadata_type_and_the_tensor_directory() {
    let dir = tempfile::tempdir().unwrap();
    for (version, alignment) in [(3, 32), (2, 64)] {
        let p = write_tmp(dir.path(), "syn.gguf", &synthetic_llama(version, alignment));
        let g = GgufFile::open(&p).unwrap();
        assert_eq!((g.version, g.alignment), (version, alignment));
        assert_eq!(g.get("test.u8"), Some(&GgufValue::U8(200)));
        assert_eq!(g.get("test.i8"), Some(&GgufValue::I8(-7)));
        assert_eq!(g.get("test.u16"), Some(&GgufValue::U16(65000)));
        assert_eq!(g.get("test.i16"), Some(&GgufValue::I16(-30000)));
        assert_eq!(g.get("test.i32"), Some(&GgufValue::I32(-123456)));
        assert_eq!(g.get("test.bool"), Some(&GgufValue::Bool(true)));
        assert_eq!(g.get("test.i64"), Some(&GgufValue::I64(-(1 << 40))));
        assert_eq!(g.get("test.f64"), Some(&GgufValue::F64(std::f64::consts::PI)));
        assert_eq!(g.get("llama.context_length"), Some(&GgufValue::U64(512)));
        assert_eq!(g.get("llama.rope.freq_base"), Some(&GgufValue::F32(10000.0)));
        assert_eq!(g.get("test.f32s"), Some(&GgufValue::Array(vec![GgufValue::F32(0.5), GgufValue::F32(-2.25)])));
        assert_eq!(g.get("test.empty"), Some(&GgufValue::Array(vec![])));
        assert_eq!(g.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap().len(), 64);
        assert_eq!(g.tensors.len(), 11);
        let q = g.tensor("blk.0.attn_q.weight").unwrap();
        assert_eq!((q.ggml_type, q.shape(), q.nbytes), (GgmlType::Q4_1, vec![32, 32], 32 * 20));
        let e = g.tensor("token_embd.weight").unwrap();
        assert_eq!((e.ggml_type, e.shape()), (GgmlType::Q8_0, vec![64, 32]));
        assert!(g.data_start.is_multiple_of(alignment) && g.tensors.iter().all(|t| t.offset.is_multiple_of(alignment)));
        // The reader's own decoder agrees with the reference one.
        for t in &g.tensors {
            let a = g.tensor_f32(t).unwrap();
            let b = ref_dequant(t.ggml_type.id(), &g.tensor_bytes(t).unwrap());
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{}", t.name);
        }
    }
}

#[test]
fn synthetic_import_is_exact_for_every_type() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_tmp(dir.path(), "syn.gguf", &synthetic_llama(3, 32));
    assert_eq!(check_import_exact(&p, None), 11);
    // config.json: the per-module bits and the float16-overflow widening.
    let out = tempfile::tempdir().unwrap();
    let report = import_gguf(&p, out.path()).unwrap();
    let q = &report.config["quantization"];
    assert_eq!((q["bits"].as_i64(), q["group_size"].as_i64(), q["mode"].as_str()), (Some(4), Some(32), Some("affine")));
    assert_eq!(q["model.embed_tokens"]["bits"], 8);
    assert_eq!(q["model.layers.0.self_attn.o_proj"]["bits"], 8);
    assert_eq!(q["model.layers.0.self_attn.v_proj"], false);
    assert_eq!(q["model.layers.0.mlp.up_proj"], false);
    assert!(q.get("model.layers.0.self_attn.q_proj").is_none());
    assert!(report.notes.iter().any(|n| n.contains("model.embed_tokens")), "{:?}", report.notes);
    let bytes = std::fs::read(out.path().join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("model.embed_tokens.scales").unwrap().dtype(), safetensors::Dtype::F32);
    assert_eq!(st.tensor("model.layers.0.self_attn.q_proj.scales").unwrap().dtype(), safetensors::Dtype::F16);
    assert_eq!(st.tensor("model.layers.0.self_attn.v_proj.weight").unwrap().dtype(), safetensors::Dtype::F16);
    assert!(st.tensor("lm_head.weight").is_err(), "tied embeddings: no lm_head");
    assert_eq!(report.config["tie_word_embeddings"], true);
    assert_eq!(report.config["model_type"], "llama");
}

#[test]
fn tiny_fixture_import_is_exact() {
    // Written by llama.cpp's gguf-py (its own quantizers and Q/K permutation).
    assert_eq!(check_import_exact(&tiny_gguf(), None), 2 * 9 + 2);
}

#[test]
fn smollm2_import_is_exact() {
    let p = smollm2_gguf_required("smollm2_import_is_exact");
    let t = std::time::Instant::now();
    // The Q8_0 embedding, every tensor of the first and last layers, and the final norm.
    let pick = |n: &str| {
        n == "token_embd.weight" || n == "output_norm.weight" || n.starts_with("blk.0.") || n.starts_with("blk.29.")
    };
    let n = check_import_exact(&p, Some(&pick));
    assert_eq!(n, 2 + 2 * 9);
    eprintln!("smollm2: {n} tensors bit-exact in {:.1?}", t.elapsed());
}

#[test]
fn damaged_files_give_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(tiny_gguf()).unwrap();
    let g = GgufFile::open(&tiny_gguf()).unwrap();
    let err = |bytes: &[u8]| -> String {
        let p = write_tmp(dir.path(), "bad.gguf", bytes);
        let e = GgufFile::open(&p).expect_err("must fail");
        let msg = format!("{e:#}");
        assert!(msg.contains(&p.display().to_string()), "error does not name the file: {msg}");
        msg
    };
    // Truncated inside the header, the metadata, the tensor directory and the data.
    let last = g.tensors.iter().max_by_key(|t| t.offset).unwrap();
    for cut in [2usize, 10, 30, 200, 5000, g.data_start as usize - 8, good.len() - 1] {
        let msg = err(&good[..cut]);
        assert!(msg.contains("truncated") || msg.contains("too short"), "cut at {cut}: {msg}");
    }
    let msg = err(&good[..good.len() - 100]);
    assert!(msg.contains(&last.name), "should name the tensor that runs past the end: {msg}");
    let mut bad = good.clone();
    bad[..4].copy_from_slice(b"GGML");
    assert!(err(&bad).contains("bad magic"));
    for v in [1u32, 4, 0x0300_0000] {
        let mut bad = good.clone();
        bad[4..8].copy_from_slice(&v.to_le_bytes());
        let msg = err(&bad);
        assert!(msg.contains("version") && (msg.contains("not supported") || msg.contains("unsupported")), "{msg}");
    }
    // An unknown tensor type id, and a known one the importer cannot convert.
    let mk = |ty: u32| {
        let t = Tensor { name: "token_embd.weight".into(), dims: vec![256, 2], ty, data: vec![0; 2 * 144] };
        gguf_bytes(3, 32, &[("general.architecture", V::Str("llama".into()))], &[t])
    };
    let msg = err(&mk(99));
    assert!(msg.contains("unknown type 99") && msg.contains("token_embd.weight"), "{msg}");
    let p = write_tmp(dir.path(), "q4k.gguf", &mk(12));
    assert!(GgufFile::open(&p).is_ok());
    let msg =
        format!("{:#}", GgufFile::open(&p).unwrap().tensor_f32(&GgufFile::open(&p).unwrap().tensors[0]).unwrap_err());
    assert!(msg.contains("Q4_K") && msg.contains("not supported"), "{msg}");
    // The importer names the unsupported type too.
    let syn = synthetic_llama(3, 32);
    let g2 = {
        let p = write_tmp(dir.path(), "syn.gguf", &syn);
        GgufFile::open(&p).unwrap()
    };
    let t = g2.tensor("blk.0.ffn_up.weight").unwrap();
    // Patch that tensor's type id in the directory (F32 -> Q5_0: its 64 blocks of 22 bytes fit
    // in the 8 KiB the F32 data took).
    let name_at = syn.windows(t.name.len()).position(|w| w == t.name.as_bytes()).unwrap();
    let ty_at = name_at + t.name.len() + 4 + 8 * 2;
    let mut patched = syn.clone();
    patched[ty_at..ty_at + 4].copy_from_slice(&6u32.to_le_bytes());
    let p = write_tmp(dir.path(), "syn_q4k.gguf", &patched);
    let out = tempfile::tempdir().unwrap();
    let msg = format!("{:#}", import_gguf(&p, out.path()).unwrap_err());
    assert!(msg.contains("Q5_0") && msg.contains("blk.0.ffn_up.weight") && msg.contains("does not support"), "{msg}");
    // A file that is not there.
    let msg = format!("{:#}", GgufFile::open(&dir.path().join("missing.gguf")).unwrap_err());
    assert!(msg.contains("missing.gguf"), "{msg}");
}

/// Every error the tokenizer import gives names the GGUF file it came from, through
/// `import-gguf`'s importer and through `load_tokenizer` alike: a token listed twice, a merge that
/// is not two vocabulary tokens, an unsupported `tokenizer.ggml.pre` or `tokenizer.ggml.model`,
/// an id outside the vocabulary, token types that do not match the tokens.
#[test]
fn tokenizer_errors_name_the_gguf_file() {
    let dir = tempfile::tempdir().unwrap();
    let set = |kvs: &mut Vec<(&str, V)>, key: &str, v: V| {
        kvs.iter_mut().find(|(k, _)| *k == key).unwrap().1 = v;
    };
    let tokens = |kvs: &mut Vec<(&str, V)>| -> Vec<V> {
        match &kvs.iter().find(|(k, _)| *k == "tokenizer.ggml.tokens").unwrap().1 {
            V::Arr(_, t) => t.clone(),
            _ => unreachable!(),
        }
    };
    type Edit = Box<dyn Fn(&mut Vec<(&str, V)>)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "repeated_token.gguf",
            Box::new(move |kvs| {
                let mut t = tokens(kvs);
                t[10] = t[9].clone();
                set(kvs, "tokenizer.ggml.tokens", V::Arr(8, t));
            }),
            "appears twice",
        ),
        (
            "bad_merge.gguf",
            Box::new(move |kvs| set(kvs, "tokenizer.ggml.merges", V::Arr(8, vec![V::Str("! nope".into())]))),
            "merge",
        ),
        ("bad_pre.gguf", Box::new(move |kvs| set(kvs, "tokenizer.ggml.pre", V::Str("klingon".into()))), "klingon"),
        ("bad_model.gguf", Box::new(move |kvs| set(kvs, "tokenizer.ggml.model", V::Str("llama".into()))), "llama"),
        ("bad_eos.gguf", Box::new(move |kvs| set(kvs, "tokenizer.ggml.eos_token_id", V::U32(9999))), "9999"),
        (
            "bad_types.gguf",
            Box::new(move |kvs| set(kvs, "tokenizer.ggml.token_type", V::Arr(5, vec![V::I32(1)]))),
            "token types",
        ),
    ];
    for (name, edit, what) in cases {
        let p = write_tmp(dir.path(), name, &synthetic_llama_with(3, 32, edit));
        let out = tempfile::tempdir().unwrap();
        let import = format!("{:#}", import_gguf(&p, out.path()).unwrap_err());
        let load = format!("{:#}", load_tokenizer(&GgufFile::open(&p).unwrap()).unwrap_err());
        for msg in [import, load] {
            assert!(msg.contains(&p.display().to_string()), "{name}: the error does not name the file: {msg}");
            assert!(msg.contains(what), "{name}: the error does not say what is wrong ({what}): {msg}");
        }
    }
}

fn encode(tok: &tokenizers::Tokenizer, text: &str) -> Vec<u32> {
    tok.encode(text, false).unwrap().get_ids().to_vec()
}

#[test]
fn tiny_tokenizer_matches_the_trained_original() {
    // tiny_llama.gguf's vocabulary and merges come from a `tokenizers` BPE trained with
    // SmolLM2's pipeline (Digits + ByteLevel); the rebuilt tokenizer must encode as it did.
    let refs: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("tiny_llama.json")).unwrap()).unwrap();
    let g = GgufFile::open(&tiny_gguf()).unwrap();
    let tok = load_tokenizer(&g).unwrap();
    let sample = refs["tokenizer"]["sample"].as_str().unwrap();
    let want: Vec<u32> =
        refs["tokenizer"]["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    assert_eq!(encode(&tok, sample), want);
    assert_eq!(tok.decode(&want, false).unwrap(), sample);
    let chat = refs["tokenizer"]["chat_rendered"].as_str().unwrap();
    let chat_ids: Vec<u32> =
        refs["tokenizer"]["chat_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    assert_eq!(encode(&tok, chat), chat_ids);
}

#[test]
fn smollm2_tokenizer_matches_the_gguf_vocabulary() {
    let p = smollm2_gguf_required("smollm2_tokenizer_matches_the_gguf_vocabulary");
    let refs: Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join("smollm2.json")).unwrap()).unwrap();
    let g = GgufFile::open(&p).unwrap();
    let vocab = g.get_str_array("tokenizer.ggml.tokens").unwrap().unwrap();
    let tok = load_tokenizer(&g).unwrap();
    let sample = refs["tokenizer"]["sample"].as_str().unwrap();
    let ids = encode(&tok, sample);
    // An independently assembled pipeline (Python `tokenizers` over gguf-py's reading of the
    // same vocabulary, see make_llama_fixtures.py) gave these ids.
    let want: Vec<u32> =
        refs["tokenizer"]["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    assert_eq!(ids, want);
    assert_eq!(tok.decode(&ids, false).unwrap(), sample, "round trip");
    // Every piece is a GGUF token, every digit is its own token (llama.cpp's smollm rule).
    let enc = tok.encode(sample, false).unwrap();
    for (id, piece) in enc.get_ids().iter().zip(enc.get_tokens()) {
        assert_eq!(vocab[*id as usize], piece);
    }
    for d in "0123456789".chars() {
        let one = encode(&tok, &format!("{d}{d}{d}"));
        assert_eq!(one.len(), 3, "digits split one by one");
        assert_eq!(vocab[one[0] as usize], d.to_string());
    }
    assert_eq!(encode(&tok, "<|im_start|>user\nhi<|im_end|>")[0], 1, "special tokens stay whole");
    assert_eq!(encode(&tok, "<|im_start|>user\nhi<|im_end|>").last(), Some(&2));
    // Whitespace runs: "   x" is "  " + " x" in GPT-2's regex.
    let ws = tok.encode("a   b", false).unwrap();
    assert_eq!(ws.get_tokens(), &["a", "ĠĠ", "Ġb"]);
}

#[test]
fn chat_template_renders_chatml() {
    let g = GgufFile::open(&tiny_gguf()).unwrap();
    let template = g.get_str("tokenizer.chat_template").unwrap().to_owned();
    let mut env = minijinja::Environment::new();
    env.add_template("chat", &template).unwrap();
    let render = |msgs: Value| {
        env.get_template("chat")
            .unwrap()
            .render(minijinja::context! { messages => msgs, add_generation_prompt => true })
            .unwrap()
    };
    let out = render(serde_json::json!([{"role": "user", "content": "Hi there"}]));
    assert_eq!(
        out,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
         <|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    );
    let out = render(serde_json::json!([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "and 3+3?"}
    ]));
    assert_eq!(
        out,
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n\
         <|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n"
    );
    // The importer carries it (and the special tokens) into tokenizer_config.json.
    let out_dir = tempfile::tempdir().unwrap();
    import_gguf(&tiny_gguf(), out_dir.path()).unwrap();
    let cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.path().join("tokenizer_config.json")).unwrap()).unwrap();
    assert_eq!(cfg["chat_template"].as_str(), Some(template.as_str()));
    assert_eq!((cfg["bos_token"].as_str(), cfg["eos_token"].as_str()), (Some("<|im_start|>"), Some("<|im_end|>")));
    assert_eq!(cfg["add_bos_token"], false);
    let tj: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.path().join("tokenizer.json")).unwrap()).unwrap();
    let added = tj["added_tokens"].as_array().unwrap();
    assert_eq!(added.len(), 3);
    assert!(added.iter().all(|a| a["special"] == true));
    // The real file's template is the same one.
    let p = smollm2_gguf_required("the real file's chat template");
    assert_eq!(GgufFile::open(&p).unwrap().get_str("tokenizer.chat_template"), Some(template.as_str()));
}

/// `cargo test --release --test models gguf -- --ignored import_smollm2_to` with COHORT_IMPORT_OUT set
/// (and optionally COHORT_IMPORT_SRC): writes an imported checkpoint there (used by
/// tests/fixtures/llama/make_llama_fixtures.py).
#[test]
#[ignore]
fn import_smollm2_to() {
    let out = PathBuf::from(std::env::var("COHORT_IMPORT_OUT").expect("set COHORT_IMPORT_OUT"));
    let src = std::env::var("COHORT_IMPORT_SRC").map(PathBuf::from).ok().or_else(smollm2_gguf).expect("no GGUF");
    let t = std::time::Instant::now();
    let r = import_gguf(&src, &out).unwrap();
    eprintln!(
        "imported {} -> {} in {:.2?}: {} tensors, {} parameters, {} bytes, types {:?}, notes {:?}",
        src.display(),
        out.display(),
        t.elapsed(),
        r.tensors_written,
        r.parameters,
        r.safetensors_bytes,
        r.tensor_types,
        r.notes
    );
}

/// `import-gguf --mtp` installs only a file that is an MTP head: anything else is refused before
/// it can break a model that loaded.
#[test]
fn import_refuses_an_mtp_head_that_is_not_one() {
    let gguf = common::smollm2_gguf_required("import_refuses_an_mtp_head_that_is_not_one");
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("head.jsonl");
    std::fs::write(&bogus, "{\"prompt\":\"x\"}\n").unwrap();
    let out = common::cohort_command(&dir.path().join("home"))
        .arg("import-gguf")
        .arg(&gguf)
        .arg("--out")
        .arg(dir.path().join("model"))
        .arg("--mtp")
        .arg(&bogus)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("head.jsonl") && stderr.contains("MTP head"), "{stderr}");
    assert!(!dir.path().join("model/mtp.safetensors").exists(), "nothing was installed");
}

/// `import-gguf --mtp` with a head that never ends (a link to /dev/zero, a FIFO): it was read
/// whole to list its tensors, so memory grew until allocation failed ("cannot read the MTP head
/// /dev/zero: out of memory", with the address space capped here at 2 GB; without a cap, until
/// the machine ran out). Only the safetensors header is read now, bounded as for the model's own
/// files, and the refusal says what the file is not.
#[test]
fn an_mtp_head_that_never_ends_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let endless = dir.path().join("mtp.safetensors");
    std::os::unix::fs::symlink("/dev/zero", &endless).unwrap();
    let started = std::time::Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 2000000 && exec "$@""#)
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_cohort"))
        .env("COHORT_HOME", dir.path().join("home"))
        .arg("import-gguf")
        .arg(tiny_gguf())
        .arg("--out")
        .arg(dir.path().join("model"))
        .arg("--mtp")
        .arg(&endless)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("mtp.safetensors is not an MTP head"), "{stderr}");
    assert!(!stderr.contains("out of memory"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "took {:?}", started.elapsed());
    assert!(!dir.path().join("model/mtp.safetensors").exists(), "nothing was installed");
    // A real head still installs, under the same cap.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 2000000 && exec "$@""#)
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_cohort"))
        .env("COHORT_HOME", dir.path().join("home"))
        .arg("import-gguf")
        .arg(tiny_gguf())
        .arg("--out")
        .arg(dir.path().join("model"))
        .arg("--mtp")
        .arg(fixtures().join("tiny_mtp.safetensors"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("model/mtp.safetensors").exists());
}

/// Issue 58: `import-gguf --out` over a folder that already held a model replaced it without a
/// word and left the old `mtp.safetensors` beside it (a head trained for another model), so the
/// folder no longer loaded. Now a folder holding a model is refused unless `--force`, which
/// replaces the model and removes what the new one did not bring (the old head among it).
#[test]
fn import_over_a_model_is_refused_unless_forced_and_a_forced_one_leaves_no_stale_head() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    let import = |extra: &[&str]| {
        common::cohort_command(&dir.path().join("home"))
            .arg("import-gguf")
            .arg(tiny_gguf())
            .arg("--out")
            .arg(&model)
            .args(extra)
            .output()
            .unwrap()
    };
    let first = import(&[]);
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    let head = fixtures().join("tiny_mtp.safetensors");
    std::fs::copy(&head, model.join("mtp.safetensors")).unwrap();
    std::fs::write(model.join("model-00002-of-00002.safetensors"), b"an old shard").unwrap();
    let config = std::fs::read(model.join("config.json")).unwrap();

    let again = import(&[]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("already holds a model") && stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(model.join("config.json")).unwrap(), config);
    assert!(model.join("mtp.safetensors").exists(), "a refused import touched nothing");

    let forced = import(&["--force"]);
    assert_eq!(forced.status.code(), Some(0), "{}", String::from_utf8_lossy(&forced.stderr));
    assert!(!model.join("mtp.safetensors").exists(), "the old head was left beside the new model");
    assert!(!model.join("model-00002-of-00002.safetensors").exists(), "an old shard was left");
    cohort::model::load::load(&model, mlx_rs::Dtype::Float32).unwrap();
}
