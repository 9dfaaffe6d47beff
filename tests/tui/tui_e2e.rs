//! End to end: the real binary in a tmux session on the fixture model. Eight prompts are typed
//! into eight panes and sent together; pane 3 is cancelled mid-answer; then the screen must show
//! pane 3 cancelled with its partial text, the other seven finished, and the inspector cycles at
//! width 8. A pane whose answer ended sends its follow-up while another pane still answers.
//! Skipped (with a message) when tmux is not installed.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const FIXTURE: &str = "tests/fixtures/qwen35_moe_4bit";

struct Tmux {
    session: String,
}

impl Tmux {
    fn start(session: &str, width: u16, height: u16, command: &str) -> Tmux {
        let status = Command::new("tmux")
            .args(["new-session", "-d", "-s", session, "-x", &width.to_string(), "-y", &height.to_string(), command])
            .status()
            .expect("tmux runs");
        assert!(status.success(), "tmux new-session failed");
        Tmux { session: session.to_owned() }
    }

    fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux").args(["send-keys", "-t", &self.session]).args(keys).status().unwrap();
        assert!(status.success());
        // Give the app a moment: an Esc followed too closely by another key reads as alt+key.
        std::thread::sleep(Duration::from_millis(150));
    }

    fn type_text(&self, text: &str) {
        let status = Command::new("tmux").args(["send-keys", "-t", &self.session, "-l", text]).status().unwrap();
        assert!(status.success());
        std::thread::sleep(Duration::from_millis(100));
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux").args(["capture-pane", "-p", "-t", &self.session]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until `check` holds for the screen; panics with the last screen on timeout.
    fn wait_for(&self, what: &str, timeout: Duration, check: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if check(&screen) {
                return screen;
            }
            if start.elapsed() > timeout {
                panic!("timed out waiting for {what}; the screen was:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux").args(["kill-session", "-t", &self.session]).status();
    }
}

/// The token count on the bottom border (`└──── 123 tok ┘`) of the `column`-th pane (0-based)
/// of the grid's first row.
fn footer_tokens(screen: &str, column: usize) -> Option<usize> {
    let line = screen.lines().find(|l| l.contains(" tok ┘"))?;
    let parts: Vec<&str> = line.split('┘').collect();
    let part = parts.get(column)?;
    part.split_whitespace().rev().nth(1)?.parse().ok()
}

fn profile(dir: &Path, max_tokens: usize) -> PathBuf {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let path = dir.join("e2e.toml");
    // ignore_eos: the fixture's random weights hit end-of-sequence early and at random; every
    // row must still be decoding when pane 3 is cancelled.
    let text = format!(
        "model = \"{}\"\npreset = \"throughput\"\nnumerics = \"throughput\"\npanes = 8\nmax_tokens = {max_tokens}\n\
         ignore_eos = true\nseed = 7\ntheme = \"dark\"\n",
        model.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// What a test's tmux session runs: environment before the binary, arguments after the profile,
/// a shell line after it exits (`{resume}` in it: the same command again with `--resume`, then
/// `echo COHORT-RESUMED-$?`).
struct Launch<'a> {
    tag: &'a str,
    size: (u16, u16),
    max_tokens: usize,
    env: &'a str,
    args: &'a str,
    after: &'a str,
}

/// Start cohort on the fixture in a tmux session of its own with a fresh home, and wait for the
/// model to load; None (after saying the test is skipped) when tmux is not installed.
fn launch(l: Launch) -> Option<(tempfile::TempDir, Tmux)> {
    if !common::tmux_or_skip(&format!("tui_e2e ({})", l.tag)) {
        return None;
    }
    let home = tempfile::tempdir().unwrap();
    let profile = profile(home.path(), l.max_tokens);
    let run = format!(
        "env {} COHORT_HOME={} {} --profile {} {}",
        l.env,
        home.path().display(),
        env!("CARGO_BIN_EXE_cohort"),
        profile.display(),
        l.args
    );
    let after = l.after.replace("{resume}", &format!("{run} --resume; echo COHORT-RESUMED-$?; "));
    let command = format!("{run}; echo COHORT-EXITED-$?; {after}sleep 600");
    let tmux = Tmux::start(&format!("cohort-e2e-{}-{}", l.tag, std::process::id()), l.size.0, l.size.1, &command);
    let load = Duration::from_secs(120);
    tmux.wait_for("the model to load", load, |s| s.contains("· mtp │") || s.contains("COHORT-EXITED"));
    Some((home, tmux))
}

#[test]
fn eight_panes_decode_together_and_one_is_cancelled() {
    let launched = launch(Launch { tag: "eight", size: (200, 50), max_tokens: 600, env: "", args: "", after: "" });
    let Some((home, tmux)) = launched else { return };
    for pane in 1..=8 {
        tmux.keys(&[&format!("M-{pane}")]);
        tmux.type_text(&format!("prompt for pane {pane}"));
    }
    tmux.keys(&["F5"]);

    // Tokens stream: pane 1's count grows while pane 3 decodes.
    let slow = Duration::from_secs(90);
    let first = tmux.wait_for("pane 3 to decode", slow, |s| {
        s.contains("3 · decoding") && footer_tokens(s, 2).is_some_and(|n| n >= 5)
    });
    let before = footer_tokens(&first, 0).unwrap_or(0);
    tmux.keys(&["M-3"]);
    tmux.keys(&["Escape"]);
    let cancelled = tmux.wait_for("pane 3 to be cancelled", slow, |s| s.contains("3 · cancelled"));
    assert!(footer_tokens(&cancelled, 0).unwrap_or(0) > before, "pane 1 kept streaming:\n{cancelled}");
    assert!(cancelled.contains("⊘ cancelled ·"), "the cancelled marker shows:\n{cancelled}");

    // The others finish (at max_tokens: ignore_eos is on).
    let done = tmux.wait_for("the other seven panes to finish", Duration::from_secs(300), |s| {
        [1, 2, 4, 5, 6, 7, 8].iter().all(|p| s.contains(&format!("{p} · done")))
    });
    assert!(done.contains("3 · cancelled"), "pane 3 stays cancelled:\n{done}");

    // Pane 3 zoomed: its prompt, its partial answer, then the marker.
    tmux.keys(&["C-z"]);
    let zoomed = tmux.wait_for("pane 3 zoomed", slow, |s| s.contains("› prompt for pane 3"));
    let lines: Vec<&str> = zoomed.lines().collect();
    let prompt = lines.iter().position(|l| l.contains("› prompt for pane 3")).unwrap();
    let marker = lines.iter().position(|l| l.contains("⊘ cancelled ·")).expect("marker in the zoomed pane");
    assert!(marker > prompt + 1, "partial text between the prompt and the marker:\n{zoomed}");
    let kept: usize =
        lines[marker].split("cancelled · ").nth(1).and_then(|t| t.split_whitespace().next()?.parse().ok()).unwrap();
    assert!(kept > 0 && kept < 600, "pane 3 kept a partial answer of {kept} tokens");
    tmux.keys(&["C-z"]);

    // The inspector: the lane ran cycles with all eight rows, and is idle now.
    tmux.keys(&["C-t"]);
    let inspector = tmux.wait_for("the inspector", slow, |s| s.contains("real width per cycle"));
    let histogram = inspector.lines().find(|l| l.contains(" 8 █")).map(str::trim);
    assert!(histogram.is_some(), "the width histogram has an 8 bar:\n{inspector}");
    assert!(inspector.contains("width now 0"), "{inspector}");

    // Quit: the terminal is given back and the transcripts hold every pane.
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
    let sessions = home.path().join("data").join("transcripts");
    let session = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    let pane3 = std::fs::read_to_string(session.join("pane-3.jsonl")).unwrap();
    let done_line = pane3.lines().find(|l| l.contains("\"kind\":\"done\"")).expect("a done record for pane 3");
    assert!(done_line.contains("\"finish\":\"cancelled\""), "{done_line}");
    for pane in 1..=8 {
        assert!(session.join(format!("pane-{pane}.jsonl")).exists(), "pane {pane} has a transcript");
    }
}

#[test]
fn a_panic_gives_the_terminal_back_and_keeps_the_transcript() {
    // After cohort exits, `stty -a` tells whether the terminal is back in cooked mode.
    let Some((home, tmux)) = launch(Launch {
        tag: "panic",
        size: (120, 30),
        max_tokens: 50,
        env: "RUST_BACKTRACE=0 COHORT_TUI_PANIC_ON=boom",
        args: "--panes 2",
        after: "stty -a | grep -q -- ' icanon' && echo TTY-COOKED; ",
    }) else {
        return;
    };
    let slow = Duration::from_secs(120);
    tmux.type_text("a first question");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the first answer", slow, |s| s.contains("1 · done"));
    tmux.type_text("boom");
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("cohort to exit", slow, |s| s.contains("TTY-COOKED"));
    assert!(screen.contains("COHORT-EXITED-101"), "a panic exits with 101:\n{screen}");
    assert!(screen.contains("a panic on purpose"), "the panic message is readable:\n{screen}");
    let sessions = home.path().join("data").join("transcripts");
    let session = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    let pane1 = std::fs::read_to_string(session.join("pane-1.jsonl")).unwrap();
    assert!(pane1.contains("\"text\":\"a first question\""), "{pane1}");
    assert!(pane1.contains("\"kind\":\"done\""), "the first answer was saved: {pane1}");
    assert!(pane1.contains("\"text\":\"boom\""), "the prompt sent just before the panic was saved: {pane1}");
}

#[test]
fn a_pane_sends_its_follow_up_while_another_still_answers() {
    // Long enough that pane 1 is still answering through the whole exchange in pane 2, short
    // enough that pane 2's follow-up (its history included) fits the fixture's 4096 positions.
    let launched =
        launch(Launch { tag: "follow", size: (160, 40), max_tokens: 2000, env: "", args: "--panes 2", after: "" });
    let Some((_home, tmux)) = launched else { return };
    let slow = Duration::from_secs(120);
    tmux.type_text("a long answer please");
    tmux.keys(&["Enter"]);
    tmux.wait_for("pane 1 to decode", slow, |s| s.contains("1 · decoding"));
    tmux.keys(&["M-2"]);
    tmux.type_text("a first question");
    tmux.keys(&["Enter"]);
    tmux.wait_for("pane 2 to answer", slow, |s| s.contains("2 · decoding"));
    tmux.keys(&["Escape"]);
    tmux.wait_for("pane 2's answer to end", slow, |s| s.contains("2 · cancelled"));
    // A sealed cohort would hold this until pane 1 has all its 2000 tokens.
    tmux.type_text("and a follow-up");
    tmux.keys(&["Enter"]);
    let both = tmux.wait_for("the follow-up to stream beside pane 1", slow, |s| {
        ["2 · decoding", "2 · done", "2 · error", "1 · done"].iter().any(|state| s.contains(state))
    });
    assert!(!both.contains("2 · error"), "the follow-up failed:\n{both}");
    assert!(both.contains("1 · decoding"), "pane 1 had ended before the follow-up ran:\n{both}");
    assert!(both.contains("and a follow-up"), "{both}");
    tmux.keys(&["M-1"]);
    tmux.keys(&["Escape"]);
    tmux.wait_for("pane 1 to be cancelled", slow, |s| s.contains("1 · cancelled"));
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
}

/// A saved session `name` under `sessions`: pane 1 asked `question` and got `answer`.
fn save_session(sessions: &Path, name: &str, question: &str, answer: &str) {
    use cohort::engine::request::{FinishReason, Stats};
    use cohort::tui::transcript::{Record, TranscriptWriter};
    let mut writer = TranscriptWriter::new(sessions, name, "throughput", None);
    let request = format!("{name}-p1-1");
    let user = Record::User { request: request.clone(), text: question.into(), replaces: None, system: None };
    let text = answer.to_owned();
    let done = Record::Done { request, finish: FinishReason::Stop, text, error: None, stats: Stats::default() };
    writer.append(1, &user).unwrap();
    writer.append(1, &done).unwrap();
}

/// The pid of the cohort process keeping its files under `home`.
fn cohort_pid(home: &Path) -> Option<u32> {
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_cohort")).ok()?;
    let wanted = format!("COHORT_HOME={}", home.display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let is_cohort = std::fs::read_link(e.path().join("exe")).ok()? == exe;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        let ours = environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes());
        (is_cohort && ours).then_some(pid)
    })
}

#[test]
fn sigterm_gives_the_terminal_back_and_writes_the_final_record() {
    stop_signal_quits_cleanly("TERM");
}

/// A closed terminal (SIGHUP) is a stop like SIGTERM: the screen given back, the cut answer's
/// final record written.
#[test]
fn sighup_gives_the_terminal_back_and_writes_the_final_record() {
    stop_signal_quits_cleanly("HUP");
}

fn stop_signal_quits_cleanly(signal: &str) {
    let tag = format!("sig{}", signal.to_lowercase());
    let Some((home, tmux)) = launch(Launch {
        tag: &tag,
        size: (120, 30),
        max_tokens: 3000,
        env: "",
        args: "--panes 2",
        after: "stty -a | grep -q -- ' icanon' && echo TTY-COOKED; ",
    }) else {
        return;
    };
    tmux.type_text("a long question");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the answer to stream", Duration::from_secs(120), |s| footer_tokens(s, 0).is_some_and(|n| n >= 5));
    let pid = cohort_pid(home.path()).expect("the cohort process");
    assert!(Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status().unwrap().success());
    let screen = tmux.wait_for("cohort to exit", Duration::from_secs(30), |s| s.contains("TTY-COOKED"));
    assert!(screen.contains("COHORT-EXITED-0"), "a SIG{signal} quits cleanly:\n{screen}");
    let sessions = home.path().join("data").join("transcripts");
    let session = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    let pane1 = std::fs::read_to_string(session.join("pane-1.jsonl")).unwrap();
    assert!(pane1.contains("\"text\":\"a long question\""), "{pane1}");
    assert!(pane1.lines().last().is_some_and(|l| l.contains("cancelled")), "the cut answer's final record: {pane1}");
}

/// Issue 40: f2 puts the last message back in the box and, sent, it replaces that turn; ctrl+r
/// asks it again in place of its answer. The transcript reads back as the screen shows it, and
/// alt+s exports the same conversation as Markdown; alt+y copies any of its messages; ctrl+f
/// finds its question; alt+b branches it at its question into a second pane, which asks it again
/// there.
#[test]
fn edit_regenerate_export_and_copy_a_conversation() {
    let launched =
        launch(Launch { tag: "edit", size: (120, 30), max_tokens: 12, env: "", args: "--panes 1", after: "" });
    let Some((home, tmux)) = launched else { return };
    let slow = Duration::from_secs(120);
    tmux.type_text("a frist question");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the first answer", slow, |s| s.contains("1 · done"));
    tmux.keys(&["F2"]);
    tmux.wait_for("the edit to start", slow, |s| s.contains("✎ editing"));
    tmux.keys(&["C-u"]);
    tmux.type_text("a first question");
    tmux.keys(&["Enter"]);
    let edited = tmux
        .wait_for("the edited question's answer", slow, |s| s.contains("› a first question") && s.contains("1 · done"));
    assert!(!edited.contains("frist"), "the old question left the screen:\n{edited}");
    tmux.keys(&["C-r"]);
    // Twelve tokens may come and go between two looks at the screen: the transcript tells.
    std::thread::sleep(Duration::from_millis(500));
    tmux.wait_for("the regenerated answer to end", slow, |s| s.contains("1 · done"));
    let screen = tmux.screen();
    assert_eq!(screen.matches("› a first question").count(), 1, "one turn on screen:\n{screen}");
    // alt+s exports the conversation beside the transcripts; the bottom bar names the file.
    tmux.keys(&["M-s"]);
    let exported = tmux.wait_for("the export", slow, |s| s.contains("exported to"));
    assert!(exported.contains("pane-1.md"), "{exported}");
    // alt+y picks a message (the newest answer first): up moves to the question, enter copies it.
    tmux.keys(&["M-y"]);
    tmux.wait_for("the message picker", slow, |s| s.contains("message 2 of 2"));
    tmux.keys(&["Up"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the copy", slow, |s| s.contains("copied 16 chars"));
    let copied = std::fs::read_to_string(home.path().join("data").join("clipboard").join("last-answer.txt"));
    assert_eq!(copied.unwrap(), "a first question");
    // ctrl+f finds the question; esc closes the search.
    tmux.keys(&["C-f"]);
    tmux.wait_for("the search", slow, |s| s.contains("find:") && s.contains("type what to find"));
    tmux.type_text("FIRST q");
    tmux.wait_for("the match", slow, |s| s.contains("find: FIRST q  1 of 1"));
    tmux.keys(&["Escape"]);
    tmux.wait_for("the search to close", slow, |s| !s.contains("find:"));
    // alt+b branches at the question: a new pane with it in the box, which sends from there.
    tmux.keys(&["M-b"]);
    tmux.wait_for("the branch picker", slow, |s| s.contains("branch at message 2 of 2"));
    tmux.keys(&["Up"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("the branched pane", slow, |s| s.contains("pane 2 branches pane 1 at message 1"));
    tmux.keys(&["Enter"]);
    tmux.wait_for("the branch's answer", slow, |s| s.contains("1 · done") && s.contains("2 · done"));
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
    let sessions = home.path().join("data").join("transcripts");
    let session = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    let (_, _, panes) = cohort::tui::transcript::load_session(&sessions, session.to_str().unwrap()).unwrap();
    let users: Vec<&str> = panes[0].turns.iter().map(|t| t.user.as_str()).collect();
    assert_eq!(users, ["a first question"], "the transcript reads back as the screen showed it");
    assert!(panes[0].turns[0].finish.is_some());
    let markdown = std::fs::read_to_string(session.join("pane-1.md")).unwrap();
    assert!(markdown.contains("## You\n\na first question\n") && !markdown.contains("frist"), "{markdown}");
    let text = std::fs::read_to_string(session.join("pane-1.jsonl")).unwrap();
    assert_eq!(text.matches("\"replaces\"").count(), 2, "the edit and the regeneration are recorded:\n{text}");
    let branch: Vec<&str> = panes[1].turns.iter().map(|t| t.user.as_str()).collect();
    assert_eq!(branch, ["a first question"], "the branch asked the question again in its own pane");
    let text = std::fs::read_to_string(session.join("pane-2.jsonl")).unwrap();
    assert!(text.contains("\"kind\":\"branch\",\"pane\":1"), "{text}");
}

/// Issue 40: ctrl+o gives the terminal to $EDITOR (cooked mode, the screen left) with the input
/// in a file; what it saves comes back into the box, the screen is drawn again, and it sends.
#[test]
fn an_external_editor_writes_the_prompt() {
    let tools = tempfile::tempdir().unwrap();
    let script = tools.path().join("editor.sh");
    let report = tools.path().join("report");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor f; do :; done\n{{ cat \"$f\"; echo; stty -a < /dev/tty | grep -q -- ' icanon' && echo COOKED; }} \
             > {report}\nprintf 'from the editor, line one\\nline two\\n' > \"$f\"\n",
            report = report.display()
        ),
    )
    .unwrap();
    assert!(Command::new("chmod").arg("+x").arg(&script).status().unwrap().success());
    let env = format!("VISUAL= EDITOR={}", script.display());
    let launched =
        launch(Launch { tag: "editor", size: (120, 30), max_tokens: 12, env: &env, args: "--panes 1", after: "" });
    let Some((_home, tmux)) = launched else { return };
    let slow = Duration::from_secs(60);
    tmux.type_text("begun in the box");
    tmux.keys(&["C-o"]);
    let back = tmux.wait_for("the editor's text in the box", slow, |s| s.contains("› from the editor, line one"));
    assert!(back.contains("line two") && back.contains("1 · idle"), "the screen is drawn again:\n{back}");
    let report = std::fs::read_to_string(&report).unwrap();
    assert!(report.starts_with("begun in the box"), "the editor got the input: {report}");
    assert!(report.contains("COOKED"), "the terminal was given back while the editor ran: {report}");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the answer", slow, |s| s.contains("1 · done"));
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
}

/// Issue 40 (item 2): alt+, gives pane 1 its own system prompt and max_tokens (its bottom border
/// shows them); a question sent to three panes stops at 5 tokens there while the others run on
/// the profile's 2000; f8 cancels every running answer; quit and `--resume` bring pane 1's
/// settings back.
#[test]
fn pane_settings_apply_and_come_back_on_resume_and_cancel_all_stops_every_pane() {
    let launched = launch(Launch {
        tag: "settings",
        size: (160, 40),
        max_tokens: 2000,
        env: "",
        args: "--panes 3",
        after: "{resume}",
    });
    let Some((home, tmux)) = launched else { return };
    let slow = Duration::from_secs(120);
    tmux.keys(&["M-,"]);
    tmux.wait_for("the settings form", slow, |s| s.contains("settings · pane 1"));
    tmux.type_text("Be terse.");
    for _ in 0..4 {
        tmux.keys(&["Down"]);
    }
    tmux.keys(&["C-u"]);
    tmux.type_text("5");
    tmux.keys(&["Enter"]);
    let applied = tmux.wait_for("pane 1's own settings on its border", slow, |s| s.contains("max5 sys"));
    assert!(applied.contains("t0.6 p0.95 k20 max2000"), "the other panes keep the profile's:\n{applied}");
    tmux.type_text("hello");
    tmux.keys(&["F5"]);
    tmux.wait_for("pane 1's 5-token answer beside the others decoding", slow, |s| {
        s.contains("1 · done") && s.contains("2 · decoding") && s.contains("3 · decoding")
    });
    tmux.keys(&["F8"]);
    let cancelled = tmux.wait_for("every running answer cancelled", slow, |s| {
        s.contains("2 · cancelled") && s.contains("3 · cancelled")
    });
    assert!(cancelled.contains("1 · done"), "the finished answer stays as it was:\n{cancelled}");
    // Zoomed on pane 2, pane 1's border is off screen: it shows again only in the resumed run.
    tmux.keys(&["M-2"]);
    tmux.keys(&["C-z"]);
    tmux.wait_for("pane 2 zoomed", slow, |s| !s.contains("max5 sys"));
    tmux.keys(&["C-q"]);
    tmux.wait_for("the resumed session with pane 1's settings", slow, |s| {
        s.contains("max5 sys") && s.contains("· mtp │")
    });
    tmux.keys(&["C-q"]);
    tmux.wait_for("the resumed run to exit", slow, |s| s.contains("COHORT-RESUMED-0"));
    let sessions = home.path().join("data").join("transcripts");
    let session = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    let pane1 = std::fs::read_to_string(session.join("pane-1.jsonl")).unwrap();
    let record = pane1.lines().find(|l| l.contains("\"kind\":\"settings\"")).expect("a settings record");
    assert!(record.contains("\"system\":\"Be terse.\"") && record.contains("\"max_tokens\":5"), "{record}");
    assert!(pane1.contains("\"completion_tokens\":5"), "pane 1's answer stopped at its max_tokens:\n{pane1}");
}

/// Issue 40 (item 3): while two panes decode, alt+i drills into pane 1's row (its offsets and
/// its drafts charted as they happen), down moves to pane 2's row, esc comes back and hides the
/// inspector the drill-down opened; the queue panel and the charts carry their scales.
#[test]
fn the_inspector_drills_into_a_running_row() {
    let launched =
        launch(Launch { tag: "drill", size: (200, 50), max_tokens: 2000, env: "", args: "--panes 2", after: "" });
    let Some((_home, tmux)) = launched else { return };
    let slow = Duration::from_secs(120);
    tmux.type_text("tell me a long story");
    tmux.keys(&["F5"]);
    tmux.wait_for("both panes to decode", slow, |s| s.contains("1 · decoding") && s.contains("2 · decoding"));
    tmux.keys(&["M-i"]);
    let first = tmux.wait_for("pane 1's row, with drafts", slow, |s| {
        s.contains("· pane 1 · decoding") && s.contains("target committed") && s.contains("acc ┤")
    });
    assert!(first.contains("row 0 of the lane's 2"), "the bottom bar says which row:\n{first}");
    let committed = |s: &str| -> Option<u32> {
        let line = s.lines().find(|l| l.contains("target committed"))?;
        line.split("target committed ").nth(1)?.split_whitespace().next()?.parse().ok()
    };
    let before = committed(&first).unwrap();
    tmux.wait_for("the row's offsets to move on", slow, |s| committed(s).is_some_and(|c| c > before));
    tmux.keys(&["Down"]);
    tmux.wait_for("pane 2's row", slow, |s| s.contains("· pane 2 · decoding") && s.contains("row 1 of the lane's 2"));
    tmux.keys(&["Escape"]);
    let back = tmux.wait_for("the drill-down to close", slow, |s| !s.contains("target committed"));
    assert!(!back.contains("┌ rows"), "the inspector the drill-down opened is hidden again:\n{back}");
    tmux.keys(&["C-t"]);
    let inspector = tmux.wait_for("the inspector", slow, |s| s.contains("┌ queue"));
    for scale in ["recent drafts: █ accepted", "└─", "now", "waiting "] {
        assert!(inspector.contains(scale), "{scale:?} missing:\n{inspector}");
    }
    tmux.keys(&["F8"]);
    tmux.wait_for("both answers cancelled", slow, |s| s.contains("1 · cancelled") && s.contains("2 · cancelled"));
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
}

/// Issue 40: alt+o lists the saved sessions; d then y deletes one, r names one ("rivers"), enter
/// opens it in place of the session in use: its conversation on screen, the next question
/// appended to its transcript, and its name printed at exit.
#[test]
fn the_session_list_deletes_renames_and_opens_sessions() {
    let launched =
        launch(Launch { tag: "sessions", size: (120, 30), max_tokens: 12, env: "", args: "--panes 1", after: "" });
    let Some((home, tmux)) = launched else { return };
    let slow = Duration::from_secs(60);
    let sessions = home.path().join("data").join("transcripts");
    for (name, question) in [("20250101-000000", "an old question about rivers"), ("20250102-000000", "to be deleted")]
    {
        save_session(&sessions, name, question, "the Danube");
    }
    tmux.type_text("a new question");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the answer", slow, |s| s.contains("1 · done"));
    tmux.keys(&["M-o"]);
    tmux.wait_for("the session list", slow, |s| s.contains("sessions 3 saved") && s.contains("“to be deleted”"));
    tmux.keys(&["Down"]);
    tmux.keys(&["d"]);
    tmux.wait_for("the question before a delete", slow, |s| s.contains("delete 20250102-000000 for good"));
    tmux.keys(&["y"]);
    tmux.wait_for("the delete", slow, |s| s.contains("sessions 2 saved") && !s.contains("“to be deleted”"));
    tmux.keys(&["Down"]);
    tmux.keys(&["r"]);
    // An untitled session's box starts empty: what is typed is the whole name.
    tmux.wait_for("the name being typed", slow, |s| s.contains("new name:") && !s.contains("new name: 2025"));
    tmux.type_text("rivers");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the new name", slow, |s| s.contains("is called \"rivers\" now") && s.contains("  rivers  "));
    tmux.keys(&["Enter"]);
    let opened = tmux.wait_for("the session opened", slow, |s| s.contains("session rivers opened"));
    assert!(opened.contains("› an old question about rivers") && opened.contains("│ rivers "), "{opened}");
    assert!(!opened.contains("a new question"), "the panes on screen are the opened session's:\n{opened}");
    tmux.type_text("and the Rhine?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the follow-up", slow, |s| s.contains("› and the Rhine?"));
    tmux.keys(&["C-q"]);
    let end = tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
    assert!(end.contains("cohort: session 20250101-000000"), "the session in use at the end:\n{end}");
    let old = sessions.join("20250101-000000");
    let pane1 = std::fs::read_to_string(old.join("pane-1.jsonl")).unwrap();
    assert!(pane1.contains("\"text\":\"and the Rhine?\""), "the follow-up went to the opened session: {pane1}");
    assert_eq!(std::fs::read_to_string(old.join("title.txt")).unwrap().trim(), "rivers");
    assert!(!sessions.join("20250102-000000").exists(), "deleted");
    let left = std::fs::read_dir(&sessions).unwrap().filter_map(|e| e.ok()).count();
    assert_eq!(left, 2, "the session started in is kept, with its question");
}

/// Issue 40 (item 5): a code line wider than the pane is cut at its edge with `…`, not wrapped;
/// shift+right scrolls the pane's code sideways to show the rest (`…` in the gutter for what is
/// hidden on the left) while the prose around it stays, and shift+left brings it back. The
/// answer is a saved session's, opened from the session list, so its text is known.
#[test]
fn code_blocks_scroll_sideways() {
    let launched =
        launch(Launch { tag: "code", size: (60, 20), max_tokens: 12, env: "", args: "--panes 1", after: "" });
    let Some((home, tmux)) = launched else { return };
    let slow = Duration::from_secs(60);
    let sessions = home.path().join("data").join("transcripts");
    let answer = "Here it is:\n```rust\nlet s = \"0123456789 this line runs well past the edge of a narrow pane TAIL-MARK\";\n```\nDone.";
    save_session(&sessions, "20250101-000000", "show a long line", answer);
    tmux.keys(&["M-o"]);
    tmux.wait_for("the session list", slow, |s| s.contains("sessions 1 saved") && s.contains("20250101-000000"));
    tmux.keys(&["Enter"]);
    let cut = tmux.wait_for("the session opened", slow, |s| s.contains("│ let s = \"0123456789"));
    assert!(!cut.contains("TAIL-MARK") && cut.contains("…"), "cut at the edge, not wrapped:\n{cut}");
    for _ in 0..8 {
        tmux.keys(&["S-Right"]);
    }
    let scrolled = tmux.wait_for("the code scrolled", slow, |s| s.contains("TAIL-MARK\";") && s.contains("│…"));
    assert!(scrolled.contains("Here it is:") && scrolled.contains("Done."), "the prose stays:\n{scrolled}");
    assert!(!scrolled.contains("0123456789"), "the start of the line is hidden:\n{scrolled}");
    for _ in 0..8 {
        tmux.keys(&["S-Left"]);
    }
    tmux.wait_for("the code back at its start", slow, |s| {
        s.contains("│ let s = \"0123456789") && !s.contains("TAIL-MARK")
    });
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
}

/// Issue 40: keys the defects changed, through a real terminal: alt+enter starts a new line in
/// the box (two lines, then enter sends both as one message); esc in zoom leaves zoom and cancels
/// nothing (a second esc cancels); ctrl+c after an answer only asks, the bottom bar saying so,
/// and a second ctrl+c quits.
#[test]
fn alt_enter_esc_in_zoom_and_ctrl_c_twice() {
    let launched =
        launch(Launch { tag: "keys", size: (120, 30), max_tokens: 2000, env: "", args: "--panes 2", after: "" });
    let Some((home, tmux)) = launched else { return };
    let slow = Duration::from_secs(120);
    tmux.type_text("first line");
    tmux.keys(&["M-Enter"]);
    tmux.type_text("second line");
    let typed = tmux.wait_for("two lines in the box", slow, |s| s.contains("second line"));
    assert!(typed.contains("first line") && typed.contains("1 · idle"), "alt+enter sent the message:\n{typed}");
    tmux.keys(&["Enter"]);
    tmux.wait_for("pane 1 to decode", slow, |s| s.contains("1 · decoding"));

    tmux.keys(&["C-z"]);
    tmux.wait_for("pane 1 zoomed", slow, |s| !s.contains("2 · idle"));
    tmux.keys(&["Escape"]);
    let back = tmux.wait_for("the grid again", slow, |s| s.contains("2 · idle"));
    assert!(back.contains("1 · decoding"), "esc in zoom cancelled the answer:\n{back}");
    tmux.keys(&["Escape"]);
    tmux.wait_for("pane 1 cancelled by the second esc", slow, |s| s.contains("1 · cancelled"));

    tmux.keys(&["C-c"]);
    let asked = tmux.wait_for("the quit hint", slow, |s| s.contains("ctrl+c again within 2 s quits"));
    assert!(!asked.contains("COHORT-EXITED"), "{asked}");
    tmux.keys(&["C-c"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
    let sessions = home.path().join("data").join("transcripts");
    let session = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    let pane1 = std::fs::read_to_string(session.join("pane-1.jsonl")).unwrap();
    assert!(pane1.contains(r#""text":"first line\nsecond line""#), "one message of two lines:\n{pane1}");
}

#[test]
fn a_draft_shows_its_share_of_the_window_and_an_overflow_offers_to_leave_out_old_turns() {
    // max_tokens 4000 of the fixture's 4096 positions: a first question fits, the second does not
    // once the first has an answer of 100 tokens.
    let launched =
        launch(Launch { tag: "window", size: (200, 30), max_tokens: 4000, env: "", args: "--panes 1", after: "" });
    let Some((_home, tmux)) = launched else { return };
    let slow = Duration::from_secs(120);
    tmux.type_text("a first question");
    tmux.wait_for("the draft's count", slow, |s| s.contains("draft ") && s.contains(" + 4000 of 4096"));
    tmux.keys(&["Enter"]);
    tmux.wait_for("an answer of 100 tokens", slow, |s| footer_tokens(s, 0).is_some_and(|n| n >= 100));
    tmux.keys(&["Escape"]);
    tmux.wait_for("the answer to stop", slow, |s| s.contains("1 · cancelled"));
    tmux.type_text("and a second one");
    tmux.wait_for("the overflow shown", slow, |s| s.contains("offers to leave out old turns"));
    tmux.keys(&["Enter"]);
    let offer = tmux.wait_for("the offer", slow, |s| s.contains("leaves out the oldest 1 turn"));
    assert!(offer.contains("and a second one"), "the draft left the box:\n{offer}");
    tmux.keys(&["Enter"]);
    let sent = tmux.wait_for("the message to go without the first turn", slow, |s| {
        s.contains("left out to fit the context window") && (s.contains("1 · decoding") || s.contains("1 · done"))
    });
    assert!(!sent.contains("1 · error"), "{sent}");
    tmux.keys(&["Escape"]);
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
}

/// Issue 58: `--resume PATH` read the folder named but appended the new turns to
/// `<data dir>/transcripts/<its name>`, so a local session of the same name got another
/// conversation's turns. New turns now go to the folder resumed.
#[test]
fn a_session_resumed_by_path_gets_its_new_turns_in_that_folder() {
    let elsewhere = tempfile::tempdir().unwrap();
    save_session(elsewhere.path(), "trip", "where is Lyon?", "on the Rhone");
    let folder = elsewhere.path().join("trip");
    let args = format!("--panes 1 --resume {}", folder.display());
    let launched =
        launch(Launch { tag: "resume-path", size: (120, 30), max_tokens: 12, env: "", args: &args, after: "" });
    let Some((home, tmux)) = launched else { return };
    let slow = Duration::from_secs(60);
    let sessions = home.path().join("data").join("transcripts");
    save_session(&sessions, "trip", "a local question", "a local answer");
    tmux.wait_for("the resumed conversation", slow, |s| s.contains("› where is Lyon?"));
    tmux.type_text("and Geneva?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the follow-up's answer", slow, |s| s.contains("› and Geneva?") && s.contains("1 · done"));
    tmux.keys(&["C-q"]);
    let end = tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
    let resumed = std::fs::read_to_string(folder.join("pane-1.jsonl")).unwrap();
    assert!(resumed.contains("\"text\":\"and Geneva?\""), "the follow-up is not in the folder resumed: {resumed}");
    let local = std::fs::read_to_string(sessions.join("trip").join("pane-1.jsonl")).unwrap();
    assert!(!local.contains("and Geneva?"), "the follow-up went to the local session of the same name: {local}");
    assert!(end.contains(&folder.display().to_string()), "the session's folder is named at exit:\n{end}");
}

/// Issue 58: ctrl+q 0.2-2 s after the screen opens, while the model still loads, ended the process
/// with SIGSEGV, "double free or corruption" or a deadlock (4 of 12 here): the process exited while
/// the loading thread was inside MLX, whose static state was being torn down under it. Quitting at
/// any moment of the load now ends with exit 0. On the default model, whose load (with its exactness
/// checks) takes long enough to quit inside it.
#[test]
fn quitting_while_the_model_loads_never_crashes() {
    if !common::tmux_or_skip("quitting_while_the_model_loads_never_crashes") {
        return;
    }
    let model = common::smollm2_with_head("quitting_while_the_model_loads_never_crashes");
    let home = tempfile::tempdir().unwrap();
    for (round, delay_ms) in
        [200u64, 500, 800, 1100, 1400, 1700, 2000, 500, 800, 1100, 1400, 1700].into_iter().enumerate()
    {
        let command = format!(
            "COHORT_HOME={} {} -m {}; echo COHORT-EXITED-$?; sleep 600",
            home.path().display(),
            env!("CARGO_BIN_EXE_cohort"),
            model.path().display()
        );
        let tmux = Tmux::start(&format!("cohort-e2e-quit-load-{}-{round}", std::process::id()), 120, 30, &command);
        std::thread::sleep(Duration::from_millis(delay_ms));
        tmux.keys(&["C-q"]);
        let end = tmux.wait_for("cohort to exit", Duration::from_secs(60), |s| s.contains("COHORT-EXITED-"));
        assert!(end.contains("COHORT-EXITED-0"), "quit {delay_ms} ms into the load:\n{end}");
    }
}

/// Issue 58, item 16: on an 80x24 terminal the profile's eight panes were 18 columns each, their
/// hints cut. The start-up count opens as many as fit at 36x8 (four here, the top bar says so);
/// `--panes 8` still opens eight.
#[test]
fn an_80x24_terminal_opens_the_panes_that_fit() {
    let launched = launch(Launch { tag: "fit", size: (80, 24), max_tokens: 12, env: "", args: "", after: "" });
    let Some((_home, tmux)) = launched else { return };
    let slow = Duration::from_secs(30);
    let screen = tmux.wait_for("the fitted panes", slow, |s| s.contains("┌ 4 ·"));
    assert!(!screen.contains("┌ 5 ·"), "more panes than fit:\n{screen}");
    assert!(screen.contains("│ 4 panes │"), "{screen}");
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
    let launched =
        launch(Launch { tag: "fit8", size: (80, 24), max_tokens: 12, env: "", args: "--panes 8", after: "" });
    let Some((_home, tmux)) = launched else { return };
    tmux.wait_for("eight panes as asked", slow, |s| s.contains("┌ 8 ·"));
    tmux.keys(&["C-q"]);
    tmux.wait_for("cohort to exit", slow, |s| s.contains("COHORT-EXITED-0"));
}

/// Issue 54: a resumed session starts warm. Quitting writes the engine's prompt cache into the
/// session's folder; `--resume` reads it back (the notice says how much) and the follow-up
/// resumes from it. On the default model, whose prompt reads split anywhere exactly on the CPU
/// (the fixture's, on its quantized kernel, do not: its cache stays off).
#[test]
fn a_resumed_session_continues_warm_from_the_state_saved_at_quit() {
    if !common::tmux_or_skip("a_resumed_session_continues_warm_from_the_state_saved_at_quit") {
        return;
    }
    let model = common::smollm2_with_head("a_resumed_session_continues_warm_from_the_state_saved_at_quit");
    let home = tempfile::tempdir().unwrap();
    let run = format!(
        "COHORT_HOME={} {} -m {} --panes 1",
        home.path().display(),
        env!("CARGO_BIN_EXE_cohort"),
        model.path().display()
    );
    let command = format!("{run}; echo COHORT-EXITED-$?; {run} --resume; echo COHORT-RESUMED-$?; sleep 600");
    let tmux = Tmux::start(&format!("cohort-e2e-resume-warm-{}", std::process::id()), 120, 30, &command);
    let slow = Duration::from_secs(120);
    tmux.wait_for("the model to load", slow, |s| s.contains("· mtp │"));
    tmux.type_text("Where is Lyon?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the answer", slow, |s| s.contains("1 · done"));
    tmux.keys(&["C-q"]);
    tmux.wait_for("the resumed session, warm", slow, |s| s.contains("resumed warm: the state of 1 conversation"));
    let sessions = home.path().join("data").join("transcripts");
    let session = std::fs::read_dir(&sessions).unwrap().next().unwrap().unwrap().path();
    assert!(session.join("prompt-cache.safetensors").is_file(), "no saved state in {}", session.display());
    tmux.type_text("And Geneva?");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the follow-up's answer", slow, |s| s.contains("› And Geneva?") && s.contains("1 · done"));
    tmux.keys(&["F3"]);
    let inspector = tmux.wait_for("the inspector's prompt cache line", slow, |s| s.contains("hits, "));
    // The line wraps in the panel: "1 hits" may start a line.
    let one_hit = inspector.lines().any(|l| l.contains(" 1 hits, ") || l.contains("│1 hits, "));
    assert!(inspector.contains("prompt cache exact · ") && one_hit, "the follow-up did not resume:\n{inspector}");
    tmux.keys(&["C-q"]);
    tmux.wait_for("the resumed run to exit", slow, |s| s.contains("COHORT-RESUMED-0"));
}
