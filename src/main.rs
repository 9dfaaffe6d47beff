//! The `cohort` binary: the TUI by default, and headless commands for scripts (`cli::app`).

fn main() -> std::process::ExitCode {
    cohort::cli::app::main()
}
