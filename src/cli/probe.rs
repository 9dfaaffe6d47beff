//! `cohort probe`: the MTP exactness verdict for a model, the route the gate picks, its cost.

use anyhow::{Result, bail};
use clap::Args;

use super::model_args::ModelArgs;
use crate::engine::probe;

#[derive(Args)]
pub struct ProbeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let loaded = args.model.load()?;
    if !loaded.model.has_mtp() {
        bail!("{} has no MTP weights: nothing to probe", loaded.dir.display());
    }
    let decision = probe::gate(loaded.model.as_ref(), allow_inexact())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&decision)?);
        return Ok(());
    }
    println!("{}", decision.summary);
    for r in &decision.reports {
        println!(
            "  route {:?}: {:?}; {} of {} logits differ (max |diff| {:.3e}); block {:.2} ms, chain {:.2} ms",
            r.route, r.verdict, r.differing_logits, r.compared_logits, r.max_abs_diff, r.block_ms, r.chain_ms
        );
    }
    println!("MTP {}; linear route {:?}", if decision.mtp_allowed { "allowed" } else { "declined" }, decision.route);
    Ok(())
}

/// `COHORT_MTP_ALLOW_INEXACT=1` keeps MTP on the fast batched route whatever the probe finds
/// (it still runs and reports the difference).
pub fn allow_inexact() -> bool {
    std::env::var("COHORT_MTP_ALLOW_INEXACT").is_ok_and(|v| v == "1")
}
