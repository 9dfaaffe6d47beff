//! `cohort device`: the MLX runtime, memory, and matmul timings.

use anyhow::Result;
use clap::Args;

use crate::engine::runtime::{self, RuntimeReport};

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
    /// Check the fused Gated DeltaNet kernel (CUDA only) and the plain-ops recurrence against a
    /// float64 reference at the real Qwen3.6 geometry; exits 1 when one is off by more than 1e-4.
    #[arg(long)]
    check_kernels: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DeviceArgs) -> Result<()> {
    if args.check_kernels {
        return check_kernels();
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
        for t in runtime::time_linear(k, n, &[1, 2, 4, 8, 9, 12, 16, 24, 32, 64, 128], 8, args.iters)? {
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
    let report = RuntimeReport::collect();
    if let Some(n) = args.matmul {
        // Two float32 operands and the product.
        let bytes = 3 * (n.max(0) as u64).pow(2) * 4;
        crate::engine::memory_guard::ensure_fits(bytes, &format!("a {n} x {n} float32 matmul"))?;
    }
    let figures = match args.matmul {
        Some(n) => vec![
            runtime::time_matmul(n, mlx_rs::Dtype::Float32, args.iters)?,
            runtime::time_matmul(n, mlx_rs::Dtype::Bfloat16, args.iters)?,
        ],
        None => Vec::new(),
    };
    if args.json {
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
    for t in crate::model::attention_timing::time_attention(heads, kv_heads, d, &cases, iters)? {
        println!("{:4} | {} | {:5} | {:8.3} | {:8.3}", t.rows, t.t, t.context, t.min_ms, t.median_ms);
    }
    Ok(())
}

/// Largest relative error a recurrence route may show against the float64 reference.
const KERNEL_TOLERANCE: f64 = 1e-4;

fn check_kernels() -> Result<()> {
    use crate::model::gdn_check::{Route, check, real_geometries};
    let dtype = crate::model::load::default_dtype();
    let mut routes = vec![Route::Ops];
    if runtime::Backend::detect() == runtime::Backend::Cuda {
        routes.insert(0, Route::Kernel);
    } else {
        println!("fused Gated DeltaNet kernel: not available on this backend (the plain-ops route serves)");
    }
    let mut worst: f64 = 0.0;
    for route in routes {
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
    }
    anyhow::ensure!(
        worst <= KERNEL_TOLERANCE,
        "a recurrence route is off by {worst:.2e} (tolerance {KERNEL_TOLERANCE:e})"
    );
    println!("all routes within {KERNEL_TOLERANCE:e} of the float64 reference");
    Ok(())
}
