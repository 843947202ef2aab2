//! What the agent changed on the host, so that every change can be undone:
//! the original bytes of each file before the agent first touched it, a hash of
//! what the agent last wrote, and an append-only journal.
//!
//! Layout under `/var/lib/rdma-node-agent/`:
//! `ledger.json` (the owned files), `originals/<escaped path>`, `journal.jsonl`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::engine::plan::{FileChange, Plan};
use crate::host::FileData;
use crate::host::files::Ownership;
use crate::host::read::ReadHost;
use crate::host::stage::Staged;
use crate::host::{Host, HostError};

use crate::host::state::{Record, STATE_DIR};
use crate::host::state_writer::{Access, StateWriter};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(
        "{path} is corrupt ({message}); move it away to start a new ledger (reverting will then not know the originals)"
    )]
    Corrupt { path: PathBuf, message: String },
    /// (The cause is in the message, not a `source`: shown once.)
    #[error(
        "{cause}; nothing was written: all {files} file(s) of this change are written beside their targets before any is put in place"
    )]
    NotWritten { cause: HostError, files: usize },
    #[error("the original of {path} is missing from {backup}: cannot restore it")]
    MissingOriginal { path: PathBuf, backup: PathBuf },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ledger {
    /// Host-absolute path → what it was before the agent first changed it.
    pub files: BTreeMap<PathBuf, Original>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Original {
    pub existed: bool,
    pub mode: u32,
    /// The file's owner and group before the agent first changed it (absent in
    /// ledgers from before they were recorded: then they are left as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// The path was a symbolic link with this stored target: `revert` puts the
    /// link back and the original bytes at its target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<PathBuf>,
    pub owner: String,
    /// Directories the agent created to hold the file, outermost first.
    #[serde(default)]
    pub created_dirs: Vec<PathBuf>,
    /// sha256 of what the agent last wrote (`None`: it removed the file).
    pub written_sha256: Option<String>,
    /// The units that read the file, as its change declared them: `revert`
    /// restarts exactly these. Absent in ledgers written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<Vec<String>>,
}

/// For a ledger entry written before restart owners were recorded: the units
/// its owner (a concern's name) restarted for the file at this path.
pub type LegacyReaders = fn(owner: &str, path: &Path) -> Vec<String>;

impl Original {
    /// The units to restart once this file is restored. Ledgers from before
    /// restart owners were recorded ask `legacy` what their owner meant.
    pub fn readers(&self, path: &Path, legacy: LegacyReaders) -> Vec<String> {
        match &self.restart {
            Some(units) => units.clone(),
            None => legacy(&self.owner, path),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct JournalEntry<'a> {
    time: u64,
    event: &'a str,
    path: &'a Path,
    owner: &'a str,
    reason: &'a str,
}

/// What `revert` did, per file.
#[derive(Debug, Default, Serialize)]
pub struct RevertOutcome {
    pub restored: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
    /// Changed by someone else since the agent wrote them: left alone.
    pub kept: Vec<(PathBuf, String)>,
}

/// The journal's size before it is moved to `journal.jsonl.1` (the one before
/// replaced): about 1,100 file changes each, so at most 512 KiB of history on
/// disk and in the daemon's copy of the state, however long a fight over a file
/// with another tool lasts.
const JOURNAL_MAX: u64 = 256 * 1024;

fn state_path(name: &str) -> PathBuf {
    Path::new(STATE_DIR).join(name)
}

fn backup_path(file: &Path) -> PathBuf {
    let escaped = file
        .to_string_lossy()
        .replace('%', "%25")
        .replace('/', "%2F");
    state_path("originals").join(escaped)
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Appends one event to the agent's journal (`journal.jsonl`): a file change,
/// or a live write that is no file (an ACS register, named by its config path).
pub fn journal(w: &StateWriter, event: &str, path: &Path, owner: &str, reason: &str) {
    let entry = JournalEntry {
        time: now(),
        event,
        path,
        owner,
        reason,
    };
    let mut line = serde_json::to_vec(&entry).expect("journal entry serializes");
    line.push(b'\n');
    // The journal is history, not state: failing to append must not undo a change.
    if let Err(e) = w.append_bounded(&state_path("journal.jsonl"), &line, JOURNAL_MAX) {
        tracing::warn!("could not append to the journal: {e}");
    }
}

impl Ledger {
    pub fn load(host: &ReadHost) -> Result<Ledger, LedgerError> {
        let p = state_path("ledger.json");
        match host.state_read(&p)? {
            None => Ok(Ledger::default()),
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| LedgerError::Corrupt {
                path: host.path(&p),
                message: e.to_string(),
            }),
        }
    }

    /// Files of `owner` that the agent created (they did not exist before it).
    pub fn created_by(&self, owner: &str) -> std::collections::BTreeSet<PathBuf> {
        self.files
            .iter()
            .filter(|(_, o)| o.owner == owner && !o.existed)
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn save(&self, host: &Host) -> Result<(), LedgerError> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("ledger serializes");
        bytes.push(b'\n');
        let ledger = Record {
            path: state_path("ledger.json"),
            bytes,
            note: None,
        };
        StateWriter::new(host).keep(&ledger, Access::Private)?;
        Ok(())
    }

    /// Keeps the original before the first change of a file. Written (and fsynced)
    /// before the file itself changes, so a crash in between loses nothing.
    /// `created_dirs`: the directories made to hold a new file.
    fn remember(
        &mut self,
        host: &Host,
        change: &FileChange,
        created_dirs: Vec<PathBuf>,
    ) -> Result<(), LedgerError> {
        if self.files.contains_key(&change.path) {
            return Ok(());
        }
        let current = host.read(&change.path)?;
        if let Some(d) = &current {
            let original = Record {
                path: backup_path(&change.path),
                bytes: d.bytes.clone(),
                note: None,
            };
            StateWriter::new(host).keep(&original, Access::Private)?;
        }
        self.files.insert(
            change.path.clone(),
            Original {
                existed: current.is_some(),
                mode: current.as_ref().map_or(change.mode, |d| d.mode),
                uid: current.as_ref().map(|d| d.uid),
                gid: current.as_ref().map(|d| d.gid),
                link: current.as_ref().and_then(|d| d.link.clone()),
                owner: change.owner.to_owned(),
                created_dirs,
                written_sha256: None,
                restart: Some(change.restart.clone()),
            },
        );
        self.save(host)
    }

    /// Carries out the plan's file changes as a whole or not at all: every new
    /// file is first written complete beside its target, and every removal's
    /// directory proven writable; only then is anything renamed into place. So
    /// no file ever names another that the same apply failed to create.
    pub fn apply(&mut self, host: &Host, plan: &Plan) -> Result<(), LedgerError> {
        let mut staged = Vec::with_capacity(plan.changes.len());
        for change in &plan.changes {
            let s = match &change.new {
                Some(bytes) => host.stage(&change.path, bytes, change.mode).map(Some),
                None => host.probe_writable(&change.path).map(|()| None),
            };
            // Dropping what was staged so far removes it: nothing was written.
            staged.push(s.map_err(|cause| LedgerError::NotWritten {
                cause,
                files: plan.changes.len(),
            })?);
        }
        for (i, (change, s)) in plan.changes.iter().zip(staged).enumerate() {
            let done = self.commit_one(host, change, s);
            if let Err(e) = done {
                // Every directory took a file a moment ago: put back what this
                // apply already renamed, so the files stay one consistent set.
                let partial = Plan {
                    changes: plan.changes[..i].to_vec(),
                    ..Plan::default()
                };
                if let Err(back) = self.rollback(host, &partial) {
                    tracing::error!(
                        "could not undo the first {i} change(s) of a failed apply: {back}"
                    );
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn commit_one(
        &mut self,
        host: &Host,
        change: &FileChange,
        staged: Option<Staged>,
    ) -> Result<(), LedgerError> {
        let created = staged
            .as_ref()
            .map_or_else(Vec::new, |s| s.created_dirs().to_vec());
        self.remember(host, change, created)?;
        // The intent is recorded before the write, so a crash in between leaves
        // a ledger that knows what the file was meant to become.
        if let Some(o) = self.files.get_mut(&change.path) {
            o.written_sha256 = change.new.as_deref().map(sha256);
        }
        self.save(host)?;
        match staged {
            Some(s) => s.commit()?,
            None => host.remove(&change.path)?,
        }
        let event = match change.kind() {
            crate::engine::plan::ChangeKind::Create => "create",
            crate::engine::plan::ChangeKind::Modify => "modify",
            crate::engine::plan::ChangeKind::Remove => "remove",
        };
        journal(
            &StateWriter::new(host),
            event,
            &change.path,
            change.owner,
            &change.reason,
        );
        Ok(())
    }

    /// Undoes one apply (after a restart that did not come back healthy): every
    /// file of the plan gets the bytes it had just before, newest change first.
    pub fn rollback(&mut self, host: &Host, plan: &Plan) -> Result<(), LedgerError> {
        for change in plan.changes.iter().rev() {
            match &change.old {
                Some(bytes) => host.write_atomic(&change.path, bytes, change.mode)?,
                None => host.remove(&change.path)?,
            }
            let back_to_original =
                change.old.is_none() && self.files.get(&change.path).is_some_and(|o| !o.existed);
            if back_to_original {
                if let Some(o) = self.files.remove(&change.path) {
                    for dir in o.created_dirs.iter().rev() {
                        host.remove_dir_if_empty(dir);
                    }
                }
            } else if let Some(o) = self.files.get_mut(&change.path) {
                o.written_sha256 = change.old.as_deref().map(sha256);
            }
            self.save(host)?;
            journal(
                &StateWriter::new(host),
                "rollback",
                &change.path,
                change.owner,
                &change.reason,
            );
        }
        Ok(())
    }

    /// Puts back the original bytes of every file the agent changed and removes
    /// what it created. A file changed by someone else since is kept, not lost.
    pub fn revert(mut self, host: &Host, force: bool) -> Result<RevertOutcome, LedgerError> {
        let mut out = RevertOutcome::default();
        let files = std::mem::take(&mut self.files);
        let mut created_dirs: Vec<PathBuf> = Vec::new();
        for (path, orig) in files {
            let current = host.read(&path)?;
            let current_sha = current.as_ref().map(|d| sha256(&d.bytes));
            // Still the original (an apply stopped before writing it): nothing lost.
            let untouched = match (&current, orig.existed) {
                (None, false) => true,
                (Some(d), true) => host
                    .state_read(&backup_path(&path))?
                    .is_some_and(|b| b == d.bytes),
                _ => false,
            };
            if !force && !untouched && current_sha != orig.written_sha256 {
                let why = format!(
                    "changed since the agent wrote it; kept as is (original at {})",
                    host.path(&backup_path(&path)).display()
                );
                out.kept.push((path.clone(), why));
                // Keep the record so a later `revert --force` can still restore it.
                self.files.insert(path, orig);
                continue;
            }
            if orig.existed {
                restore_original(host, &path, &orig, current.as_ref())?;
                out.restored.push(path);
            } else {
                host.remove(&path)?;
                created_dirs.extend(orig.created_dirs.iter().cloned());
                journal(
                    &StateWriter::new(host),
                    "remove",
                    &path,
                    &orig.owner,
                    "revert",
                );
                out.removed.push(path);
            }
        }
        // Deepest first, once every file is gone: two files may share a created dir.
        created_dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in created_dirs {
            host.remove_dir_if_empty(&dir);
        }
        if self.files.is_empty() {
            StateWriter::new(host).remove(&state_path("ledger.json"))?;
            host.state_remove_dir_if_empty(&state_path("originals"));
        } else {
            self.save(host)?;
        }
        Ok(out)
    }
}

/// Puts one changed file's original back (its bytes, owner, mode, and the link
/// it was), then drops the kept copy.
fn restore_original(
    host: &Host,
    path: &Path,
    orig: &Original,
    current: Option<&FileData>,
) -> Result<(), LedgerError> {
    let backup = backup_path(path);
    let bytes = host
        .state_read(&backup)?
        .ok_or_else(|| LedgerError::MissingOriginal {
            path: path.to_owned(),
            backup: host.path(&backup),
        })?;
    // A link goes back as the link, its target gets the original bytes.
    if let Some(target) = &orig.link {
        host.restore_link(path, target)?;
    }
    // Ledgers from before owners were recorded: keep the current ones.
    let (uid, gid) = match (orig.uid, orig.gid, current) {
        (Some(uid), Some(gid), _) => (uid, gid),
        (_, _, Some(d)) => (d.uid, d.gid),
        _ => (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        ),
    };
    let own = Ownership {
        mode: orig.mode,
        uid,
        gid,
    };
    host.write_exact(path, &bytes, &own)?;
    let w = StateWriter::new(host);
    w.remove(&backup)?;
    journal(&w, "restore", path, &orig.owner, "revert");
    Ok(())
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
