//! The MLX runtime cohort links against, checked against plain references written here.
//!
//! Each MLX result is compared with a straightforward f64 computation in Rust over the same
//! inputs (generated here, not by MLX), so a broken link, a wrong BLAS, a miscompiled shim or a
//! misread argument convention shows up as a numeric mismatch.

use std::collections::HashMap;

use mlx_rs::fast::ScaledDotProductAttentionMask;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::{Array, Dtype};

/// Deterministic inputs in [-1, 1) independent of MLX's RNG.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

fn f32s(a: &Array) -> Vec<f32> {
    // contiguous(): GPU kernels may hand back strided results, and as_slice needs row-major data.
    let a = a.as_dtype(Dtype::Float32).unwrap().contiguous().unwrap();
    a.eval().unwrap();
    a.as_slice::<f32>().to_vec()
}

fn assert_close(got: &[f32], want: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs() / scale;
        assert!(err <= rel, "{what}: element {i}: got {g}, want {w} (error {err:.2e} of max |x|, bound {rel:.0e})");
    }
}

/// Row-major [m,k] x [k,n] in f64.
fn plain_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p] as f64;
            for j in 0..n {
                out[i * n + j] += x * b[p * n + j] as f64;
            }
        }
    }
    out
}

#[test]
fn matmul_matches_plain_reference() {
    let (m, k, n) = (37, 129, 65);
    let a = values(1, m * k);
    let b = values(2, k * n);
    let got =
        mlx_rs::ops::matmul(Array::from_slice(&a, &[m as i32, k as i32]), Array::from_slice(&b, &[k as i32, n as i32]))
            .unwrap();
    assert_eq!(got.shape(), &[m as i32, n as i32]);
    assert_close(&f32s(&got), &plain_matmul(&a, &b, m, k, n), 1e-5, "f32 matmul");
}

/// Unpack MLX's affine quantization by hand: `bits`-wide fields packed little-end first into
/// u32 words along the input dimension; w = q * scale + bias per group.
fn plain_dequantize(
    words: &[u32],
    scales: &[f32],
    biases: &[f32],
    rows: usize,
    cols: usize,
    group: usize,
    bits: usize,
) -> Vec<f32> {
    let per_word = 32 / bits;
    let words_per_row = cols / per_word;
    let mask = (1u32 << bits) - 1;
    let mut w = vec![0.0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            let word = words[r * words_per_row + c / per_word];
            let q = (word >> ((c % per_word) * bits)) & mask;
            let g = r * (cols / group) + c / group;
            w[r * cols + c] = q as f32 * scales[g] + biases[g];
        }
    }
    w
}

#[test]
fn quantized_matmul_matches_plain_dequantize_then_matmul() {
    for (bits, group) in [(4usize, 32usize), (4, 64), (8, 64), (8, 128)] {
        let (m, k, n) = (5, 256, 48); // x [m,k], w [n,k] (as a Linear layer stores it)
        let x = values(3, m * k);
        let w = values(4, n * k);
        let (wq, scales, biases) =
            mlx_rs::ops::quantize(Array::from_slice(&w, &[n as i32, k as i32]), group as i32, bits as i32).unwrap();
        wq.eval().unwrap();
        assert_eq!(wq.dtype(), Dtype::Uint32);
        assert_eq!(wq.shape(), &[n as i32, (k * bits / 32) as i32]);
        let words = wq.as_slice::<u32>().to_vec();
        let (s, b) = (f32s(&scales), f32s(&biases));
        let deq = plain_dequantize(&words, &s, &b, n, k, group, bits);
        // Quantization itself must land within one step of the original (a sanity bound on the format).
        let step = 2.0 / ((1 << bits) - 1) as f32;
        for (d, o) in deq.iter().zip(&w) {
            assert!((d - o).abs() <= step + 1e-5, "bits {bits}: dequantized {d} vs original {o}");
        }
        let got = mlx_rs::ops::quantized_matmul(
            Array::from_slice(&x, &[m as i32, k as i32]),
            &wq,
            &scales,
            &biases,
            true,
            group as i32,
            bits as i32,
        )
        .unwrap();
        // x @ deq^T in f64
        let mut deq_t = vec![0.0f32; k * n];
        for r in 0..n {
            for c in 0..k {
                deq_t[c * n + r] = deq[r * k + c];
            }
        }
        assert_close(
            &f32s(&got),
            &plain_matmul(&x, &deq_t, m, k, n),
            1e-5,
            &format!("quantized_matmul {bits}-bit g{group}"),
        );
    }
}

/// softmax(q k^T * scale + causal) v for one batch, heads [H, L, D], keys [Hkv, S, D]; query i
/// sees keys up to i + (S - L) (the queries are the last L positions).
#[allow(clippy::too_many_arguments)]
fn plain_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    h: usize,
    hkv: usize,
    l: usize,
    s: usize,
    d: usize,
    scale: f64,
    causal: bool,
) -> Vec<f64> {
    let mut out = vec![0.0; h * l * d];
    for head in 0..h {
        let kv = head / (h / hkv);
        for i in 0..l {
            let limit = if causal { i + (s - l) } else { s - 1 };
            let scores: Vec<f64> = (0..=limit)
                .map(|j| {
                    (0..d).map(|x| q[(head * l + i) * d + x] as f64 * k[(kv * s + j) * d + x] as f64).sum::<f64>()
                        * scale
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::MIN, f64::max);
            let exps: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            for x in 0..d {
                out[(head * l + i) * d + x] =
                    exps.iter().enumerate().map(|(j, e)| e / total * v[(kv * s + j) * d + x] as f64).sum();
            }
        }
    }
    out
}

#[test]
fn fast_sdpa_matches_plain_softmax_attention_with_grouped_kv() {
    let (h, hkv, d) = (8usize, 2usize, 64usize);
    // (query length, key length): a full causal prefill, a two-token verify on a cache, one decode step.
    for (l, s) in [(7usize, 7usize), (2, 11), (1, 9)] {
        let q = values(5 + l as u64, h * l * d);
        let k = values(6 + s as u64, hkv * s * d);
        let v = values(7 + s as u64, hkv * s * d);
        let scale = 1.0 / (d as f64).sqrt();
        let qa = Array::from_slice(&q, &[1, h as i32, l as i32, d as i32]);
        let ka = Array::from_slice(&k, &[1, hkv as i32, s as i32, d as i32]);
        let va = Array::from_slice(&v, &[1, hkv as i32, s as i32, d as i32]);
        let mask = if l > 1 { Some(ScaledDotProductAttentionMask::Causal) } else { None };
        let got = mlx_rs::fast::scaled_dot_product_attention(&qa, &ka, &va, scale as f32, mask, None).unwrap();
        let want = plain_attention(&q, &k, &v, h, hkv, l, s, d, scale, l > 1);
        assert_close(&f32s(&got), &want, 1e-5, &format!("sdpa L={l} S={s}"));
    }
}

#[test]
fn rms_norm_matches_plain_reference() {
    let (rows, dim) = (6usize, 96usize);
    let x = values(8, rows * dim);
    let w = values(9, dim);
    let eps = 1e-6f64;
    let got = mlx_rs::fast::rms_norm(
        Array::from_slice(&x, &[rows as i32, dim as i32]),
        Some(&Array::from_slice(&w, &[dim as i32])),
        eps as f32,
    )
    .unwrap();
    let mut want = vec![0.0; rows * dim];
    for r in 0..rows {
        let row = &x[r * dim..(r + 1) * dim];
        let ms = row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / dim as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        for c in 0..dim {
            want[r * dim + c] = row[c] as f64 * inv * w[c] as f64;
        }
    }
    assert_close(&f32s(&got), &want, 1e-6, "rms_norm");
}

#[test]
fn rope_matches_plain_rotate_half_on_partial_dims() {
    // Qwen3.5 rotates only the first quarter of each head, non-traditional (rotate-half) pairing.
    let (heads, len, d, rot) = (3usize, 5usize, 32usize, 8usize);
    let base = 10000.0f64;
    let offset = 13usize;
    let x = values(10, heads * len * d);
    let got = mlx_rs::fast::rope(
        Array::from_slice(&x, &[1, heads as i32, len as i32, d as i32]),
        rot as i32,
        false,
        base as f32,
        1.0,
        offset as i32,
        None,
    )
    .unwrap();
    let mut want: Vec<f64> = x.iter().map(|v| *v as f64).collect();
    let half = rot / 2;
    for hd in 0..heads {
        for t in 0..len {
            let pos = (offset + t) as f64;
            let row = (hd * len + t) * d;
            for i in 0..half {
                let theta = pos * base.powf(-2.0 * i as f64 / rot as f64);
                let (a, b) = (x[row + i] as f64, x[row + i + half] as f64);
                want[row + i] = a * theta.cos() - b * theta.sin();
                want[row + i + half] = a * theta.sin() + b * theta.cos();
            }
        }
    }
    assert_close(&f32s(&got), &want, 1e-5, "rope");
}

#[test]
fn half_precision_items_round_trip() {
    // Values exactly representable in both formats survive a trip through MLX.
    let vals = [1.5f32, -2.25, 0.0, 1024.0, -0.0078125];
    let a = Array::from_slice(&vals, &[vals.len() as i32]);
    for dtype in [Dtype::Float16, Dtype::Bfloat16] {
        let h = a.as_dtype(dtype).unwrap();
        h.eval().unwrap();
        for (i, want) in vals.iter().enumerate() {
            let item = h.index(i as i32);
            assert_eq!(item.item_cast::<f32>(), *want, "{dtype:?} element {i}");
        }
        assert_eq!(f32s(&h), vals.to_vec(), "{dtype:?} as_dtype back to f32");
    }
    let bf = Array::from_slice(&[3.0f32], &[]).as_dtype(Dtype::Bfloat16).unwrap();
    assert_eq!(bf.item_exact::<half::bf16>().to_f32(), 3.0);
    let f16 = Array::from_slice(&[-6.5f32], &[]).as_dtype(Dtype::Float16).unwrap();
    assert_eq!(f16.item_exact::<half::f16>().to_f32(), -6.5);
}

#[test]
fn safetensors_save_load_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("round.safetensors");
    let f = values(11, 12);
    let arrays: HashMap<String, Array> = [
        ("f32".to_owned(), Array::from_slice(&f, &[3, 4])),
        ("bf16".to_owned(), Array::from_slice(&f, &[12]).as_dtype(Dtype::Bfloat16).unwrap()),
        ("u32".to_owned(), Array::from_slice(&[1u32, 2, 0xdead_beef], &[3])),
    ]
    .into_iter()
    .collect();
    let metadata: HashMap<String, String> = [("format".to_owned(), "mlx".to_owned())].into_iter().collect();
    Array::save_safetensors(arrays.iter().map(|(k, v)| (k.as_str(), v)), &metadata, &path).unwrap();
    let (loaded, meta) = Array::load_safetensors_with_metadata(&path).unwrap();
    assert_eq!(meta.get("format").map(String::as_str), Some("mlx"));
    assert_eq!(loaded.len(), 3);
    for (name, original) in &arrays {
        let back = &loaded[name];
        assert_eq!(back.dtype(), original.dtype(), "{name} dtype");
        assert_eq!(back.shape(), original.shape(), "{name} shape");
        assert_eq!(f32s(back), f32s(original), "{name} values");
    }
    // The file is real safetensors: the independent `safetensors` crate reads the same header.
    let bytes = std::fs::read(&path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("u32").unwrap().shape(), &[3]);
    assert_eq!(st.tensor("bf16").unwrap().dtype(), safetensors::Dtype::BF16);
}

/// The graph counter sees exactly the unevaluated nodes a graph holds, by primitive, and none
/// once it is evaluated: a step's node count (bench-step --graph-stats) is only worth reading if
/// it counts what MLX will run.
#[test]
fn graph_stats_count_the_unevaluated_nodes_by_primitive() {
    use cohort_lab::graph_stats::GraphStats;
    let a = Array::from_slice(&values(1, 6), &[2, 3]);
    let b = Array::from_slice(&values(2, 6), &[2, 3]);
    let sum = a.add(&b).unwrap();
    let out = mlx_rs::ops::exp(sum.multiply(&b).unwrap()).unwrap();
    let stats = GraphStats::of(&[&out]).unwrap();
    let want: Vec<(&str, usize)> = vec![("Add", 1), ("Exp", 1), ("Multiply", 1)];
    let got: Vec<(&str, usize)> = stats.by_primitive.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(got, want, "{stats:?}");
    assert_eq!(stats.nodes, 3);
    // A node shared by two outputs is one node; evaluated arrays are inputs, not nodes.
    let other = sum.subtract(&a).unwrap();
    assert_eq!(GraphStats::of(&[&out, &other]).unwrap().nodes, 4);
    sum.eval().unwrap();
    assert_eq!(GraphStats::of(&[&out, &other]).unwrap().nodes, 3);
    out.eval().unwrap();
    other.eval().unwrap();
    assert_eq!(GraphStats::of(&[&out, &other]).unwrap().nodes, 0);
}
