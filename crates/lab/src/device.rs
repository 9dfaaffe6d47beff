//! `cohort-lab device`: `cohort device` (the runtime, its memory, its routes) with the lab's matmul,
//! linear and attention timings and the kernels' float64 checks and timings.

use anyhow::Result;
use clap::Args;

use crate::device_timing as timing;
use cohort_core::platform::backend::{self as runtime, RuntimeReport};

#[derive(Args)]
pub struct DeviceArgs {
    /// Time an N x N matmul in float32 and bfloat16 on the default device.
    #[arg(long, value_name = "N")]
    matmul: Option<i32>,
    /// Timed repetitions per dtype (the median is reported).
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Time a linear layer of K inputs and N outputs ("K,N") at several row counts: float32 BLAS
    /// whole, split into chunks of at most 8 rows, and with the weight as BLAS's left operand; and
    /// cohort's CPU kernel on 4- and 8-bit codes of the same weight, on host buffers (blocks of up
    /// to 16 rows, the blocks the host decode path gives it).
    #[arg(long, value_name = "K,N", value_delimiter = ',')]
    linear: Vec<i32>,
    /// Time host attention (MLX's CPU backend) for HEADS query heads over KV_HEADS heads of D
    /// ("HEADS,KV_HEADS,D"; the default model is 9,3,64): 1 and 8 rows, 1 and 2 query positions,
    /// over 64, 300 and 1000 stored positions.
    #[arg(long, value_name = "HEADS,KV_HEADS,D", value_delimiter = ',')]
    attention: Vec<usize>,
    /// Check the Gated DeltaNet recurrence routes (the fused CUDA kernel and the plain ops), and
    /// on CUDA the fused mixer front and the MoE router kernel, against float64 references at
    /// the real Qwen3.6 geometry; exits 1 when one is off by more than its tolerance.
    #[arg(long)]
    check_kernels: bool,
    /// Check the invariant route's kernels (CUDA): each quantized product and the short-block
    /// attention against float64, and every row of a block bit for bit against the row alone and
    /// a verify's queries against single steps; exits 1 on any difference.
    #[arg(long)]
    check_invariance: bool,
    /// Time the real Qwen3.6 geometry's step products through MLX's quantized matmul and the
    /// invariant route's kernel (CUDA), side by side, at 1 to 16 rows; then its MoE expert
    /// kernels with the up kernel scalar and on the tensor cores, at 1 to 16 tokens.
    #[arg(long)]
    time_invariance: bool,
    /// Time only the MoE expert kernels' table of `--time-invariance` (CUDA): seconds, not
    /// minutes, so kernel variants can be timed one folder after another in one call.
    #[arg(long)]
    time_moe: bool,
    /// The product's own `device` flags (`--routes`, `--json`).
    #[command(flatten)]
    product: cohort::cli::device::DeviceArgs,
}

pub fn run(args: DeviceArgs) -> Result<()> {
    if args.check_kernels {
        return check_kernels();
    }
    if args.check_invariance {
        return crate::device_invariance::run();
    }
    if args.time_invariance {
        return crate::device_invariance::time();
    }
    if args.time_moe {
        return crate::device_moe_timing::time();
    }
    if !args.attention.is_empty() {
        return time_attention(&args.attention, args.iters);
    }
    if let [k, n] = args.linear[..] {
        println!(
            "x[M, {k}] . w[{n}, {k}]^T, median of {} (ms): M | float32 BLAS whole | chunks of 8 | (w . x^T)^T \
             | CPU kernel 4-bit g32 | 8-bit g32",
            args.iters
        );
        let cell = |t: Option<f64>| t.map(|t| format!("{t:8.3}")).unwrap_or_else(|| format!("{:>8}", "-"));
        for t in timing::time_linear(k, n, &[1, 2, 4, 8, 9, 12, 16, 24, 32, 64, 128], 8, args.iters)? {
            println!(
                "{:4} | {:8.3} | {:8.3} | {:8.3} | {} | {}",
                t.m,
                t.whole,
                t.split,
                t.flipped,
                cell(t.kernel4),
                cell(t.kernel8)
            );
        }
        return Ok(());
    }
    let Some(n) = args.matmul else {
        return cohort::cli::device::run(args.product);
    };
    let report = RuntimeReport::collect();
    // Two float32 operands and the product.
    let bytes = 3 * (n.max(0) as u64).pow(2) * 4;
    cohort_core::platform::memory::ensure_fits(bytes, &format!("a {n} x {n} float32 matmul"))?;
    let figures = vec![
        timing::time_matmul(n, mlx_rs::Dtype::Float32, args.iters)?,
        timing::time_matmul(n, mlx_rs::Dtype::Bfloat16, args.iters)?,
    ];
    if args.product.json {
        let json = serde_json::json!({ "runtime": report, "matmul": figures });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!("{report}");
    for f in &figures {
        println!(
            "matmul {n}x{n}x{n} {dtype}: {ms:.3} ms median of {iters} ({tf:.2} TFLOP/s)",
            n = f.n,
            dtype = f.dtype,
            ms = f.median_ms,
            iters = args.iters,
            tf = f.tflops
        );
    }
    Ok(())
}

fn time_attention(shape: &[usize], iters: usize) -> Result<()> {
    let &[heads, kv_heads, d] = shape else {
        anyhow::bail!("--attention takes HEADS,KV_HEADS,D (three numbers), not {shape:?}");
    };
    anyhow::ensure!(
        kv_heads > 0 && d > 0 && heads.is_multiple_of(kv_heads),
        "--attention {heads},{kv_heads},{d}: the query heads must be a multiple of the KV heads, both above zero"
    );
    let cases: Vec<_> = [1, 8]
        .into_iter()
        .flat_map(|r| [1, 2].into_iter().flat_map(move |t| [64, 300, 1000].map(|c| (r, t, c))))
        .collect();
    println!(
        "host attention, {heads} heads over {kv_heads} KV heads of {d}, {iters} runs (ms): rows | T | context | min | median"
    );
    for t in crate::attention_timing::time_attention(heads, kv_heads, d, &cases, iters)? {
        println!("{:4} | {} | {:5} | {:8.3} | {:8.3}", t.rows, t.t, t.context, t.min_ms, t.median_ms);
    }
    Ok(())
}

/// Largest relative error a recurrence route may show against the float64 reference.
const KERNEL_TOLERANCE: f64 = 1e-4;

fn check_kernels() -> Result<()> {
    use crate::checks::harness::{self, Check, Needs};
    let dtype = cohort_core::model::load::default_dtype();
    let backend = runtime::Backend::detect();
    // MLX's own products (gather_qmm, quantized_matmul) come last: on MLX CUDA one of them has
    // stalled a run (docs/benchmarks.md), and the kernels cohort serves should report first.
    let checks = vec![
        Check::new("Gated DeltaNet recurrence, fused kernel", Needs::Cuda, move || {
            check_recurrence(crate::checks::gdn_check::Route::Kernel, dtype)
        }),
        Check::new("Gated DeltaNet recurrence, plain ops", Needs::AnyBackend, move || {
            check_recurrence(crate::checks::gdn_check::Route::Ops, dtype)
        }),
        Check::new("MoE experts", Needs::AnyBackend, move || check_experts(dtype)),
        Check::new("fused front", Needs::Cuda, move || check_fused_front(dtype)),
        Check::new("router", Needs::Cuda, check_router),
        Check::new("add-norm", Needs::Cuda, check_add_norm),
        Check::new("qk-norm-rope", Needs::Cuda, check_qk_norm_rope),
        Check::new("short-block attention", Needs::Cuda, check_short_attention),
        Check::new("MLX's products", Needs::AnyBackend, move || check_gather(dtype)),
    ];
    harness::run(checks, backend).into_result("kernel checks", backend)?;
    println!("every kernel check that runs here passed");
    Ok(())
}

/// One recurrence route at each real geometry against the float64 reference.
fn check_recurrence(route: crate::checks::gdn_check::Route, dtype: mlx_rs::Dtype) -> Result<()> {
    use crate::checks::gdn_check::{check, real_geometries};
    let mut worst: f64 = 0.0;
    for (name, geo) in real_geometries() {
        let t = std::time::Instant::now();
        let r = check(route, geo, dtype, 1)?;
        worst = worst.max(r.worst());
        println!(
            "{route:?} {name} ({dtype:?}): relative error y {:.2e}, state {:.2e}{} ({:.1} s)",
            r.y,
            r.state,
            r.per_position.map(|p| format!(", per-position states {p:.2e}")).unwrap_or_default(),
            t.elapsed().as_secs_f64()
        );
    }
    anyhow::ensure!(
        worst <= KERNEL_TOLERANCE,
        "the {route:?} recurrence is off by {worst:.2e} (tolerance {KERNEL_TOLERANCE:e})"
    );
    println!("{route:?} recurrence within {KERNEL_TOLERANCE:e} of the float64 reference");
    Ok(())
}

/// The dtypes a product is checked in: float32, and the model dtype when it differs.
fn checked_dtypes(model: mlx_rs::Dtype) -> Vec<mlx_rs::Dtype> {
    if model == mlx_rs::Dtype::Float32 { vec![model] } else { vec![mlx_rs::Dtype::Float32, model] }
}

/// An error scaled to float32's tolerance: bf16 products round 100x coarser.
fn scaled_error(error: f64, dtype: mlx_rs::Dtype) -> f64 {
    error / if dtype == mlx_rs::Dtype::Float32 { 1.0 } else { 100.0 }
}

/// The MoE block after routing, at the fixtures' sizes and the real geometry's (16 experts of
/// real width stand in for 256: the kernels index the ones routed to), against float64: MLX's
/// own products everywhere, the expert kernels (`model/cuda/moe_experts.rs`) on CUDA.
fn check_experts(dtype: mlx_rs::Dtype) -> Result<()> {
    use crate::checks::moe_check::{ExpertsRoute, ExpertsShape, check_experts};
    let (fixture, real) = (ExpertsShape::FIXTURE, ExpertsShape::REAL);
    let mut routes = vec![ExpertsRoute::Ops];
    if runtime::Backend::detect() == runtime::Backend::Cuda {
        routes.extend([ExpertsRoute::Kernel, ExpertsRoute::KernelMma]);
    }
    let (mut worst, mut unrepeatable) = (0.0f64, 0);
    for route in routes {
        for (name, shape) in [
            ("fixture size", fixture),
            ("real size, one token", ExpertsShape { tokens: 1, ..real }),
            ("real size, B8 verify", real),
            ("real size, 8-bit, the shared gate's own product", ExpertsShape { bits: 8, gate_columns: 1, ..real }),
        ] {
            for dt in checked_dtypes(dtype) {
                let r = check_experts(route, shape, dt, 4)?;
                // MLX's products round every intermediate to bf16, so in bf16 their line is a
                // report only; in float32 they check the reference, and the kernels are held to
                // the bound in both.
                if route != ExpertsRoute::Ops || dt == mlx_rs::Dtype::Float32 {
                    worst = worst.max(scaled_error(r.error, dt));
                }
                unrepeatable += r.unrepeatable;
                println!(
                    "MoE experts, {route:?} route, {name} ({dt:?}): relative error {:.2e}; runs differing from the first: {}",
                    r.error, r.unrepeatable
                );
            }
        }
    }
    anyhow::ensure!(
        worst <= KERNEL_TOLERANCE && unrepeatable == 0,
        "a MoE experts route is off by {worst:.2e} (float32 tolerance {KERNEL_TOLERANCE:e}, 100x that in bf16) or unrepeatable ({unrepeatable} runs)"
    );
    Ok(())
}

/// The MoE block's stacked-expert product (`gather_qmm`) and the plain quantized products
/// against float64 products, at the test fixtures' sizes (64 -> 64, 8 experts top-2, one group
/// a row) and at the real geometry's (2048 -> 512, 256 experts top-8), in float32 and the model
/// dtype, each also repeated for bitwise equality. Reports every case; the tolerance and any
/// unrepeatable run decide the exit status.
fn check_gather(dtype: mlx_rs::Dtype) -> Result<()> {
    use crate::checks::moe_check::{GatherShape, check_gather};
    let fixture =
        GatherShape { tokens: 32, top_k: 2, experts: 8, input: 64, output: 64, bits: 4, group: 64, per_pair: false };
    let real = GatherShape {
        tokens: 16,
        top_k: 8,
        experts: 256,
        input: 2048,
        output: 512,
        bits: 4,
        group: 64,
        per_pair: false,
    };
    let mut worst: f64 = 0.0;
    let mut unrepeatable = 0;
    for (name, shape) in [
        ("fixture size", fixture),
        ("fixture size, one token", GatherShape { tokens: 1, ..fixture }),
        ("fixture size, down projection (a row per pair)", GatherShape { per_pair: true, ..fixture }),
        ("real size", real),
        ("real size, down projection", GatherShape { input: 512, output: 2048, per_pair: true, ..real }),
    ] {
        for dt in checked_dtypes(dtype) {
            let r = check_gather(shape, dt, 3)?;
            // The model hands the down projection no held rows on CUDA (moe_graph::block):
            // there the held form is reported, not held to the tolerance.
            let used = if shape.per_pair && runtime::Backend::is_cuda() {
                r.built_rows
            } else {
                r.held_rows.max(r.built_rows)
            };
            worst = worst.max(scaled_error(used, dt));
            unrepeatable += r.unrepeatable;
            println!(
                "gather_qmm {name} ({dt:?}): relative error with held rows {:.2e}, with built rows {:.2e}; runs differing from the first: {}",
                r.held_rows, r.built_rows, r.unrepeatable
            );
        }
    }
    // The plain products at the fixtures' 64-wide hidden size (one group a row, which MLX's
    // CUDA backend sends to other kernels than real widths) and at the real 2048: the router (8 /
    // 256 outputs, 8-bit), the shared expert gate (1), the two stacked (9 / 257), and a
    // projection (64 / 512, 4-bit as the body is, and 8-bit); one token, a few, and a prefill
    // chunk or a B8 verify's sixteen. On CUDA the load layouts apply (cohort-core's model/layers/product.rs): the
    // real stacked mixer input (12352 outputs) is padded, and narrow products such as the
    // 2048-wide out-projections take a dense copy from 8 rows on.
    let narrow = |outputs: [i32; 3]| outputs.map(|o| (o, 8));
    let fixture_products = [narrow([8, 1, 9]).as_slice(), &[(64, 4), (64, 8)]].concat();
    let real_products = [narrow([256, 1, 257]).as_slice(), &[(512, 4), (512, 8), (2048, 4), (12352, 4)]].concat();
    for (input, products, tokens) in [(2048, real_products, [1, 3, 16]), (64, fixture_products, [1, 3, 32])] {
        for &(output, bits) in &products {
            for tokens in tokens {
                for dt in checked_dtypes(dtype) {
                    let r = crate::checks::moe_check::check_qmm(tokens, input, output, bits, 64, dt, 5)?;
                    worst = worst.max(scaled_error(r.error, dt));
                    unrepeatable += r.unrepeatable;
                    println!(
                        "quantized product {tokens} x {input} -> {output}, {bits}-bit g64 ({dt:?}): relative error {:.2e} (MLX's quantized_matmul alone {:.2e}); runs differing from the first: {}",
                        r.error,
                        r.mlx_error.unwrap_or(f64::NAN),
                        r.unrepeatable
                    );
                }
            }
        }
    }
    anyhow::ensure!(
        worst <= KERNEL_TOLERANCE,
        "a MoE product is off by {worst:.2e} (float32 tolerance {KERNEL_TOLERANCE:e}, 100x that in bf16)"
    );
    anyhow::ensure!(unrepeatable == 0, "{unrepeatable} repeated runs of a product gave other bits than its first run");
    Ok(())
}

/// The fused front (convolution to recurrence in one kernel) at the real geometry, with
/// Qwen3.6's 4-tap convolution.
fn check_fused_front(dtype: mlx_rs::Dtype) -> Result<()> {
    for (name, geo) in crate::checks::gdn_check::real_geometries() {
        let t = std::time::Instant::now();
        let r = crate::checks::gdn_check::check_fused(geo, 4, dtype, 2)?;
        let rec = r.recurrence;
        let gated_tolerance = crate::checks::gdn_check::gated_tolerance(dtype);
        let gated = match (r.gated, r.gated_recurrence) {
            (Some(g), Some(gr)) => format!("; with the norm folded in, gated output {g:.2e}, state {:.2e}", gr.state),
            _ => String::new(),
        };
        println!(
            "fused front {name} ({dtype:?}): relative error y {:.2e}, state {:.2e}{}; convolution input exact: {}{gated} ({:.1} s)",
            rec.y,
            rec.state,
            rec.per_position.map(|p| format!(", per-position states {p:.2e}")).unwrap_or_default(),
            r.conv_in_exact,
            t.elapsed().as_secs_f64()
        );
        anyhow::ensure!(
            r.within(KERNEL_TOLERANCE, gated_tolerance),
            "the fused Gated DeltaNet front is off on {name}: {r:?} (tolerance {KERNEL_TOLERANCE:e}, gated {gated_tolerance:e})"
        );
    }
    println!("fused front within {KERNEL_TOLERANCE:e} of the float64 reference");
    Ok(())
}

/// Largest error of a kernel whose outputs are rounded to `dtype` (the add-norm and short-block
/// attention kernels) against float64, relative to the largest value, and of the add-norm
/// kernel against MLX's own add and rms_norm: float32's, and bf16's rounding (2^-8) with room
/// for one more rounding step.
fn rounded_output_tolerance(dtype: mlx_rs::Dtype) -> f64 {
    if dtype == mlx_rs::Dtype::Float32 { 1e-5 } else { 1e-2 }
}

/// The attention layers' q/k norm and RoPE kernel at the real heads: a B1 step, a B8 verify (8
/// rows of 2 positions at spread offsets) and a prefill block, in bf16 and float32. The float32
/// bound is looser than a product's: the angle is computed in float32, position x frequency.
fn check_qk_norm_rope() -> Result<()> {
    for (name, offsets, t) in [
        ("B1 step", vec![37], 1),
        ("B8 verify", (0..8).map(|r| 3 + 90 * r).collect(), 2),
        ("prefill block", vec![0], 64),
    ] {
        for dtype in [mlx_rs::Dtype::Bfloat16, mlx_rs::Dtype::Float32] {
            let (q, k) = crate::checks::qk_norm_rope_check::check(&offsets, t, dtype, true, 29)?;
            println!("q/k norm and RoPE kernel, {name} ({dtype:?}): queries {q:.2e}, keys {k:.2e}");
            let tol = if dtype == mlx_rs::Dtype::Float32 { 1e-4 } else { 1e-2 };
            anyhow::ensure!(
                q <= tol && k <= tol,
                "the q/k norm and RoPE kernel is off on {name} ({dtype:?}): queries {q:e}, keys {k:e} (tolerance {tol:e})"
            );
        }
    }
    Ok(())
}

/// The residual sum and norm kernel at the real hidden size, 2048: a B1 step, a B8 verify's 16
/// rows and a prefill block, in bf16 and float32.
fn check_add_norm() -> Result<()> {
    for (name, n) in [("B1 step", 1), ("B8 verify", 16), ("prefill block", 512)] {
        for dtype in [mlx_rs::Dtype::Bfloat16, mlx_rs::Dtype::Float32] {
            let r = crate::checks::add_norm_check::check(n, 2048, dtype, true, 13)?;
            println!(
                "add-norm kernel, {name} ({dtype:?}, {n} x 2048): sum {:.2e}, normed {:.2e}, against MLX's ops {:.2e}",
                r.sum, r.normed, r.against_ops
            );
            let tol = rounded_output_tolerance(dtype);
            anyhow::ensure!(
                r.sum <= tol && r.normed <= tol && r.against_ops <= tol,
                "the add-norm kernel is off on {name} ({dtype:?}): {r:?} (tolerance {tol:e})"
            );
        }
    }
    Ok(())
}

/// The short-block cohort attention kernel at the real geometry's attention heads, B8 rows at the
/// start, middle and end of a 1024-position buffer and of a 4,608-position one (rows past one
/// segment of keys take the split launch), against float64.
fn check_short_attention() -> Result<()> {
    use crate::checks::attention_check::{Shape, check};
    for (queries, base) in [(2, Shape::REAL), (1, Shape::REAL), (2, Shape::REAL_LONG), (1, Shape::REAL_LONG)] {
        for dtype in [mlx_rs::Dtype::Bfloat16, mlx_rs::Dtype::Float32] {
            let s = Shape { queries, ..base };
            let offsets: Vec<i32> = (0..8).map(|r| r * (s.capacity - queries) / 7).collect();
            let error = check(s, &offsets, dtype, true, 17)?;
            println!(
                "short-block attention kernel, {queries} queries a row, {} positions ({dtype:?}): relative error {error:.2e}",
                s.capacity
            );
            let tol = rounded_output_tolerance(dtype);
            anyhow::ensure!(error <= tol, "the short-block attention kernel is off by {error:.2e} (tolerance {tol:e})");
        }
    }
    Ok(())
}

/// Largest score error the router kernel may show against the float64 reference (its softmax
/// is float32 throughout).
const ROUTER_TOLERANCE: f64 = 1e-5;

/// The MoE router kernel at Qwen3.6-35B-A3B's 256 experts top-8: a B1 step, a B8 verify's 16
/// rows, and a stacked product with the shared expert gate's column after the experts'.
fn check_router() -> Result<()> {
    for (name, n, extra, dtype) in [
        ("B1 step", 1, 0, mlx_rs::Dtype::Bfloat16),
        ("B8 verify, stacked with the shared expert gate", 16, 1, mlx_rs::Dtype::Bfloat16),
        ("prefill block, float32", 512, 1, mlx_rs::Dtype::Float32),
    ] {
        let r = crate::checks::moe_check::check_router(n, 256, extra, 8, dtype, 11)?;
        println!(
            "router kernel, {name} ({dtype:?}, {n} tokens): experts as the reference's: {}, scores {:.2e}",
            r.indices_equal, r.scores
        );
        anyhow::ensure!(
            r.indices_equal && r.scores <= ROUTER_TOLERANCE,
            "the router kernel is off on {name}: {r:?} (tolerance {ROUTER_TOLERANCE:e})"
        );
    }
    println!("router kernel within {ROUTER_TOLERANCE:e} of the float64 reference, experts identical");
    Ok(())
}
