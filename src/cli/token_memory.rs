//! The CLI's memory of fencing tokens, across processes: the highest token each job was handed
//! per database, in a small file of the user's state folder (`tokens`, beside the default
//! database; `EXACTLY_TOKEN_MEMORY` names another file, or `off`).
//!
//! A claim is handed a new, higher token every time, so a claim handed one not above the highest
//! remembered was handed a token already handed out: the database went back (a failover that
//! lost its last commits, with the guard off or beaten). Such a claim is released and refused.
//! A command handed a token (`exactly effect`, `lease renew`) refuses one below the highest
//! remembered that the database still takes; one the database fences anyway is left to it. Memory is a help, never a condition: a folder that cannot be written, a lock
//! that is not had in time or a file that cannot be read is said once on stderr, and the
//! command goes on as without it.
//!
//! The file: one JSON object a line, `{"db":…,"job":…,"token":…,"shown":…,"at":…}` (`db` the
//! database's identity, [`crate::Store::holder_identity`]; `shown` its `--db` with any password
//! hidden). Changed only under an exclusive lock on `tokens.lock` beside it, by writing a new
//! file and renaming it over the old one: a reader sees the old file or the new, whole.
use crate::{sanitize::inert, Store};
use serde_json::{json, Value};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The variable that names the memory's file, or `off`.
pub(super) const VAR: &str = "EXACTLY_TOKEN_MEMORY";
/// The file's name in the state folder.
const FILE: &str = "tokens";
/// How long a command waits for another's lock on the file before going on without memory.
const LOCK_WAIT: Duration = Duration::from_secs(5);
/// The most (database, job) pairs kept: past it, the ones changed longest ago are forgotten.
const KEEP: usize = 4096;

/// What the memory says of a token.
pub(super) enum Seen {
    /// Nothing against it (or no memory to ask).
    Fine,
    /// A token at least this high was handed out for the job before (remembered in `file`).
    Below { highest: i64, file: PathBuf },
}

/// Where the memory is kept: `EXACTLY_TOKEN_MEMORY`, else `tokens` in the state folder; None
/// when it is `off` or there is no state folder.
fn location() -> Option<(PathBuf, bool)> {
    match std::env::var_os(VAR) {
        Some(v) if v == "off" => None,
        Some(v) if !v.is_empty() => Some((PathBuf::from(v), false)),
        // The state folder is ours to create, as for the default database.
        _ => exactly::state_dir().map(|d| (d.join(FILE), true)),
    }
}

/// Says once per process that the memory could not be used, and why.
fn unusable(why: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::SeqCst) {
        eprintln!(
            "exactly: warning: the token memory is not kept ({}); a fencing token lower than \
             one handed out before is not noticed across commands",
            inert(why)
        );
    }
}

/// The database's identity for the memory, or None (said once) when it cannot be read.
fn identity(store: &mut Store) -> Option<String> {
    match crate::lease::token_source(store) {
        Ok(id) => Some(id),
        Err(e) => {
            unusable(&format!("the database's identity: {e}"));
            None
        }
    }
}

/// A claim won `token` for `job`: refused (`Below`) when it is not above the highest the memory
/// holds for the job on this database, else remembered as the highest.
pub(super) fn claimed(store: &mut Store, job: &str, token: i64) -> Seen {
    let Some(db) = identity(store) else {
        return Seen::Fine;
    };
    let shown = exactly::shown_db(exactly::db_name(store));
    raise(&db, &shown, job, token, true)
}

/// A command was handed `token` for `job`: `Below` when the memory holds a higher one for it
/// and the database would still take this one (the job's lease row carries it): the database
/// went back. A token the database fences anyway is left to it, so that refusal is counted as a
/// fenced write as ever. Nothing is written.
pub(super) fn handed(store: &mut Store, job: &crate::JobName, token: i64) -> Seen {
    let (Some((file, _)), Some(db)) = (location(), identity(store)) else {
        return Seen::Fine;
    };
    let highest = match read(&file)
        .iter()
        .find(|e| e.db == db && e.job == job.as_str())
    {
        Some(e) if e.token > token => e.token,
        _ => return Seen::Fine,
    };
    // A lease row that cannot be read: refused, as the safe side (the command would fail on
    // the same database anyway).
    let taken = crate::lease::get(store, job)
        .map_or(true, |row| row.is_some_and(|r| r.fencing_token == token));
    match taken {
        true => Seen::Below { highest, file },
        false => Seen::Fine,
    }
}

/// The database accepted `token` for `job` (an effect sent or settled under it): remembered if
/// it is the highest.
pub(super) fn accepted(store: &mut Store, job: &str, token: i64) {
    if let Some(db) = identity(store) {
        let shown = exactly::shown_db(exactly::db_name(store));
        raise(&db, &shown, job, token, false);
    }
}

/// One remembered (database, job).
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    db: String,
    job: String,
    token: i64,
    shown: String,
    at: String,
}

impl Entry {
    fn parse(line: &str) -> Option<Entry> {
        let v: Value = serde_json::from_str(line).ok()?;
        Some(Entry {
            db: v.get("db")?.as_str()?.to_string(),
            job: v.get("job")?.as_str()?.to_string(),
            token: v.get("token")?.as_i64()?,
            shown: v.get("shown").and_then(Value::as_str).unwrap_or("").into(),
            at: v.get("at").and_then(Value::as_str).unwrap_or("").into(),
        })
    }

    fn line(&self) -> String {
        json!({"db": self.db, "job": self.job, "token": self.token, "shown": self.shown,
               "at": self.at})
        .to_string()
    }
}

/// The file's entries; lines that cannot be read are left out and said once. A missing file
/// is an empty memory.
fn read(file: &Path) -> Vec<Entry> {
    let bytes = match fs::read(file) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            unusable(&format!("cannot read {}: {e}", file.display()));
            return Vec::new();
        }
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut bad = 0;
    let entries = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let e = Entry::parse(l);
            bad += usize::from(e.is_none());
            e
        })
        .collect();
    if bad > 0 {
        corrupt(file, bad);
    }
    entries
}

/// Says once per process that lines of the file could not be read (they are dropped at its next
/// change).
fn corrupt(file: &Path, bad: usize) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::SeqCst) {
        eprintln!(
            "exactly: warning: the token memory {} has {bad} unreadable line(s); they are left \
             out (and dropped at its next change)",
            inert(&file.display().to_string())
        );
    }
}

/// Compares `token` with the highest remembered for (`db`, `job`) and raises it, under the
/// file's lock. With `strictly` (a claim) a token equal to the highest is refused too: a claim
/// is handed a new token each time.
fn raise(db: &str, shown: &str, job: &str, token: i64, strictly: bool) -> Seen {
    let Some((file, ours)) = location() else {
        return Seen::Fine;
    };
    if ours {
        if let Some(dir) = file.parent() {
            use std::os::unix::fs::DirBuilderExt;
            if let Err(e) = fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
            {
                unusable(&format!("cannot create {}: {e}", dir.display()));
                return Seen::Fine;
            }
        }
    }
    let _lock = match lock(&file) {
        Ok(l) => l,
        Err(why) => {
            unusable(&why);
            return Seen::Fine;
        }
    };
    let mut entries = read(&file);
    let now = crate::time::fmt(crate::time::now());
    match entries.iter_mut().find(|e| e.db == db && e.job == job) {
        Some(e) if e.token > token || (strictly && e.token == token) => {
            return Seen::Below {
                highest: e.token,
                file,
            };
        }
        Some(e) if e.token == token => return Seen::Fine,
        Some(e) => {
            e.token = token;
            e.shown = shown.to_string();
            e.at = now;
        }
        None => entries.push(Entry {
            db: db.to_string(),
            job: job.to_string(),
            token,
            shown: shown.to_string(),
            at: now,
        }),
    }
    if entries.len() > KEEP {
        // Fixed-width UTC instants sort as text: the newest first, the oldest forgotten.
        entries.sort_by(|a, b| b.at.cmp(&a.at));
        entries.truncate(KEEP);
    }
    if let Err(e) = replace(&file, &entries) {
        unusable(&format!("cannot write {}: {e}", file.display()));
    }
    Seen::Fine
}

/// The exclusive lock on `FILE.lock`, waited for at most [`LOCK_WAIT`].
fn lock(file: &Path) -> Result<File, String> {
    let path = with_suffix(file, ".lock");
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?
    };
    let until = Instant::now() + LOCK_WAIT;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(fs::TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "{} stayed locked by another command for {}s",
                    path.display(),
                    LOCK_WAIT.as_secs()
                ))
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(format!("cannot lock {}: {e}", path.display()))
            }
        }
    }
}

/// Writes `entries` to a new file beside `file`, flushed to disk, and renames it over `file`.
fn replace(file: &Path, entries: &[Entry]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = with_suffix(file, &format!(".{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        let mut text = String::new();
        for e in entries {
            text.push_str(&e.line());
            text.push('\n');
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, file)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    // The rename itself made durable: a crash right after must not bring back the old file.
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of garbage is read as the lines it has that make sense, never a panic.
    #[test]
    fn a_corrupt_file_keeps_what_it_can() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("tokens");
        let good = Entry {
            db: "pg:1:d:s:9".into(),
            job: "j".into(),
            token: 7,
            shown: "x".into(),
            at: "2026-01-01T00:00:00.000Z".into(),
        };
        let mut bytes = b"\xff\xfe{not json\n{\"db\":1}\n".to_vec();
        bytes.extend_from_slice(good.line().as_bytes());
        bytes.extend_from_slice(b"\n\0\0\0");
        fs::write(&file, bytes)?;
        assert_eq!(read(&file), vec![good]);
        Ok(())
    }
}
