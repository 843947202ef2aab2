//! What `apply` would do: file changes (shown as unified diffs) and live actions.
//! Pure values: concerns produce them, `ledger` carries them out.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use similar::TextDiff;

use super::effect::{Effect, EffectKey, Preflight, Probe};
use crate::host::state::Record;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Host-absolute path.
    pub path: PathBuf,
    /// Current bytes; `None` when the file does not exist yet.
    pub old: Option<Vec<u8>>,
    /// Wanted bytes; `None` to remove the file.
    pub new: Option<Vec<u8>>,
    pub mode: u32,
    /// The concern that owns this file (its ledger owner name).
    pub owner: &'static str,
    pub reason: String,
    /// The units that read this file and must restart to apply it (what
    /// Bottlerocket calls a file's restart commands). The ledger keeps them, so
    /// `revert` restarts exactly these.
    pub restart: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Create,
    Modify,
    Remove,
}

impl FileChange {
    pub fn kind(&self) -> ChangeKind {
        match (&self.old, &self.new) {
            (None, _) => ChangeKind::Create,
            (Some(_), None) => ChangeKind::Remove,
            (Some(_), Some(_)) => ChangeKind::Modify,
        }
    }

    /// A unified diff; binary-safe (lossy) since every file we own is text.
    /// Credential values are masked on both sides, context lines included.
    pub fn diff(&self) -> String {
        let text = |b: &Option<Vec<u8>>| {
            let t = b
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            crate::redact::redact(&t).into_owned()
        };
        let (old, new) = (text(&self.old), text(&self.new));
        let p = self.path.display().to_string();
        let a = if self.old.is_some() {
            p.clone()
        } else {
            "/dev/null".into()
        };
        let b = if self.new.is_some() {
            p
        } else {
            "/dev/null".into()
        };
        TextDiff::from_lines(&old, &new)
            .unified_diff()
            .context_radius(3)
            .header(&a, &b)
            .to_string()
    }
}

/// A live action that follows file changes: a restart of a unit that reads a
/// changed file (the engine's own), or an effect a concern owns.
#[derive(Debug, Clone)]
pub struct Action {
    pub kind: ActionKind,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub enum ActionKind {
    RestartUnit { unit: String },
    Effect(Arc<dyn Effect>),
}

impl ActionKind {
    /// One action per key in a plan; a failing effect is held back by it.
    pub fn key(&self) -> EffectKey {
        match self {
            ActionKind::RestartUnit { unit } => EffectKey::new("restart_unit", unit.clone()),
            ActionKind::Effect(e) => e.key(),
        }
    }
}

impl PartialEq for ActionKind {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for ActionKind {}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ActionKind::RestartUnit { unit } => write!(f, "restart {unit}"),
            ActionKind::Effect(e) => f.write_str(&e.describe()),
        }
    }
}

impl Serialize for Action {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let key = self.kind.key();
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("action", key.kind)?;
        m.serialize_entry("target", &key.target)?;
        m.serialize_entry("description", &self.kind.to_string())?;
        m.serialize_entry("reason", &self.reason)?;
        m.end()
    }
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub changes: Vec<FileChange>,
    pub actions: Vec<Action>,
    /// Things the operator should know that are neither changes nor failures.
    pub notes: Vec<String>,
    /// Per unit, how the executor verifies its restart (default: it is active).
    pub verify: Vec<(String, Arc<dyn Probe>)>,
    pub preflight: Vec<Arc<dyn Preflight>>,
    pub records: Vec<Record>,
}

#[derive(Serialize)]
struct ChangeJson<'a> {
    path: String,
    kind: ChangeKind,
    owner: &'a str,
    reason: &'a str,
    diff: String,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty() && self.actions.is_empty()
    }

    /// The restarts this plan carries out, in order.
    pub fn restarts(&self) -> impl Iterator<Item = &str> {
        self.actions.iter().filter_map(|a| match &a.kind {
            ActionKind::RestartUnit { unit } => Some(unit.as_str()),
            _ => None,
        })
    }

    /// Identifies what this plan would write, to recognise a plan that was
    /// already tried and rolled back.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for c in &self.changes {
            h.update(c.path.as_os_str().as_encoded_bytes());
            h.update([0]);
            h.update(c.new.as_deref().unwrap_or(b"\0removed"));
            h.update([0]);
        }
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Adds a file change and the restarts of the units that read it.
    pub fn push_change(&mut self, change: FileChange) {
        for unit in &change.restart {
            self.push_action(Action {
                kind: ActionKind::RestartUnit { unit: unit.clone() },
                reason: format!("{unit} reads {}", change.path.display()),
            });
        }
        self.changes.push(change);
    }

    /// Adds an action; one per kind (one restart per unit, whichever concerns need it).
    pub fn push_action(&mut self, a: Action) {
        match self.actions.iter_mut().find(|x| x.kind == a.kind) {
            Some(x) if !x.reason.contains(&a.reason) => {
                x.reason = format!("{}; {}", x.reason, a.reason);
            }
            Some(_) => {}
            None => self.actions.push(a),
        }
    }

    pub fn extend(&mut self, other: Plan) {
        for c in other.changes {
            self.push_change(c);
        }
        for a in other.actions {
            self.push_action(a);
        }
        self.notes.extend(other.notes);
        self.verify.extend(other.verify);
        self.preflight.extend(other.preflight);
        self.records.extend(other.records);
    }

    /// How a restart of `unit` is verified.
    pub fn verify_of(&self, unit: &str) -> Option<&dyn Probe> {
        self.verify
            .iter()
            .find(|(u, _)| u == unit)
            .map(|(_, v)| v.as_ref())
    }

    pub fn to_text(&self) -> String {
        if self.is_empty() {
            let mut out = String::from("No changes: the node is converged.\n");
            for n in &self.notes {
                out.push_str(&format!("note: {n}\n"));
            }
            return out;
        }
        let mut out = format!(
            "{} file change(s), {} action(s)\n",
            self.changes.len(),
            self.actions.len()
        );
        for c in &self.changes {
            out.push_str(&format!("\n# {} ({})\n", c.path.display(), c.reason));
            out.push_str(&c.diff());
        }
        for a in &self.actions {
            out.push_str(&format!("\naction: {} ({})\n", a.kind, a.reason));
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }

    pub fn to_json(&self) -> serde_json::Value {
        let changes: Vec<ChangeJson> = self
            .changes
            .iter()
            .map(|c| ChangeJson {
                path: c.path.display().to_string(),
                kind: c.kind(),
                owner: c.owner,
                reason: &c.reason,
                diff: c.diff(),
            })
            .collect();
        serde_json::json!({
            "changes": changes,
            "actions": self.actions,
            "notes": self.notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_shows_only_changed_lines() {
        let c = FileChange {
            path: "/etc/x.toml".into(),
            old: Some(b"a = 1\nb = 2\n".to_vec()),
            new: Some(b"a = 1\nb = 3\n".to_vec()),
            mode: 0o644,
            owner: "test",
            reason: "r".into(),
            restart: Vec::new(),
        };
        let d = c.diff();
        assert!(d.starts_with("--- /etc/x.toml\n+++ /etc/x.toml\n"), "{d}");
        assert!(d.contains("-b = 2\n+b = 3\n"));
        assert_eq!(c.kind(), ChangeKind::Modify);
    }

    #[test]
    fn one_restart_per_unit() {
        let restart = |reason: &str| Action {
            kind: ActionKind::RestartUnit {
                unit: "app.service".into(),
            },
            reason: reason.into(),
        };
        let mut p = Plan {
            actions: vec![restart("spec changed")],
            ..Plan::default()
        };
        p.extend(Plan {
            actions: vec![restart("drop-in changed")],
            ..Plan::default()
        });
        assert_eq!(p.actions.len(), 1);
        assert_eq!(p.actions[0].reason, "spec changed; drop-in changed");
    }

    #[test]
    fn created_files_diff_from_dev_null() {
        let c = FileChange {
            path: "/etc/y".into(),
            old: None,
            new: Some(b"x\n".to_vec()),
            mode: 0o644,
            owner: "test",
            reason: "r".into(),
            restart: Vec::new(),
        };
        assert!(c.diff().starts_with("--- /dev/null\n+++ /etc/y\n"));
        assert_eq!(c.kind(), ChangeKind::Create);
    }
}
