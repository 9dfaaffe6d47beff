//! `cohort-lab device --check-invariance`: the row-invariant route's kernels against float64 and
//! against themselves (issue 41). Each product must be within rounding of a float64 product and
//! give every row of a block bit for bit what the row gives alone; the short-block attention
//! kernel must give a verify block's queries bit for bit what single-token steps and lone rows
//! give; the MoE router and expert kernels must give each token of a block what it gets alone.
//! CUDA only: the kernels have no other backend, so elsewhere every check reports skipped.

use anyhow::{Result, ensure};
use mlx_rs::Dtype;

use crate::checks::attention_check::{self, Shape};
use crate::checks::gdn_check::{self, Geometry};
use crate::checks::moe_check::{self, ExpertsShape};
use crate::checks::{qk_norm_rope_check, row_invariant_check};
use cohort_core::model::config::QuantSpec;
use cohort_core::model::cuda::row_invariant;

/// Largest relative error a product may show against float64: float32 accumulation over at
/// most a few thousand inputs, then the output rounded to its dtype.
fn tolerance(dtype: Dtype) -> f64 {
    if dtype == Dtype::Float32 { 1e-5 } else { 1e-2 }
}

/// (inputs, outputs, bits, group; bits 0: a float weight): the default model's projections and
/// tied 8-bit LM head, three of the real Qwen3.6-35B-A3B geometry's (its 8-bit router with the
/// shared expert's gate, 257 outputs, ends in a part-filled tile), and float weights of the same
/// shapes (checkpoints stored unquantized).
const PRODUCTS: [(i32, i32, i32, i32); 11] = [
    (576, 576, 4, 32),
    (576, 192, 4, 32),
    (576, 1536, 4, 32),
    (1536, 576, 4, 32),
    (576, 49_152, 8, 32),
    (2048, 4096, 4, 64),
    (4096, 2048, 4, 64),
    (2048, 257, 8, 64),
    (576, 192, 0, 0),
    (1536, 576, 0, 0),
    (576, 49_152, 0, 0),
];

pub fn run() -> Result<()> {
    use crate::checks::harness::{self, Check, Needs};
    let backend = cohort_core::platform::backend::Backend::detect();
    let checks = vec![
        Check::new("row-invariant products", Needs::Cuda, products),
        Check::new("short-block attention", Needs::Cuda, attention),
        Check::new("MoE router and expert kernels", Needs::Cuda, moe_kernels),
        Check::new("Gated DeltaNet front in place", Needs::Cuda, mixer_front_in_place),
        Check::new("q/k norm and RoPE", Needs::Cuda, qk_norm_rope),
    ];
    harness::run(checks, backend).into_result("row-invariant kernels", backend)?;
    println!("every row-invariant kernel is exact against itself and within tolerance of float64");
    Ok(())
}

/// `failures` as one error naming each, or nothing.
fn none_of(failures: Vec<String>, what: &str) -> Result<()> {
    ensure!(failures.is_empty(), "{what}: {}", failures.join(", "));
    Ok(())
}

fn products() -> Result<()> {
    let mut failures = Vec::new();
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        for (input, out, bits, group_size) in PRODUCTS {
            for rows in [2, 8, 16] {
                let spec = (bits > 0).then_some(QuantSpec { bits, group_size });
                let weight = if bits > 0 { format!("{bits}-bit g{group_size}") } else { "float".into() };
                let r = row_invariant_check::check(rows, input, out, spec, dtype, 41 + rows as u64)?;
                println!(
                    "row-invariant product {input}->{out} {weight} {dtype:?}, {rows} rows: relative error {:.2e}, rows differing from alone {}",
                    r.relative_error, r.rows_differing
                );
                if r.relative_error > tolerance(dtype) || r.rows_differing > 0 {
                    failures.push(format!("product {input}->{out} {weight} {dtype:?} x{rows}"));
                }
            }
        }
    }
    none_of(failures, "not row-invariant or off the float64 product")
}

fn attention() -> Result<()> {
    let mut failures = Vec::new();
    let small = Shape { heads: 9, kv_heads: 3, head_dim: 64, queries: 2, capacity: 512 };
    for (name, shape) in
        [("default model", small), ("Qwen3.6 real", Shape::REAL), ("Qwen3.6 real, split keys", Shape::REAL_LONG)]
    {
        for dtype in [Dtype::Bfloat16, Dtype::Float32] {
            let offsets: Vec<i32> = (0..8).map(|r| 1 + r * (shape.capacity - 3) / 7).collect();
            let differing = attention_check::check_invariance(shape, &offsets, dtype, 7)?;
            println!(
                "short-block attention, {name} ({dtype:?}), 8 rows: outputs differing from steps or lone rows {differing}"
            );
            if differing > 0 {
                failures.push(format!("attention {name} {dtype:?}"));
            }
        }
    }
    none_of(failures, "outputs differing from steps or lone rows")
}

fn moe_kernels() -> Result<()> {
    let mut failures = Vec::new();
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        for tokens in [2, 8, 16] {
            let shape = ExpertsShape { tokens, ..ExpertsShape::REAL };
            let experts = moe_check::experts_rows_differing(shape, dtype, 43)?;
            // The tensor-core up kernel takes bf16 blocks only (float32 stays on the scalar one).
            let on_tensor_cores = if dtype == Dtype::Bfloat16 {
                moe_check::with_up_mma(true, || moe_check::experts_rows_differing(shape, dtype, 43))?
            } else {
                0
            };
            let router = moe_check::router_rows_differing(tokens, 256, 1, 8, dtype, 44)?;
            println!(
                "MoE kernels, real geometry ({dtype:?}), {tokens} tokens: tokens differing from alone: router {router}, experts {experts}, experts with the up kernel on tensor cores {on_tensor_cores}"
            );
            if router + experts + on_tensor_cores > 0 {
                failures.push(format!("MoE kernels {dtype:?} x{tokens}"));
            }
        }
    }
    none_of(failures, "tokens differing from alone")
}

/// The mixer's front reading a verify's states in place must give what it gives them sliced.
fn mixer_front_in_place() -> Result<()> {
    let mut failures = Vec::new();
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        for positions in [1, 2] {
            let geo = Geometry {
                rows: 8,
                positions,
                key_heads: 16,
                value_heads: 32,
                key_dim: 128,
                value_dim: 128,
                capture: false,
            };
            let differing = gdn_check::placed_differing(geo, 4, 2, dtype, 45)?;
            println!(
                "Gated DeltaNet front, real geometry ({dtype:?}), 8 rows x {positions} after a verify: elements differing read in place {differing}"
            );
            if differing > 0 {
                failures.push(format!("mixer front in place {dtype:?} x{positions}"));
            }
        }
    }
    none_of(failures, "elements differing read in place")
}

fn qk_norm_rope() -> Result<()> {
    let mut failures = Vec::new();
    for dtype in [Dtype::Bfloat16, Dtype::Float32] {
        let offsets: Vec<i32> = (0..8).map(|r| 3 + 90 * r).collect();
        let differing = qk_norm_rope_check::rows_differing(&offsets, 2, dtype, 47)?;
        println!(
            "q/k norm and RoPE kernel, real heads ({dtype:?}), 8 rows x 2: positions differing from lone rows or steps {differing}"
        );
        if differing > 0 {
            failures.push(format!("q/k norm and RoPE {dtype:?}"));
        }
    }
    none_of(failures, "positions differing from lone rows or steps")
}

/// The real Qwen3.6-35B-A3B geometry's step products as the engine stacks them at load (input,
/// outputs, bits): the mixer's stacked input projections, attention's stacked q/k/v, the output
/// projections, the shared expert's stacked gate/up and its down projection, the 8-bit router,
/// and the LM head.
const REAL_PRODUCTS: [(&str, i32, i32, i32); 8] = [
    ("mixer in (qkv, z, b, a)", 2048, 12_352, 4),
    ("attention q, k, v", 2048, 9216, 4),
    ("mixer / attention out", 4096, 2048, 4),
    ("shared expert gate, up", 2048, 1024, 4),
    ("shared expert down", 512, 2048, 4),
    ("router", 2048, 256, 8),
    ("MTP fc", 4096, 2048, 4),
    ("LM head", 2048, 248_320, 4),
];

/// Products queued back to back a timing: enough that a product's time is the device's (or the
/// host's, where handing a node over takes longer than running it) rather than one launch's.
pub(super) const QUEUED: usize = 32;

/// `cohort-lab device --time-invariance`: each real-geometry product at 1, 2, 8 and 16 rows through
/// MLX's quantized matmul (the batched route's kernel choice) and through the row-invariant
/// kernel at 1, 2 and 4 channels a warp (the invariant route takes 4 from 16,384 outputs, else 1):
/// microseconds a product with QUEUED of them queued, median of 5.
pub fn time() -> Result<()> {
    ensure!(
        cohort_core::platform::backend::Backend::is_cuda(),
        "the row-invariant kernels run only where MLX drives CUDA (this backend: {:?})",
        cohort_core::platform::backend::Backend::detect()
    );
    let dtype = Dtype::Bfloat16;
    println!("us a product, {QUEUED} queued, median of 5, bf16 (x MLX's time in brackets)");
    println!(
        "| product | rows | MLX quantized matmul | tensor-core kernel | scalar kernel, 1 a warp | 2 a warp | 4 a warp |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (name, input, out, bits) in REAL_PRODUCTS {
        let spec = QuantSpec { bits, group_size: 64 };
        let w = mlx_rs::random::normal::<f32>(&[out, input], None, None, None)?.as_dtype(dtype)?;
        let (q, s, b) = mlx_rs::ops::quantize(&w, spec.group_size, bits)?;
        mlx_rs::transforms::eval([&q, &s, &b])?;
        for rows in [1, 2, 8, 16] {
            let x = mlx_rs::random::normal::<f32>(&[rows, input], None, None, None)?.as_dtype(dtype)?;
            x.eval()?;
            let mlx = per_product(&|| Ok(mlx_rs::ops::quantized_matmul(&x, &q, &s, &b, true, spec.group_size, bits)?))?;
            let mut cells = vec![format!("{mlx:.1}")];
            let mma = per_product(&|| {
                row_invariant::affine_product_mma(&x, &q, &s, &b, spec, out)
                    .unwrap_or_else(|| anyhow::bail!("the tensor-core kernel does not take {input}->{out}"))
            })?;
            cells.push(format!("{mma:.1} ({:.2}x)", mma / mlx));
            for cpw in [1, 2, 4] {
                let t = per_product(&|| row_invariant::affine_product_cpw(&x, &q, &s, &b, spec, cpw))?;
                cells.push(format!("{t:.1} ({:.2}x)", t / mlx));
            }
            println!("| {name} {input}->{out} {bits}-bit | {rows} | {} |", cells.join(" | "));
        }
    }
    crate::device_moe_timing::time()
}

/// Microseconds one product takes with [`QUEUED`] of them evaluated together (after a warm-up
/// batch, which pays for compiles): the median of 5 batches.
pub(super) fn per_product(make: &dyn Fn() -> Result<mlx_rs::Array>) -> Result<f64> {
    let mut times = Vec::new();
    for batch in 0..6 {
        let t = std::time::Instant::now();
        let outs = (0..QUEUED).map(|_| make()).collect::<Result<Vec<_>>>()?;
        mlx_rs::transforms::eval(outs.iter())?;
        if batch > 0 {
            times.push(t.elapsed().as_secs_f64() * 1e6 / QUEUED as f64);
        }
    }
    Ok(cohort_core::platform::timing::median(times))
}
