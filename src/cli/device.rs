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
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DeviceArgs) -> Result<()> {
    let report = RuntimeReport::collect();
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
