//! The result of every concern's checks, and how it is reported (text, JSON, exit code).

use serde::{Deserialize, Serialize};

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub id: String,
    pub status: Status,
    pub message: String,
    /// Structured facts behind the message (handlers, processes, devices…).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub details: serde_json::Value,
}

impl Check {
    pub fn new(id: &'static str, status: Status, message: impl Into<String>) -> Self {
        Check {
            id: id.to_owned(),
            status,
            message: message.into(),
            details: serde_json::Value::Null,
        }
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
    pub fn new(checks: Vec<Check>) -> Self {
        let failing: Vec<&str> = checks
            .iter()
            .filter(|c| c.status == Status::Fail)
            .map(|c| c.id.as_str())
            .collect();
        let unknown: Vec<&str> = checks
            .iter()
            .filter(|c| c.status == Status::Unknown)
            .map(|c| c.id.as_str())
            .collect();
        let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
        let summary = if !failing.is_empty() {
            format!("RDMA host not ready: {} failing", failing.join(", "))
        } else if !unknown.is_empty() {
            format!("RDMA host state unknown: {}", unknown.join(", "))
        } else if warned > 0 {
            format!(
                "RDMA host ready ({} checks, {warned} warnings)",
                checks.len()
            )
        } else {
            format!("RDMA host ready ({} checks ok)", checks.len())
        };
        Report {
            ok: failing.is_empty() && unknown.is_empty(),
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
    use super::*;

    #[test]
    fn exit_codes_follow_npd() {
        let ok = Report::new(vec![Check::new("a", Status::Ok, "")]);
        assert_eq!(ok.exit_code(), 0);
        assert!(ok.ok);
        let warn = Report::new(vec![Check::new("a", Status::Warn, "")]);
        assert_eq!(warn.exit_code(), 0);
        let unknown = Report::new(vec![
            Check::new("a", Status::Ok, ""),
            Check::new("b", Status::Unknown, ""),
        ]);
        assert_eq!(unknown.exit_code(), 2);
        let fail = Report::new(vec![
            Check::new("a", Status::Unknown, ""),
            Check::new("b", Status::Fail, ""),
        ]);
        assert_eq!(fail.exit_code(), 1);
        assert!(!fail.ok);
    }

    #[test]
    fn summary_fits_one_npd_line() {
        let ids: Vec<Check> = [
            "containerd.memlock",
            "systemd.memlock",
            "rdma.netns",
            "rdma.devices",
            "kernel.dkms",
        ]
        .into_iter()
        .map(|id| Check::new(id, Status::Fail, ""))
        .collect();
        let r = Report::new(ids);
        assert!(r.summary.chars().count() <= SUMMARY_MAX);
        assert!(!r.summary.contains('\n'));
        assert!(r.to_text().starts_with(&r.summary));
    }
}
