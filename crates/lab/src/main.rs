//! The `cohort-lab` binary: the lab's commands (benchmarks, step timings, device timings and
//! kernel checks, the probe on synthetic weights) and, for anything else, `cohort`'s own command
//! line, so one staged binary runs every GPU recipe.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
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

/// Whether the lab's command line answers `first` (one of `LabCommand`'s names, or help); every
/// other first argument is `cohort`'s.
fn is_lab_command(first: &str) -> bool {
    matches!(first, "help" | "--help" | "-h") || Lab::command().get_subcommands().any(|c| c.get_name() == first)
}

fn main() -> ExitCode {
    app::float32_means_float32();
    if !is_lab_command(&std::env::args().nth(1).unwrap_or_default()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks over the whole lab command line: the route arms' flags,
    /// made from the switch table at run time, collide with no other flag, and every
    /// `conflicts_with` names an argument that exists.
    #[test]
    fn the_lab_command_line_is_consistent_and_answers_to_its_commands() {
        Lab::command().debug_assert();
        for name in ["bench", "bench-step", "device", "probe", "--help"] {
            assert!(is_lab_command(name), "{name}");
        }
        for name in ["serve", "generate", ""] {
            assert!(!is_lab_command(name), "{name}");
        }
    }
}
