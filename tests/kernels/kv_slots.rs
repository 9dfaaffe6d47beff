//! A packed cohort's attention (crates/core/src/model/layers/kv_slots.rs) against a float64 reference written here:
//! rotate-half RoPE at each row's own positions and causal softmax attention over the row's own
//! history, nothing else. Rows sit at different offsets, one crosses a KV growth step, some drop a
//! rejected position, and a subset of slots takes the per-row path.

use crate::common;

use cohort::model::config::LayerKind;
use cohort::model::config::RopeSpec;
use cohort::model::layers::attention::{self, Block};
use cohort::model::layers::cache::{KvCache, LayerState, RowCache};
use cohort::model::routes::BlockRoute;
use cohort::model::routes::{self, Routes};
use common::{Lcg, to_f32};
use mlx_rs::Array;

const HEADS: i32 = 4;
const KV_HEADS: i32 = 2;
const DIM: i32 = 16;
const BASE: f32 = 10_000.0;
const TOLERANCE: f64 = 1e-5;

/// Rotate one head vector at `pos`: pairs (j, j + dims/2) for j < dims/2; the rest unchanged.
fn rope_ref(x: &[f32], pos: i32, dims: i32) -> Vec<f64> {
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let half = (dims / 2) as usize;
    for j in 0..half {
        let angle = pos as f64 * (BASE as f64).powf(-2.0 * j as f64 / dims as f64);
        let (a, b) = (x[j] as f64, x[j + half] as f64);
        out[j] = a * angle.cos() - b * angle.sin();
        out[j + half] = b * angle.cos() + a * angle.sin();
    }
    out
}

/// One row's keys or values as the reference keeps them: [kv_head][position][dim].
type History = Vec<Vec<Vec<f64>>>;

/// One row of a step: append the rotated keys and values, then attend each query position.
/// `q` is [heads, T, dim], `k` and `v` are [kv_heads, T, dim] (flattened).
fn step_ref(
    keys: &mut History,
    values: &mut History,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    t: usize,
    dims: i32,
) -> Vec<f64> {
    let d = DIM as usize;
    let offset = keys[0].len() as i32;
    for h in 0..KV_HEADS as usize {
        for i in 0..t {
            let at = (h * t + i) * d;
            keys[h].push(rope_ref(&k[at..at + d], offset + i as i32, dims));
            values[h].push(v[at..at + d].iter().map(|&x| x as f64).collect());
        }
    }
    let scale = (DIM as f64).powf(-0.5);
    let mut out = vec![0.0; HEADS as usize * t * d];
    for h in 0..HEADS as usize {
        let kv = h / (HEADS / KV_HEADS) as usize;
        for i in 0..t {
            let at = (h * t + i) * d;
            let qr = rope_ref(&q[at..at + d], offset + i as i32, dims);
            let visible = offset as usize + i + 1;
            let scores: Vec<f64> =
                (0..visible).map(|j| scale * qr.iter().zip(&keys[kv][j]).map(|(a, b)| a * b).sum::<f64>()).collect();
            let top = scores.iter().cloned().fold(f64::MIN, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
            let total: f64 = weights.iter().sum();
            for (j, w) in weights.iter().enumerate() {
                for c in 0..d {
                    out[at + c] += w / total * values[kv][j][c];
                }
            }
        }
    }
    out
}

fn kv_of(row: &mut RowCache) -> &mut KvCache {
    match &mut row.layers[0] {
        LayerState::Attention(kv) => kv,
        LayerState::GatedDelta(_) => unreachable!(),
    }
}

/// Rows with `lengths` positions of random history each, written one row at a time, and the
/// reference's copy of the same history (raw keys: a prefill's keys reach the cache already
/// rotated, and attention reads them as they are stored).
fn rows_with_history(lengths: &[i32], rng: &mut Lcg) -> (Vec<RowCache>, Vec<(History, History)>) {
    let mut rows = Vec::new();
    let mut reference = Vec::new();
    for &n in lengths {
        let mut row = RowCache::new(&[LayerKind::Full]);
        let (k, kd) = rng.array(&[1, KV_HEADS, n, DIM]);
        let (v, vd) = rng.array(&[1, KV_HEADS, n, DIM]);
        kv_of(&mut row).write(&k, &v).unwrap();
        let split = |data: &[f32]| -> History {
            (0..KV_HEADS as usize)
                .map(|h| {
                    (0..n as usize)
                        .map(|p| {
                            let at = (h * n as usize + p) * DIM as usize;
                            data[at..at + DIM as usize].iter().map(|&x| x as f64).collect()
                        })
                        .collect()
                })
                .collect()
        };
        reference.push((split(&kd), split(&vd)));
        rows.push(row);
    }
    (rows, reference)
}

fn max_abs_diff(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).abs()).fold(0.0, f64::max)
}

/// One step of `t` positions for the rows at `slots`, checked row by row against the reference.
/// Returns the output as computed.
fn step_and_check(
    rows: &mut [RowCache],
    reference: &mut [(History, History)],
    slots: &[usize],
    t: i32,
    rope: RopeSpec,
    rng: &mut Lcg,
    host_block: bool,
) -> Vec<f32> {
    let w = slots.len() as i32;
    let (q, qd) = rng.array(&[w, HEADS, t, DIM]);
    let (k, kd) = rng.array(&[w, KV_HEADS, t, DIM]);
    let (v, vd) = rng.array(&[w, KV_HEADS, t, DIM]);
    let out = {
        let mut caches: Vec<&mut KvCache> =
            rows.iter_mut().enumerate().filter(|(b, _)| slots.contains(b)).map(|(_, r)| kv_of(r)).collect();
        if host_block {
            host_block_step(&mut caches, [&qd, &kd, &vd], t as usize, rope)
        } else {
            attention::attend(
                &mut caches,
                &Block { q: &q, k: &k, v: &v, rope: Some(rope), scale: (DIM as f32).powf(-0.5) },
            )
            .unwrap()
        }
    };
    assert_eq!(out.shape(), &[w, HEADS, t, DIM]);
    let got = to_f32(&out);
    let (qn, kn) = ((HEADS * t * DIM) as usize, (KV_HEADS * t * DIM) as usize);
    for (i, &b) in slots.iter().enumerate() {
        let (keys, values) = &mut reference[b];
        let want = step_ref(
            keys,
            values,
            &qd[i * qn..(i + 1) * qn],
            &kd[i * kn..(i + 1) * kn],
            &vd[i * kn..(i + 1) * kn],
            t as usize,
            rope.dims,
        );
        let err = max_abs_diff(&got[i * qn..(i + 1) * qn], &want);
        assert!(err <= TOLERANCE, "slot {b}: max abs error {err:e}");
        assert_eq!(kv_of(&mut rows[b]).offset(), keys[0].len() as i32, "slot {b}'s offset");
    }
    got
}

/// [w, a, b, d] to [w, b, a, d] (row-major both).
fn swap_middle(x: &[f32], w: usize, a: usize, b: usize) -> Vec<f32> {
    let d = DIM as usize;
    let mut out = vec![0f32; x.len()];
    for r in 0..w {
        for i in 0..a {
            for j in 0..b {
                let (from, to) = (((r * a + i) * b + j) * d, ((r * b + j) * a + i) * d);
                out[to..to + d].copy_from_slice(&x[from..from + d]);
            }
        }
    }
    out
}

/// The host decode path's attention for one layer (`attention::attend_host`, as `model::families::llama`'s
/// host path calls it), after one evaluation of the rows' storage. Takes and returns the test's
/// [w, heads, T, d] layout.
fn host_block_step(caches: &mut [&mut KvCache], [q, k, v]: [&[f32]; 3], t: usize, rope: RopeSpec) -> Array {
    let (w, heads, kv_heads) = (caches.len(), HEADS as usize, KV_HEADS as usize);
    let stored = attention::stored_before(caches);
    let arrays: Vec<&Array> = stored.iter().flatten().flat_map(|r| [&r.keys, &r.values]).collect();
    mlx_rs::transforms::eval(arrays).unwrap();
    let qkv = attention::HostQkv {
        q: swap_middle(q, w, heads, t),
        k: swap_middle(k, w, kv_heads, t),
        v: swap_middle(v, w, kv_heads, t),
        t,
        heads,
        kv_heads,
        head_dim: DIM as usize,
    };
    let out = attention::attend_host(caches, stored, qkv, rope, (DIM as f32).powf(-0.5)).unwrap();
    Array::from_slice(&swap_middle(&out, w, t, heads), &[w as i32, HEADS, t as i32, DIM])
}

/// How a run stores and attends.
#[derive(Clone, Copy)]
struct Setup {
    route: BlockRoute,
    /// Move the rows' KV into one shared buffer first (as a cohort does).
    pack: bool,
    /// Short blocks attend over the whole capacity with a mask (the CUDA default).
    padded: bool,
    /// Short blocks attend on the host (the CPU default); off, MLX's SDPA serves them.
    host: bool,
    /// The host decode path: the block stays on the host and the write follows the attention.
    host_block: bool,
}

const COHORT: Setup = Setup { route: BlockRoute::Batched, pack: true, padded: false, host: true, host_block: false };

fn cohort_steps(setup: Setup, rope: RopeSpec) -> Vec<Vec<f32>> {
    let was = routes::current();
    let routes = Routes {
        block: setup.route,
        padded_blocks: setup.padded,
        host_attention: setup.host && was.host_attention,
        ..was
    };
    routes::scoped(routes, || {
        let mut rng = Lcg(42);
        // One row stands 2 short of the first growth step, so the verify block grows the buffer.
        let (mut rows, mut reference) = rows_with_history(&[5, 1, 254, 17, 40, 3, 99, 8], &mut rng);
        if setup.pack {
            let buffers = RowCache::pack(&mut rows).unwrap();
            assert_eq!(buffers.layers(), 1, "one attention layer, and no MTP history written yet");
        }
        let all: Vec<usize> = (0..rows.len()).collect();
        let mut outs = vec![step_and_check(&mut rows, &mut reference, &all, 2, rope, &mut rng, setup.host_block)];
        // Rejected drafts: rows 1 and 6 drop their second position before the next step.
        for b in [1, 6] {
            kv_of(&mut rows[b]).trim(1).unwrap();
            let (keys, values) = &mut reference[b];
            for h in keys.iter_mut().chain(values.iter_mut()) {
                h.pop();
            }
        }
        outs.push(step_and_check(&mut rows, &mut reference, &all, 1, rope, &mut rng, setup.host_block));
        // A subset of slots (accepted drafts owing their MTP history) goes row by row.
        outs.push(step_and_check(&mut rows, &mut reference, &[2, 5, 6], 1, rope, &mut rng, setup.host_block));
        outs.push(step_and_check(&mut rows, &mut reference, &all, 2, rope, &mut rng, setup.host_block));
        outs
    })
}

const FULL_ROPE: RopeSpec = RopeSpec { dims: DIM, traditional: false, base: BASE };

#[test]
fn a_packed_cohort_matches_the_reference_on_the_batched_route() {
    cohort_steps(COHORT, FULL_ROPE);
}

#[test]
fn partial_rope_matches_the_reference_on_the_batched_route() {
    cohort_steps(COHORT, RopeSpec { dims: DIM / 2, traditional: false, base: BASE });
}

#[test]
fn the_per_row_route_matches_the_reference_on_packed_rows() {
    cohort_steps(Setup { route: BlockRoute::RowByRow, ..COHORT }, FULL_ROPE);
}

#[test]
fn unpacked_rows_match_the_reference() {
    cohort_steps(Setup { pack: false, ..COHORT }, FULL_ROPE);
}

#[test]
fn capacity_wide_short_blocks_match_the_reference_on_every_path() {
    for (route, pack) in [(BlockRoute::Batched, true), (BlockRoute::RowByRow, true), (BlockRoute::Batched, false)] {
        cohort_steps(Setup { route, pack, padded: true, host: false, host_block: false }, FULL_ROPE);
    }
}

#[test]
fn mlx_sdpa_matches_the_reference_on_every_path() {
    // Where host attention serves short blocks (the CPU), MLX's own SDPA is checked as well.
    for (route, pack) in [(BlockRoute::Batched, true), (BlockRoute::RowByRow, true), (BlockRoute::Batched, false)] {
        cohort_steps(Setup { route, pack, padded: false, host: false, host_block: false }, FULL_ROPE);
    }
}

#[test]
fn on_the_cpu_the_batched_step_equals_the_per_row_step_bit_for_bit() {
    if cohort::platform::backend::Backend::detect() != cohort::platform::backend::Backend::Cpu {
        common::skip(
            "on_the_cpu_the_batched_step_equals_the_per_row_step_bit_for_bit",
            "the bit-for-bit claim is made for MLX's CPU backend",
        );
        return;
    }
    let per_row = Setup { route: BlockRoute::RowByRow, ..COHORT };
    assert_eq!(cohort_steps(COHORT, FULL_ROPE), cohort_steps(per_row, FULL_ROPE));
    let unpacked = Setup { pack: false, ..COHORT };
    assert_eq!(cohort_steps(COHORT, FULL_ROPE), cohort_steps(unpacked, FULL_ROPE));
}

#[test]
fn host_blocks_match_the_reference_on_packed_and_unpacked_rows_and_both_routes() {
    for (route, pack) in [(BlockRoute::Batched, true), (BlockRoute::Batched, false), (BlockRoute::RowByRow, true)] {
        for rope in [FULL_ROPE, RopeSpec { dims: DIM / 2, ..FULL_ROPE }] {
            cohort_steps(Setup { route, pack, host_block: true, ..COHORT }, rope);
        }
    }
}

#[test]
fn host_blocks_start_fresh_rows_from_nothing() {
    // A first block on rows with no storage yet (an MTP history's first draft), then one more.
    let mut rng = Lcg(7);
    let mut rows: Vec<RowCache> = (0..3).map(|_| RowCache::new(&[LayerKind::Full])).collect();
    let mut reference: Vec<(History, History)> =
        (0..3).map(|_| (vec![Vec::new(); KV_HEADS as usize], vec![Vec::new(); KV_HEADS as usize])).collect();
    for t in [3, 1, 2] {
        step_and_check(&mut rows, &mut reference, &[0, 1, 2], t, FULL_ROPE, &mut rng, true);
    }
}
