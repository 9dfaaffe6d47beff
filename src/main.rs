//! The `cohort` command line: the TUI by default, and headless commands for scripts.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use cohort::config::paths::Paths;
use cohort::engine::runtime::{self, RuntimeReport};

#[derive(Parser)]
#[command(name = "cohort", about = "Chat with a local LLM in up to eight panes of one batched MTP cohort")]
#[command(disable_version_flag = true)]
struct Cli {
    /// Print cohort's version, the MLX version and the device in use.
    #[arg(short = 'V', long = "version")]
    version: bool,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Describe the MLX runtime (version, device, memory) and optionally time matrix products.
    Device(DeviceArgs),
}

#[derive(Args)]
struct DeviceArgs {
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

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("cohort: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let paths = Paths::resolve()?;
    let _log_guard = cohort::logging::init(&paths.log_dir())?;
    mlx_rs::Device::set_default(&runtime::default_device());
    if cli.version {
        let report = RuntimeReport::collect();
        println!(
            "cohort {} (MLX {}, {} on {})",
            report.cohort_version, report.mlx_version, report.device, report.backend
        );
        return Ok(());
    }
    match cli.command {
        None => {
            // The TUI arrives with the cohort engine; until then the default command reports
            // what it would run on.
            println!("{}", RuntimeReport::collect());
            Ok(())
        }
        Some(Command::Device(args)) => device(args),
    }
}

fn device(args: DeviceArgs) -> Result<()> {
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
