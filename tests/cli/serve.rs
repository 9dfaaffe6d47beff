//! `cohort serve` with real clients: the official `openai` Python package (installed by
//! `./setup.sh test` into .runtime/pyclients), curl for raw HTTP and SSE, on the default model.
//! Every test starts its own server process on a free port.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::server::{Server, curl, text};
use serde_json::Value;

/// `curl -s -i`: status, headers (lower-cased names) and body.
fn post(url: &str, body: &str, extra: &[&str]) -> (u16, String, String) {
    let mut args = vec!["-s", "-i", "-H", "content-type: application/json", "--data-binary", body, url];
    args.extend_from_slice(extra);
    let out = text(&curl(&args).stdout);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head.to_lowercase(), body.to_owned())
}

fn py_clients() -> PathBuf {
    let dir = std::env::var_os("COHORT_PY_CLIENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".runtime/pyclients"));
    assert!(dir.join("openai").is_dir(), "no openai package in {}: run ./setup.sh test", dir.display());
    dir
}

fn python(check: &[&str]) -> String {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/openai_client.py"))
        .args(check)
        .env("PYTHONPATH", py_clients())
        .output()
        .unwrap();
    assert!(out.status.success(), "{check:?}:\n{}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

const CHAT: &str = r#"{"messages":[{"role":"user","content":"Tell me about the sea."}],"max_tokens":MAX,"temperature":0,"ignore_eos":true,"stream":STREAM}"#;

fn chat(max_tokens: usize, stream: bool) -> String {
    CHAT.replace("MAX", &max_tokens.to_string()).replace("STREAM", &stream.to_string())
}

#[test]
fn the_openai_client_chats_streams_and_gets_its_errors() {
    let server = Server::start("the_openai_client_chats_streams_and_gets_its_errors", &[]);
    python(&["basic", &server.url("/v1")]);
    let h = server.wait_idle(Duration::from_secs(10));
    assert_eq!(h["status"], "ready");
    assert_eq!(h["generation_mode"], "mtp");
}

#[test]
fn eight_concurrent_streams_each_get_their_own_answer_in_one_cohort() {
    let server = Server::start("eight_concurrent_streams_each_get_their_own_answer_in_one_cohort", &[]);
    let said = python(&["concurrent", &server.url("/v1"), "8"]);
    let h = server.wait_idle(Duration::from_secs(10));
    // The eight decoded as rows of one lane: cycles ran wider than one.
    let widest = h["fixed_width_cycles"].as_object().unwrap().keys().map(|k| k.parse::<usize>().unwrap()).max();
    assert!(widest.unwrap_or(0) >= 4, "{said}: cycles by width {}", h["fixed_width_cycles"]);
}

#[test]
fn raw_http_gets_sse_json_errors_and_metrics() {
    let server = Server::start("raw_http_gets_sse_json_errors_and_metrics", &["--max-body-bytes", "2000"]);
    let chat_url = server.url("/v1/chat/completions");
    // Server-sent events as curl sees them: data lines of JSON, then [DONE].
    let (status, head, body) = post(&chat_url, &chat(8, true), &["-N"]);
    assert_eq!(status, 200, "{head}{body}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    let data: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]));
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
    assert!(head.contains(&format!("x-request-id: {}", chunks[0]["id"].as_str().unwrap())), "{head}");

    // Errors are JSON in OpenAI's shape with the right status.
    let (status, _, body) = post(&chat_url, "{not json", &[]);
    assert_eq!(status, 400, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert!(e["error"]["message"].as_str().unwrap().contains("not a valid request"), "{body}");
    let (status, _, body) = post(&chat_url, r#"{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}"#, &[]);
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["error"]["param"], "temperature", "{body}");
    let big = format!(r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#, "x".repeat(5000));
    let (status, _, body) = post(&chat_url, &big, &[]);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("2000 bytes"), "{body}");
    let (status, _, _) = post(&server.url("/v1/nothing"), "{}", &[]);
    assert_eq!(status, 404);

    // Prometheus text: the requests above are counted, the engine's cycles by width show.
    let metrics = text(&curl(&["-s", &server.url("/metrics")]).stdout);
    for line in [
        "cohort_requests_total{endpoint=\"chat\",outcome=\"length\"} 1",
        "cohort_completion_tokens_total 8",
        "cohort_ready 1",
        "cohort_cycles_by_width_total{width=\"1\"}",
        "cohort_time_to_first_token_seconds_count 1",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }
    let h = server.wait_idle(Duration::from_secs(10));
    assert_eq!(h["telemetry"]["rows"].as_array().map(Vec::len), Some(0), "{h}");
}

#[test]
fn a_client_that_disconnects_frees_its_row() {
    let server = Server::start("a_client_that_disconnects_frees_its_row", &[]);
    // A long answer, abandoned after its first second.
    let out =
        curl(&["-s", "-N", "--max-time", "1", "--data-binary", &chat(3000, true), &server.url("/v1/chat/completions")]);
    assert!(text(&out.stdout).contains("chat.completion.chunk"), "it streamed before the client left");
    let left = Instant::now();
    let h = server.wait_idle(Duration::from_secs(5));
    eprintln!("the row was freed {:.0} ms after the client left", left.elapsed().as_secs_f64() * 1e3);
    let metrics = text(&curl(&["-s", &server.url("/metrics")]).stdout);
    assert!(metrics.contains("outcome=\"disconnected\"} 1"), "{metrics}");
    let tokens: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("cohort_completion_tokens_total "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(tokens < 3000, "the abandoned row stopped early ({tokens} tokens)");
    assert_eq!(h["status"], "ready");
}

#[test]
fn a_key_is_required_when_set_and_a_full_queue_answers_503() {
    let server = Server::start(
        "a_key_is_required_when_set_and_a_full_queue_answers_503",
        &["--api-key", "s3cret", "--max-waiting", "0"],
    );
    let chat_url = server.url("/v1/chat/completions");
    let (status, _, body) = post(&chat_url, &chat(4, false), &[]);
    assert_eq!(status, 401, "{body}");
    let (status, _, _) = post(&chat_url, &chat(4, false), &["-H", "authorization: Bearer wrong"]);
    assert_eq!(status, 401);
    let auth = ["-H", "authorization: Bearer s3cret"];
    let (status, _, body) = post(&chat_url, &chat(4, false), &auth);
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.health()["status"], "ready", "/health needs no key");

    // Eight long streams fill the lane (capacity 8 + 0 waiting); the ninth is told to retry.
    let mut streams: Vec<Child> = (0..8)
        .map(|_| {
            Command::new("curl")
                .args(["-s", "-N", "-H", "authorization: Bearer s3cret", "--data-binary", &chat(3000, true), &chat_url])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.health()["queue"]["in_flight"] != 8 {
        assert!(Instant::now() < deadline, "the eight never all got in: {}", server.health()["queue"]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, head, body) = post(&chat_url, &chat(4, false), &auth);
    assert_eq!(status, 503, "{body}");
    assert!(head.contains("retry-after: 1"), "{head}");
    assert!(body.contains("queue is full"), "{body}");
    for s in &mut streams {
        let _ = s.kill();
        let _ = s.wait();
    }
    server.wait_idle(Duration::from_secs(5));
    let (status, _, _) = post(&chat_url, &chat(4, false), &auth);
    assert_eq!(status, 200, "served again once the rows were freed");
}

/// A streamed answer of `max_tokens` read by curl in the background, once the server decodes it.
fn streaming(server: &Server, max_tokens: usize) -> Child {
    let running = Command::new("curl")
        .args(["-s", "-N", "--data-binary", &chat(max_tokens, true), &server.url("/v1/chat/completions")])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.health()["queue"]["active"] != 1 {
        assert!(Instant::now() < deadline, "the answer never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    running
}

#[test]
fn sigterm_lets_running_answers_finish_refuses_new_ones_and_exits_0() {
    let mut server =
        Server::start("sigterm_lets_running_answers_finish_refuses_new_ones_and_exits_0", &["--grace-s", "60"]);
    let chat_url = server.url("/v1/chat/completions");
    let running = streaming(&server, 150);
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let drain = server.log.recv_timeout(Duration::from_secs(10)).expect("a drain message");
    assert!(drain.contains("draining"), "{drain}");
    // While it drains, a new request on a new connection is refused.
    let (status, _, body) = post(&chat_url, &chat(4, false), &[]);
    assert!(status == 503 || status == 0, "{status} {body}");
    let out = running.wait_with_output().unwrap();
    let body = text(&out.stdout);
    assert!(body.trim_end().ends_with("data: [DONE]"), "the running answer finished: {body}");
    assert!(body.contains("\"finish_reason\":\"length\""), "{body}");
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn after_the_grace_period_a_drain_cancels_what_still_runs() {
    let mut server = Server::start("after_the_grace_period_a_drain_cancels_what_still_runs", &["--grace-s", "0.5"]);
    let running = streaming(&server, 5000);
    let stopped = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap().success());
    let body = text(&running.wait_with_output().unwrap().stdout);
    assert!(body.contains("\"finish_reason\":\"cancelled\""), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
    assert!(stopped.elapsed() < Duration::from_secs(10), "stopped in {:?}", stopped.elapsed());
}

/// `--grace-s` beyond what a Duration holds (1e300, 2^64 s) passed the check for NaN and
/// negatives and then panicked the server the moment it was listening ("cannot convert float
/// seconds to Duration", exit 101). Every such value is refused up front, naming the flag.
#[test]
fn a_grace_period_no_clock_can_hold_is_refused_naming_the_flag() {
    for grace in ["1e300", "18446744073709551616", "NaN", "inf", "-1"] {
        let home = tempfile::tempdir().unwrap();
        let mut child = common::cohort_command(home.path())
            .args(["serve", "--port", "0", "-m"])
            .arg(common::fixture("qwen35_moe_4bit"))
            .arg(format!("--grace-s={grace}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("--grace-s {grace}: the server took it and kept running");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(1), "--grace-s {grace}: {stderr}");
        assert!(stderr.contains("--grace-s") && !stderr.contains("panicked"), "--grace-s {grace}: {stderr}");
        assert!(!stderr.contains("listening"), "--grace-s {grace}: refused only after binding: {stderr}");
    }
}

/// `cohort serve` on a model that cannot load: its exit code and everything it said.
fn serve_until_it_ends(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let home = tempfile::tempdir().unwrap();
    let mut cmd = common::cohort_command(home.path());
    cmd.env_remove("COHORT_API_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["serve", "--port", "0", "-m", "/nonexistent/model"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), text(&out.stderr))
}

/// Issue 58: an empty `--api-key` or `COHORT_API_KEY` turned authentication off without a word,
/// and a server bound to every interface without a key said nothing. The empty key is refused
/// before anything binds; an open bind without a key is served with a warning.
#[test]
fn an_empty_key_is_refused_and_an_open_bind_without_a_key_is_warned_of() {
    for (args, env) in [
        (&["--api-key", ""][..], &[][..]),
        (&["--api-key", "  "][..], &[][..]),
        (&[][..], &[("COHORT_API_KEY", "")][..]),
    ] {
        let (code, stderr) = serve_until_it_ends(args, env);
        assert_eq!(code, Some(1), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains("--api-key") && stderr.contains("empty"), "{args:?} {env:?}: {stderr}");
        assert!(!stderr.contains("listening"), "refused only after binding: {stderr}");
    }
    let (_, stderr) = serve_until_it_ends(&["--host", "0.0.0.0"], &[]);
    assert!(stderr.contains("listening") && stderr.contains("without --api-key"), "{stderr}");
    let (_, stderr) = serve_until_it_ends(&["--host", "0.0.0.0", "--api-key", "k"], &[]);
    assert!(!stderr.contains("without --api-key"), "{stderr}");
    let (_, stderr) = serve_until_it_ends(&["--host", "127.0.0.1"], &[]);
    assert!(!stderr.contains("without --api-key"), "a loopback bind needs no warning: {stderr}");
}

/// Issue 58: after SIGTERM the server waited forever for a connection that had sent half a
/// request, and a second SIGTERM or SIGINT was ignored. Now connections still open shortly after
/// the drain are closed, and a second signal during a drain stops the server at once (what
/// still runs is cancelled).
#[test]
fn a_half_sent_request_cannot_hold_a_stopping_server_and_a_second_signal_stops_it_at_once() {
    use std::io::Write;
    let mut server = Server::start("a_half_sent_request_cannot_hold_a_stopping_server", &["--grace-s", "1"]);
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut half = std::net::TcpStream::connect(&address).unwrap();
    half.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let stopped = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "a half-sent request held the stopping server for 20 s");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    assert!(stopped.elapsed() < Duration::from_secs(10), "stopped in {:?}", stopped.elapsed());
    drop(half);

    let mut server = Server::start("a_second_signal_stops_a_draining_server", &["--grace-s", "120"]);
    let running = streaming(&server, 5000);
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let drain = server.log.recv_timeout(Duration::from_secs(10)).expect("a drain message");
    assert!(drain.contains("draining"), "{drain}");
    let second = Instant::now();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let body = text(&running.wait_with_output().unwrap().stdout);
    assert!(body.contains("\"finish_reason\":\"cancelled\""), "{body}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the second signal was ignored");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(second.elapsed() < Duration::from_secs(10), "stopped {:?} after the second signal", second.elapsed());
}

/// Issue 58: responses refused before a request reached the engine (400, 401, 404, 405, 413) were
/// not counted in /metrics, and a wrong method got a 405 with an empty body. Every response is
/// counted by status; the 405 says which method to use, in the error shape clients parse.
#[test]
fn every_response_is_counted_by_status_and_a_wrong_method_is_explained() {
    let args = ["--api-key", "k", "--max-body-bytes", "1000"];
    let server = Server::start("every_response_is_counted_by_status", &args);
    let url = server.url("/v1/chat/completions");
    let key = ["-H", "authorization: Bearer k"];
    assert_eq!(post(&url, "{}", &[]).0, 401);
    assert_eq!(post(&url, "{not json", &key).0, 400);
    assert_eq!(post(&url, &format!("\"{}\"", "x".repeat(5000)), &key).0, 413);
    assert_eq!(post(&server.url("/v1/nothing"), "{}", &key).0, 404);
    let out = text(&curl(&["-s", "-i", "-H", "authorization: Bearer k", &url]).stdout);
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    assert!(head.starts_with("HTTP/1.1 405"), "{out}");
    let error: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {out}"));
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("GET is not served on /v1/chat/completions") && message.contains("POST"), "{out}");
    let metrics = text(&curl(&["-s", &server.url("/metrics")]).stdout);
    for status in [400, 401, 404, 405, 413] {
        let line = format!("cohort_http_responses_total{{status=\"{status}\"}} 1");
        assert!(metrics.contains(&line), "no {line} in:\n{metrics}");
    }
}

/// `n` descriptors for this process (the tests below hold over a thousand connections).
fn raise_own_descriptor_limit(n: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        assert!(lim.rlim_max >= n, "this test needs {n} descriptors; the hard limit is {}", lim.rlim_max);
        lim.rlim_cur = lim.rlim_cur.max(n);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
}

/// The server process started under a descriptor limit of `n` (soft and hard).
fn descriptor_limit(n: u64) -> impl FnOnce(&mut Command) {
    move |cmd: &mut Command| {
        use std::os::unix::process::CommandExt;
        // SAFETY: only setrlimit runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// A metric's value in /metrics, 0 when absent.
fn metric(server: &Server, name: &str) -> f64 {
    let m = text(&curl(&["-s", &server.url("/metrics")]).stdout);
    m.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok()).unwrap_or(0.0)
}

/// 1,100 connections that send nothing, against a server under a 1,024-descriptor limit, cannot
/// keep a normal request out (issue 58, item 4): the table holds the limit less 64, and each
/// connection past it closes the one idle longest; with a limit set above what the descriptors
/// allow, accepting fails for want of one and the longest-idle connection makes room.
#[test]
fn a_thousand_idle_connections_at_a_descriptor_limit_do_not_keep_a_request_out() {
    raise_own_descriptor_limit(2600);
    // To answer, the server must have closed at least the connections past what it may hold: the
    // limit less 64 by default, the 1,024 descriptors (less its own) with a limit above them.
    let arms = [
        ("the default limit", vec![], 1101 - 960),
        ("a limit over the descriptors", vec!["--max-connections", "5000"], 1101 - 1024),
    ];
    for (name, args, least_shed) in arms {
        let test = "a_thousand_idle_connections_at_a_descriptor_limit_do_not_keep_a_request_out";
        let server = Server::start_with(test, &args, descriptor_limit(1024));
        let addr = server.base.trim_start_matches("http://").to_owned();
        let idle: Vec<std::net::TcpStream> =
            (0..1100).map(|i| std::net::TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{i}: {e}"))).collect();
        let started = Instant::now();
        let out = curl(&["-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code}", &server.url("/health")]);
        let took = started.elapsed();
        assert_eq!(text(&out.stdout), "200", "{name}");
        assert!(took < Duration::from_secs(1), "{name}: /health answered after {took:?}");
        let shed = metric(&server, "cohort_http_connections_shed_total");
        assert!(shed >= f64::from(least_shed), "{name}: {shed} shed");
        drop(idle);
    }
}

/// Reads what `stream` sends until it closes or `within` passes: (bytes, closed).
fn read_until_closed(stream: &mut std::net::TcpStream, within: Duration) -> (String, bool) {
    use std::io::Read;
    stream.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (String::from_utf8_lossy(&got).into_owned(), true);
            }
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
        }
    }
}

/// A connection that sends half a header, or idles after an answer, is closed after
/// `--header-timeout-s`; a body that stops arriving gets 408 after `--body-timeout-s`.
#[test]
fn slow_headers_idle_connections_and_stalled_bodies_time_out() {
    use std::io::Write;
    let test = "slow_headers_idle_connections_and_stalled_bodies_time_out";
    let server = Server::start(test, &["--header-timeout-s", "1", "--body-timeout-s", "1"]);
    let addr = server.base.trim_start_matches("http://").to_owned();
    let connect = || std::net::TcpStream::connect(&addr).unwrap();

    let mut half = connect();
    half.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").unwrap();
    let started = Instant::now();
    let (_, closed) = read_until_closed(&mut half, Duration::from_secs(5));
    assert!(closed && started.elapsed() < Duration::from_secs(4), "half a header held {:?}", started.elapsed());

    let mut kept = connect();
    kept.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let started = Instant::now();
    let (got, closed) = read_until_closed(&mut kept, Duration::from_secs(5));
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(closed && started.elapsed() < Duration::from_secs(4), "an idle keep-alive held {:?}", started.elapsed());

    let mut stalled = connect();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
    stalled.write_all(format!("{head}{{\"messages\"").as_bytes()).unwrap();
    let (got, _) = read_until_closed(&mut stalled, Duration::from_secs(5));
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("--body-timeout-s"), "{got}");
}

/// A streamed request that waits for a row gets its response headers at once (clients with a
/// header timeout gave up after 15.9 s), and its tokens when a row frees.
#[test]
fn a_queued_stream_gets_its_headers_at_once() {
    let server = Server::start("a_queued_stream_gets_its_headers_at_once", &[]);
    let chat_url = server.url("/v1/chat/completions");
    let long = chat(600, true);
    let busy: Vec<Child> = (0..8)
        .map(|_| {
            Command::new("curl")
                .args([
                    "-s",
                    "-N",
                    "-o",
                    "/dev/null",
                    "-H",
                    "content-type: application/json",
                    "--data-binary",
                    &long,
                    &chat_url,
                ])
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.health()["queue"]["active"] != 8 {
        assert!(Instant::now() < deadline, "eight rows never ran: {}", server.health());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Headers only, within 2 s: curl stops at the first byte of the body it cannot get in time.
    let out = curl(&[
        "-s",
        "-N",
        "-D",
        "-",
        "-o",
        "/dev/null",
        "-m",
        "2",
        "-H",
        "content-type: application/json",
        "--data-binary",
        &chat(4, true),
        &chat_url,
    ]);
    let head = text(&out.stdout);
    assert!(head.starts_with("HTTP/1.1 200"), "no headers within 2 s while queued: {head:?}");
    assert!(head.to_lowercase().contains("text/event-stream"), "{head}");
    assert!(server.health()["queue"]["active"] == 8, "the rows ended before the check meant anything");
    for mut c in busy {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// A request still running `--request-timeout-s` after it came is cancelled and its client told
/// why: 504 for a whole answer, an error event before `[DONE]` for a stream (issue 58, item 4).
#[test]
fn a_request_past_the_request_timeout_is_cancelled_and_told_why() {
    let test = "a_request_past_the_request_timeout_is_cancelled_and_told_why";
    let server = Server::start(test, &["--request-timeout-s", "1"]);
    let url = server.url("/v1/chat/completions");
    let started = Instant::now();
    let (status, _, body) = post(&url, &chat(3000, false), &[]);
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("--request-timeout-s"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(10), "cancelled after {:?}", started.elapsed());
    let (status, _, body) = post(&url, &chat(3000, true), &["-N"]);
    assert_eq!(status, 200, "{body}");
    let data: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    assert!(data[data.len() - 2].contains("--request-timeout-s"), "{body}");
    assert!(data.len() > 4, "no tokens came before the timeout: {body}");
    let h = server.wait_idle(Duration::from_secs(10));
    assert_eq!(h["queue"]["in_flight"], 0, "{h}");
}

/// Where `max_tokens` cuts a multi-byte character (three tokens an emoji here), the stream says
/// what the whole answer says: the decoder's held-back tail (U+FFFD) goes out before the closing
/// chunk (issue 58, item 12: the stream dropped it).
#[test]
fn a_character_cut_by_max_tokens_reads_the_same_whole_and_streamed() {
    let server = Server::start("a_character_cut_by_max_tokens_reads_the_same_whole_and_streamed", &[]);
    let url = server.url("/v1/completions");
    let body = |n: usize, stream: bool| {
        format!(
            r#"{{"prompt":"Reply with five emoji only: 🙂🎉","max_tokens":{n},"temperature":0,"ignore_eos":true,"stream":{stream}}}"#
        )
    };
    let mut cut = 0;
    for n in 1..=5 {
        let (status, _, whole) = post(&url, &body(n, false), &[]);
        assert_eq!(status, 200, "{whole}");
        let whole: Value = serde_json::from_str(&whole).unwrap();
        let whole = whole["choices"][0]["text"].as_str().unwrap().to_owned();
        let (_, _, streamed) = post(&url, &body(n, true), &["-N"]);
        let text: String = streamed
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|c| c["choices"][0]["text"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(text, whole, "max_tokens {n}");
        cut += usize::from(whole.ends_with('\u{FFFD}'));
    }
    assert!(cut > 0, "no max_tokens cut a character: the check meant nothing");
}

/// A request naming a model this server does not serve gets 404 naming `model` (as OpenAI and
/// vLLM answer it; it was served whatever it named), and one naming the served model, "default"
/// or nothing is answered (issue 58, item 12).
#[test]
fn a_model_this_server_does_not_serve_is_404_naming_it() {
    let server = Server::start("a_model_this_server_does_not_serve_is_404_naming_it", &[]);
    let url = server.url("/v1/chat/completions");
    let served = text(&curl(&["-s", &server.url("/v1/models")]).stdout);
    let served: Value = serde_json::from_str(&served).unwrap();
    let served = served["data"][0]["id"].as_str().unwrap().to_owned();
    let ask = |model: &str| {
        let body = format!(r#"{{{model}"messages":[{{"role":"user","content":"Hi"}}],"max_tokens":2}}"#);
        post(&url, &body, &[])
    };
    let (status, _, body) = ask(r#""model":"gpt-4o","#);
    assert_eq!(status, 404, "{body}");
    let e: Value = serde_json::from_str(&body).unwrap();
    assert_eq!((e["error"]["param"].as_str(), e["error"]["code"].as_str()), (Some("model"), Some("model_not_found")));
    assert!(e["error"]["message"].as_str().unwrap().contains(&served), "{body}");
    for named in
        [format!(r#""model":"{served}","#), r#""model":"default","#.into(), r#""model":"","#.into(), String::new()]
    {
        let (status, _, body) = ask(&named);
        assert_eq!(status, 200, "{named}: {body}");
    }
}
