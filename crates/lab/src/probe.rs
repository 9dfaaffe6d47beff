//! `cohort-lab probe`: `cohort probe` on a model folder or on random weights at a named geometry
//! (made on the device, no checkpoint needed), and optionally the cost of each route it kept.

use anyhow::Result;
use clap::Args;
use cohort::cli::probe::{ProbeReport, print_report, probe_model};
use cohort_core::engine::cohort::FIXED_WIDTH;
use cohort_core::model::forward::LanguageModel;
use cohort_core::model::routes::BlockRoute;

use crate::route_cost::{RouteCost, time_routes};

#[derive(Args)]
pub struct ProbeArgs {
    /// The product's own `probe` flags (`-m`, `--dtype`, `--weights`, `--json`).
    #[command(flatten)]
    product: cohort::cli::probe::ProbeArgs,
    /// Probe random weights at a named geometry instead of a model folder (`qwen36-35b-a3b`),
    /// made on the device: no tokenizer needed (`qwen35-moe-small`: the same
    /// blocks at a small width).
    #[arg(long, value_name = "GEOMETRY", conflicts_with = "model")]
    synthetic: Option<String>,
    /// Decoder layers of the synthetic model (default: the geometry's).
    #[arg(long, requires = "synthetic")]
    layers: Option<i32>,
    /// Vocabulary of the synthetic model (default: the geometry's).
    #[arg(long, requires = "synthetic")]
    vocab: Option<i32>,
    /// Also time a packed verify block and a single-token step at the cohort's width on the
    /// batched route and on the route the gate kept, in turns (median of N turns each, 1-10,000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    time_routes: Option<u64>,
}

#[derive(serde::Serialize)]
struct LabProbeReport {
    #[serde(flatten)]
    report: ProbeReport,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    route_costs: Vec<RouteCost>,
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let (model, name): (Box<dyn LanguageModel>, String) = match &args.synthetic {
        Some(g) => {
            let dtype = match &args.product.model.dtype {
                Some(d) => cohort_core::model::load::parse_dtype(d)?,
                None => cohort_core::model::load::default_dtype(),
            };
            let cfg = crate::synth::geometry(g, args.layers, args.vocab)?;
            let mut w = crate::synth::make_weights(&cfg, dtype, 7)?;
            let model = cohort_core::model::families::qwen3_5::Qwen35Model::from_weights(cfg, &mut w, dtype)?;
            (Box::new(model), format!("synthetic {g}"))
        }
        None => {
            let loaded = args.product.model.load()?;
            (loaded.model, loaded.dir.display().to_string())
        }
    };
    let report = probe_model(model.as_ref(), &name)?;
    let route_costs = match args.time_routes {
        Some(reps) => {
            let mut routes = vec![BlockRoute::Batched];
            if report.decision.route != BlockRoute::Batched {
                routes.push(report.decision.route);
            }
            time_routes(model.as_ref(), &routes, FIXED_WIDTH, reps as usize)?
        }
        None => Vec::new(),
    };
    if args.product.json {
        println!("{}", serde_json::to_string_pretty(&LabProbeReport { report, route_costs })?);
        return Ok(());
    }
    print_report(&report);
    if let Some(fast) = route_costs.first() {
        for c in &route_costs {
            println!(
                "  {:?} at B{}: verify (T=2) {:.3} ms ({:.2}x batched; handed to the device by {:.3} ms), step (T=1) {:.3} ms ({:.2}x batched; handed by {:.3} ms)",
                c.route,
                c.width,
                c.verify_ms,
                c.verify_ms / fast.verify_ms,
                c.verify_handed_ms,
                c.step_ms,
                c.step_ms / fast.step_ms,
                c.step_handed_ms
            );
        }
    }
    Ok(())
}
