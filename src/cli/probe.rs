//! `cohort probe`: the MTP exactness verdict for a model, the route the gate picks, its cost, and
//! the construction check of the batched cohort on that route (every row of a packed B2..B8
//! verify against the row alone).

use anyhow::{Result, bail};
use clap::Args;

use super::model_args::ModelArgs;
use crate::engine::construction::check_batched;
use crate::engine::probe;
use crate::engine::scheduler::Numerics;
use crate::model::forward::LanguageModel;
use crate::model::routes::BlockRoute;

#[derive(Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    model: ModelArgs,
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
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct ProbeOutput {
    #[serde(flatten)]
    decision: probe::GateDecision,
    construction: Option<crate::engine::telemetry::ConstructionCheck>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    route_costs: Vec<crate::engine::route_cost::RouteCost>,
    /// Whether a prompt read split anywhere gives the bits of a whole read (what makes the
    /// prompt cache exact).
    split_read: crate::engine::prompt_cache::check::SplitCheck,
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let (model, name): (Box<dyn LanguageModel>, String) = match &args.synthetic {
        Some(g) => {
            let dtype = match &args.model.dtype {
                Some(d) => crate::model::load::parse_dtype(d)?,
                None => crate::model::load::default_dtype(),
            };
            let cfg = crate::model::synth::geometry(g, args.layers, args.vocab)?;
            let mut w = crate::model::synth::make_weights(&cfg, dtype, 7)?;
            let model = crate::model::families::qwen3_5::Qwen35Model::from_weights(cfg, &mut w, dtype)?;
            (Box::new(model), format!("synthetic {g}"))
        }
        None => {
            let loaded = args.model.load()?;
            (loaded.model, loaded.dir.display().to_string())
        }
    };
    if !model.has_mtp() {
        bail!("{name} has no MTP weights: nothing to probe");
    }
    let mut decision = probe::gate(model.as_ref(), probe::allow_inexact())?;
    let construction = if decision.mtp_allowed {
        let batched = decision.batched_route();
        let widths: Vec<usize> = (2..=crate::engine::cohort::FIXED_WIDTH).collect();
        let route = Numerics::Throughput.route_id_at("probe", crate::engine::cohort::FIXED_WIDTH);
        let choice = check_batched(model.as_ref(), Numerics::Throughput, batched, &route, &widths)?;
        if let Some(note) = choice.note {
            decision.summary = format!("{}; {note}", decision.summary);
            decision.route = choice.route;
        }
        Some(choice.check)
    } else {
        None
    };
    let route_costs = match args.time_routes {
        Some(reps) => {
            let mut routes = vec![BlockRoute::Batched];
            if decision.route != BlockRoute::Batched {
                routes.push(decision.route);
            }
            crate::engine::route_cost::time_routes(
                model.as_ref(),
                &routes,
                crate::engine::cohort::FIXED_WIDTH,
                reps as usize,
            )?
        }
        None => Vec::new(),
    };
    let chunk = crate::engine::scheduler::Preset::Throughput.config().prefill_chunk;
    // Under the gate's verdict, as the engine reads prompts once it has chosen.
    let split_read = crate::model::routes::scoped(model.routes().with_gate(decision.route), || {
        crate::engine::prompt_cache::check::split_read_check(model.as_ref(), chunk)
    })?;
    if args.json {
        let out = ProbeOutput { decision, construction, route_costs, split_read };
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("{}", decision.summary);
    for r in &decision.reports {
        println!(
            "  route {:?}: {:?}; {} of {} logits differ (max |diff| {:.3e}); block {:.2} ms, chain {:.2} ms",
            r.route, r.verdict, r.differing_logits, r.compared_logits, r.max_abs_diff, r.block_ms, r.chain_ms
        );
    }
    println!("MTP {}; block route {:?}", if decision.mtp_allowed { "allowed" } else { "declined" }, decision.route);
    if let Some(c) = construction {
        println!(
            "construction check, throughput cohort at widths 2-{}: max |B - B1| {:.3e} (bound {:.3e}): {}",
            crate::engine::cohort::FIXED_WIDTH,
            c.max_abs_diff,
            c.bound,
            if c.passed { "served batched" } else { "refused: cohorts run b1-exact serial" }
        );
    }
    match &split_read.difference {
        None => println!("prompt reads split anywhere give the bits of whole reads: the prompt cache is exact"),
        Some(d) => {
            println!("prompt reads depend on where they split ({d}): the prompt cache serves only if allowed inexact")
        }
    }
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
