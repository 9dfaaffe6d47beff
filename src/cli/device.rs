//! `cohort device`: the MLX runtime, its memory, and the routes the engine runs here. The lab's
//! `cohort-lab device` adds matmul, linear and attention timings and the kernels' float64 checks.

use anyhow::Result;
use clap::Args;

use crate::platform::backend::{self as runtime, RuntimeReport};

#[derive(Args)]
pub struct DeviceArgs {
    /// List the routes the engine runs here (every route choice, built once from the backend's
    /// defaults and the environment's switches) and every other switch it reads: each value, where
    /// it came from (set or default) and what it does.
    #[arg(long, alias = "switches")]
    pub routes: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DeviceArgs) -> Result<()> {
    if args.routes {
        let backend = runtime::Backend::detect();
        print!("{}", crate::model::routes::listing(&crate::model::routes::Routes::from_env(backend)?, backend));
        return Ok(());
    }
    let report = RuntimeReport::collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "runtime": report }))?);
    } else {
        println!("{report}");
    }
    Ok(())
}
