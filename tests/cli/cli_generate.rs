//! `cohort generate` as a script sees it: bad lines fail alone with a message naming the line and
//! the setting and keep their id, good lines still run, the exit code says which happened,
//! requests are read as they arrive and results written as each ends, an unwritable output is
//! refused before any model work, and an interrupted run keeps every finished result.

use crate::common;

use std::io::Write;
use std::process::Command;

use common::{cohort_command, fixture, fixture_copy, results_by_id, with_default_sigint};

fn cohort() -> Command {
    cohort_command(&std::env::temp_dir().join("cohort-cli-tests"))
}

/// `cohort generate` on the MoE fixture from `input` into `output`.
fn generate_into(input: &std::path::Path, output: &std::path::Path) -> Command {
    let mut cmd = cohort();
    cmd.args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(input).arg("-o").arg(output);
    cmd
}

/// `cohort generate` on the MoE fixture over `lines`: the result of each of `ids`, in that order.
fn results_of_lines(lines: &[String], ids: &[&str]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = cohort().args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output().unwrap();
    results_by_id(&out.stdout, ids)
}

/// `cohort generate` on the MoE fixture reading `input`, with `var` set to `value`.
fn generate_under(var: &str, value: &str, input: &std::path::Path) -> std::process::Output {
    cohort()
        .env(var, value)
        .args(["generate", "-m"])
        .arg(fixture("qwen35_moe_4bit"))
        .arg("-i")
        .arg(input)
        .output()
        .unwrap()
}

#[test]
fn bad_lines_fail_alone_and_the_exit_code_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    let long_prompt: Vec<u32> = vec![5; 5000];
    writeln!(f, r#"{{"id":"ok","prompt":"The boat","max_tokens":5,"temperature":0}}"#).unwrap();
    writeln!(f, "{{not json").unwrap();
    f.write_all(b"{\"id\":\"bad-utf8\",\"prompt\":\"\xff\xfe\"}\n").unwrap();
    writeln!(f, r#"{{"id":"empty","prompt":""}}"#).unwrap();
    writeln!(f, r#"{{"id":"hot","prompt":"x","temperature":-1}}"#).unwrap();
    writeln!(f, r#"{{"id":"topk","prompt":"x","top_k":5000}}"#).unwrap();
    writeln!(f, r#"{{"id":"unknown","prompt":"x","temprature":0.5}}"#).unwrap();
    writeln!(f, "{}", serde_json::json!({"id": "huge", "prompt_ids": long_prompt})).unwrap();
    writeln!(f, r#"{{"id":"budget","prompt":"x","max_tokens":100000}}"#).unwrap();
    writeln!(f, r#"{{"id":"oov","prompt_ids":[1,2,99999]}}"#).unwrap();
    writeln!(f, r#"{{"id":"ok2","prompt":"A heron","max_tokens":4,"temperature":0}}"#).unwrap();
    drop(f);
    let out = cohort().args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    // Refused lines keep the id they name (even a line that is not UTF-8); lines that name none
    // are line-N.
    let ids = ["ok", "line-2", "bad-utf8", "empty", "hot", "topk", "unknown", "huge", "budget", "oov", "ok2"];
    let r = results_by_id(&out.stdout, &ids);
    let err = |i: usize| r[i]["error"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r[0]["finish_reason"], "length");
    assert!(err(1).contains("line 2"), "{}", err(1));
    assert!(err(2).contains("line 3") && err(2).contains("UTF-8"), "{}", err(2));
    assert!(err(3).contains("empty"), "{}", err(3));
    assert!(err(4).contains("temperature"), "{}", err(4));
    assert!(err(5).contains("top_k"), "{}", err(5));
    assert!(err(6).contains("temprature"), "{}", err(6));
    assert!(err(7).contains("context window"), "{}", err(7));
    assert!(err(8).contains("max_tokens") && err(8).contains("context window"), "{}", err(8));
    assert!(err(9).contains("99999") && err(9).contains("vocabulary"), "{}", err(9));
    assert_eq!(r[10]["finish_reason"], "length");
    for (i, x) in r.iter().enumerate().skip(1).take(9) {
        assert_eq!(x["finish_reason"], "error", "line {}", i + 1);
    }
}

#[test]
fn a_model_that_cannot_load_exits_1_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\"}\n").unwrap();
    let out = cohort().args(["generate", "-m", "/nonexistent/model", "-i"]).arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/model"));
}

#[test]
fn a_tokenizer_that_does_not_fit_the_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = fixture_copy("qwen35_moe_4bit", dir.path());
    // The fixture's tokenizer with 100 more (added) tokens than the model's 512-entry vocabulary.
    let mut tok: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("tokenizer.json")).unwrap()).unwrap();
    let added = tok["added_tokens"].as_array_mut().unwrap();
    for i in 0..100 {
        added.push(
            serde_json::json!({"id": 512 + i, "content": format!("<extra_{i}>"), "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": true}),
        );
    }
    std::fs::write(model.join("tokenizer.json"), tok.to_string()).unwrap();
    let out = cohort().args(["inspect", "-m"]).arg(&model).output().unwrap();
    assert!(out.status.success(), "inspect only reads the config");
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\"}\n").unwrap();
    let out = cohort().args(["generate", "-m"]).arg(&model).arg("-i").arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tokenizer") && stderr.contains("vocabulary"), "{stderr}");
}

#[test]
fn inspect_reports_the_weight_policy_auto_picks_here() {
    let out = cohort().args(["inspect", "--json", "-m"]).arg(fixture("qwen35_moe_4bit")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu = cohort::platform::backend::Backend::detect() == cohort::platform::backend::Backend::Cpu;
    let want = match (cpu, cohort::model::cpu::cpu_qmm::simd_available()) {
        (false, _) => "quantized",
        (true, true) => "kernel",
        (true, false) => "dequantize",
    };
    assert_eq!(json["weights_auto"], want, "a small quantized model");
}

/// What `cohort device` prints with `var` set to `value` (removed for None).
fn device_report(var: &str, value: Option<&str>) -> String {
    let mut c = cohort();
    c.arg("device");
    match value {
        Some(v) => c.env(var, v),
        None => c.env_remove(var),
    };
    let out = c.output().unwrap();
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The CPU backend's products run on OpenBLAS kernels that use the CPU's vector units: where
/// OpenBLAS took a CPU with AVX2 or AVX-512 for one without AVX (a VM hiding the CPU's model made
/// it pick its SSE3 "Prescott" kernels, 5x slower), cohort starts again with the kernels named;
/// a choice the user made with OPENBLAS_CORETYPE stands. `cohort device` says which run.
#[test]
fn openblas_runs_kernels_that_use_the_cpus_vector_units() {
    use cohort::platform::blas::{CpuFeatures, better_kernels};
    let device = |coretype: Option<&str>| {
        let stdout = device_report("OPENBLAS_CORETYPE", coretype);
        let line = stdout.lines().find(|l| l.starts_with("BLAS")).map(str::to_owned);
        (line, stdout)
    };
    let (line, stdout) = device(None);
    let Some(line) = line else {
        common::skip(
            "cli_generate (OpenBLAS kernels)",
            &format!("the products do not go through OpenBLAS here:\n{stdout}"),
        );
        return;
    };
    let kernels = line.split_whitespace().nth(2).unwrap_or_default().to_owned();
    assert_eq!(better_kernels(&kernels, CpuFeatures::detect()), None, "{line}: kernels without AVX on this CPU");
    // The test process links the same start-up code.
    assert_eq!(cohort::platform::blas::kernels().as_deref(), Some(kernels.as_str()), "this test process");
    let (chosen, stdout) = device(Some("Prescott"));
    assert!(chosen.is_some_and(|l| l.contains("OpenBLAS Prescott kernels")), "the user's choice stands:\n{stdout}");
}

/// A float32 model computes in float32 unless TF32 is asked for: `main` turns MLX's TF32 default
/// off before MLX first reads it (on MLX CUDA it moved float32 products by 2.5e-4 to 3e-4), and
/// `cohort device` says which applies.
#[test]
fn float32_matmuls_stay_float32_unless_tf32_is_asked_for() {
    let report = |tf32: Option<&str>| device_report("MLX_ENABLE_TF32", tf32);
    assert!(report(None).contains("float32 matmuls full float32"), "{}", report(None));
    assert!(report(Some("1")).contains("float32 matmuls TF32"), "{}", report(Some("1")));
}

/// A request written to stdin is answered before the next one is written: the input is read, and
/// the results written, as they come.
#[test]
fn stdin_requests_are_answered_as_they_arrive() {
    use std::io::{BufRead, BufReader};
    let mut child = cohort()
        .args(["generate", "-m"])
        .arg(fixture("qwen35_moe_4bit"))
        .args(["-i", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // A reader that waited for the end of the input would hang here: end it after 60 s so the
    // read below sees the end of stdout and the test fails instead.
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (flag, pid) = (answered.clone(), child.id().to_string());
    std::thread::spawn(move || {
        for _ in 0..600 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            if flag.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
        }
        let _ = Command::new("kill").args(["-9", &pid]).status();
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for id in ["first", "second"] {
        writeln!(stdin, r#"{{"id":"{id}","prompt":"The boat","max_tokens":3,"temperature":0}}"#).unwrap();
        stdin.flush().unwrap();
        line.clear();
        stdout.read_line(&mut line).unwrap();
        let r: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("no result for {id} before the input ended"));
        assert_eq!(r["id"], id, "{line}");
        assert_eq!(r["finish_reason"], "length", "{line}");
    }
    answered.store(true, std::sync::atomic::Ordering::SeqCst);
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn an_unwritable_output_is_refused_before_the_model_loads() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\"}\n").unwrap();
    for output in [dir.path().to_path_buf(), dir.path().join("missing/parent/out.jsonl")] {
        // A model that does not exist: had it been loaded first, the error would name it.
        let out = cohort()
            .args(["generate", "-m", "/nonexistent/model", "-i"])
            .arg(&input)
            .arg("-o")
            .arg(&output)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("output file") && stderr.contains(&*output.to_string_lossy()), "{stderr}");
        assert!(!stderr.contains("/nonexistent/model"), "the model was loaded first: {stderr}");
    }
}

/// `cohort generate ... >&-`: Rust's runtime puts /dev/null where a closed stdout was, so every
/// result went into nothing and the run exited 0. A closed stdout is refused before the model
/// loads; `-o FILE` still runs with it closed, and a stdout sent to /dev/null on purpose is obeyed.
#[test]
fn a_closed_stdout_is_refused_before_the_model_loads() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    std::fs::write(&input, "{\"id\":\"a\",\"prompt\":\"The boat\",\"max_tokens\":2,\"temperature\":0}\n").unwrap();
    // The shell closes fd 1 (or points it at /dev/null) and then becomes cohort.
    let run = |redirect: &str, extra: &[&std::ffi::OsStr]| {
        Command::new("sh")
            .arg("-c")
            .arg(format!("exec \"$@\" {redirect}"))
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_cohort"))
            .env("COHORT_HOME", std::env::temp_dir().join("cohort-cli-tests"))
            .args(["generate", "-m"])
            .arg(fixture("qwen35_moe_4bit"))
            .arg("-i")
            .arg(&input)
            .args(extra)
            .output()
            .unwrap()
    };
    let closed = run(">&-", &[]);
    let stderr = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(1), "a closed stdout ran: {stderr}");
    assert!(stderr.contains("stdout is closed") && stderr.contains("-o"), "{stderr}");
    assert!(!stderr.contains("exactness probe"), "the model was loaded first: {stderr}");

    let to_file = run(">&-", &["-o".as_ref(), output.as_os_str()]);
    assert_eq!(to_file.status.code(), Some(0), "{}", String::from_utf8_lossy(&to_file.stderr));
    let written = common::result_lines(&std::fs::read(&output).unwrap());
    assert_eq!((written.len(), &written[0]["id"]), (1, &serde_json::json!("a")));

    let discarded = run(">/dev/null", &[]);
    assert_eq!(discarded.status.code(), Some(0), "{}", String::from_utf8_lossy(&discarded.stderr));
}

/// SIGINT in the middle of a run: the results of the requests that had ended are in the file,
/// whole.
#[test]
fn an_interrupted_run_keeps_every_finished_result() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    let mut f = std::fs::File::create(&input).unwrap();
    writeln!(f, r#"{{"id":"quick","prompt":"The boat","max_tokens":2,"temperature":0}}"#).unwrap();
    for i in 0..3 {
        writeln!(f, r#"{{"id":"slow{i}","prompt":"A heron","max_tokens":3000,"temperature":0,"ignore_eos":true}}"#)
            .unwrap();
    }
    drop(f);
    let mut child =
        with_default_sigint(&mut generate_into(&input, &output)).stderr(std::process::Stdio::null()).spawn().unwrap();
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&output).map(|s| s.lines().count()).unwrap_or(0) == 0 {
        assert!(t0.elapsed().as_secs() < 60, "no result was written within 60 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the run was interrupted, not finished");
    let written = std::fs::read_to_string(&output).unwrap();
    let lines: Vec<serde_json::Value> = written.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(written.ends_with('\n') && lines[0]["id"] == "quick", "{written}");
    assert_eq!(lines[0]["finish_reason"], "length");
}

#[test]
fn a_repeated_id_is_refused_and_the_first_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let line = r#"{"id":"dup","prompt":"The boat","max_tokens":3,"temperature":0}"#;
    std::fs::write(&input, format!("{line}\n{line}\n")).unwrap();
    let out = cohort().args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let lines = common::result_lines(&out.stdout);
    assert_eq!(lines.len(), 2);
    let reasons: Vec<&str> = lines.iter().map(|l| l["finish_reason"].as_str().unwrap()).collect();
    assert!(reasons.contains(&"length") && reasons.contains(&"error"), "{lines:?}");
    let refused = lines.iter().find(|l| l["finish_reason"] == "error").unwrap();
    assert_eq!(refused["id"], "line-2", "the id stays the first line's alone (issue 58)");
    let msg = refused["error"].as_str().unwrap();
    assert!(msg.contains("line 2") && msg.contains("unique"), "{msg}");
}

/// A refused line keeps the id it names even where the line breaks after the id (a number JSON
/// allows but a double cannot hold, a line cut short, trailing junk, a byte that is not UTF-8);
/// before, each of these came back as `line-N`. A later line reusing the id of a refused line is
/// refused too (before, it ran, and the id had a refusal and an answer), as `line-N`.
#[test]
fn a_refused_line_keeps_its_id_wherever_the_line_breaks() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    writeln!(f, r#"{{"id":"huge-number","prompt":"x","temperature":1e400}}"#).unwrap();
    writeln!(f, r#"{{"id":"cut","prompt":"The bo"#).unwrap();
    writeln!(f, r#"{{"id":"junk","prompt":"x"}} trailing"#).unwrap();
    f.write_all(b"{\"id\":\"latin1\",\"prompt\":\"caf\xe9\"}\n").unwrap();
    writeln!(f, r#"{{"prompt":"x","id":"late","max_tokens":-1}}"#).unwrap();
    writeln!(f, r#"{{"id":"cut","prompt":"The boat","max_tokens":2,"temperature":0}}"#).unwrap();
    writeln!(f, r#"{{"id":"ok","prompt":"The boat","max_tokens":2,"temperature":0}}"#).unwrap();
    drop(f);
    let out = cohort().args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let lines = common::result_lines(&out.stdout);
    let ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    // Line 6 reuses the id of refused line 2: its refusal goes by its line (issue 58: one result
    // an id).
    assert_eq!(sorted, ["cut", "huge-number", "junk", "late", "latin1", "line-6", "ok"], "{lines:?}");
    for l in &lines {
        let expected = if l["id"] == "ok" { "length" } else { "error" };
        assert_eq!(l["finish_reason"], expected, "{l}");
    }
    let errors: Vec<&str> = lines.iter().filter_map(|l| l["error"].as_str()).collect();
    assert!(errors.iter().any(|e| e.contains("line 6") && e.contains("unique")), "{errors:?}");
}

/// An input line without end (`-i /dev/zero`) was read until memory ran out (an abort under the
/// 2 GB address-space cap used here; without one, the machine's memory). A line over 32 MB is
/// refused as soon as it passes the limit, keeping its id, and the reader skips to the next
/// line, whose request still runs.
#[test]
fn a_line_without_end_is_refused_and_the_next_line_runs() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    write!(f, r#"{{"id":"huge","prompt":""#).unwrap();
    f.write_all(&vec![b'x'; 33 << 20]).unwrap();
    writeln!(f, r#""}}"#).unwrap();
    writeln!(f, r#"{{"id":"ok","prompt":"The boat","max_tokens":2,"temperature":0}}"#).unwrap();
    drop(f);
    let capped = |input: &std::path::Path| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"ulimit -v 2000000 && exec "$@""#)
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_cohort"))
            .env("COHORT_HOME", std::env::temp_dir().join("cohort-cli-tests"))
            .args(["generate", "-m"])
            .arg(fixture("qwen35_moe_4bit"))
            .arg("-i")
            .arg(input);
        c
    };
    let out = capped(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let r = results_by_id(&out.stdout, &["huge", "ok"]);
    let err = r[0]["error"].as_str().unwrap_or_default();
    assert!(err.contains("line 1") && err.contains("over 32 MB"), "{err}");
    assert_eq!(r[1]["finish_reason"], "length");

    // /dev/zero never ends its first line: the refusal still comes, and memory stays bounded.
    let mut child = capped(std::path::Path::new("/dev/zero"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(60));
        let _ = Command::new("kill").args(["-9", &pid]).status();
    });
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let status = child.wait().unwrap();
    let r: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("no refusal for /dev/zero's line ({status}): {line:?}"));
    assert_eq!(r["id"], "line-1", "{line}");
    assert!(r["error"].as_str().unwrap().contains("over 32 MB"), "{line}");
    drop(watchdog);
}

/// A switch naming a CUDA kernel on a machine without CUDA, or a switch value that is neither 0
/// nor 1, is refused up front with the variable's name (it aborted start-up in MLX, or was
/// silently ignored).
#[test]
fn switches_the_machine_cannot_honour_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\",\"max_tokens\":2}\n").unwrap();
    let cuda = cohort::platform::backend::Backend::detect() == cohort::platform::backend::Backend::Cuda;
    let mut cases = vec![("COHORT_COMPILE_GDN", "yes", "COHORT_COMPILE_GDN=yes")];
    if !cuda {
        cases.push(("COHORT_ADD_NORM_KERNEL", "1", "CUDA"));
        cases.push(("COHORT_ROUTER_KERNEL", "1", "CUDA"));
    }
    for (var, value, says) in cases {
        let out = generate_under(var, value, &input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{var}={value}: {stderr}");
        assert!(stderr.contains(var) && stderr.contains(says), "{var}={value}: {stderr}");
    }
}

/// `COHORT_MEMORY_AVAILABLE` that is not a whole number of bytes (`8G`, `1x`, `-1`) is refused up
/// front naming the variable, as the route switches are: read as "unknown" it turned the memory
/// guard off altogether (even on the CPU, where MemAvailable would otherwise be read).
#[test]
fn a_memory_figure_that_is_not_a_number_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\",\"max_tokens\":2}\n").unwrap();
    for value in ["8G", "1x", "-1"] {
        let out = generate_under("COHORT_MEMORY_AVAILABLE", value, &input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "COHORT_MEMORY_AVAILABLE={value:?}: {stderr}");
        assert!(stderr.contains("COHORT_MEMORY_AVAILABLE"), "COHORT_MEMORY_AVAILABLE={value:?}: {stderr}");
    }
}

/// `cohort generate` with `-i` and `-o` in `dir` (the model need not exist: these are refused
/// before it would load), returning the exit code and stderr.
fn refused_before_the_model(input: &std::path::Path, output: &std::path::Path, more: &[&str]) -> (Option<i32>, String) {
    let out = cohort()
        .args(["generate", "-m", "/nonexistent/model", "-i"])
        .arg(input)
        .arg("-o")
        .arg(output)
        .args(more)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Issue 58: `-i x.jsonl -o x.jsonl` emptied the requests and exited 0; a mistyped `-i` emptied an
/// existing results file; a rerun with the same `-o` overwrote the results already there. Now the
/// output is checked before anything is written: never the input, never an existing file unless
/// asked (`--append` keeps it, `--overwrite` replaces it), and never touched when the input
/// cannot be read.
#[test]
fn the_output_never_overwrites_the_input_or_earlier_results_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    let requests = "{\"id\":\"a\",\"prompt\":\"x\"}\n";
    std::fs::write(&input, requests).unwrap();
    let (code, stderr) = refused_before_the_model(&input, &input, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("is the request file"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&input).unwrap(), requests, "the requests were overwritten");

    let earlier = "{\"id\":\"old\",\"finish_reason\":\"stop\"}\n";
    std::fs::write(&output, earlier).unwrap();
    let (code, stderr) = refused_before_the_model(&dir.path().join("typo.jsonl"), &output, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("typo.jsonl"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&output).unwrap(), earlier, "a mistyped input emptied the results");

    let (code, stderr) = refused_before_the_model(&input, &output, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("--append") && stderr.contains("--overwrite") && stderr.contains("1 result line"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&output).unwrap(), earlier, "earlier results were overwritten");

    let (code, stderr) = refused_before_the_model(&input, &output, &["--append", "--overwrite"]);
    assert_eq!(code, Some(2), "both at once is a usage error: {stderr}");
}

/// `--append` is the rerun after an interruption: the results already in the file stay, a torn
/// last line (the run was killed mid-write) is cut back, and only the requests with no answer
/// there run. `--overwrite` starts the file again.
#[test]
fn append_answers_only_what_the_results_file_lacks_and_overwrite_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    let mut f = std::fs::File::create(&input).unwrap();
    for id in ["done", "failed", "new"] {
        writeln!(f, r#"{{"id":"{id}","prompt":"The boat","max_tokens":2,"temperature":0}}"#).unwrap();
    }
    drop(f);
    let kept = "{\"id\":\"done\",\"finish_reason\":\"length\",\"text\":\"kept\"}\n{\"id\":\"failed\",\"finish_reason\":\"error\"}\n";
    std::fs::write(&output, format!("{kept}{{\"id\":\"torn\",\"fin")).unwrap();
    let run = |flag: &str| {
        let out = generate_into(&input, &output).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = run("--append");
    assert!(stderr.contains("1 request already answered"), "{stderr}");
    let written = std::fs::read_to_string(&output).unwrap();
    assert!(written.starts_with(kept) && written.ends_with('\n'), "{written}");
    let appended: Vec<serde_json::Value> =
        written[kept.len()..].lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut ids: Vec<&str> = appended.iter().map(|l| l["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["failed", "new"], "{written}");

    run("--overwrite");
    let written = std::fs::read_to_string(&output).unwrap();
    assert_eq!(written.lines().count(), 3, "{written}");
    assert!(!written.contains("kept"), "{written}");
}

/// Issue 58: results that cannot be written (a full disk: here /dev/full) stopped the run with
/// "cannot write a result" and listed nowhere which requests were left without one. Now the
/// run stops naming the output and the reason, and lists every request read that has no result
/// written, so a rerun (`--append`) knows what is missing.
#[test]
fn results_that_cannot_be_written_stop_the_run_listing_the_requests_left_unanswered() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let mut f = std::fs::File::create(&input).unwrap();
    for id in ["first", "second", "third"] {
        writeln!(f, r#"{{"id":"{id}","prompt":"The boat","max_tokens":3,"temperature":0}}"#).unwrap();
    }
    drop(f);
    let out = generate_into(&input, std::path::Path::new("/dev/full")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("/dev/full") && stderr.contains("No space left"), "{stderr}");
    assert!(stderr.contains("3 requests have no result written"), "{stderr}");
    for id in ["first", "second", "third"] {
        assert!(stderr.contains(id), "{id} is not listed: {stderr}");
    }
}

/// Issue 58: a valid line with id `x` and then a malformed line naming `x` gave two result lines
/// with id `x`, so a script matching results to requests by id took the refusal for the answer or
/// the answer for the refusal. The id belongs to the first line's request; the later refusal is
/// reported as `line-N`, its message naming the id it repeated.
#[test]
fn a_malformed_line_repeating_an_earlier_id_does_not_take_that_id() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let good = r#"{"id":"x","prompt":"The boat","max_tokens":3,"temperature":0}"#;
    let bad = r#"{"id":"x","prompt":"The boat","max_tokens":"three"}"#;
    std::fs::write(&input, format!("{good}\n{bad}\n")).unwrap();
    let out = cohort().args(["generate", "-m"]).arg(fixture("qwen35_moe_4bit")).arg("-i").arg(&input).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let lines = common::result_lines(&out.stdout);
    let ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids.iter().filter(|&&id| id == "x").count(), 1, "{lines:?}");
    let answer = lines.iter().find(|l| l["id"] == "x").unwrap();
    assert_eq!(answer["finish_reason"], "length", "{lines:?}");
    let refused = lines.iter().find(|l| l["id"] == "line-2").unwrap_or_else(|| panic!("{lines:?}"));
    let msg = refused["error"].as_str().unwrap();
    assert!(msg.contains("line 2") && msg.contains("\"x\""), "{msg}");
}

/// Issue 58: `HF_HUB_OFFLINE=1` was ignored: a hub id not in the cache was downloaded anyway (or
/// tried). Offline, it is refused naming the cache and the variable, and nothing is fetched
/// (a proxy that answers nothing would fail any attempt with another message).
#[test]
fn hf_hub_offline_is_obeyed() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "{\"prompt\":\"x\"}\n").unwrap();
    let out = cohort()
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf"))
        .env("HTTPS_PROXY", "http://127.0.0.1:9")
        .env("https_proxy", "http://127.0.0.1:9")
        .args(["generate", "-m", "cohort-tests/no-such-model", "-i"])
        .arg(&input)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("HF_HUB_OFFLINE") && stderr.contains("cohort-tests/no-such-model"), "{stderr}");
}

/// Issue 58, item 12: `generate` and `serve` disagreed on what a request means: generate took
/// only string contents and stop lists, passed an empty role to the template and did not know
/// "developer". Both now read messages and stop sequences one way: content parts are joined,
/// "developer" is the system role, a stop string is a list of one, and an empty role, a part
/// that is not text or an empty stop string is refused naming the field.
#[test]
fn generate_reads_messages_and_stop_sequences_as_serve_does() {
    let lines = [
        r#"{"id":"plain","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi there"}],"stop":["zz"],"max_tokens":6,"temperature":0}"#,
        r#"{"id":"parts","messages":[{"role":"developer","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],"stop":"zz","max_tokens":6,"temperature":0}"#,
        r#"{"id":"no-role","messages":[{"role":" ","content":"hi"}]}"#,
        r#"{"id":"image","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}"#,
        r#"{"id":"empty-stop","prompt":"hi","stop":[""]}"#,
        r#"{"id":"no-messages","messages":[]}"#,
    ]
    .map(str::to_owned);
    let r = results_of_lines(&lines, &["plain", "parts", "no-role", "image", "empty-stop", "no-messages"]);
    let err = |i: usize| r[i]["error"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r[0]["error"], serde_json::Value::Null, "{}", err(0));
    assert_eq!(r[0]["token_ids"], r[1]["token_ids"], "parts, developer and a stop string read as the plain form");
    assert!(err(2).contains("messages[0].role is empty"), "{}", err(2));
    assert!(err(3).contains("messages[0].content[0].type") && err(3).contains("only text parts"), "{}", err(3));
    assert!(err(4).contains("stop") && err(4).contains("empty"), "{}", err(4));
    assert!(err(5).contains("messages must hold at least one message"), "{}", err(5));
}

/// Issue 58, item 12: a 20 MB line took 20 s and 2.8 GB to refuse, all of it tokenizing a prompt
/// no window holds. A prompt whose bytes alone put it over the window is refused before it is
/// tokenized (the message counts bytes); one near the window is tokenized and refused by count.
#[test]
fn a_prompt_far_over_the_window_is_refused_before_it_is_tokenized() {
    let huge = "lighthouse keepers ".repeat(600_000); // ~11 MB
    let over = "lighthouse ".repeat(6_000); // a few thousand tokens past the fixture's window
    let lines = [
        serde_json::json!({"id": "huge", "prompt": huge}).to_string(),
        serde_json::json!({"id": "over", "messages": [{"role": "user", "content": over}]}).to_string(),
    ];
    let r = results_of_lines(&lines, &["huge", "over"]);
    let err = |i: usize| r[i]["error"].as_str().unwrap_or_default().to_owned();
    assert!(err(0).contains("bytes, at least") && err(0).contains("context window"), "{}", err(0));
    assert!(err(1).contains("the prompt has") && err(1).contains("context window"), "{}", err(1));
}
