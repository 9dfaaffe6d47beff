//! Transcripts: appended per event, read back for `--resume`, a torn last line skipped, an
//! answer that never finished shown as interrupted.

use std::io::Write;

use cohort::engine::request::{FinishReason, Stats};
use cohort::engine::telemetry::RowState;
use cohort::tui::fixture;
use cohort::tui::transcript::{
    Record, TranscriptWriter, latest_session, load_session, new_session_name, session_profile,
};

fn user(request: &str, text: &str) -> Record {
    Record::User { request: request.into(), text: text.into(), replaces: None, system: None }
}
fn replacing(request: &str, text: &str, old: &str) -> Record {
    Record::User { request: request.into(), text: text.into(), replaces: Some(old.into()), system: None }
}
fn delta(request: &str, text: &str) -> Record {
    Record::Delta { request: request.into(), text: text.into() }
}
fn done(request: &str, finish: FinishReason, text: &str) -> Record {
    Record::Done { request: request.into(), finish, text: text.into(), error: None, stats: Stats::default() }
}

#[test]
fn a_session_reads_back_into_turns() {
    let dir = tempfile::tempdir().unwrap();
    let session = new_session_name(dir.path());
    let mut writer = TranscriptWriter::new(dir.path(), &session, "throughput", Some("m".into()));
    for r in [user("a", "first"), delta("a", "one "), delta("a", "two"), done("a", FinishReason::Stop, "one two")] {
        writer.append(1, &r).unwrap();
    }
    for r in [user("b", "count"), delta("b", "1 2"), done("b", FinishReason::Cancelled, "1 2")] {
        writer.append(2, &r).unwrap();
    }
    // Pane 3 was mid-answer when the process died, in the middle of writing a line.
    for r in [user("c", "long one"), delta("c", "so far")] {
        writer.append(3, &r).unwrap();
    }
    let mut file = std::fs::OpenOptions::new().append(true).open(writer.pane_path(3)).unwrap();
    file.write_all(b"{\"t\":1,\"kind\":\"delta\",\"requ").unwrap();
    drop(writer);

    assert_eq!(latest_session(dir.path()).as_deref(), Some(session.as_str()));
    let (name, _, panes) = load_session(dir.path(), &session).unwrap();
    assert_eq!(name, session);
    assert_eq!(panes.iter().map(|p| p.id).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!((panes[0].turns[0].answer.as_str(), panes[0].turns[0].finish), ("one two", Some(FinishReason::Stop)));
    assert_eq!(panes[1].turns[0].finish, Some(FinishReason::Cancelled));
    let torn = &panes[2].turns[0];
    assert_eq!((torn.answer.as_str(), torn.interrupted), ("so far", true));

    let mut app = fixture::app(4, "dark");
    app.restore(panes);
    let states: Vec<RowState> = app.panes.iter().map(|p| p.state).collect();
    assert_eq!(states, [RowState::Done, RowState::Cancelled, RowState::Cancelled, RowState::Idle]);
    assert_eq!(app.panes[3].id, 4, "new panes get fresh ids (fresh transcript files)");
    // Resumed conversations continue: the next prompt carries the restored turns.
    assert_eq!(app.panes[0].messages_with(None, "next").len(), 3);
}

#[test]
fn a_cleared_pane_reads_back_empty_and_sessions_get_unique_names() {
    let dir = tempfile::tempdir().unwrap();
    let first = new_session_name(dir.path());
    let mut writer = TranscriptWriter::new(dir.path(), &first, "p", None);
    writer.append(1, &user("a", "x")).unwrap();
    writer.append(1, &Record::Clear).unwrap();
    let second = cohort::tui::transcript::reserve_session(dir.path()).unwrap();
    let third = cohort::tui::transcript::reserve_session(dir.path()).unwrap();
    assert!(first != second && second != third, "sessions started in the same second get a suffix");
    assert_eq!(latest_session(dir.path()).as_deref(), Some(first.as_str()), "empty sessions are not resumed");
    let (_, _, panes) = load_session(dir.path(), &first).unwrap();
    assert!(panes[0].turns.is_empty());
    assert!(load_session(dir.path(), "no-such-session").is_err());
}

/// A record cut short (a full disk mid-write, or a crash) must never swallow the next one: the
/// writer starts a fresh line when the file does not end with one, in this run or a resumed one.
#[test]
fn a_torn_record_never_swallows_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let session = new_session_name(dir.path());
    let mut writer = TranscriptWriter::new(dir.path(), &session, "throughput", None);
    for r in [user("a", "first"), done("a", FinishReason::Stop, "answer one")] {
        writer.append(1, &r).unwrap();
    }
    // A write that failed halfway (the disk filled), then space came back.
    let tear = |path: &std::path::Path| {
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        file.write_all(b"{\"t\":1,\"kind\":\"delta\",\"requ").unwrap();
    };
    tear(&writer.pane_path(1));
    for r in [user("b", "second"), done("b", FinishReason::Stop, "answer two")] {
        writer.append(1, &r).unwrap();
    }
    let path = writer.pane_path(1);
    drop(writer);
    // The process died mid-line; the session is resumed and goes on.
    tear(&path);
    let mut resumed = TranscriptWriter::new(dir.path(), &session, "throughput", None);
    for r in [user("c", "third"), done("c", FinishReason::Stop, "answer three")] {
        resumed.append(1, &r).unwrap();
    }
    let (_, _, panes) = load_session(dir.path(), &session).unwrap();
    let answers: Vec<&str> = panes[0].turns.iter().map(|t| t.answer.as_str()).collect();
    assert_eq!(answers, ["answer one", "answer two", "answer three"]);
}

/// After `--resume`, new turns get request ids the session has not used.
#[test]
fn a_resumed_session_never_reuses_request_ids() {
    let dir = tempfile::tempdir().unwrap();
    let session = new_session_name(dir.path());
    let mut app = fixture::app(1, "dark");
    let mut writer = TranscriptWriter::new(dir.path(), &session, "throughput", None);
    let used = format!("{}-p1-7", app.session);
    for r in [user(&used, "first"), done(&used, FinishReason::Stop, "answer")] {
        writer.append(1, &r).unwrap();
    }
    drop(writer);
    let (_, _, panes) = load_session(dir.path(), &session).unwrap();
    app.restore(panes);
    app.panes[0].input.set("next");
    let effects = app.handle_key(crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Enter,
        crossterm::event::KeyModifiers::NONE,
    ));
    let id = effects
        .iter()
        .find_map(|e| {
            if let cohort::tui::action::Effect::Submit { request, .. } = e { Some(request.id.clone()) } else { None }
        })
        .expect("a submit");
    let n: u64 = id.rsplit('-').next().unwrap().parse().unwrap();
    assert!(n > 7, "the new turn's id {id} reuses or precedes {used}");
}

fn temp_paths(root: &std::path::Path) -> cohort::platform::paths::Paths {
    cohort::platform::paths::Paths { config_dir: root.join("config"), data_dir: root.join("data") }
}

/// Issue 40: a session records the profile it ran with, and `--resume` without `--profile`
/// reopens with it; an explicit `--profile` wins; the newest header counts (a session resumed
/// with another profile keeps that one), and a profile switched to in the app counts too.
#[test]
fn a_resumed_session_reopens_with_its_profile() {
    use cohort::tui::startup_profile;
    let dir = tempfile::tempdir().unwrap();
    let paths = temp_paths(dir.path());
    let transcripts = dir.path().join("transcripts");
    let session = new_session_name(&transcripts);
    let (loaded, spec, notice) = startup_profile(Some("balanced"), None, &paths).unwrap();
    assert_eq!((loaded.name.as_str(), spec.as_str(), notice), ("balanced", "balanced", None));
    let mut writer = TranscriptWriter::new(&transcripts, &session, &spec, None);
    writer.append(1, &user("a", "first")).unwrap();
    drop(writer);
    let recorded = session_profile(&transcripts.join(&session));
    assert_eq!(recorded.as_deref(), Some("balanced"));

    let (loaded, spec, notice) = startup_profile(None, recorded.as_deref(), &paths).unwrap();
    assert_eq!((loaded.name.as_str(), spec.as_str(), notice), ("balanced", "balanced", None), "resume keeps it");
    let (loaded, _, _) = startup_profile(Some("latency"), recorded.as_deref(), &paths).unwrap();
    assert_eq!(loaded.name, "latency", "an explicit --profile wins");

    // Resumed with --profile latency, a new pane's header records it: the next resume uses it.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let mut resumed = TranscriptWriter::new(&transcripts, &session, "latency", None);
    resumed.append(1, &user("b", "second")).unwrap();
    resumed.append(2, &user("c", "third")).unwrap();
    assert_eq!(session_profile(&transcripts.join(&session)).as_deref(), Some("latency"));

    // Switched in the app (ctrl+p): recorded in the session's files, so the next resume uses it;
    // the conversation reads back as before, and a pane opened afterwards names it in its header.
    std::thread::sleep(std::time::Duration::from_millis(5));
    resumed.record_profile("b1-exact").unwrap();
    assert_eq!(session_profile(&transcripts.join(&session)).as_deref(), Some("b1-exact"));
    let (_, _, panes) = load_session(&transcripts, &session).unwrap();
    let asked: Vec<Vec<&str>> = panes.iter().map(|p| p.turns.iter().map(|t| t.user.as_str()).collect()).collect();
    assert_eq!(asked, [vec!["first", "second"], vec!["third"]]);
    resumed.append(3, &user("d", "fourth")).unwrap();
    drop(resumed);
    assert_eq!(session_profile(&transcripts.join(&session)).as_deref(), Some("b1-exact"));
    let header = std::fs::read_to_string(transcripts.join(&session).join("pane-3.jsonl")).unwrap();
    assert!(header.lines().next().unwrap().contains(r#""profile":"b1-exact""#), "{header}");
    let (loaded, spec, notice) = startup_profile(None, Some("b1-exact"), &paths).unwrap();
    assert_eq!((loaded.name.as_str(), spec.as_str(), notice), ("b1-exact", "b1-exact", None), "resume reopens with it");
}

/// A profile file given by path is recorded by its absolute path, so a resume from another
/// folder finds it; a recorded profile that is gone (or broken) falls back to the default with a
/// notice naming it, never an error.
#[test]
fn a_resumed_profile_file_is_found_by_path_and_a_missing_one_falls_back() {
    use cohort::tui::startup_profile;
    let dir = tempfile::tempdir().unwrap();
    let paths = temp_paths(dir.path());
    let file = dir.path().join("mine").join("two.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "panes = 2\n").unwrap();
    let (loaded, spec, _) = startup_profile(Some(file.to_str().unwrap()), None, &paths).unwrap();
    assert_eq!(loaded.profile.panes, Some(2));
    assert!(std::path::Path::new(&spec).is_absolute(), "recorded as an absolute path: {spec}");
    let (loaded, _, notice) = startup_profile(None, Some(&spec), &paths).unwrap();
    assert_eq!((loaded.profile.panes, notice), (Some(2), None));

    std::fs::remove_file(&file).unwrap();
    let (loaded, spec, notice) = startup_profile(None, Some(file.to_str().unwrap()), &paths).unwrap();
    assert_eq!(loaded.name, cohort::config::profile::FALLBACK_PROFILE);
    assert_eq!(spec, cohort::config::profile::FALLBACK_PROFILE);
    let notice = notice.expect("a notice");
    assert!(notice.contains("two.toml") && notice.contains(cohort::config::profile::FALLBACK_PROFILE), "{notice}");
    let (loaded, _, notice) = startup_profile(None, Some("deleted-long-ago"), &paths).unwrap();
    assert_eq!(loaded.name, cohort::config::profile::FALLBACK_PROFILE);
    assert!(notice.unwrap().contains("deleted-long-ago"));
    // An explicit profile that does not exist is still an error.
    assert!(startup_profile(Some("deleted-long-ago"), None, &paths).is_err());
    // A session with no header (or none readable) records nothing.
    assert_eq!(session_profile(&dir.path().join("nowhere")), None);
}

/// Issue 40: an edited or regenerated turn is recorded as a `user` record naming the request it
/// replaces; read back, the replaced turn (and anything after it) is gone, so `--resume` shows
/// what the user saw. Transcripts written before the field read as they always did.
#[test]
fn an_edited_turn_reads_back_in_place_of_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let session = new_session_name(dir.path());
    let mut writer = TranscriptWriter::new(dir.path(), &session, "throughput", None);
    let records = [
        user("a", "first"),
        done("a", FinishReason::Stop, "answer one"),
        user("b", "secnod"),
        done("b", FinishReason::Stop, "answer two"),
        // Edited: "secnod" and its answer are replaced.
        replacing("c", "second", "b"),
        done("c", FinishReason::Stop, "answer two, edited"),
        // Regenerated: the same question, a new answer.
        replacing("d", "second", "c"),
        delta("d", "answer two, "),
        done("d", FinishReason::Stop, "answer two, regenerated"),
    ];
    for r in &records {
        writer.append(1, r).unwrap();
    }
    let text = std::fs::read_to_string(writer.pane_path(1)).unwrap();
    assert!(text.contains("\"replaces\":\"b\""), "{text}");
    assert_eq!(text.matches("replaces").count(), 2, "written only where a turn is replaced: {text}");
    drop(writer);
    let (_, _, panes) = load_session(dir.path(), &session).unwrap();
    let turns: Vec<(&str, &str)> = panes[0].turns.iter().map(|t| (t.user.as_str(), t.answer.as_str())).collect();
    assert_eq!(turns, [("first", "answer one"), ("second", "answer two, regenerated")]);

    // A line from before the field (no `replaces`) still reads.
    let old = dir.path().join("old");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("pane-1.jsonl"), "{\"t\":1,\"kind\":\"user\",\"request\":\"x\",\"text\":\"hi\"}\n")
        .unwrap();
    TranscriptWriter::new(dir.path(), "old", "p", None).append(1, &done("x", FinishReason::Stop, "hello")).unwrap();
    let (_, _, panes) = load_session(dir.path(), old.to_str().unwrap()).unwrap();
    assert_eq!((panes[0].turns[0].user.as_str(), panes[0].turns[0].answer.as_str()), ("hi", "hello"));
}

/// Issue 40 (item 2): a pane's own settings (its generation mode too) are recorded when set and
/// restored by `--resume` (the last record wins; `null` = back to the profile's); a pane without a record takes its
/// profile's `[pane.N]`, if any.
#[test]
fn a_resumed_pane_gets_its_own_settings_back() {
    let dir = tempfile::tempdir().unwrap();
    let session = new_session_name(dir.path());
    let mut writer = TranscriptWriter::new(dir.path(), &session, "throughput", None);
    let base = fixture::settings(3).chat();
    let mut terse = base.clone();
    terse.system = Some("Be terse.".into());
    terse.sampler.temperature = 0.1;
    terse.mode = Some(cohort::engine::request::GenerationMode::Ar);
    let settings = |s: Option<&cohort::config::profile::ChatSettings>| Record::Settings { settings: s.cloned() };
    for r in [settings(Some(&terse)), user("a", "first"), done("a", FinishReason::Stop, "one")] {
        writer.append(1, &r).unwrap();
    }
    for r in [settings(Some(&terse)), user("b", "first"), settings(None)] {
        writer.append(2, &r).unwrap();
    }
    writer.append(3, &user("c", "first")).unwrap();
    let text = std::fs::read_to_string(writer.pane_path(1)).unwrap();
    assert!(text.contains("\"kind\":\"settings\"") && text.contains("Be terse."), "{text}");
    assert!(text.contains("\"mode\":\"ar\""), "the pane's generation mode is recorded: {text}");
    drop(writer);
    let (_, _, panes) = load_session(dir.path(), &session).unwrap();
    let recorded: Vec<_> = panes.iter().map(|p| p.settings.clone()).collect();
    assert_eq!(recorded, [Some(Some(terse.clone())), Some(None), None]);

    let mut from_profile = base.clone();
    from_profile.max_tokens = 9;
    let mut profile_settings = fixture::settings(3);
    profile_settings.pane_settings = [(2, from_profile.clone()), (3, from_profile.clone())].into();
    let mut app = cohort::tui::app::App::new(
        profile_settings,
        cohort::config::theme::Theme::builtin("dark"),
        cohort::config::keymap::Keymap::default(),
        &session,
    );
    app.restore(panes);
    let restored: Vec<_> = app.panes.iter().map(|p| p.settings.clone()).collect();
    assert_eq!(restored, [Some(terse), None, Some(from_profile)], "recorded, reset, the profile's [pane.3]");
}

/// Issue 40: a branched pane's transcript (its `branch` record, then the turns it took) reads
/// back as the branch showed them, so `--resume` brings the branch back beside its source.
#[test]
fn a_branched_pane_reads_back_with_the_turns_it_took() {
    use cohort::tui::action::Effect;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let dir = tempfile::tempdir().unwrap();
    let session = new_session_name(dir.path());
    let mut writer = TranscriptWriter::new(dir.path(), &session, "throughput", None);
    let mut app = fixture::app(1, "dark");
    let t0 = std::time::Instant::now();
    let mut effects = Vec::new();
    for (q, a, finish) in [("first", "one", FinishReason::Stop), ("second", "two, cut", FinishReason::Cancelled)] {
        app.panes[0].input.set(q);
        effects.extend(app.update(cohort::tui::action::Action::Command(cohort::config::keymap::Command::Send)));
        let pane = app.panes[0].id;
        let id = app.panes[0].in_flight.as_ref().unwrap().id.clone();
        let mut result = cohort::engine::request::RequestResult::ended(&id, finish);
        result.text = a.into();
        let event = cohort::engine::row::RowEvent::Done(Box::new(result));
        effects.extend(app.update(cohort::tui::action::Action::Row { pane, event, at: t0 }));
    }
    effects.extend(app.handle_key(KeyEvent::new(KeyCode::Char('b'), KeyModifiers::ALT)));
    effects.extend(app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE)));
    for effect in &effects {
        if let Effect::Record { pane, record } = effect {
            writer.append(*pane, record).unwrap();
        }
    }
    let text = std::fs::read_to_string(writer.pane_path(2)).unwrap();
    assert!(text.contains("\"kind\":\"branch\",\"pane\":1"), "{text}");
    drop(writer);
    let (_, _, panes) = load_session(dir.path(), &session).unwrap();
    let turns = |i: usize| -> Vec<(String, String, Option<FinishReason>)> {
        panes[i].turns.iter().map(|t| (t.user.clone(), t.answer.clone(), t.finish)).collect()
    };
    assert_eq!(turns(1), turns(0), "the branch took the whole conversation");
    assert_eq!(turns(1)[1], ("second".into(), "two, cut".into(), Some(FinishReason::Cancelled)));
}

/// Issue 40: the session list reads every saved session (panes, turns, first question, when it
/// was last written), newest first; a title given in the app is kept beside the transcripts (the
/// folder keeps its name) and `--resume` finds a session by it; a session can be deleted, by name
/// only (never a path).
#[test]
fn sessions_are_listed_titled_found_by_title_and_deleted() {
    use cohort::tui::transcript::{
        check_session_title, delete_session, list_sessions, session_title, set_session_title,
    };
    let dir = tempfile::tempdir().unwrap();
    let mut old = TranscriptWriter::new(dir.path(), "20260101-100000", "throughput", None);
    for r in [user("a", "an old question\nwith a second line"), done("a", FinishReason::Stop, "an old answer")] {
        old.append(1, &r).unwrap();
    }
    old.append(2, &user("b", "another")).unwrap();
    drop(old);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut new = TranscriptWriter::new(dir.path(), "20260102-100000", "throughput", None);
    new.append(3, &user("c", "a newer question")).unwrap();
    drop(new);
    std::fs::create_dir(dir.path().join("empty")).unwrap();

    let list = list_sessions(dir.path());
    let names: Vec<&str> = list.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["20260102-100000", "20260101-100000"], "newest first; a folder without transcripts is none");
    let (newer, older) = (&list[0], &list[1]);
    assert_eq!((older.panes, older.turns, older.first.as_deref()), (2, 2, Some("an old question\nwith a second line")));
    assert_eq!((newer.panes, newer.turns, newer.title.as_deref()), (1, 1, None));
    assert!(newer.modified > older.modified);

    set_session_title(dir.path(), "20260101-100000", Some("  rivers of Europe ")).unwrap();
    assert_eq!(session_title(&dir.path().join("20260101-100000")).as_deref(), Some("rivers of Europe"));
    assert_eq!(list_sessions(dir.path())[1].label(), "rivers of Europe");
    let (name, _, panes) = load_session(dir.path(), "rivers of Europe").unwrap();
    assert_eq!((name.as_str(), panes.len()), ("20260101-100000", 2), "--resume takes the title");
    set_session_title(dir.path(), "20260101-100000", None).unwrap();
    assert_eq!(session_title(&dir.path().join("20260101-100000")), None, "back to the folder's name");
    assert!(check_session_title("a/b").is_err() && check_session_title(&"x".repeat(61)).is_err());
    assert!(set_session_title(dir.path(), "20260101-100000", Some("tab\there")).is_err());

    assert!(delete_session(dir.path(), "../outside").is_err(), "a name, never a path");
    assert!(delete_session(dir.path(), "nowhere").is_err());
    delete_session(dir.path(), "20260101-100000").unwrap();
    assert!(!dir.path().join("20260101-100000").exists());
    assert_eq!(list_sessions(dir.path()).len(), 1);
}

/// Issue 58, item 13: `--resume` with no name opened the newest folder by name, not the session
/// last used. The one written to last is resumed.
#[test]
fn resume_picks_the_session_written_to_last_not_the_newest_name() {
    let dir = tempfile::tempdir().unwrap();
    let older = cohort::tui::transcript::reserve_session(dir.path()).unwrap();
    let newer = cohort::tui::transcript::reserve_session(dir.path()).unwrap();
    assert!(older < newer);
    for (name, request) in [(&newer, "b"), (&older, "a")] {
        let mut writer = TranscriptWriter::new(dir.path(), name, "p", None);
        writer.append(1, &user(request, "x")).unwrap();
    }
    // The older session was used after the newer one: its file changed last.
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
    let file = std::fs::File::options().append(true).open(dir.path().join(&older).join("pane-1.jsonl")).unwrap();
    file.set_modified(later).unwrap();
    assert_eq!(latest_session(dir.path()).as_deref(), Some(older.as_str()));
}

/// Issue 58, item 13: a resumed pane took the profile's `[pane.N]` settings by its place on the
/// screen, so with panes 1 and 3 restored, pane 3 got `[pane.2]`'s. Each takes its own number's,
/// and the session's pane count comes back with it.
#[test]
fn resumed_panes_keep_their_numbers_settings_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let session = new_session_name(dir.path());
    let mut writer = TranscriptWriter::new(dir.path(), &session, "p", None);
    for pane in [1, 3] {
        writer.append(pane, &user(&format!("r{pane}"), "hello")).unwrap();
    }
    writer.record_pane_count(5).unwrap();
    drop(writer);
    let (_, folder, panes) = load_session(dir.path(), &session).unwrap();
    assert_eq!(cohort::tui::transcript::session_pane_count(&folder), Some(5));
    let mut app = fixture::app(2, "dark");
    let chat = app.settings.chat();
    let own = |max_tokens: usize| cohort::config::profile::ChatSettings { max_tokens, ..chat.clone() };
    app.settings.pane_settings.insert(2, own(22));
    app.settings.pane_settings.insert(3, own(33));
    app.settings.panes = 5;
    app.restore(panes);
    assert_eq!(app.panes.iter().map(|p| p.id).collect::<Vec<_>>(), [1, 3, 4, 5, 6]);
    assert_eq!(app.panes[1].settings.as_ref().map(|s| s.max_tokens), Some(33), "pane 3 takes [pane.3]");
}

/// A session nothing was typed in leaves no folder, even when quitting wrote its pane count (or
/// the engine its prompt cache) there; one with a transcript keeps all three.
#[test]
fn an_unused_session_leaves_no_folder_even_with_its_pane_count_written() {
    use cohort::tui::transcript::{release_session_if_empty, reserve_session};
    let dir = tempfile::tempdir().unwrap();
    let unused = reserve_session(dir.path()).unwrap();
    let writer = TranscriptWriter::new(dir.path(), &unused, "p", None);
    writer.record_pane_count(4).unwrap();
    std::fs::write(dir.path().join(&unused).join("prompt-cache.safetensors"), b"x").unwrap();
    assert!(release_session_if_empty(dir.path(), &unused));
    assert!(!dir.path().join(&unused).exists());
    let used = reserve_session(dir.path()).unwrap();
    let mut writer = TranscriptWriter::new(dir.path(), &used, "p", None);
    writer.append(1, &user("a", "x")).unwrap();
    writer.record_pane_count(4).unwrap();
    assert!(!release_session_if_empty(dir.path(), &used));
    assert!(dir.path().join(&used).join("panes.txt").is_file());
}
