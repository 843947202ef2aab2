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
use crate::host::files::Ownership;
use crate::host::read::ReadHost;
use crate::host::{Host, HostError};

use crate::host::state::STATE_DIR;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(
        "{path} is corrupt ({message}); move it away to start a new ledger (reverting will then not know the originals)"
    )]
    Corrupt { path: PathBuf, message: String },
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
pub fn journal(host: &Host, event: &str, path: &Path, owner: &str, reason: &str) {
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
    if let Err(e) = host.state_append_bounded(&state_path("journal.jsonl"), &line, JOURNAL_MAX) {
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
        host.state_write(&state_path("ledger.json"), &bytes, 0o600)?;
        Ok(())
    }

    /// Keeps the original before the first change of a file. Written (and fsynced)
    /// before the file itself changes, so a crash in between loses nothing.
    fn remember(&mut self, host: &Host, change: &FileChange) -> Result<(), LedgerError> {
        if self.files.contains_key(&change.path) {
            return Ok(());
        }
        let current = host.read(&change.path)?;
        if let Some(d) = &current {
            host.state_write(&backup_path(&change.path), &d.bytes, 0o600)?;
        }
        // Behind a directory link the file is created where the link leads:
        // record the directories made there, never the link.
        let created_dirs = if current.is_none() {
            missing_dirs(host, &host.resolve_managed(&change.path)?.real)
        } else {
            Vec::new()
        };
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

    /// Carries out the plan's file changes, atomically, one file at a time.
    pub fn apply(&mut self, host: &Host, plan: &Plan) -> Result<(), LedgerError> {
        for change in &plan.changes {
            self.remember(host, change)?;
            // The intent is recorded before the write, so a crash in between leaves
            // a ledger that knows what the file was meant to become.
            if let Some(o) = self.files.get_mut(&change.path) {
                o.written_sha256 = change.new.as_deref().map(sha256);
            }
            self.save(host)?;
            match &change.new {
                Some(bytes) => host.write_atomic(&change.path, bytes, change.mode)?,
                None => host.remove(&change.path)?,
            }
            let event = match change.kind() {
                crate::engine::plan::ChangeKind::Create => "create",
                crate::engine::plan::ChangeKind::Modify => "modify",
                crate::engine::plan::ChangeKind::Remove => "remove",
            };
            journal(host, event, &change.path, change.owner, &change.reason);
        }
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
            journal(host, "rollback", &change.path, change.owner, &change.reason);
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
                let backup = backup_path(&path);
                let bytes =
                    host.state_read(&backup)?
                        .ok_or_else(|| LedgerError::MissingOriginal {
                            path: path.clone(),
                            backup: host.path(&backup),
                        })?;
                // A link goes back as the link, its target gets the original bytes.
                if let Some(target) = &orig.link {
                    host.restore_link(&path, target)?;
                }
                // Ledgers from before owners were recorded: keep the current ones.
                let (uid, gid) = match (orig.uid, orig.gid, &current) {
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
                host.write_exact(&path, &bytes, &own)?;
                host.state_remove(&backup)?;
                journal(host, "restore", &path, &orig.owner, "revert");
                out.restored.push(path);
            } else {
                host.remove(&path)?;
                created_dirs.extend(orig.created_dirs.iter().cloned());
                journal(host, "remove", &path, &orig.owner, "revert");
                out.removed.push(path);
            }
        }
        // Deepest first, once every file is gone: two files may share a created dir.
        created_dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in created_dirs {
            host.remove_dir_if_empty(&dir);
        }
        if self.files.is_empty() {
            host.state_remove(&state_path("ledger.json"))?;
            host.state_remove_dir_if_empty(&state_path("originals"));
        } else {
            self.save(host)?;
        }
        Ok(out)
    }
}

/// The directories above `path` that do not exist yet, outermost first.
fn missing_dirs(host: &Host, path: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = path
        .ancestors()
        .skip(1)
        .take_while(|d| !host.exists(d))
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> FileChange {
        FileChange {
            path: path.into(),
            old: old.map(<[u8]>::to_vec),
            new: new.map(<[u8]>::to_vec),
            mode: 0o644,
            owner: "test",
            reason: "test".into(),
            restart: Vec::new(),
        }
    }

    #[test]
    fn apply_then_revert_is_byte_identical() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        host.write_atomic(Path::new("/etc/a.toml"), b"# mine\na = 1\n", 0o640)
            .unwrap();
        let plan = Plan {
            changes: vec![
                change("/etc/a.toml", Some(b"# mine\na = 1\n"), Some(b"a = 2\n")),
                change("/etc/new/dir/spec.json", None, Some(b"{}\n")),
            ],
            ..Plan::default()
        };
        let mut l = Ledger::load(&host.reader()).unwrap();
        l.apply(&host, &plan).unwrap();
        // A second apply of the same plan must not overwrite the saved original.
        l.apply(&host, &plan).unwrap();
        let l = Ledger::load(&host.reader()).unwrap();
        assert_eq!(l.files.len(), 2);
        let out = l.revert(&host, false).unwrap();
        assert_eq!(out.restored, vec![PathBuf::from("/etc/a.toml")]);
        assert_eq!(out.removed, vec![PathBuf::from("/etc/new/dir/spec.json")]);
        let a = host.read(Path::new("/etc/a.toml")).unwrap().unwrap();
        assert_eq!(a.bytes, b"# mine\na = 1\n");
        assert_eq!(a.mode, 0o640);
        assert!(!host.exists(Path::new("/etc/new")));
        assert!(!host.exists(&state_path("ledger.json")));
        let journal = String::from_utf8(
            host.state_read(&state_path("journal.jsonl"))
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(journal.lines().count(), 6);
    }

    #[test]
    fn rollback_returns_to_the_bytes_before_this_apply() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        host.write_atomic(Path::new("/etc/a"), b"v1", 0o644)
            .unwrap();
        let mut l = Ledger::default();
        let first = Plan {
            changes: vec![change("/etc/a", Some(b"v1"), Some(b"v2"))],
            ..Plan::default()
        };
        l.apply(&host, &first).unwrap();
        let second = Plan {
            changes: vec![
                change("/etc/a", Some(b"v2"), Some(b"v3")),
                change("/etc/d/new", None, Some(b"n")),
            ],
            ..Plan::default()
        };
        l.apply(&host, &second).unwrap();
        l.rollback(&host, &second).unwrap();
        assert_eq!(
            host.read(Path::new("/etc/a")).unwrap().unwrap().bytes,
            b"v2"
        );
        assert!(!host.exists(Path::new("/etc/d")));
        // Revert still knows the very first original.
        let out = Ledger::load(&host.reader())
            .unwrap()
            .revert(&host, false)
            .unwrap();
        assert_eq!(out.restored, vec![PathBuf::from("/etc/a")]);
        assert_eq!(
            host.read(Path::new("/etc/a")).unwrap().unwrap().bytes,
            b"v1"
        );
    }

    #[test]
    fn revert_keeps_files_edited_since() {
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        host.write_atomic(Path::new("/etc/a"), b"1", 0o644).unwrap();
        let mut l = Ledger::default();
        l.apply(
            &host,
            &Plan {
                changes: vec![change("/etc/a", Some(b"1"), Some(b"2"))],
                ..Plan::default()
            },
        )
        .unwrap();
        host.write_atomic(Path::new("/etc/a"), b"3", 0o644).unwrap();
        let out = Ledger::load(&host.reader())
            .unwrap()
            .revert(&host, false)
            .unwrap();
        assert_eq!(out.kept.len(), 1);
        assert!(out.kept[0].1.contains("changed since the agent wrote it"));
        assert_eq!(host.read(Path::new("/etc/a")).unwrap().unwrap().bytes, b"3");
        // --force restores the original anyway.
        let out = Ledger::load(&host.reader())
            .unwrap()
            .revert(&host, true)
            .unwrap();
        assert_eq!(out.restored.len(), 1);
        assert_eq!(host.read(Path::new("/etc/a")).unwrap().unwrap().bytes, b"1");
    }

    /// A file linked out of /etc and a file created in a linked directory: the
    /// targets change, revert restores (or removes) them and the links stay.
    #[test]
    fn revert_acts_on_link_targets_and_keeps_the_links() {
        use std::os::unix::fs::symlink;
        let t = tempfile::tempdir().unwrap();
        let host = Host::new(t.path());
        let cm = Path::new("/opt/cm/app.toml");
        host.write_atomic(cm, b"v1", 0o640).unwrap();
        host.write_atomic(Path::new("/opt/cm-etc/x"), b"", 0o644)
            .unwrap();
        std::fs::create_dir_all(t.path().join("etc")).unwrap();
        symlink(cm, t.path().join("etc/c.toml")).unwrap();
        symlink("/opt/cm-etc", t.path().join("etc/cm")).unwrap();
        let plan = Plan {
            changes: vec![
                change("/etc/c.toml", Some(b"v1"), Some(b"v2")),
                change("/etc/cm/new/spec.json", None, Some(b"{}")),
            ],
            ..Plan::default()
        };
        let mut l = Ledger::default();
        l.apply(&host, &plan).unwrap();
        assert_eq!(
            std::fs::read(t.path().join("opt/cm/app.toml")).unwrap(),
            b"v2"
        );
        assert!(t.path().join("opt/cm-etc/new/spec.json").is_file());
        let spec = &l.files[Path::new("/etc/cm/new/spec.json")];
        assert_eq!(spec.created_dirs, vec![PathBuf::from("/opt/cm-etc/new")]);
        assert_eq!(l.files[Path::new("/etc/c.toml")].link.as_deref(), Some(cm));
        let out = Ledger::load(&host.reader())
            .unwrap()
            .revert(&host, false)
            .unwrap();
        assert_eq!((out.restored.len(), out.removed.len()), (1, 1));
        let d = host.read(cm).unwrap().unwrap();
        assert_eq!((d.bytes.as_slice(), d.mode), (&b"v1"[..], 0o640));
        assert_eq!(std::fs::read_link(t.path().join("etc/c.toml")).unwrap(), cm);
        assert!(!t.path().join("opt/cm-etc/new").exists());
        assert!(t.path().join("etc/cm").is_symlink());
    }
}
