//! Runs a list of checks and says what each one did: passed, failed (and why), or skipped
//! because this backend cannot run it. A skipped check is never counted as passed, and a run in
//! which nothing could be checked is an error, not a success.

use anyhow::{Result, bail};
use cohort_core::platform::backend::Backend;

/// Where a check can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Any backend MLX drives (the float64 references of the ops routes, the CPU's kernels).
    AnyBackend,
    /// MLX on CUDA: the check launches cohort's CUDA kernels.
    Cuda,
}

impl Needs {
    fn met_by(self, backend: Backend) -> bool {
        match self {
            Needs::AnyBackend => true,
            Needs::Cuda => backend == Backend::Cuda,
        }
    }
}

/// One named check: it returns an error naming what is off.
pub struct Check<'a> {
    name: String,
    needs: Needs,
    run: Box<dyn Fn() -> Result<()> + 'a>,
}

impl<'a> Check<'a> {
    pub fn new(name: impl Into<String>, needs: Needs, run: impl Fn() -> Result<()> + 'a) -> Self {
        Self { name: name.into(), needs, run: Box::new(run) }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Passed,
    Failed(String),
    Skipped(String),
}

/// Every check's outcome, in the order they ran.
#[derive(Debug, Default)]
pub struct Summary {
    pub outcomes: Vec<(String, Outcome)>,
}

impl Summary {
    fn count(&self, pick: fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|(_, o)| pick(o)).count()
    }

    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Passed))
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Failed(_)))
    }

    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Skipped(_)))
    }

    /// One line: how many passed, failed and were skipped.
    pub fn line(&self) -> String {
        format!("{} passed, {} failed, {} skipped (not supported here)", self.passed(), self.failed(), self.skipped())
    }

    /// An error naming the failed checks, or naming the backend when none could run.
    pub fn into_result(self, what: &str, backend: Backend) -> Result<()> {
        let failed: Vec<String> = self
            .outcomes
            .iter()
            .filter_map(|(name, o)| match o {
                Outcome::Failed(why) => Some(format!("{name}: {why}")),
                _ => None,
            })
            .collect();
        if !failed.is_empty() {
            bail!("{what}: {}; failed: {}", self.line(), failed.join("; "));
        }
        if self.passed() == 0 {
            bail!("{what}: nothing could be checked on this backend ({backend:?}): {}", self.line());
        }
        Ok(())
    }
}

/// Runs each check whose needs `backend` meets and prints its outcome as it ends; every check
/// runs, so one failing family does not hide the others' results.
pub fn run(checks: Vec<Check<'_>>, backend: Backend) -> Summary {
    let mut summary = Summary::default();
    for check in checks {
        let outcome = if !check.needs.met_by(backend) {
            let why = format!("needs MLX on CUDA (this backend: {backend:?})");
            println!("SKIPPED {}: {why}", check.name);
            Outcome::Skipped(why)
        } else {
            match (check.run)() {
                Ok(()) => Outcome::Passed,
                Err(e) => {
                    println!("FAILED {}: {e:#}", check.name);
                    Outcome::Failed(format!("{e:#}"))
                }
            }
        };
        summary.outcomes.push((check.name, outcome));
    }
    println!("{}", summary.line());
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checks() -> Vec<Check<'static>> {
        vec![
            Check::new("holds", Needs::AnyBackend, || Ok(())),
            Check::new("off", Needs::AnyBackend, || bail!("off by 1e-2")),
            Check::new("kernel", Needs::Cuda, || Ok(())),
        ]
    }

    #[test]
    fn a_check_this_backend_cannot_run_is_skipped_never_passed() {
        let s = run(checks(), Backend::Cpu);
        assert_eq!(s.outcomes[2].1, Outcome::Skipped("needs MLX on CUDA (this backend: Cpu)".into()));
        assert_eq!((s.passed(), s.failed(), s.skipped()), (1, 1, 1));
        let cuda = run(checks(), Backend::Cuda);
        assert_eq!((cuda.passed(), cuda.failed(), cuda.skipped()), (2, 1, 0));
    }

    #[test]
    fn a_failure_is_named_and_the_checks_after_it_still_run() {
        let s = run(checks(), Backend::Cuda);
        assert_eq!(s.outcomes[1].1, Outcome::Failed("off by 1e-2".into()));
        let err = s.into_result("kernel checks", Backend::Cuda).unwrap_err().to_string();
        assert!(err.contains("off: off by 1e-2") && err.contains("2 passed, 1 failed"), "{err}");
    }

    #[test]
    fn nothing_checked_is_an_error_not_a_pass() {
        let only_cuda = vec![Check::new("kernel", Needs::Cuda, || Ok(()))];
        let err = run(only_cuda, Backend::Cpu).into_result("invariance", Backend::Cpu).unwrap_err().to_string();
        assert!(err.contains("nothing could be checked") && err.contains("Cpu"), "{err}");
        let fine = vec![Check::new("holds", Needs::AnyBackend, || Ok(()))];
        assert!(run(fine, Backend::Cpu).into_result("x", Backend::Cpu).is_ok());
    }
}
