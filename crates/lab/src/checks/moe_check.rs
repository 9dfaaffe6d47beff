//! Float64 references for the MoE block's products and routing, on whatever backend runs:
//! the stacked-expert product (`gather_qmm`, with the gather rows held as
//! `moe_graph::RowIndices` makes them and with `gather_qmm`'s own), the plain narrow products
//! (`quantized_matmul`), both over weights dequantized here from MLX's affine layout (`value =
//! scale * q + bias`, q packed low bits first into uint32 words), and the router kernel's
//! softmax, top-k and renormalisation. Used by `cohort-lab device --check-kernels` and the tests, to
//! tell what the backend does at the test fixtures' sizes from what it does at the real geometry.

use anyhow::Result;
use mlx_rs::{Array, Dtype};

use cohort_core::model::layers::moe_graph::RowIndices;
use cohort_core::model::ops::{host_f32, host_u32, relative_error, rows_differing};
use cohort_core::platform::rng::Rng;

/// One expert product's sizes: `tokens` rows routed to `top_k` of `experts` experts, each a
/// [`output`, `input`] matrix quantized at `bits` with groups of `group`.
#[derive(Debug, Clone, Copy)]
pub struct GatherShape {
    pub tokens: i32,
    pub top_k: i32,
    pub experts: i32,
    pub input: i32,
    pub output: i32,
    pub bits: i32,
    pub group: i32,
    /// The down-projection form: each (token, expert) pair reads its own row of x [N, k, 1, in]
    /// (`RowIndices::by_pair`); else every pair of a token reads x [N, 1, 1, in]'s row.
    pub per_pair: bool,
}

/// Largest |difference| from the float64 product relative to its largest magnitude, with the
/// gather rows held and with `gather_qmm` building them.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct GatherReport {
    pub held_rows: f64,
    pub built_rows: f64,
    /// Of `REPEATS` more runs with held rows, how many differ bitwise from the first.
    pub unrepeatable: usize,
}

/// A plain product's error against float64, and how many of `REPEATS` more runs differ bitwise
/// from the first.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct QmmReport {
    /// The product as the model takes it ([`cohort_core::model::layers::product::served`], laid out as it
    /// loads).
    pub error: f64,
    /// A plain product's error with MLX's `quantized_matmul` alone, which the model's route
    /// avoids where it is known wrong.
    pub mlx_error: Option<f64>,
    /// Of `REPEATS` more runs of the model's route, how many differ bitwise from the first.
    pub unrepeatable: usize,
}

/// Repeated runs of one product on the same inputs. A deterministic kernel gives the same bits
/// every time; a race inside one (a pipeline's shared memory reused before its asynchronous
/// copies land is the known kind) shows as runs that differ, which an error bound alone can
/// miss when the race is rare or its damage small.
const REPEATS: usize = 8;

/// `count` values uniform in [-scale, scale).
fn uniform(rng: &mut Rng, count: i32, scale: f32) -> Vec<f32> {
    (0..count).map(|_| (rng.next_f64() as f32 * 2.0 - 1.0) * scale).collect()
}

fn unrepeatable(product: impl Fn() -> Result<Array>) -> Result<usize> {
    let first = host_f32(&product()?)?;
    let mut differing = 0;
    for _ in 0..REPEATS {
        let again = host_f32(&product()?)?;
        if again.iter().zip(&first).any(|(a, b)| a.to_bits() != b.to_bits()) {
            differing += 1;
        }
    }
    Ok(differing)
}

/// x [N, 1, 1, in] (or [N, k, 1, in] per pair), expert ids [N, k] -> [N, k, 1, out].
pub fn check_gather(s: GatherShape, dtype: Dtype, seed: u64) -> Result<GatherReport> {
    let GatherShape { tokens: n, top_k: k, experts: e, input, output, bits, group, per_pair } = s;
    let x_rows = if per_pair { n * k } else { n };
    let mut rng = Rng::new(seed);
    let weights =
        Array::from_slice(&uniform(&mut rng, e * output * input, 1.0), &[e, output, input]).as_dtype(dtype)?;
    let (packed, scales, biases) = mlx_rs::ops::quantize(&weights, group, bits)?;
    let x_shape = if per_pair { [n, k, 1, input] } else { [n, 1, 1, input] };
    let x = Array::from_slice(&uniform(&mut rng, x_rows * input, 1.0), &x_shape).as_dtype(dtype)?;
    let ids: Vec<u32> = (0..n * k).map(|i| ((i as u64 * 2654435761 + seed) % e as u64) as u32).collect();
    let indices = Array::from_slice(&ids, &[n, k]);
    mlx_rs::transforms::eval([&packed, &scales, &biases, &x, &indices])?;

    // The float64 product from the packed codes.
    let xs = host_f32(&x)?;
    let dequantized = Dequantized::new(&packed, &scales, &biases, input, bits, group)?;
    let weight = |ex: i32, o: i32, i: i32| dequantized.at(ex * output + o, i);
    let mut want = vec![0.0f64; (n * k * output) as usize];
    for t in 0..n {
        for j in 0..k {
            let ex = ids[(t * k + j) as usize] as i32;
            for o in 0..output {
                let row = if per_pair { t * k + j } else { t };
                let dot: f64 = (0..input).map(|i| xs[(row * input + i) as usize] as f64 * weight(ex, o, i)).sum();
                want[((t * k + j) * output + o) as usize] = dot;
            }
        }
    }
    let product = |rows: Option<&Array>| -> Result<Array> {
        Ok(mlx_rs::ops::gather_qmm(&x, &packed, &scales, &biases, rows, &indices, true, group, bits, false)?)
    };
    let error = |rows: Option<&Array>| -> Result<f64> { Ok(relative_error(&host_f32(&product(rows)?)?, &want)) };
    let held = RowIndices::for_block(n, k).map(|r| if per_pair { r.by_pair } else { r.by_token });
    Ok(GatherReport {
        held_rows: error(held.as_ref())?,
        built_rows: error(None)?,
        unrepeatable: unrepeatable(|| product(held.as_ref()))?,
    })
}

/// A plain quantized product (`quantized_matmul`, as every projection but the experts runs):
/// `tokens` rows through an [`output`, `input`] matrix; the relative error against float64.
/// Covers the MoE block's narrow products: the router (E outputs, 8-bit), the shared expert's
/// gate (one output) and the two stacked (E + 1 outputs).
pub fn check_qmm(
    tokens: i32,
    input: i32,
    output: i32,
    bits: i32,
    group: i32,
    dtype: Dtype,
    seed: u64,
) -> Result<QmmReport> {
    let mut rng = Rng::new(seed);
    let weights = Array::from_slice(&uniform(&mut rng, output * input, 1.0), &[output, input]).as_dtype(dtype)?;
    let (packed, scales, biases) = mlx_rs::ops::quantize(&weights, group, bits)?;
    let x = Array::from_slice(&uniform(&mut rng, tokens * input, 1.0), &[tokens, input]).as_dtype(dtype)?;
    mlx_rs::transforms::eval([&packed, &scales, &biases, &x])?;
    let xs = host_f32(&x)?;
    let dequantized = Dequantized::new(&packed, &scales, &biases, input, bits, group)?;
    let want: Vec<f64> = (0..tokens)
        .flat_map(|t| (0..output).map(move |o| (t, o)))
        .map(|(t, o)| (0..input).map(|i| xs[(t * input + i) as usize] as f64 * dequantized.at(o, i)).sum())
        .collect();
    // The model's route: laid out at load as the backend's defaults say (cohort-core's model/layers/product.rs),
    // then its product.
    let spec = cohort_core::model::config::QuantSpec { bits, group_size: group };
    let ([w, s, b], layout) =
        cohort_core::model::layers::product::lay_out(packed.clone(), scales.clone(), biases.clone(), spec)?;
    let arrays = layout.inputs([&w, &s, &b]);
    let product = || cohort_core::model::layers::product::served(&x, &arrays, layout.storage(spec));
    let mlx = mlx_rs::ops::quantized_matmul(&x, &packed, &scales, &biases, true, group, bits)?;
    Ok(QmmReport {
        error: relative_error(&host_f32(&product()?)?, &want),
        mlx_error: Some(relative_error(&host_f32(&mlx)?, &want)),
        unrepeatable: unrepeatable(product)?,
    })
}

/// Rows of a quantized matrix (any leading axes flattened into rows), read on the host.
struct Dequantized {
    codes: Vec<u32>,
    scales: Vec<f32>,
    biases: Vec<f32>,
    input: i32,
    bits: i32,
    group: i32,
}

impl Dequantized {
    fn new(packed: &Array, scales: &Array, biases: &Array, input: i32, bits: i32, group: i32) -> Result<Self> {
        // Codes never straddle a word only when the width divides 32 (2, 4, 8 bits).
        anyhow::ensure!(32 % bits == 0, "the float64 reference reads whole-word codes only, not {bits}-bit");
        let (codes, scales, biases) = (host_u32(packed)?, host_f32(scales)?, host_f32(biases)?);
        Ok(Dequantized { codes, scales, biases, input, bits, group })
    }

    /// Element (row, i) as `scale * q + bias`.
    fn at(&self, row: i32, i: i32) -> f64 {
        let per_word = 32 / self.bits;
        let word = self.codes[(row * (self.input / per_word) + i / per_word) as usize];
        let q = (word >> ((i % per_word) * self.bits)) & ((1u32 << self.bits) - 1);
        let g = (row * (self.input / self.group) + i / self.group) as usize;
        self.scales[g] as f64 * q as f64 + self.biases[g] as f64
    }
}

/// What `check_router` found: whether every token's experts came out as the reference's, in order, and
/// the largest score difference relative to the largest score.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct RouterReport {
    pub indices_equal: bool,
    pub scores: f64,
}

/// The router on random logits [n, experts + extra] in `dtype` against a float64 host reference
/// (softmax, top k by probability with ties to the lower id, renormalised).
pub fn check_router(n: i32, experts: i32, extra: i32, k: i32, dtype: Dtype, seed: u64) -> Result<RouterReport> {
    let width = experts + extra;
    let mut rng = Rng::new(seed);
    let host: Vec<f32> = (0..n * width).map(|_| (rng.next_f64() as f32 - 0.5) * 8.0).collect();
    let logits = Array::from_slice(&host, &[n, width]).as_dtype(dtype)?;
    logits.eval()?;
    let seen = host_f32(&logits)?;
    let (indices, scores) = cohort_core::model::cuda::moe_router::route(&logits, experts, k, true)?;
    let got_ids: Vec<u32> = host_u32(&indices)?;
    let got_scores = host_f32(&scores)?;
    let (mut equal, mut worst, mut largest) = (true, 0.0f64, 0.0f64);
    for t in 0..n as usize {
        let row: Vec<f64> = seen[t * width as usize..][..experts as usize].iter().map(|&v| v as f64).collect();
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = row.iter().map(|v| (v - m).exp()).sum();
        let probs: Vec<f64> = row.iter().map(|v| (v - m).exp() / total).collect();
        let mut order: Vec<usize> = (0..experts as usize).collect();
        order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
        let kept: f64 = order[..k as usize].iter().map(|&i| probs[i]).sum();
        for (j, &id) in order[..k as usize].iter().enumerate() {
            let at = t * k as usize + j;
            equal &= got_ids[at] as usize == id;
            let want = probs[id] / kept;
            worst = worst.max((got_scores[at] as f64 - want).abs());
            largest = largest.max(want);
        }
    }
    Ok(RouterReport { indices_equal: equal, scores: worst / largest.max(1e-30) })
}

/// The expert kernels' sizes: `tokens` rows, `experts` experts of which `top_k` per token,
/// hidden `hidden`, expert width `inter`, shared expert width `shared`, at `bits` / `group`.
#[derive(Debug, Clone, Copy)]
pub struct ExpertsShape {
    pub tokens: i32,
    pub hidden: i32,
    pub experts: i32,
    pub top_k: i32,
    pub inter: i32,
    pub shared: i32,
    pub bits: i32,
    pub group: i32,
    /// Columns of the gate product whose last is the shared expert's logit: 1 for the shared
    /// expert gate's own product, E + 1 for the router's stacked one.
    pub gate_columns: i32,
}

impl ExpertsShape {
    /// The test fixtures' sizes: hidden 64 (one quantization group a row), 8 experts top-2, the
    /// shared expert twice as wide as a routed one, the router's stacked gate product (E + 1).
    pub const FIXTURE: ExpertsShape = ExpertsShape {
        tokens: 32,
        hidden: 64,
        experts: 8,
        top_k: 2,
        inter: 64,
        shared: 128,
        bits: 4,
        group: 64,
        gate_columns: 9,
    };
    /// The real geometry's sizes at a B8 verify's 16 tokens; 16 experts of real width stand in
    /// for 256 (the kernels index only the ones routed to), with the stacked gate of 257 columns.
    pub const REAL: ExpertsShape = ExpertsShape {
        tokens: 16,
        hidden: 2048,
        experts: 16,
        top_k: 8,
        inter: 512,
        shared: 512,
        bits: 4,
        group: 64,
        gate_columns: 257,
    };
}

/// Which route [`check_experts`] runs: the expert kernels (CUDA only), or MLX's own products
/// (`gather_qmm`, `quantized_matmul`) composed as the ops route composes them, which runs
/// everywhere and so checks the float64 reference itself on the CPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ExpertsRoute {
    Kernel,
    /// The expert kernels with the first half on the tensor cores where it fits (bf16 blocks of
    /// up to 16 tokens, 4-bit experts: `model/cuda/moe_experts_up_mma.cu`).
    KernelMma,
    Ops,
}

/// `f` with the tensor-core up kernel on or off, the rest of the routes in force as they are.
pub fn with_up_mma<T>(on: bool, f: impl FnOnce() -> T) -> T {
    cohort_core::model::routes::scoped(
        cohort_core::model::routes::Routes { moe_up_mma: on, ..cohort_core::model::routes::current() },
        f,
    )
}

/// The block after routing through `route` on random weights and inputs against a float64 host
/// product: each routed expert's and the shared expert's SwiGLU, their down products weighted by
/// the scores and by the sigmoid of the gate logit, summed.
pub fn check_experts(route: ExpertsRoute, s: ExpertsShape, dtype: Dtype, seed: u64) -> Result<QmmReport> {
    let ExpertsShape { tokens: n, hidden: h, top_k: k, inter: i, shared: si, bits, group, gate_columns, .. } = s;
    let ExpertsInputs { x, ids, scores, gate, weights } = experts_inputs(s, dtype, seed)?;
    let ids_array = Array::from_slice(&ids, &[n, k]);
    let (xs, ss, gs) = (host_f32(&x)?, host_f32(&scores)?, host_f32(&gate)?);
    let deq = |m: &[Array; 3], input: i32| Dequantized::new(&m[0], &m[1], &m[2], input, bits, group);
    let (gu, dn, sgu, sdn) = (
        deq(&weights.gate_up, h)?,
        deq(&weights.down, i)?,
        deq(&weights.shared_gate_up, h)?,
        deq(&weights.shared_down, si)?,
    );
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let mut want = vec![0.0f64; (n * h) as usize];
    for t in 0..n {
        let xrow = &xs[(t * h) as usize..][..h as usize];
        let dot = |d: &Dequantized, row: i32| -> f64 { (0..h).map(|c| xrow[c as usize] as f64 * d.at(row, c)).sum() };
        let mut add = |weight: f64, act: &[f64], d: &Dequantized, first_row: i32| {
            for o in 0..h {
                let v: f64 = act.iter().enumerate().map(|(c, a)| a * d.at(first_row + o, c as i32)).sum();
                want[(t * h + o) as usize] += weight * v;
            }
        };
        for j in 0..k {
            let ex = ids[(t * k + j) as usize] as i32;
            let act: Vec<f64> = (0..i).map(|c| silu(dot(&gu, ex * 2 * i + c)) * dot(&gu, ex * 2 * i + i + c)).collect();
            add(ss[(t * k + j) as usize] as f64, &act, &dn, ex * h);
        }
        let act: Vec<f64> = (0..si).map(|c| silu(dot(&sgu, c)) * dot(&sgu, si + c)).collect();
        let logit = gs[(t * gate_columns + gate_columns - 1) as usize] as f64;
        add(1.0 / (1.0 + (-logit).exp()), &act, &sdn, 0);
    }
    let product = || match route {
        ExpertsRoute::Kernel | ExpertsRoute::KernelMma => with_up_mma(route == ExpertsRoute::KernelMma, || {
            cohort_core::model::cuda::moe_experts::apply(&x, &ids_array, &scores, &gate, &weights)
        }),
        ExpertsRoute::Ops => experts_by_ops(&x, &ids_array, &scores, &gate, &weights),
    };
    Ok(QmmReport {
        error: relative_error(&host_f32(&product()?)?, &want),
        mlx_error: None,
        unrepeatable: unrepeatable(product)?,
    })
}

/// A block's random inputs and weights at `s`: x [N, H], each token's distinct experts spread
/// over all of them, scores, and a gate product whose last column is the shared expert's logit.
struct ExpertsInputs {
    x: Array,
    ids: Vec<u32>,
    scores: Array,
    gate: Array,
    weights: cohort_core::model::cuda::moe_experts::ExpertWeights,
}

fn experts_inputs(s: ExpertsShape, dtype: Dtype, seed: u64) -> Result<ExpertsInputs> {
    let ExpertsShape { tokens: n, hidden: h, experts: e, top_k: k, inter: i, shared: si, bits, group, gate_columns } =
        s;
    anyhow::ensure!(k <= e, "top {k} of {e} experts");
    let mut rng = Rng::new(seed);
    let mut matrix = |shape: &[i32]| -> Result<[Array; 3]> {
        let count = shape.iter().product();
        let dense = Array::from_slice(&uniform(&mut rng, count, 1.0), shape).as_dtype(dtype)?;
        let (w, sc, b) = mlx_rs::ops::quantize(&dense, group, bits)?;
        mlx_rs::transforms::eval([&w, &sc, &b])?;
        Ok([w, sc, b])
    };
    let weights = cohort_core::model::cuda::moe_experts::ExpertWeights {
        gate_up: matrix(&[e, 2 * i, h])?,
        down: matrix(&[e, h, i])?,
        shared_gate_up: matrix(&[2 * si, h])?,
        shared_down: matrix(&[h, si])?,
        spec: cohort_core::model::config::QuantSpec { bits, group_size: group },
    };
    let x = Array::from_slice(&uniform(&mut rng, n * h, 1.0), &[n, h]).as_dtype(dtype)?;
    let ids: Vec<u32> = (0..n).flat_map(|t| (0..k).map(move |j| ((t * 7 + j * (e / k)) % e) as u32)).collect();
    let scores = Array::from_slice(&uniform(&mut rng, n * k, 0.5).iter().map(|v| v + 0.5).collect::<Vec<_>>(), &[n, k]);
    let gate = Array::from_slice(&uniform(&mut rng, n * gate_columns, 2.0), &[n, gate_columns]).as_dtype(dtype)?;
    mlx_rs::transforms::eval([&x, &scores, &gate])?;
    Ok(ExpertsInputs { x, ids, scores, gate, weights })
}

/// Tokens of a block of `s.tokens` whose expert-kernel outputs differ in any bit from the same
/// token run alone (CUDA only). The down kernel takes more channels a warp for blocks of more
/// than two tokens, so this holds it to summing each channel in one order at every block size.
pub fn experts_rows_differing(s: ExpertsShape, dtype: Dtype, seed: u64) -> Result<usize> {
    use cohort_core::model::cuda::moe_experts::apply;
    use cohort_core::model::ops::slice_axis;
    let ExpertsInputs { x, ids, scores, gate, weights } = experts_inputs(s, dtype, seed)?;
    let ids = Array::from_slice(&ids, &[s.tokens, s.top_k]);
    let all = host_f32(&apply(&x, &ids, &scores, &gate, &weights)?)?;
    rows_differing(&all, s.tokens, |t| {
        let one = |a: &Array| slice_axis(a, 0, t, t + 1);
        host_f32(&apply(&one(&x)?, &one(&ids)?, &one(&scores)?, &one(&gate)?, &weights)?)
    })
}

/// Tokens of a block of `n` whose router-kernel experts or scores differ in any bit from the
/// same token routed alone, on random logits [n, experts + extra] (CUDA only).
pub fn router_rows_differing(n: i32, experts: i32, extra: i32, k: i32, dtype: Dtype, seed: u64) -> Result<usize> {
    use cohort_core::model::cuda::moe_router::route;
    let width = experts + extra;
    let mut rng = Rng::new(seed);
    let host: Vec<f32> = (0..n * width).map(|_| (rng.next_f64() as f32 - 0.5) * 8.0).collect();
    let logits = Array::from_slice(&host, &[n, width]).as_dtype(dtype)?;
    // Ids as floats, exact below 2^24, beside the scores: one row of both a token.
    let routed = |logits: &Array| -> Result<Vec<f32>> {
        let (ids, scores) = route(logits, experts, k, true)?;
        let both = mlx_rs::ops::concatenate(&[ids.as_dtype(Dtype::Float32)?, scores], 1)?;
        host_f32(&both)
    };
    let all = routed(&logits)?;
    rows_differing(&all, n, |t| routed(&cohort_core::model::ops::slice_axis(&logits, 0, t, t + 1)?))
}

/// The same block with MLX's products (the plain ones through the model's own route): [N, 1, 1,
/// H] rows gathered per expert, SwiGLU, the
/// [N, K, 1, I] rows gathered again for the down product, then the weighted sums.
fn experts_by_ops(
    x: &Array,
    ids: &Array,
    scores: &Array,
    gate: &Array,
    w: &cohort_core::model::cuda::moe_experts::ExpertWeights,
) -> Result<Array> {
    use cohort_core::model::layers::product::quantized;
    use mlx_rs::ops::gather_qmm;
    let (g, b) = (w.spec.group_size, w.spec.bits);
    let swiglu = |both: Array| -> Result<Array> {
        let half = both.shape().last().copied().unwrap_or(0) / 2;
        let parts = cohort_core::model::layers::linear::split_widths(&both, &[half, half])?;
        Ok(mlx_rs::nn::silu(&parts[0])?.multiply(&parts[1])?)
    };
    let [gw, gs, gb] = &w.gate_up;
    let act = swiglu(gather_qmm(x.expand_dims_axes(&[-2, -3])?, gw, gs, gb, None, ids, true, g, b, false)?)?;
    let [dw, ds, db] = &w.down;
    let routed = gather_qmm(&act, dw, ds, db, None, ids, true, g, b, false)?.squeeze_axes(&[-2])?;
    let routed = routed.multiply(scores.expand_dims(-1)?.as_dtype(routed.dtype())?)?.sum_axis(-2, None)?;
    let [sw, ss, sb] = &w.shared_gate_up;
    let [tw, ts, tb] = &w.shared_down;
    let shared = quantized(&swiglu(quantized(x, sw, ss, sb, g, b)?)?, tw, ts, tb, g, b)?;
    let width = gate.shape()[1];
    let weight = mlx_rs::ops::sigmoid(cohort_core::model::ops::slice_axis(gate, 1, width - 1, width)?)?;
    Ok(routed.add(shared.multiply(weight)?)?)
}
