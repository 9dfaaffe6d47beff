//! `cohort probe`: the MTP exactness verdict for a model, the route the gate picks, its cost, and
//! the construction check of the batched cohort on that route (every row of a packed B2..B8
//! verify against the row alone).

use anyhow::{Result, bail};
use clap::Args;

use crate::config::model_args::ModelArgs;
use crate::engine::construction::check_batched;
use crate::engine::probe;
use crate::engine::scheduler::Numerics;
use crate::model::forward::LanguageModel;

#[derive(Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What the probe found: the gate's verdict, the cohort's construction check, and whether a
/// prompt read split anywhere gives the bits of a whole read (what makes the prompt cache exact).
#[derive(serde::Serialize)]
pub struct ProbeReport {
    #[serde(flatten)]
    pub decision: probe::GateDecision,
    pub construction: Option<crate::engine::telemetry::ConstructionCheck>,
    pub split_read: crate::engine::prompt_cache::check::SplitCheck,
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let loaded = args.model.load()?;
    let report = probe_model(loaded.model.as_ref(), &loaded.dir.display().to_string())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

/// The gate, the construction check and the split-read check on one loaded model (`name` says
/// which in errors).
pub fn probe_model(model: &dyn LanguageModel, name: &str) -> Result<ProbeReport> {
    if !model.has_mtp() {
        bail!("{name} has no MTP weights: nothing to probe");
    }
    let mut decision = probe::gate(model, probe::allow_inexact())?;
    let construction = if decision.mtp_allowed {
        let batched = decision.batched_route();
        let widths: Vec<usize> = (2..=crate::engine::cohort::FIXED_WIDTH).collect();
        let route = Numerics::Throughput.route_id_at("probe", crate::engine::cohort::FIXED_WIDTH);
        let choice = check_batched(model, Numerics::Throughput, batched, &route, &widths)?;
        if let Some(note) = choice.note {
            decision.summary = format!("{}; {note}", decision.summary);
            decision.route = choice.route;
        }
        Some(choice.check)
    } else {
        None
    };
    let chunk = crate::engine::scheduler::Preset::Throughput.config().prefill_chunk;
    // Under the gate's verdict, as the engine reads prompts once it has chosen.
    let split_read = crate::model::routes::scoped(model.routes().with_gate(decision.route), || {
        crate::engine::prompt_cache::check::split_read_check(model, chunk)
    })?;
    Ok(ProbeReport { decision, construction, split_read })
}

pub fn print_report(report: &ProbeReport) {
    let decision = &report.decision;
    println!("{}", decision.summary);
    for r in &decision.reports {
        println!(
            "  route {:?}: {:?}; {} of {} logits differ (max |diff| {:.3e}); block {:.2} ms, chain {:.2} ms",
            r.route, r.verdict, r.differing_logits, r.compared_logits, r.max_abs_diff, r.block_ms, r.chain_ms
        );
    }
    println!("MTP {}; block route {:?}", if decision.mtp_allowed { "allowed" } else { "declined" }, decision.route);
    if let Some(c) = &report.construction {
        println!(
            "construction check, throughput cohort at widths 2-{}: max |B - B1| {:.3e} (bound {:.3e}): {}",
            crate::engine::cohort::FIXED_WIDTH,
            c.max_abs_diff,
            c.bound,
            if c.passed { "served batched" } else { "refused: cohorts run b1-exact serial" }
        );
    }
    match &report.split_read.difference {
        None => println!("prompt reads split anywhere give the bits of whole reads: the prompt cache is exact"),
        Some(d) => {
            println!("prompt reads depend on where they split ({d}): the prompt cache serves only if allowed inexact")
        }
    }
}
