//! The product's command line: the TUI by default, and headless commands for scripts. The lab's
//! binary (`cohort-lab`) runs these same commands beside its own, through `in_process`.

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::cli::{self, exit};
use crate::platform::backend::{self, RuntimeReport};
use crate::platform::paths::Paths;

#[derive(Parser)]
#[command(name = "cohort", about = "Chat with a local LLM in up to eight panes of one batched MTP cohort")]
#[command(disable_version_flag = true, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// Print cohort's version, the MLX version and the device in use.
    #[arg(short = 'V', long = "version")]
    pub version: bool,

    /// The TUI's options (the default command).
    #[command(flatten)]
    pub tui: crate::tui::TuiArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run requests from a JSONL file and write results as JSONL.
    Generate(cli::generate::GenerateArgs),
    /// Import a GGUF file (Llama family) as an MLX-format checkpoint.
    ImportGguf(cli::import::ImportArgs),
    /// Train an MTP head for a model that ships none (self-distillation, AdamW).
    TrainMtp(Box<cli::train::TrainArgs>),
    /// Describe a model directory: family, layers, quantization, size, MTP weights.
    Inspect(cli::inspect::InspectArgs),
    /// Measure whether a T=2 verify block equals two single steps (MTP exactness) and pick a route.
    Probe(cli::probe::ProbeArgs),
    /// Serve the engine over an OpenAI-compatible HTTP API, with /health and /metrics.
    Serve(Box<cli::serve::ServeArgs>),
    /// Print the folder cohort keeps models, transcripts and logs in.
    #[command(hide = true)]
    DataDir,
    /// Describe the MLX runtime (version, device, memory) and the routes the engine runs here.
    Device(cli::device::DeviceArgs),
}

/// The product binary's `main`: the process set up, the command line parsed and run.
pub fn main() -> ExitCode {
    float32_means_float32();
    let cli = Cli::parse();
    quiet_on_a_closed_pipe(prints_only(&cli));
    in_process(|paths| run(cli, paths))
}

/// Every binary's process around its command: the log, MLX's default device, the environment's
/// switches checked, a fatal error printed, and an exit that does not run MLX's destructors
/// under a thread still inside it. `float32_means_float32` must have run before (it is the first
/// thing a `main` does).
pub fn in_process(command: impl FnOnce(&Paths) -> Result<u8>) -> ExitCode {
    let code = match set_up().and_then(|(paths, _log)| command(&paths)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("cohort: error: {err:#}");
            exit::FATAL
        }
    };
    leave_mlx_running(code);
    ExitCode::from(code)
}

/// A model-owner thread still inside MLX when the process ends (the TUI quit while its model
/// loaded) crashed the exit: MLX's static destructors ran under it (SIGSEGV, "double free or
/// corruption", or a hang; issue 58). Everything of cohort's is written by now (transcripts,
/// the log, the terminal given back), so the process leaves without running them.
fn leave_mlx_running(code: u8) {
    if crate::engine::handle::owners_running() == 0 {
        return;
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    #[cfg(unix)]
    // SAFETY: _exit ends the process at once; nothing after it runs, and nothing of cohort's is
    // left unwritten (above).
    unsafe {
        libc::_exit(i32::from(code))
    }
}

/// MLX's CUDA backend runs float32 matmuls as TF32 unless `MLX_ENABLE_TF32=0`: on the H200
/// that moved float32 results by 2.5e-4 to 3e-4 of their size (docs/benchmarks.md, sessions 25
/// and 26), beyond what cohort's float32 checks allow. A float32 model here computes in float32;
/// `MLX_ENABLE_TF32=1` asks for TF32. bf16 models are unaffected.
pub fn float32_means_float32() {
    if std::env::var_os("MLX_ENABLE_TF32").is_none() {
        // SAFETY: the first thing main does, before any thread exists and before MLX reads it.
        unsafe { std::env::set_var("MLX_ENABLE_TF32", "0") };
    }
}

/// Commands that only print to stdout end as Unix tools do when their reader goes away (`cohort
/// inspect M | head -1`): killed quietly by SIGPIPE. Rust ignores SIGPIPE, so otherwise their
/// next print panics ("failed printing to stdout", exit 101). Not for the TUI, the server (a
/// closed socket must fail one write, not the process) or commands that handle their own output
/// (generate, the one-shot prompt).
pub fn quiet_on_a_closed_pipe(prints_only: bool) {
    #[cfg(unix)]
    if prints_only {
        unsafe extern "C" {
            fn signal(signum: i32, handler: usize) -> usize;
        }
        const SIGPIPE: i32 = 13; // Linux and macOS alike
        const SIG_DFL: usize = 0;
        // SAFETY: restores the default disposition of one signal, before any thread starts.
        unsafe { signal(SIGPIPE, SIG_DFL) };
    }
    #[cfg(not(unix))]
    let _ = prints_only;
}

fn prints_only(cli: &Cli) -> bool {
    cli.version
        || matches!(cli.command, Some(Command::Inspect(_) | Command::Probe(_) | Command::DataDir | Command::Device(_)))
}

/// The data folders, the log (its guard flushes it when the command ends) and MLX's device.
fn set_up() -> Result<(Paths, impl Sized)> {
    let paths = Paths::resolve()?;
    let log = crate::platform::logging::init(&paths.log_dir());
    mlx_rs::Device::set_default(&backend::default_device());
    Ok((paths, log))
}

fn run(cli: Cli, paths: &Paths) -> Result<u8> {
    if cli.version {
        let report = RuntimeReport::collect();
        println!(
            "cohort {} (MLX {}, {} on {})",
            report.cohort_version, report.mlx_version, report.device, report.backend
        );
        return Ok(exit::OK);
    }
    crate::model::switches::check_environment()?;
    match cli.command {
        // `cohort "prompt"`: one answer to stdout, then exit.
        None if cli.tui.prompt.is_some() => cli::oneshot::run(cli.tui, paths),
        None => crate::tui::run(cli.tui, paths).map(|()| exit::OK),
        Some(Command::Generate(args)) => cli::generate::run(args),
        Some(Command::ImportGguf(args)) => cli::import::run(args).map(|()| exit::OK),
        Some(Command::TrainMtp(args)) => cli::train::run(*args).map(|()| exit::OK),
        Some(Command::Inspect(args)) => cli::inspect::run(args).map(|()| exit::OK),
        Some(Command::Probe(args)) => cli::probe::run(args).map(|()| exit::OK),
        Some(Command::Serve(args)) => cli::serve::run(*args, paths).map(|()| exit::OK),
        Some(Command::DataDir) => {
            println!("{}", paths.data_dir.display());
            Ok(exit::OK)
        }
        Some(Command::Device(args)) => cli::device::run(args).map(|()| exit::OK),
    }
}
