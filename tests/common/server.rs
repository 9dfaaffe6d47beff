//! A real `cohort serve` process for tests (tests/cli/serve.rs, tests/tui/tui_attach.rs), and curl.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `cohort serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
    /// stderr lines after "ready" (the drain messages).
    pub log: mpsc::Receiver<String>,
    _model: tempfile::TempDir,
    _home: tempfile::TempDir,
}

impl Server {
    /// The default model (with its MTP head, as setup installs it) behind `cohort serve ARGS`.
    pub fn start(test: &str, args: &[&str]) -> Server {
        Self::start_with(test, args, |_| {})
    }

    /// [`Server::start`], with `adjust` applied to the command first (a descriptor limit).
    pub fn start_with(test: &str, args: &[&str], adjust: impl FnOnce(&mut Command)) -> Server {
        let model = super::smollm2_imported(test);
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/smollm2-135m-instruct.mtp.safetensors"),
            model.path().join("mtp.safetensors"),
        )
        .unwrap();
        let home = tempfile::tempdir().unwrap();
        let mut command = super::cohort_command(home.path());
        command.args(["serve", "--port", "0", "-m"]).arg(model.path()).args(args);
        adjust(&mut command);
        let mut child = command.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        let (tx, log) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut base = None;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let line = log
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("{test}: the server never said it was ready"));
            if let Some(rest) = line.split("listening on ").nth(1) {
                base = Some(rest.split_whitespace().next().unwrap().to_owned());
            }
            if line.contains("ready in") {
                break;
            }
            assert!(!line.contains("error"), "{test}: {line}");
        }
        Server { child, base: base.expect("the address"), log, _model: model, _home: home }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn health(&self) -> Value {
        let out = curl(&["-s", &self.url("/health")]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("/health: {e}: {}", text(&out.stdout)))
    }

    /// Wait until /health shows nothing in flight and no live row.
    pub fn wait_idle(&self, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let h = self.health();
            if h["queue"]["in_flight"] == 0 && h["queue"]["active"] == 0 {
                return h;
            }
            assert!(Instant::now() < deadline, "still busy after {within:?}: {}", h["queue"]);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn curl(args: &[&str]) -> Output {
    Command::new("curl").args(args).output().expect("curl (./setup.sh installs it)")
}
