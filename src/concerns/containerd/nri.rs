//! The NRI route to RLIMIT_MEMLOCK, pure: which containers the agent's NRI
//! plugin adjusts at CreateContainer ([`adjust`]), and the `containerd.nri`
//! check on the mode and the plugin's registration ([`NriCheck`]).

use crate::concerns::containerd::reasons;
use crate::engine::check::CheckId;
use serde_json::json;

use crate::config::Config;
use crate::config::nri::MemlockVia;
use crate::engine::check::{Check, Status};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::host::limit::Limit;
use crate::host::nri::{self, api};
use crate::host::snapshot::Snapshot;
use crate::observe::Observation;
use crate::reason::Reason;

pub const CHECK_ID: CheckId = CheckId::new("containerd.nri");
const MEMLOCK: &str = "RLIMIT_MEMLOCK";

/// What the plugin gives, and to which containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub memlock: Limit,
    pub annotations: Vec<String>,
    /// The namespaces whose pods the annotations are heard from (none: off).
    pub annotation_namespaces: Vec<String>,
}

/// Why a container gets the target, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Raised to the target; the reason names the device or annotation.
    Adjust { reason: String },
    /// No RDMA device and no annotation: the runtime default stays.
    NotRdma,
    /// Its spec already has RLIMIT_MEMLOCK at or above the target.
    AlreadyEnough { soft: u64, hard: u64 },
    /// Its spec has an explicit lower RLIMIT_MEMLOCK (a base spec, another
    /// plugin): kept, never raised silently; reported.
    KeptLower {
        soft: u64,
        hard: u64,
        reason: String,
    },
    /// Its handler's base spec is not known (it may set a lower limit the
    /// operator wants kept): not raised; reported.
    BaseSpecUnknown { reason: String, why: String },
}

/// A device node RDMA verbs or the connection manager use (device plugins
/// and CDI both end in these paths in the container's `linux.devices`).
pub fn rdma_device(path: &str) -> bool {
    path.strip_prefix("/dev/infiniband/")
        .is_some_and(|n| n.starts_with("uverbs") || n == "rdma_cm")
}

fn asks(
    annotations: &std::collections::HashMap<String, String>,
    keys: &[String],
) -> Option<String> {
    keys.iter()
        .find(|k| annotations.get(*k).is_some_and(|v| v != "false"))
        .cloned()
}

/// Each CRI handler's base-spec memlock, from containerd's own view (the
/// running containerd's CRI Status, else `config dump`) and the spec files read.
pub fn base_spec_observations(f: &super::Facts) -> Vec<Observation> {
    let view = match (&f.cri_view, &f.dump_view) {
        (Some(Ok(v)), _) | (_, Some(Ok(v))) => v,
        _ => return Vec::new(),
    };
    view.handlers
        .iter()
        .filter(|h| h.linux())
        .map(|h| Observation::BaseSpecMemlock {
            handler: h.name.clone(),
            default: h.name == view.default,
            memlock: (!h.base_spec.is_empty())
                .then(|| f.specs.get(std::path::Path::new(&h.base_spec)))
                .flatten()
                .and_then(|s| s.as_ref())
                .and_then(|(text, _)| super::spec::memlock(text)),
        })
        .collect()
}

/// The pure decision for one container at CreateContainer. `base_spec`: the
/// RLIMIT_MEMLOCK of its handler's base spec, which containerd 2.1 applies but
/// does not show plugins (its `rlimits` are empty there).
pub fn adjust(
    pod: Option<&api::PodSandbox>,
    c: &api::Container,
    base_spec: &nri::BaseSpec,
    t: &Target,
) -> Verdict {
    let device = c
        .linux
        .as_ref()
        .and_then(|l| l.devices.iter().find(|d| rdma_device(&d.path)))
        .map(|d| format!("device {}", d.path));
    // Any pod can annotate itself: heard only in the namespaces allowed.
    let annotation = || {
        let pod = pod.filter(|p| t.annotation_namespaces.contains(&p.namespace))?;
        asks(&c.annotations, &t.annotations)
            .map(|k| format!("container annotation {k}"))
            .or_else(|| {
                asks(&pod.annotations, &t.annotations).map(|k| format!("pod annotation {k}"))
            })
    };
    let Some(reason) = device.or_else(annotation) else {
        return Verdict::NotRdma;
    };
    let own = c
        .rlimits
        .iter()
        .find(|r| r.r#type == MEMLOCK)
        .map(|r| (r.soft, r.hard));
    let explicit = match (own, base_spec) {
        (Some(l), _) => Some(l),
        (None, nri::BaseSpec::Set(l)) => Some(*l),
        (None, nri::BaseSpec::Unset) => None,
        (None, nri::BaseSpec::Unknown(why)) => {
            return Verdict::BaseSpecUnknown {
                reason,
                why: why.clone(),
            };
        }
    };
    match explicit {
        None => Verdict::Adjust { reason },
        Some((soft, hard)) if soft >= t.memlock.0 && hard >= t.memlock.0 => {
            Verdict::AlreadyEnough { soft, hard }
        }
        Some((soft, hard)) => Verdict::KeptLower { soft, hard, reason },
    }
}

/// The answer to CreateContainer for a verdict.
pub fn response(v: &Verdict, t: &Target) -> api::CreateContainerResponse {
    let mut out = api::CreateContainerResponse::default();
    if let Verdict::Adjust { .. } = v {
        out.adjust = Some(api::ContainerAdjustment {
            rlimits: vec![api::PosixRlimit {
                r#type: MEMLOCK.into(),
                hard: t.memlock.0,
                soft: t.memlock.0,
            }],
            ..Default::default()
        });
    }
    out
}

/// `containerd.nri`: the mode, and whether the plugin runs where it must.
pub struct NriCheck;

pub struct Facts {
    via: MemlockVia,
    socket: std::path::PathBuf,
    /// Whether the socket accepts connections, or why not.
    probe: Result<(), String>,
    /// The daemon's plugin: this process's, or what the running daemon published.
    plugin: Result<nri::Status, String>,
    /// Where `plugin` comes from: "" in the daemon, else " (daemon pid N)".
    source: String,
}

impl Concern for NriCheck {
    type Facts = Facts;

    fn reasons(&self) -> &'static [Reason] {
        reasons::ALL
    }

    fn ids(&self) -> &'static [CheckId] {
        &[CHECK_ID]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.containerd.enabled
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Facts, GatherError> {
        let socket = cfg.containerd.nri_socket.clone();
        let via = cfg.containerd.memlock_via;
        let (plugin, source) = match snap.nri() {
            Some(p) => (Ok(p.clone()), String::new()),
            None if !via.may_use_nri() => (Err(String::new()), String::new()),
            None => match nri::published(snap) {
                nri::Daemon::Running { pid, status } => {
                    (Ok(status), format!(" (daemon pid {pid})"))
                }
                nri::Daemon::NotRunning(why) => (Err(why), String::new()),
            },
        };
        let probe = match &plugin {
            _ if !via.may_use_nri() => Ok(()),
            // Registered: containerd accepts NRI plugins, as it just said.
            Ok(p) if p.registered => Ok(()),
            // `auto` stays on NRI once this daemon registered (as
            // containerd.memlock decides): judged as an unregistered plugin.
            _ if via == MemlockVia::Auto && snap.nri().is_some_and(|p| p.registrations > 0) => {
                Ok(())
            }
            _ => nri::probe(snap, &socket),
        };
        Ok(Facts {
            via,
            socket,
            probe,
            plugin,
            source,
        })
    }

    fn decide(&self, f: &Facts, _ctx: &Ctx) -> Decision {
        let mut d = Decision::default();
        // Metrics only from the daemon's own plugin, never a file's copy.
        if let (Ok(p), true) = (&f.plugin, f.source.is_empty()) {
            d.observations.push(Observation::Nri {
                registered: p.registered,
                adjusted: p.adjusted,
                kept_lower: p.kept_lower,
            });
        }
        d.checks.push(judge(f));
        d
    }
}

const HOW: &str = "enable NRI in containerd ([plugins.\"io.containerd.nri.v1.nri\"] disable = false, on by default in containerd 2.x; then restart containerd), or set memlock_via = \"base-spec\" under [containerd] in the agent config";

fn judge(f: &Facts) -> Check {
    let p = f.plugin.as_ref().ok();
    let details = json!({
        "memlock_via": f.via.as_str(),
        "socket": f.socket,
        "registered": p.map(|p| p.registered),
        "registrations": p.map(|p| p.registrations),
        "adjusted_containers": p.map(|p| p.adjusted),
        "kept_lower": p.map(|p| p.kept_lower),
        "base_spec_unknown": p.map(|p| p.base_spec_unknown),
        "last_error": p.and_then(|p| p.last_error.clone()),
    });
    let c = |s, m: String| Check::new(CHECK_ID, s, m).with_details(details.clone());
    let sock = f.socket.display();
    let via = f.via.as_str();
    // "both" keeps the base spec: a missing NRI half is a warning, not a failure.
    let missing = if f.via == MemlockVia::Both {
        Status::Warn
    } else {
        Status::Fail
    };
    match (f.via, &f.probe, &f.plugin) {
        (MemlockVia::BaseSpec, ..) => c(
            Status::Skipped,
            "memlock_via = \"base-spec\": containers get memlock from containerd's base spec (containerd.memlock); no NRI plugin".into(),
        ),
        (MemlockVia::Auto, Err(why), _) => c(
            Status::Ok,
            format!("memlock_via = \"auto\" picked the base spec: {why}"),
        ),
        (_, Err(why), _) => c(
            missing,
            format!("memlock_via = \"{via}\" but {why}: no container gets memlock from this agent's NRI plugin; {HOW}"),
        )
        .with_reason(reasons::NRI_UNAVAILABLE),
        (_, Ok(()), Err(why)) => c(
            missing,
            format!("memlock_via = \"{via}\": containerd accepts NRI plugins on {sock}, but {why}; new RDMA containers get no memlock from the agent until `rdma-node-agent serve` runs"),
        )
        .with_reason(reasons::NRI_PLUGIN_NOT_RUNNING),
        (_, Ok(()), Ok(p)) if p.registered && p.base_spec_unknown > 0 => c(
            Status::Warn,
            format!(
                "memlock_via = \"{via}\": the NRI plugin is registered on {sock}{}, but {} RDMA container(s) were not raised: their runtime handler's base spec was not known (it may set a lower RLIMIT_MEMLOCK to keep), so they run with containerd's default; the agent's log names them. {} adjusted, {} kept a lower explicit limit",
                f.source, p.base_spec_unknown, p.adjusted, p.kept_lower
            ),
        )
        .with_reason(reasons::NRI_BASE_SPEC_UNKNOWN),
        (_, Ok(()), Ok(p)) if p.registered => c(
            Status::Ok,
            format!(
                "memlock_via = \"{via}\": the NRI plugin is registered on {sock}{}; {} RDMA container(s) adjusted, {} kept a lower explicit limit",
                f.source, p.adjusted, p.kept_lower
            ),
        ),
        (_, Ok(()), Ok(p)) => c(
            missing,
            format!(
                "memlock_via = \"{via}\": the NRI plugin is not registered on {sock}{}{}; new RDMA containers do not get memlock from it until it is",
                f.source,
                p.last_error.as_ref().map(|e| format!(" ({e})")).unwrap_or_default()
            ),
        )
        .with_reason(reasons::NRI_PLUGIN_NOT_REGISTERED),
    }
}

#[cfg(test)]
#[path = "nri_tests.rs"]
mod tests;
