//! `cohort-lab bench-step` refuses, before loading anything, an arm that forces one of cohort's CUDA
//! kernels on a backend without CUDA, and says which flag asked for it (instead of failing deep
//! inside a step, after minutes of building random weights); and it says which route the engine
//! would serve before timing it.

use crate::common;

use common::cohort_command;

#[test]
fn forcing_a_cuda_kernel_off_cuda_is_refused_by_name() {
    if cohort::platform::backend::Backend::detect() == cohort::platform::backend::Backend::Cuda {
        common::skip("forcing_a_cuda_kernel_off_cuda_is_refused_by_name", "this backend has the CUDA kernels");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    // Every arm the switch table marks as one of cohort's CUDA kernels.
    let flags: Vec<String> = cohort::model::switches::SWITCHES
        .iter()
        .filter(|s| s.cuda_only)
        .filter_map(|s| s.arm.map(|a| format!("--{}", a.flag)))
        .collect();
    assert!(flags.len() >= 8, "{flags:?}");
    for flag in &flags {
        let out = cohort_command(home.path())
            .args(["bench-step", "--synthetic", "qwen36-35b-a3b", flag, "on,off"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag} on ran: {stderr}");
        assert!(stderr.contains(&format!("{flag} on forces")) && stderr.contains("CUDA"), "{flag}: {stderr}");
    }
    // Off alone is the ops route, which every backend has: it gets past the check (and is cut
    // short here by an unknown geometry, which loads nothing).
    let out = cohort_command(home.path())
        .args(["bench-step", "--synthetic", "no-such-geometry", "--add-norm", "off"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("forces"), "{stderr}");
    assert!(stderr.contains("no-such-geometry"), "{stderr}");
}

/// bench-step times the route the engine would serve: it runs the exactness gate and the
/// construction check first and says what they kept, and labels the aggregate figures it
/// derives from one cycle as projections (issue 41); its B8 figures are the engine's own cycle
/// (engine::cycle), phase by phase (issue 36).
#[test]
fn bench_step_names_the_served_route_and_labels_projections() {
    let out = std::process::Command::new(common::cohort_bin())
        .args(["bench-step", "--synthetic", "qwen35-moe-small", "--layers", "2", "--vocab", "1024"])
        .args(["--prefill", "32", "--iters", "2"])
        .env("COHORT_HOME", tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let served =
        stdout.lines().find(|l| l.starts_with("route the engine serves: ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(served.contains("MTP exactness probe: Equal") && served.contains("B8 cohort batched"), "{served}");
    assert!(stdout.contains("projection (not measured): B8 aggregate"), "{stdout}");
    // The B8 figures are the engine's own cycle, phase by phase, and the same cycles untimed.
    for phase in ["owe history", "draft (M=8)", "verify (T=2, M=16", "decide", "commit", "all phases"] {
        assert!(
            stdout.contains(&format!("| B8 MTP cycle: {phase}"))
                || stdout.contains(&format!("| B8 MTP cycle, {phase}")),
            "{phase}: {stdout}"
        );
    }
    assert!(stdout.contains("B8 MTP cohort as the engine serves it (untimed cycles): "), "{stdout}");
    assert!(!stdout.contains("  projected B8"), "an unlabelled projection: {stdout}");
}

/// Counts the machine cannot hold, or that measure nothing, are refused by name before anything
/// loads (issue 37: `--prefill 18446744073709551615` aborted on a 17 GB allocation; `--iters 0`
/// reported "0 tok/s (measured)").
#[test]
fn impossible_counts_are_refused_by_name() {
    for (flag, value) in
        [("--prefill", "18446744073709551615"), ("--prefill", "0"), ("--iters", "0"), ("--iters", "1000000")]
    {
        let out = std::process::Command::new(common::cohort_bin())
            .args(["bench-step", "--synthetic", "qwen35-moe-small", "--layers", "1", flag, value])
            .env("COHORT_HOME", tempfile::tempdir().unwrap().path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains("must be a whole number from 1 to"),
            "{flag} {value}: {stderr}"
        );
    }
}
