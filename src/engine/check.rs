//! The result of every concern's checks, and how it is reported (text, JSON, exit code).

use serde::{Deserialize, Serialize};

use crate::reason::Reason;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Skipped,
    Warn,
    Unknown,
    Fail,
}

impl Status {
    /// A check that fails or cannot tell makes the node not ready (`/readyz`
    /// 503, `ready` 0, exit code non-zero); ok, warn and skipped do not.
    pub fn blocks_ready(self) -> bool {
        matches!(self, Status::Fail | Status::Unknown)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Skipped => "skipped",
            Status::Warn => "warn",
            Status::Unknown => "unknown",
            Status::Fail => "fail",
        }
    }
}

/// A check's id (`rdma.devices`), declared once as a const by the concern
/// that reports it; `Check::new` and `Concern::ids` take only these, so a
/// misspelt id does not compile. Reports carry it as text (`Check::id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckId(&'static str);

impl CheckId {
    pub const fn new(id: &'static str) -> Self {
        CheckId(id)
    }

    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl std::fmt::Display for CheckId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<CheckId> for String {
    fn eq(&self, other: &CheckId) -> bool {
        self == other.0
    }
}

impl PartialEq<CheckId> for str {
    fn eq(&self, other: &CheckId) -> bool {
        self == other.0
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub id: String,
    pub status: Status,
    pub message: String,
    /// Structured facts behind the message (handlers, processes, devices…).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
    /// Why it is not ok: one stable code per warn, fail or unknown result
    /// (docs/reasons.md); `None` for ok and skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

/// A failed apply, said by the checks it left failing: each that names a path
/// the error names (else every check that is not ok) gets the error appended,
/// so `check`, `/status` and node-problem-detector show the fault (a full disk,
/// a read-only /etc), not only "not prepared".
/// `reason`: what the failure means for those checks when it is one cause for
/// all (a file the agent cannot write: `path_not_writable`).
pub fn note_apply_failure(checks: &mut [Check], error: &str, reason: Option<Reason>) {
    let bad = |c: &Check| !matches!(c.status, Status::Ok | Status::Skipped);
    let names_it = |c: &Check| {
        c.message
            .split([' ', ':', ';', '(', ')', ','])
            .any(|w| w.starts_with('/') && w.len() > 1 && error.contains(w))
    };
    let any = checks.iter().any(|c| bad(c) && names_it(c));
    for c in checks
        .iter_mut()
        .filter(|c| bad(c) && (!any || names_it(c)))
    {
        c.message = format!("{}; the last apply failed: {error}", c.message);
        if reason.is_some() {
            c.reason = reason;
        }
    }
}

impl Check {
    pub fn new(id: CheckId, status: Status, message: impl Into<String>) -> Self {
        Check {
            id: id.as_str().to_owned(),
            status,
            message: message.into(),
            details: serde_json::Value::Null,
            reason: None,
        }
    }

    /// The reason of a non-ok result; ignored (kept `None`) on ok and skipped,
    /// so a verdict computed at run time can carry its reason unconditionally.
    pub fn with_reason(mut self, reason: Reason) -> Self {
        self.reason = match self.status {
            Status::Ok | Status::Skipped => None,
            _ => Some(reason),
        };
        self
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = details;
        self
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub ok: bool,
    pub summary: String,
    pub checks: Vec<Check>,
}

/// node-problem-detector's plugin convention: 0 ok, 1 problem, 2 could not tell.
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAIL: i32 = 1;
pub const EXIT_UNKNOWN: i32 = 2;

/// NPD keeps only the first line of a plugin's output, and at most 80 characters.
pub const SUMMARY_MAX: usize = 80;

impl Report {
    /// The summary counts every status apart ("5 ok, 3 skipped" is not "8 ok")
    /// and names the checks that keep the node from being ready.
    pub fn new(checks: Vec<Check>) -> Self {
        let ids = |s: Status| -> Vec<&str> {
            checks
                .iter()
                .filter(|c| c.status == s)
                .map(|c| c.id.as_str())
                .collect()
        };
        let (failing, unknown) = (ids(Status::Fail), ids(Status::Unknown));
        let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
        let counts: Vec<String> = [
            (count(Status::Fail), "failing"),
            (count(Status::Unknown), "unknown"),
            (count(Status::Warn), "warn"),
        ]
        .into_iter()
        .chain([(count(Status::Ok), "ok")])
        .chain([(count(Status::Skipped), "skipped")])
        .filter(|(n, what)| *n > 0 || *what == "ok")
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
        let counts = counts.join(", ");
        let summary = if !failing.is_empty() {
            let named = [failing.as_slice(), unknown.as_slice()].concat().join(", ");
            format!("RDMA host not ready: {counts}: {named}")
        } else if !unknown.is_empty() {
            format!("RDMA host state unknown: {counts}: {}", unknown.join(", "))
        } else {
            format!("RDMA host ready: {counts}")
        };
        Report {
            ok: !checks.iter().any(|c| c.status.blocks_ready()),
            summary: truncate(&summary, SUMMARY_MAX),
            checks,
        }
    }

    pub fn exit_code(&self) -> i32 {
        let worst = self.checks.iter().map(|c| c.status).max();
        match worst {
            Some(Status::Fail) => EXIT_FAIL,
            Some(Status::Unknown) => EXIT_UNKNOWN,
            _ => EXIT_OK,
        }
    }

    pub fn to_text(&self) -> String {
        let mut out = format!("{}\n", self.summary);
        for c in &self.checks {
            out.push_str(&format!(
                "{:<7} {:<20} {}\n",
                c.status.as_str(),
                c.id,
                c.message
            ));
            // A check may list sub-lines (one per GPU↔NIC pair): indented below it.
            let lines = c.details.get("lines").and_then(|l| l.as_array());
            for l in lines.into_iter().flatten().filter_map(|l| l.as_str()) {
                out.push_str(&format!("{:<28} {l}\n", ""));
            }
        }
        out
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut t: String = s.chars().take(max - 1).collect();
    t.push('…');
    t
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_failed_apply_is_said_by_the_check_naming_its_file() {
        let mut checks = vec![
            Check::new(
                CheckId::new("app.config"),
                Status::Fail,
                "not prepared: /etc/app/config.toml: point runtime handlers",
            ),
            Check::new(
                CheckId::new("rdma.devices"),
                Status::Warn,
                "mlx5_0/1 is DOWN",
            ),
            Check::new(CheckId::new("app.modules"), Status::Ok, "loaded"),
        ];
        let e = "cannot write /etc/app/config.toml: No space left on device (os error 28)";
        note_apply_failure(&mut checks, e, None);
        assert!(
            checks[0]
                .message
                .ends_with(&format!("; the last apply failed: {e}"))
        );
        assert_eq!(checks[1].message, "mlx5_0/1 is DOWN");
        assert_eq!(checks[2].message, "loaded");
        // Naming no file of any check: every check that is not ok says it.
        note_apply_failure(&mut checks, "ledger: cannot lock", None);
        assert!(
            checks[1]
                .message
                .ends_with("the last apply failed: ledger: cannot lock")
        );
        assert_eq!(checks[2].message, "loaded");
    }

    use super::*;

    #[test]
    fn exit_codes_follow_npd() {
        let ok = Report::new(vec![Check::new(CheckId::new("a"), Status::Ok, "")]);
        assert_eq!(ok.exit_code(), 0);
        assert!(ok.ok);
        let warn = Report::new(vec![Check::new(CheckId::new("a"), Status::Warn, "")]);
        assert_eq!(warn.exit_code(), 0);
        let unknown = Report::new(vec![
            Check::new(CheckId::new("a"), Status::Ok, ""),
            Check::new(CheckId::new("b"), Status::Unknown, ""),
        ]);
        assert_eq!(unknown.exit_code(), 2);
        let fail = Report::new(vec![
            Check::new(CheckId::new("a"), Status::Unknown, ""),
            Check::new(CheckId::new("b"), Status::Fail, ""),
        ]);
        assert_eq!(fail.exit_code(), 1);
        assert!(!fail.ok);
    }

    #[test]
    fn summary_counts_each_status_apart() {
        let r = |s: &[Status]| {
            Report::new(
                s.iter()
                    .enumerate()
                    .map(|(i, s)| Check {
                        id: format!("c{i}"),
                        ..Check::new(CheckId::new(""), *s, "")
                    })
                    .collect(),
            )
        };
        use Status::*;
        assert_eq!(
            r(&[Ok, Ok, Skipped]).summary,
            "RDMA host ready: 2 ok, 1 skipped"
        );
        assert_eq!(r(&[Ok, Warn]).summary, "RDMA host ready: 1 warn, 1 ok");
        assert_eq!(r(&[Skipped]).summary, "RDMA host ready: 0 ok, 1 skipped");
        assert_eq!(
            r(&[Ok, Unknown, Skipped]).summary,
            "RDMA host state unknown: 1 unknown, 1 ok, 1 skipped: c1"
        );
        assert_eq!(
            r(&[Fail, Unknown, Warn, Ok]).summary,
            "RDMA host not ready: 1 failing, 1 unknown, 1 warn, 1 ok: c0, c1"
        );
        assert!(r(&[Ok, Warn, Skipped]).ok);
        assert!(!r(&[Ok, Unknown]).ok);
    }

    #[test]
    fn summary_fits_one_npd_line() {
        let ids: Vec<Check> = [
            "app.config",
            "app.unit",
            "app.mode",
            "rdma.devices",
            "app.builds",
        ]
        .into_iter()
        .map(|id| Check::new(CheckId::new(id), Status::Fail, ""))
        .collect();
        let r = Report::new(ids);
        assert!(r.summary.chars().count() <= SUMMARY_MAX);
        assert!(!r.summary.contains('\n'));
        assert!(r.to_text().starts_with(&r.summary));
    }
}
