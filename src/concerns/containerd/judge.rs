//! The `containerd.memlock` check. The files the agent wrote are never the
//! proof: `ok` needs containerd's own view (`config dump` of the config its unit
//! reads; on the live host, the running containerd's CRI `Status` too) to give
//! every CRI handler, the default included, a base spec with the target memlock.
//! What cannot be asked is `unknown`, with the reason.

use crate::concerns::containerd::reasons;
use std::path::Path;

use serde_json::{Value, json};

use super::spec;
use super::view::View;
use super::{CHECK_ID, ContainerdError, Decision, Facts, Started};
use crate::config::ContainerdConfig;
use crate::engine::check::{Check, Status};
use crate::reason::Reason;

/// The `containerd.memlock` check from a decision (or the error that prevented one).
pub fn check(
    facts: Option<&Facts>,
    decision: &Result<Decision, &ContainerdError>,
    cfg: &ContainerdConfig,
) -> Check {
    let d = match decision {
        Err(e) => {
            return Check::new(CHECK_ID, e.status(cfg.required), e.to_string())
                .with_reason(e.reason());
        }
        Ok(d) => d,
    };
    let facts = facts.expect("a decision comes from facts");
    let config = facts.set.files[0].path.display().to_string();
    let mut details = details(facts, d, cfg, &config);
    if let Some(entry) = &facts.cri_disabled {
        return cri_off(facts, entry, &config).with_details(details);
    }
    let j = Judge {
        facts,
        d,
        cfg,
        config: &config,
        names: d.handlers.iter().map(|(h, _)| h.as_str()).collect(),
    };
    let found = j.judge(&mut details);
    let check = Check::new(CHECK_ID, found.status, found.message);
    match found.reason {
        Some(r) => check.with_reason(r),
        None => check,
    }
    .with_details(details)
}

/// What the decision, the facts and the config say about the check's subject.
fn details(facts: &Facts, d: &Decision, cfg: &ContainerdConfig, config: &str) -> Value {
    json!({
        "target": cfg.memlock.to_string(),
        "config": config,
        "config_source": facts.config_source,
        "unit": facts.unit,
        "handlers": d.handlers.iter().map(|(h, s)| json!({"handler": h, "base_runtime_spec": s})).collect::<Vec<_>>(),
        "unmanaged": d.unmanaged,
        "left_alone": d.foreign,
        "warnings": facts.warnings,
        "containerd_started_unix": facts.containerd_started.as_ref().ok().and_then(|s| s.as_ref()).map(|s| unix(s.at)),
        "newest_change": facts.newest_change.as_ref().ok().and_then(|n| n.as_ref()).map(|(t, p)| json!({"path": p, "unix": unix(*t)})),
    })
}

/// A check's verdict before its details: status, reason, message.
struct Found {
    status: Status,
    reason: Option<Reason>,
    message: String,
}

fn found(status: Status, reason: Reason, message: String) -> Found {
    Found {
        status,
        reason: Some(reason),
        message,
    }
}

/// The check's inputs, once CRI is known to be on.
struct Judge<'a> {
    facts: &'a Facts,
    d: &'a Decision,
    cfg: &'a ContainerdConfig,
    config: &'a str,
    /// The handlers given the spec.
    names: Vec<&'a str>,
}

impl Judge<'_> {
    /// In order: edits still due, containerd's own views (each must agree),
    /// whether the running containerd read the files, then what is left to say.
    fn judge(&self, details: &mut Value) -> Found {
        let (d, cfg) = (self.d, self.cfg);
        if !d.plan.changes.is_empty() {
            return found(
                Status::Fail,
                reasons::NO_BASE_SPEC,
                format!(
                    "not prepared for memlock {}: {} (run `rdma-node-agent apply`)",
                    cfg.memlock,
                    d.pending.join("; ")
                ),
            );
        }
        let confirmed = match self.confirm(details) {
            Ok(c) => c,
            Err(f) => return f,
        };
        let (started, pending) = match self.running() {
            Ok(r) => r,
            Err(f) => return f,
        };
        self.verdict(started.is_some(), pending, &confirmed.join(" and "))
    }

    /// containerd's own answers, each of which must agree: the sources that
    /// confirmed the target, or why not.
    fn confirm(&self, details: &mut Value) -> Result<Vec<String>, Found> {
        let (facts, cfg, config) = (self.facts, self.cfg, self.config);
        let names = self.names.join(", ");
        let mut views: Vec<&Result<View, String>> = facts.dump_view.iter().collect();
        views.extend(facts.cri_view.iter());
        if views.is_empty() {
            return Err(found(
                Status::Unknown,
                reasons::CONTAINERD_UNCONFIRMED,
                format!(
                    "configured for memlock {}, not confirmed by containerd: there was nothing to ask it",
                    cfg.memlock
                ),
            ));
        }
        let mut confirmed = Vec::new();
        for v in views {
            let view = v.as_ref().map_err(|why| {
                found(
                    Status::Unknown,
                    reasons::CONTAINERD_UNCONFIRMED,
                    format!(
                        "handlers {names} are configured for memlock {} in {config}, not confirmed by containerd: {why}",
                        cfg.memlock
                    ),
                )
            })?;
            details[view_key(view)] = json!({
                "default": view.default,
                "handlers": view.handlers.iter().map(|h| json!({"handler": h.name, "base_runtime_spec": h.base_spec})).collect::<Vec<_>>(),
            });
            // No handler to judge confirms nothing, however it is read.
            let Some(problems) = disagreements(view, facts, cfg) else {
                return Err(found(
                    Status::Unknown,
                    reasons::CONTAINERD_UNCONFIRMED,
                    format!(
                        "handlers {names} are configured for memlock {} in {config}, not confirmed by containerd: {} lists no Linux runtime handler and no default",
                        cfg.memlock, view.source
                    ),
                ));
            };
            if !problems.is_empty() {
                return Err(found(
                    Status::Fail,
                    reasons::BASE_SPEC_NOT_APPLIED,
                    format!(
                        "containerd does not give new containers memlock {}: {} says {} (the agent reads {config}: {})",
                        cfg.memlock,
                        view.source,
                        problems.join("; "),
                        facts.config_source
                    ),
                ));
            }
            confirmed.push(view.source.clone());
        }
        Ok(confirmed)
    }

    /// When the running containerd started (`None`: not running) and whether
    /// a restart is owed since its files changed; unknown is said.
    fn running(&self) -> Result<(Option<Started>, bool), Found> {
        let (facts, cfg) = (self.facts, self.cfg);
        let started = facts.containerd_started.clone().map_err(|why| {
            found(
                Status::Unknown,
                Reason::FACT_UNREADABLE,
                format!("configured for memlock {}, but whether the running containerd read it is not known: {why}", cfg.memlock),
            )
        })?;
        let pending = facts.restart_pending().map_err(|why| {
            found(
                Status::Unknown,
                Reason::FACT_UNREADABLE,
                format!("configured for memlock {}, but whether containerd restarted since its config changed is not known: {why}", cfg.memlock),
            )
        })?;
        Ok((started, pending))
    }

    /// The verdict once containerd confirmed the files (`by`): a running,
    /// restarted containerd with every CRI handler covered and no warning is ok.
    fn verdict(&self, running: bool, pending: bool, by: &str) -> Found {
        let (facts, d, cfg) = (self.facts, self.d, self.cfg);
        let names = self.names.join(", ");
        let alone = if d.foreign.is_empty() {
            String::new()
        } else {
            format!(" ({} left alone: Windows)", d.foreign.join(", "))
        };
        if !running {
            return found(
                Status::Warn,
                reasons::CONTAINERD_NOT_RUNNING,
                format!(
                    "handlers {names} are configured for memlock {} ({by} agrees), but containerd is not running",
                    cfg.memlock
                ),
            );
        }
        if pending {
            return found(
                Status::Fail,
                reasons::CONTAINERD_NOT_RESTARTED,
                format!(
                    "containerd restart pending: {}, so new containers do not get memlock {} yet",
                    facts.pending_reason(),
                    cfg.memlock
                ),
            );
        }
        if !d.unmanaged.is_empty() {
            return found(
                Status::Warn,
                reasons::HANDLER_UNMANAGED,
                format!(
                    "handlers {names} start containers with memlock {}, but CRI can also use {}, which {} not in containerd.handlers and lack it",
                    cfg.memlock,
                    d.unmanaged.join(", "),
                    if d.unmanaged.len() == 1 { "is" } else { "are" }
                ),
            );
        }
        if !facts.warnings.is_empty() {
            return found(
                Status::Warn,
                reasons::CONTAINERD_CONFIG_WARNING,
                format!(
                    "handlers {names} start containers with memlock {} ({by} agrees), but: {}",
                    cfg.memlock,
                    facts.warnings.join("; ")
                ),
            );
        }
        Found {
            status: Status::Ok,
            reason: None,
            message: format!(
                "handlers {names} start containers with memlock {}{alone}, confirmed by {by}",
                cfg.memlock
            ),
        }
    }
}

fn view_key(v: &View) -> &'static str {
    if v.source.contains("CRI") {
        "cri_status"
    } else {
        "config_dump"
    }
}

/// Where containerd's view falls short of the target: each handler CRI can use
/// (the configured ones, else every Linux handler and the default). `None`
/// when there is no handler to judge.
fn disagreements(view: &View, facts: &Facts, cfg: &ContainerdConfig) -> Option<Vec<String>> {
    let mut judged: Vec<String> = if cfg.handlers.is_empty() {
        view.handlers
            .iter()
            .filter(|h| h.linux())
            .map(|h| h.name.clone())
            .collect()
    } else {
        cfg.handlers.clone()
    };
    if cfg.handlers.is_empty() && !view.default.is_empty() && !judged.contains(&view.default) {
        judged.push(view.default.clone());
    }
    if judged.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for name in &judged {
        let Some(h) = view.get(name) else {
            let what = if *name == view.default {
                "the default handler"
            } else {
                "handler"
            };
            out.push(format!("{what} {name} does not exist"));
            continue;
        };
        if h.base_spec.is_empty() {
            out.push(format!("{name} has no base_runtime_spec"));
            continue;
        }
        let text = facts.specs.get(Path::new(&h.base_spec)).cloned().flatten();
        match text.as_ref().map(|(t, _)| spec::memlock(t)) {
            None => out.push(format!("{name} uses {}, which does not exist", h.base_spec)),
            Some(None) => out.push(format!(
                "{name} uses {}, which sets no RLIMIT_MEMLOCK",
                h.base_spec
            )),
            Some(Some((soft, _))) if soft < cfg.memlock.0 => out.push(format!(
                "{name} uses {} with memlock {}",
                h.base_spec,
                crate::host::limit::Limit(soft)
            )),
            Some(Some(_)) => {}
        }
    }
    Some(out)
}

/// CRI is off in the config containerd reads: it serves no pods.
fn cri_off(facts: &Facts, entry: &str, config: &str) -> Check {
    cri_off_check(facts, entry, config).with_reason(reasons::CRI_DISABLED)
}

fn cri_off_check(facts: &Facts, entry: &str, config: &str) -> Check {
    let fix = format!("remove {entry:?} from disabled_plugins in {config} if this node runs pods");
    let socket = facts.grpc_address.display().to_string();
    match &facts.kubelet_endpoint {
        Some(ep) if ep.trim_start_matches("unix://") == socket => Check::new(
            CHECK_ID,
            Status::Fail,
            format!(
                "CRI is off in {config} (disabled_plugins = [{entry:?}]), yet the kubelet's runtime endpoint is this containerd ({ep}): no pod can start here; {fix}"
            ),
        ),
        Some(ep) => Check::new(
            CHECK_ID,
            Status::Warn,
            format!(
                "CRI is off in {config} (disabled_plugins = [{entry:?}]): this containerd serves no pods, so nothing was prepared; the kubelet's runtime endpoint is {ep}, which this check does not cover"
            ),
        ),
        None => Check::new(
            CHECK_ID,
            Status::Warn,
            format!(
                "CRI is off in {config} (disabled_plugins = [{entry:?}]): this containerd serves no pods, so nothing was prepared; {fix}"
            ),
        ),
    }
}

/// Seconds since the epoch, to the microsecond (systemd's precision).
fn unix(t: std::time::SystemTime) -> f64 {
    t.duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::super::{Started, facts_from_text};
    use super::*;
    use crate::engine::plan::Plan;

    fn decided() -> Decision {
        Decision {
            plan: Plan::default(),
            handlers: vec![("runc".into(), "/etc/containerd/base.json".into())],
            pending: Vec::new(),
            unmanaged: Vec::new(),
            foreign: Vec::new(),
        }
    }

    /// A containerd view that lists no runtime handler (a CRI Status whose
    /// runtimes sit where this parser does not look) confirms nothing: before,
    /// no handler to judge meant no disagreement, and `ok`.
    #[test]
    fn a_view_without_runtime_handlers_confirms_nothing() {
        let mut f = facts_from_text("version = 2\n").unwrap();
        f.containerd_started = Ok(Some(Started {
            at: std::time::SystemTime::UNIX_EPOCH,
            exact: true,
        }));
        let empty = View {
            source: "the running containerd's CRI Status".into(),
            cri_disabled: None,
            handlers: Vec::new(),
            default: String::new(),
        };
        f.cri_view = Some(Ok(empty.clone()));
        let cfg = ContainerdConfig::default();
        let c = check(Some(&f), &Ok(decided()), &cfg);
        assert_eq!(c.status, Status::Unknown, "{}", c.message);
        assert_eq!(c.reason, Some(reasons::CONTAINERD_UNCONFIRMED));
        assert!(
            c.message.ends_with(
                "not confirmed by containerd: the running containerd's CRI Status lists no Linux runtime handler and no default"
            ),
            "{}",
            c.message
        );
        // Only Windows handlers: nothing to judge either.
        f.cri_view = Some(Ok(View {
            handlers: vec![super::super::view::ViewHandler {
                name: "runhcs-wcow-process".into(),
                base_spec: String::new(),
                runtime_type: "io.containerd.runhcs.v1".into(),
            }],
            ..empty
        }));
        let c = check(Some(&f), &Ok(decided()), &cfg);
        assert_eq!(c.status, Status::Unknown, "{}", c.message);
    }
}
