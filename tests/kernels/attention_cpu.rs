//! Host attention (crates/core/src/model/cpu/attention_cpu.rs) against a float64 reference written here: causal
//! softmax attention of each query over its row's stored positions and then the block's own, at
//! head sizes that take each of its code paths (whole 64-wide register blocks, a partial block,
//! widths that are not a multiple of 8), with query heads sharing KV heads, rows with and without
//! storage, and storage whose elements are strided. Each query's result must also be the same bit
//! for bit whatever else is in its block: the property that makes a T=2 verify equal two steps.

use crate::common;

use cohort::model::cpu::attention_cpu::{self, HostBlock, RowKv};
use common::Lcg;
use mlx_rs::Array;

#[derive(Clone, Copy, Debug)]
struct Shape {
    heads: usize,
    kv_heads: usize,
    d: usize,
}

/// One row: `stored` positions of storage [kv_heads][pos][d] (None: no storage at all).
struct Row {
    stored: Option<(Vec<f32>, Vec<f32>, usize)>,
}

/// The inputs of one case: per-row storage, and the block's q [rows, t, heads, d] and k, v
/// [rows, t, kv_heads, d].
struct Case {
    shape: Shape,
    rows: Vec<Row>,
    t: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
}

fn case(shape: Shape, stored: &[Option<usize>], t: usize, seed: u64) -> Case {
    let mut rng = Lcg(seed);
    let Shape { heads, kv_heads, d } = shape;
    let rows = stored
        .iter()
        .map(|s| Row { stored: s.map(|n| (rng.fill(kv_heads * n * d), rng.fill(kv_heads * n * d), n)) })
        .collect::<Vec<_>>();
    let b = stored.len();
    Case {
        shape,
        rows,
        t,
        q: rng.fill(b * t * heads * d),
        k: rng.fill(b * t * kv_heads * d),
        v: rng.fill(b * t * kv_heads * d),
    }
}

/// Storage for every row as MLX arrays [rows, kv_heads, capacity, d]; `strided` lays the data out
/// as [rows, kv_heads, d, capacity] and transposes, so its last axis has a stride above one.
fn storage(c: &Case, strided: bool) -> Vec<Option<RowKv>> {
    let Shape { kv_heads, d, .. } = c.shape;
    let cap = c.rows.iter().filter_map(|r| r.stored.as_ref().map(|s| s.2)).max().unwrap_or(0) + 3;
    let b = c.rows.len();
    let mut keys = vec![0f32; b * kv_heads * cap * d];
    let mut values = keys.clone();
    for (r, row) in c.rows.iter().enumerate() {
        let Some((k, v, n)) = &row.stored else { continue };
        for h in 0..kv_heads {
            for p in 0..*n {
                for x in 0..d {
                    let at = if strided {
                        ((r * kv_heads + h) * d + x) * cap + p
                    } else {
                        ((r * kv_heads + h) * cap + p) * d + x
                    };
                    keys[at] = k[(h * n + p) * d + x];
                    values[at] = v[(h * n + p) * d + x];
                }
            }
        }
    }
    let array = |data: &[f32]| {
        let (b, h, cap, d) = (b as i32, kv_heads as i32, cap as i32, d as i32);
        let a = if strided {
            Array::from_slice(data, &[b, h, d, cap]).transpose_axes(&[0, 1, 3, 2]).unwrap()
        } else {
            Array::from_slice(data, &[b, h, cap, d])
        };
        a.eval().unwrap();
        a
    };
    let (ka, va) = (array(&keys), array(&values));
    if strided {
        assert_ne!(ka.strides()[3], 1, "the strided storage must have a strided last axis");
    }
    c.rows
        .iter()
        .enumerate()
        .map(|(r, row)| {
            row.stored.as_ref().map(|s| RowKv {
                keys: ka.clone(),
                values: va.clone(),
                slot: r as i32,
                offset: s.2 as i32,
            })
        })
        .collect()
}

fn attend(c: &Case, strided: bool) -> Vec<f32> {
    let Shape { heads, kv_heads, d } = c.shape;
    let block = HostBlock { q: &c.q, k: &c.k, v: &c.v, rows: c.rows.len(), t: c.t, heads, kv_heads, head_dim: d };
    attention_cpu::attend_host_block(&block, &storage(c, strided), (d as f32).powf(-0.5)).unwrap()
}

/// The reference: [rows, t, heads, d] in float64.
fn reference(c: &Case) -> Vec<f64> {
    let Shape { heads, kv_heads, d } = c.shape;
    let t = c.t;
    let scale = (d as f64).powf(-0.5);
    let mut out = vec![0f64; c.rows.len() * t * heads * d];
    for (r, row) in c.rows.iter().enumerate() {
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            // Row r's keys and values for KV head g: storage first, then the block.
            let mut keys: Vec<&[f32]> = Vec::new();
            let mut values: Vec<&[f32]> = Vec::new();
            let stored = row.stored.as_ref().map_or(0, |s| s.2);
            if let Some((k, v, n)) = &row.stored {
                for p in 0..*n {
                    keys.push(&k[(g * n + p) * d..][..d]);
                    values.push(&v[(g * n + p) * d..][..d]);
                }
            }
            for p in 0..t {
                let at = ((r * t + p) * kv_heads + g) * d;
                keys.push(&c.k[at..at + d]);
                values.push(&c.v[at..at + d]);
            }
            for i in 0..t {
                let q = &c.q[((r * t + i) * heads + h) * d..][..d];
                let visible = stored + i + 1;
                let scores: Vec<f64> = keys[..visible]
                    .iter()
                    .map(|k| scale * q.iter().zip(*k).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>())
                    .collect();
                let top = scores.iter().cloned().fold(f64::MIN, f64::max);
                let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                let total: f64 = weights.iter().sum();
                let o = &mut out[((r * t + i) * heads + h) * d..][..d];
                for (w, v) in weights.iter().zip(&values) {
                    for (x, y) in o.iter_mut().zip(*v) {
                        *x += w / total * *y as f64;
                    }
                }
            }
        }
    }
    out
}

const SHAPES: [Shape; 4] = [
    // The default model's attention: 64 wide, three query heads per KV head.
    Shape { heads: 9, kv_heads: 3, d: 64 },
    // One 64-wide register block and a partial one of 8.
    Shape { heads: 4, kv_heads: 1, d: 72 },
    // Not a multiple of 8: the portable route on every CPU.
    Shape { heads: 6, kv_heads: 2, d: 12 },
    // Two whole blocks, one query head per KV head.
    Shape { heads: 2, kv_heads: 2, d: 128 },
];

#[test]
fn host_attention_matches_the_float64_reference_on_every_path() {
    for (i, shape) in SHAPES.into_iter().enumerate() {
        // A fresh row, short and long storage (lengths off the four-key groups), an empty one.
        for (t, stored) in [(1, vec![Some(37)]), (2, vec![Some(5), None, Some(130), Some(0)]), (5, vec![Some(9), None])]
        {
            let c = case(shape, &stored, t, 7 + i as u64);
            let want = reference(&c);
            for strided in [false, true] {
                let got = attend(&c, strided);
                let worst = got.iter().zip(&want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
                assert!(
                    worst < 2e-6,
                    "{shape:?} T={t} stored {stored:?} strided={strided}: off by {worst:e} from the reference"
                );
            }
        }
    }
}

#[test]
fn a_query_gets_the_same_bits_whatever_else_is_in_its_block() {
    for (i, shape) in SHAPES.into_iter().enumerate() {
        let Shape { heads, kv_heads, d } = shape;
        let c = case(shape, &[Some(41), Some(3), None], 4, 100 + i as u64);
        let whole = attend(&c, false);
        let (t, b) = (c.t, c.rows.len());
        for r in 0..b {
            for keep in 1..=t {
                // Row r alone, its block cut to the first `keep` positions: each kept query sees
                // exactly the keys it saw in the whole block.
                let slice = |x: &[f32], h: usize| x[r * t * h * d..][..keep * h * d].to_vec();
                let alone = Case {
                    shape,
                    rows: vec![Row { stored: c.rows[r].stored.clone() }],
                    t: keep,
                    q: slice(&c.q, heads),
                    k: slice(&c.k, kv_heads),
                    v: slice(&c.v, kv_heads),
                };
                let got = attend(&alone, false);
                let want = &whole[r * t * heads * d..][..keep * heads * d];
                assert!(
                    got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{shape:?}: row {r}'s first {keep} positions differ alone from within the {b}-row block of {t}"
                );
            }
        }
    }
}

#[test]
fn the_portable_route_gives_the_simd_route_s_bits() {
    for (i, shape) in SHAPES.into_iter().enumerate() {
        let Shape { heads, kv_heads, d } = shape;
        // Storage past several eight-key softmax blocks with a tail, and queries scaled up so
        // some weights fall below the exponential's floor.
        let mut c = case(shape, &[Some(1003), None, Some(17)], 3, 300 + i as u64);
        for (j, x) in c.q.iter_mut().enumerate() {
            *x *= if j % 3 == 0 { 40.0 } else { 1.0 };
        }
        let block = HostBlock { q: &c.q, k: &c.k, v: &c.v, rows: c.rows.len(), t: c.t, heads, kv_heads, head_dim: d };
        let scale = (d as f32).powf(-0.5);
        for strided in [false, true] {
            let simd = attention_cpu::attend_host_block(&block, &storage(&c, strided), scale).unwrap();
            let portable = attention_cpu::attend_host_block_portable(&block, &storage(&c, strided), scale).unwrap();
            let differ = simd.iter().zip(&portable).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
            assert_eq!(differ, 0, "{shape:?} strided={strided}: {differ} of {} outputs differ", simd.len());
            let want = reference(&c);
            let worst = simd.iter().zip(&want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
            assert!(worst < 2e-5, "{shape:?} strided={strided}: off by {worst:e} from the reference");
        }
    }
}

#[test]
fn the_softmax_exponential_is_within_two_ulp_of_the_float64_one() {
    let mut worst = 0f64;
    let steps = 2_000_000;
    for i in 0..=steps {
        let x = -87.3f32 * i as f32 / steps as f32;
        let got = attention_cpu::exp_nonpositive(x) as f64;
        let want = (x as f64).exp();
        let ulp = (want as f32).next_up() as f64 - want as f32 as f64;
        worst = worst.max((got - want).abs() / ulp);
    }
    assert!(worst <= 2.0, "worst error {worst} ulp");
    assert_eq!(attention_cpu::exp_nonpositive(0.0), 1.0);
    for x in [-87.4f32, -100.0, -1e30, f32::NEG_INFINITY, f32::NAN] {
        assert_eq!(attention_cpu::exp_nonpositive(x), 0.0, "exp({x})");
    }
}
