//! The `cohort-lab` binary: the lab's commands (benchmarks, step timings, device timings and
//! kernel checks, the probe on synthetic weights) and, for anything else, `cohort`'s own command
//! line, so one staged binary runs every GPU recipe.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cohort::cli::app;
use cohort::cli::exit;

#[derive(Parser)]
#[command(name = "cohort-lab", about = "cohort's lab: benchmarks, step timings, device timings and kernel checks")]
#[command(after_help = "Every other command (serve, generate, inspect, ...) is cohort's own: see `cohort --help`.")]
struct Lab {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand)]
enum LabCommand {
    /// The serial-vs-cohort benchmark (8 marker prompts, seeds 4200-4207, paired rounds).
    Bench(cohort_lab::bench::BenchArgs),
    /// Time one step (prefill, B1 AR, the B8 cycle's phases) against its bandwidth floor.
    BenchStep(Box<cohort_lab::bench_step::BenchStepArgs>),
    /// `cohort device`, plus matmul, linear and attention timings and the kernels' float64 checks.
    Device(cohort_lab::device::DeviceArgs),
    /// `cohort probe`, plus synthetic weights at a named geometry and the routes' costs.
    Probe(cohort_lab::probe::ProbeArgs),
}

/// The names `LabCommand` answers to (and help); every other first argument is `cohort`'s.
const LAB_COMMANDS: [&str; 7] = ["bench", "bench-step", "device", "probe", "help", "--help", "-h"];

fn main() -> ExitCode {
    app::float32_means_float32();
    let first = std::env::args().nth(1).unwrap_or_default();
    if !LAB_COMMANDS.contains(&first.as_str()) {
        return app::main();
    }
    let lab = Lab::parse();
    app::quiet_on_a_closed_pipe(matches!(lab.command, LabCommand::Device(_) | LabCommand::Probe(_)));
    app::in_process(|_paths| {
        cohort_core::model::switches::check_environment()?;
        match lab.command {
            LabCommand::Bench(args) => cohort_lab::bench::run(args),
            LabCommand::BenchStep(args) => cohort_lab::bench_step::run(*args),
            LabCommand::Device(args) => cohort_lab::device::run(args),
            LabCommand::Probe(args) => cohort_lab::probe::run(args),
        }
        .map(|()| exit::OK)
    })
}
