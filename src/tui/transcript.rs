//! Transcripts: every pane's conversation appended as it streams, one JSONL file per pane per
//! session under `<data_dir>/transcripts/<session>/pane-<id>.jsonl`. Each event is one line
//! written with a single `write` on an append-mode file, so a crash (or a panic) loses at most
//! the line being written, and readers skip a torn last line. Finished answers are fsynced.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::pane::Turn;
use crate::config::profile::ChatSettings;
use crate::engine::api::{FinishReason, Stats};

/// One event of a pane's conversation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// First line of every file.
    Session {
        session: String,
        pane: u32,
        /// The profile in use, as `--profile` takes it: a name, or the absolute path of a
        /// profile file outside the profiles folder. `--resume` reopens with it.
        profile: String,
        model: Option<String>,
    },
    User {
        request: String,
        text: String,
        /// An edited or regenerated message: the request whose turn (and anything after it)
        /// this one replaces. Absent in files written before edits existed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces: Option<String>,
        /// The system prompt the request carried. Absent in files written before turns
        /// recorded it, and when there was none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        system: Option<String>,
    },
    Delta {
        request: String,
        text: String,
    },
    Done {
        request: String,
        finish: FinishReason,
        /// The whole answer (authoritative over the deltas).
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        stats: Stats,
    },
    /// The user started a new conversation in this pane.
    Clear,
    /// The turn of request `request` was left out of the conversation sent from here on, to fit
    /// the context window (the user agreed to it); its records stay.
    Dropped {
        request: String,
    },
    /// This pane was branched from pane `pane`'s conversation at the request `request`'s
    /// question (`answer`: its answer too). The turns it took follow as `user` and `done`
    /// records.
    Branch {
        pane: u32,
        request: String,
        answer: bool,
    },
    /// The pane's own system prompt, sampler and max_tokens from here on (set in the app);
    /// `null`: the profile's again. `--resume` restores the last one.
    Settings {
        settings: Option<ChatSettings>,
    },
    /// The profile switched to in the app (ctrl+p), as `--profile` takes it, from here on.
    /// `--resume` reopens with the newest of these and the headers.
    Profile {
        profile: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct Stamped {
    /// Milliseconds since the Unix epoch.
    t: u64,
    #[serde(flatten)]
    record: Record,
}

pub fn transcripts_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("transcripts")
}

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// `20261103-142501` (UTC), the session's name; later sessions sort after earlier ones.
pub fn timestamp_name(unix_s: u64) -> String {
    let (days, secs) = (unix_s / 86_400, unix_s % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}{month:02}{day:02}-{:02}{:02}{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A new session's folder name, unique under `dir`.
pub fn new_session_name(dir: &Path) -> String {
    let base = timestamp_name(unix_ms() / 1000);
    let mut name = base.clone();
    let mut n = 2;
    while dir.join(&name).exists() {
        name = format!("{base}-{n}");
        n += 1;
    }
    name
}

/// Create a new session's folder under `dir` and return its name. Creating it (rather than only
/// picking a name) reserves it: two cohorts started in the same second never share files.
pub fn reserve_session(dir: &Path) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    loop {
        let name = new_session_name(dir);
        match std::fs::create_dir(dir.join(&name)) {
            Ok(()) => return Ok(name),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create a session in {}", dir.display())),
        }
    }
}

/// Remove a session's folder if no transcript was written to it; true when it was removed. A
/// session with a transcript, a title or any file of a user's is kept.
pub fn release_session_if_empty(dir: &Path, session: &str) -> bool {
    let path = dir.join(session);
    let Ok(entries) = std::fs::read_dir(&path) else { return false };
    let names: Vec<std::ffi::OsString> = entries.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    // What a session gains beside its transcripts when it is left: its pane count, and the
    // engine's saved prompt cache (which holds no conversation of its own without them).
    let cache = crate::engine::api::PROMPT_CACHE_FILE;
    let kept_only_beside = |n: &std::ffi::OsString| n == PANES_FILE || n == cache;
    if !names.iter().all(kept_only_beside) {
        return false;
    }
    for name in &names {
        let _ = std::fs::remove_file(path.join(name));
    }
    // remove_dir refuses a folder that gained a file meanwhile.
    std::fs::remove_dir(&path).is_ok()
}

/// The session under `dir` used last: the one whose transcript was written to last (a session
/// resumed yesterday beats one started the day before and left), ties by name; the order the
/// session list shows ([`list_sessions`]), without reading every session.
pub fn latest_session(dir: &Path) -> Option<String> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some((last_written(&e.path())?, e.file_name().to_string_lossy().into_owned())))
        .max_by(|(ta, a), (tb, b)| ta.cmp(tb).then_with(|| session_order(a).cmp(&session_order(b))))
        .map(|(_, name)| name)
}

/// When a session's transcripts were last written (seconds since the epoch, the newest file's);
/// None for a folder without one.
fn last_written(folder: &Path) -> Option<u64> {
    std::fs::read_dir(folder)
        .ok()?
        .filter_map(|f| f.ok().map(|f| f.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|p| p.metadata().ok()?.modified().ok()?.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .max()
}

/// How many panes a session had when it was last left ([`TranscriptWriter::record_pane_count`]),
/// where it says and the count is one the TUI can open.
pub fn session_pane_count(session_dir: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(session_dir.join(PANES_FILE)).ok()?;
    text.trim().parse().ok().filter(|n| (1..=crate::config::profile::MAX_PANES).contains(n))
}

/// `20261103-142501-10` sorts after `...-9`: compare the numeric suffix as a number.
fn session_order(name: &str) -> (String, u64) {
    let parts: Vec<&str> = name.splitn(3, '-').collect();
    let suffix = parts.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    (format!("{}-{}", parts.first().unwrap_or(&""), parts.get(1).unwrap_or(&"")), suffix)
}

/// A saved session, as the session list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEntry {
    /// The folder's name (what `--resume` takes, as it takes the title).
    pub name: String,
    /// The name given in the app (`rename`), if any.
    pub title: Option<String>,
    pub panes: usize,
    pub turns: usize,
    /// The first question of its lowest-numbered pane with one.
    pub first: Option<String>,
    /// When a transcript of it was last written (Unix seconds).
    pub modified: u64,
}

impl SessionEntry {
    /// The title, else the folder's name.
    pub fn label(&self) -> &str {
        self.title.as_deref().unwrap_or(&self.name)
    }
}

/// The file in a session's folder holding the title given in the app.
pub const TITLE_FILE: &str = "title.txt";
/// The file in a session's folder that holds its pane count ([`session_pane_count`]).
pub const PANES_FILE: &str = "panes.txt";
/// A title's length at most, in characters.
pub const MAX_TITLE: usize = 60;

/// Every session under `dir` that holds a transcript, the one written to last first. A session
/// that cannot be read is left out.
pub fn list_sessions(dir: &Path) -> Vec<SessionEntry> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<SessionEntry> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let folder = e.path();
            let modified = last_written(&folder)?;
            let (_, _, panes) = load_session(dir, &name).ok()?;
            Some(SessionEntry {
                title: session_title(&folder),
                panes: panes.len(),
                turns: panes.iter().map(|p| p.turns.len()).sum(),
                first: panes.iter().find_map(|p| p.turns.first().map(|t| t.user.clone())),
                modified,
                name,
            })
        })
        .collect();
    out.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| session_order(&b.name).cmp(&session_order(&a.name))));
    out
}

/// The title a session was given in the app (its folder's `title.txt`), if any.
pub fn session_title(session_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(session_dir.join(TITLE_FILE)).ok()?;
    Some(text.trim().to_owned()).filter(|t| !t.is_empty())
}

/// A title the app can give a session: some text, at most `MAX_TITLE` characters, no control
/// characters and no `/` (`--resume` reads a `/` as a path).
pub fn check_session_title(title: &str) -> Result<()> {
    let title = title.trim();
    if title.chars().count() > MAX_TITLE {
        bail!("a session's name is at most {MAX_TITLE} characters");
    }
    if let Some(c) = title.chars().find(|c| c.is_control() || *c == '/') {
        bail!("{c:?} is not allowed in a session's name");
    }
    Ok(())
}

/// Give session `name` under `dir` a title (None or blank: back to its folder's name). The
/// folder keeps its name, so `--resume` takes either.
pub fn set_session_title(dir: &Path, name: &str, title: Option<&str>) -> Result<()> {
    let folder = session_folder(dir, name)?;
    let path = folder.join(TITLE_FILE);
    match title.map(str::trim).filter(|t| !t.is_empty()) {
        Some(title) => {
            check_session_title(title)?;
            std::fs::write(&path, format!("{title}\n")).with_context(|| format!("cannot write {}", path.display()))
        }
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(e).with_context(|| format!("cannot remove {}", path.display()))
            }
            _ => Ok(()),
        },
    }
}

/// Delete session `name`'s folder under `dir`, with every transcript and export in it.
pub fn delete_session(dir: &Path, name: &str) -> Result<()> {
    let folder = session_folder(dir, name)?;
    std::fs::remove_dir_all(&folder).with_context(|| format!("cannot delete {}", folder.display()))
}

/// The folder of session `name` directly under `dir` (a name, never a path).
fn session_folder(dir: &Path, name: &str) -> Result<PathBuf> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
        bail!("{name:?} is not a session's name");
    }
    let folder = dir.join(name);
    if !folder.is_dir() {
        bail!("no session {name} in {}", dir.display());
    }
    Ok(folder)
}

/// The session titled `title` under `dir` (the newest, when several are).
fn session_titled(dir: &Path, title: &str) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir() && session_title(&e.path()).as_deref() == Some(title))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max_by(|a, b| session_order(a).cmp(&session_order(b)))
        .map(|name| dir.join(name))
}

/// Appends records to one session's files.
pub struct TranscriptWriter {
    /// The transcripts folder (the sessions' parent).
    pub root: PathBuf,
    pub dir: PathBuf,
    pub session: String,
    profile: String,
    model: Option<String>,
    files: HashMap<u32, File>,
}

impl TranscriptWriter {
    /// Write into `<transcripts>/<session>/` (created on the first record).
    pub fn new(transcripts: &Path, session: &str, profile: &str, model: Option<String>) -> TranscriptWriter {
        TranscriptWriter {
            root: transcripts.to_owned(),
            dir: transcripts.join(session),
            session: session.to_owned(),
            profile: profile.to_owned(),
            model,
            files: HashMap::new(),
        }
    }

    /// Write into session `session` (under the same transcripts folder) from now on.
    pub fn switch(&mut self, session: &str) {
        self.files.clear();
        self.session = session.to_owned();
        self.dir = self.root.join(session);
    }

    /// Profile `profile` is in use from now on (switched to in the app): files opened from now
    /// on name it in their header, and each pane file the session already has records it, so
    /// `--resume` reopens with it. A session with no file yet records nothing now (its first
    /// header will).
    pub fn record_profile(&mut self, profile: &str) -> Result<()> {
        self.profile = profile.to_owned();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Ok(()) };
        let mut panes: Vec<u32> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_prefix("pane-")?.strip_suffix(".jsonl")?.parse().ok()
            })
            .collect();
        panes.sort_unstable();
        for pane in panes {
            self.append(pane, &Record::Profile { profile: profile.to_owned() })?;
        }
        Ok(())
    }

    /// The session had `panes` panes when it was left: `--resume` opens as many. Written only
    /// where the session has a folder (something was recorded), so an unused session still
    /// leaves none.
    pub fn record_pane_count(&self, panes: usize) -> Result<()> {
        if !self.dir.is_dir() {
            return Ok(());
        }
        let path = self.dir.join(PANES_FILE);
        std::fs::write(&path, format!("{panes}\n")).with_context(|| format!("cannot write {}", path.display()))
    }

    pub fn pane_path(&self, pane: u32) -> PathBuf {
        self.dir.join(format!("pane-{pane}.jsonl"))
    }

    pub fn append(&mut self, pane: u32, record: &Record) -> Result<()> {
        if !self.files.contains_key(&pane) {
            std::fs::create_dir_all(&self.dir).with_context(|| format!("cannot create {}", self.dir.display()))?;
            let path = self.pane_path(pane);
            let file = OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("cannot open {}", path.display()))?;
            let fresh = file.metadata().map(|m| m.len() == 0).unwrap_or(true);
            self.files.insert(pane, file);
            if fresh {
                let header = Record::Session {
                    session: self.session.clone(),
                    pane,
                    profile: self.profile.clone(),
                    model: self.model.clone(),
                };
                self.write(pane, &header)?;
            }
        }
        self.write(pane, record)?;
        if matches!(record, Record::Done { .. }) {
            // A finished answer is worth a disk sync; streaming deltas are not (hundreds a second).
            self.files[&pane].sync_data().ok();
        }
        Ok(())
    }

    fn write(&mut self, pane: u32, record: &Record) -> Result<()> {
        let file = self.files.get_mut(&pane).expect("opened above");
        // A line cut short before (a full disk, a crash) gets its end here, so this record starts
        // a line of its own instead of being glued onto the fragment and lost with it.
        let mut line = if ends_mid_line(file) { vec![b'\n'] } else { Vec::new() };
        serde_json::to_writer(&mut line, &Stamped { t: unix_ms(), record: record.clone() })?;
        line.push(b'\n');
        // One write per line: an O_APPEND write lands whole or (on a crash) as a torn tail line.
        file.write_all(&line).with_context(|| format!("cannot append to {}", self.pane_path(pane).display()))
    }
}

/// Whether the file's last byte is not a newline (an empty file ends cleanly).
fn ends_mid_line(file: &mut File) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(len) = file.metadata().map(|m| m.len()) else { return false };
    if len == 0 {
        return false;
    }
    let mut last = [0u8; 1];
    // Appends go to the end whatever the position, so moving it to read is harmless.
    let read = file.seek(SeekFrom::Start(len - 1)).and_then(|_| file.read_exact(&mut last));
    read.is_ok() && last[0] != b'\n'
}

/// A pane read back from a transcript.
#[derive(Debug, Clone)]
pub struct RestoredPane {
    pub id: u32,
    pub turns: Vec<Turn>,
    /// The pane's last settings record: its own settings, or `Some(None)` for the profile's;
    /// None when it has no such record (the profile's `[pane.N]` then applies).
    pub settings: Option<Option<ChatSettings>>,
}

/// Read every pane of a session. `spec` is a session name under `transcripts`, the title one was
/// given in the app, or a folder path.
pub fn load_session(transcripts: &Path, spec: &str) -> Result<(String, PathBuf, Vec<RestoredPane>)> {
    let mut dir = if spec.contains('/') { PathBuf::from(spec) } else { transcripts.join(spec) };
    if !dir.is_dir()
        && !spec.contains('/')
        && let Some(titled) = session_titled(transcripts, spec)
    {
        dir = titled;
    }
    if !dir.is_dir() {
        bail!("no session {spec} (sessions are folders in {})", transcripts.display());
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| spec.to_owned());
    let mut panes = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        let id = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("pane-"))
            .and_then(|n| n.strip_suffix(".jsonl"))
            .and_then(|n| n.parse::<u32>().ok());
        if let Some(id) = id {
            let (turns, settings) = read_pane(&path)?;
            panes.push(RestoredPane { id, turns, settings });
        }
    }
    panes.sort_by_key(|p| p.id);
    Ok((name, dir, panes))
}

/// The profile a session ran with: the newest of its files' headers and `profile` records (a
/// session resumed with another `--profile` and given a new pane since records that one; so does
/// a profile switched to in the app). None when none reads.
pub fn session_profile(session_dir: &Path) -> Option<String> {
    let Ok(entries) = std::fs::read_dir(session_dir) else { return None };
    entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|path| {
            let file = File::open(&path).ok()?;
            // Every line: a `profile` record may come anywhere. Lines that do not parse (a torn
            // one) are skipped.
            std::io::BufReader::new(file)
                .split(b'\n')
                .map_while(|line| line.ok())
                .filter_map(|line| match serde_json::from_slice::<Stamped>(line.trim_ascii_end()).ok()? {
                    Stamped { t, record: Record::Session { pane, profile, .. } } => Some(((t, pane), profile)),
                    Stamped { t, record: Record::Profile { profile } } => Some(((t, u32::MAX), profile)),
                    _ => None,
                })
                .max_by(|a, b| a.0.cmp(&b.0))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, profile)| profile)
}

/// Replay one file into turns. Lines that do not parse (a torn last line) are skipped.
pub fn read_turns(path: &Path) -> Result<Vec<Turn>> {
    read_pane(path).map(|(turns, _)| turns)
}

/// Replay one file into turns and the pane's last settings record (see [`RestoredPane`]).
pub fn read_pane(path: &Path) -> Result<(Vec<Turn>, Option<Option<ChatSettings>>)> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut turns: Vec<Turn> = Vec::new();
    let mut own = None;
    for line in std::io::BufReader::new(file).split(b'\n') {
        let line = line.with_context(|| format!("cannot read {}", path.display()))?;
        let Ok(Stamped { record, .. }) = serde_json::from_slice::<Stamped>(&line) else {
            continue;
        };
        match record {
            Record::Session { .. } | Record::Branch { .. } | Record::Profile { .. } => {}
            Record::Clear => turns.clear(),
            Record::Dropped { request } => {
                if let Some(t) = turns.iter_mut().find(|t| t.request_id == request) {
                    t.dropped = true;
                }
            }
            Record::Settings { settings } => own = Some(settings),
            Record::User { request, text, replaces, system } => {
                if let Some(old) = replaces
                    && let Some(at) = turns.iter().position(|t| t.request_id == old)
                {
                    turns.truncate(at);
                }
                turns.push(Turn { request_id: request, user: text, system, interrupted: true, ..Turn::default() })
            }
            Record::Delta { request, text } => {
                if let Some(t) = turns.iter_mut().rev().find(|t| t.request_id == request) {
                    t.answer.push_str(&text);
                }
            }
            Record::Done { request, finish, text, error, stats } => {
                if let Some(t) = turns.iter_mut().rev().find(|t| t.request_id == request) {
                    t.answer = text;
                    t.finish = Some(finish);
                    t.error = error;
                    t.stats = Some(stats);
                    t.interrupted = false;
                }
            }
        }
    }
    Ok((turns, own))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_are_utc_timestamps() {
        assert_eq!(timestamp_name(0), "19700101-000000");
        assert_eq!(timestamp_name(1_709_210_096), "20240229-123456");
    }

    #[test]
    fn an_empty_session_folder_is_released_and_a_used_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let empty = reserve_session(dir.path()).unwrap();
        let used = reserve_session(dir.path()).unwrap();
        TranscriptWriter::new(dir.path(), &used, "p", None).append(1, &Record::Clear).unwrap();
        assert!(release_session_if_empty(dir.path(), &empty));
        assert!(!release_session_if_empty(dir.path(), &used));
        assert!(!dir.path().join(&empty).exists() && dir.path().join(&used).exists());
    }

    #[test]
    fn numbered_sessions_sort_by_number() {
        assert!(session_order("20240101-000000-10") > session_order("20240101-000000-9"));
        assert!(session_order("20240101-000000-2") > session_order("20240101-000000"));
    }
}
