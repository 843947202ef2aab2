//! Node Feature Discovery labels from the checks, so RDMA pods can be scheduled
//! only on prepared nodes: a feature file in NFD's local source directory,
//! written atomically (dot-file, then rename) and removed by `revert`. A
//! concern registered last: it reads the checks and observations of all the
//! others, by check id, as the engine hands them over (it imports none).

use crate::config::{Config, NfdConfig};
use crate::engine::check::CheckId;
use crate::engine::check::{Check, Report};
use crate::engine::concern::{Concern, Ctx, Decision, GatherError};
use crate::engine::plan::FileChange;
use crate::host::snapshot::Snapshot;
use crate::observe::{Observation, Observations};
use crate::reason::Reason;

/// `feature.node.kubernetes.io/<name>` once NFD picks them up.
pub fn labels(
    checks: &[Check],
    observations: &[Observation],
    config: &Config,
) -> Vec<(String, String)> {
    let mut out = vec![
        (
            "rdma-node-agent.ready".to_owned(),
            Report::new(checks.to_vec()).ok.to_string(),
        ),
        (
            "rdma-node-agent.memlock".to_owned(),
            config.containerd.memlock.to_string().replace(' ', "-"),
        ),
    ];
    if let Some(mode) = observations.netns_mode() {
        out.push((
            "rdma-node-agent.netns-mode".to_owned(),
            mode.as_str().to_owned(),
        ));
    }
    out.extend(readiness_labels(checks, observations));
    // `gate`: the return-to-service gate (`rdma.gate`, only with `[peers] gate`):
    // `open` when it said ok, else `closed` (an unknown gate is no open one);
    // none when the gate is off (skipped).
    if let Some(c) = checks
        .iter()
        .find(|c| c.id == "rdma.gate" && c.status != crate::engine::check::Status::Skipped)
    {
        let open = c.status == crate::engine::check::Status::Ok;
        out.push((
            "rdma-node-agent.gate".to_owned(),
            if open { "open" } else { "closed" }.to_owned(),
        ));
    }
    // `gpudirect`: peermem, dmabuf or none (only with NVIDIA GPUs, and only
    // when gpudirect.path could tell).
    if let Some(mech) = observations.iter().find_map(|o| match o {
        Observation::GpuDirectMechanism(m) => *m,
        _ => None,
    }) {
        out.push(("rdma-node-agent.gpudirect".to_owned(), mech.to_owned()));
    }
    out
}

/// `rdma-pods-ok`: every running RDMA pod container can register memory (from
/// `pods.rdma`); `rdma-advertised`: the kubelet has at least one healthy RDMA
/// device (from `kubelet.devices`). Absent when their check could not tell.
fn readiness_labels(checks: &[Check], observations: &[Observation]) -> Vec<(String, String)> {
    use crate::engine::check::Status;
    let status = |id: &str| checks.iter().find(|c| c.id == id).map(|c| c.status);
    let mut out = Vec::new();
    match status("pods.rdma") {
        Some(Status::Ok) => {
            out.push(("rdma-node-agent.rdma-pods-ok".to_owned(), "true".to_owned()))
        }
        Some(Status::Warn | Status::Fail) => out.push((
            "rdma-node-agent.rdma-pods-ok".to_owned(),
            "false".to_owned(),
        )),
        _ => {}
    }
    if matches!(
        status("kubelet.devices"),
        Some(Status::Ok | Status::Warn | Status::Fail)
    ) {
        let advertised = observations.iter().any(|o| {
            matches!(o, Observation::KubeletResource { rdma: true, devices, .. } if *devices > 0)
        });
        out.push((
            "rdma-node-agent.rdma-advertised".to_owned(),
            advertised.to_string(),
        ));
    }
    out
}

/// The labels as a concern: registered last, it summarises every check before it.
pub struct Labels;

impl Concern for Labels {
    type Facts = Option<Vec<u8>>;

    fn reasons(&self) -> &'static [Reason] {
        &[]
    }

    fn ids(&self) -> &'static [CheckId] {
        &[]
    }

    fn enabled(&self, cfg: &Config) -> bool {
        cfg.nfd.enabled
    }

    fn writes(&self) -> bool {
        true
    }

    fn summarises(&self) -> bool {
        true
    }

    fn gather(&self, snap: &Snapshot, cfg: &Config) -> Result<Option<Vec<u8>>, GatherError> {
        Ok(snap
            .read(&cfg.nfd.path)
            .map_err(GatherError::unknown)?
            .map(|d| d.bytes))
    }

    fn decide(&self, current: &Option<Vec<u8>>, ctx: &Ctx) -> Decision {
        let labels = labels(ctx.checks, ctx.observations, ctx.config);
        Decision {
            changes: decide(&ctx.config.nfd, current.clone(), &labels)
                .into_iter()
                .collect(),
            ..Decision::default()
        }
    }
}

pub fn content(labels: &[(String, String)]) -> String {
    let mut s = String::from(
        "# Written by rdma-node-agent from its checks; removed by `rdma-node-agent revert`.\n",
    );
    for (k, v) in labels {
        s.push_str(&format!("{k}={v}\n"));
    }
    s
}

/// The change that brings the feature file to `labels`, if any. Pure.
pub fn decide(
    cfg: &NfdConfig,
    current: Option<Vec<u8>>,
    labels: &[(String, String)],
) -> Option<FileChange> {
    let want = content(labels).into_bytes();
    (current.as_deref() != Some(want.as_slice())).then(|| FileChange {
        path: cfg.path.clone(),
        old: current,
        new: Some(want),
        mode: 0o644,
        owner: "nfd",
        reason: "node labels for RDMA scheduling".into(),
        restart: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::check::Status;

    #[test]
    fn labels_follow_the_checks() {
        let c = Config::default();
        let ok = vec![Check::new(
            CheckId::new("containerd.memlock"),
            Status::Ok,
            "",
        )];
        let l = labels(&ok, &[], &c);
        assert_eq!(l[0], ("rdma-node-agent.ready".into(), "true".into()));
        assert_eq!(l[1], ("rdma-node-agent.memlock".into(), "unlimited".into()));
        let failing = vec![
            Check::new(CheckId::new("containerd.memlock"), Status::Fail, ""),
            Check::new(CheckId::new("rdma.netns"), Status::Ok, ""),
        ];
        let seen = [Observation::NetnsMode(Some(
            crate::host::netlink::NetnsMode::Exclusive,
        ))];
        let l = labels(&failing, &seen, &c);
        assert_eq!(l[0].1, "false");
        assert_eq!(
            l[2],
            ("rdma-node-agent.netns-mode".into(), "exclusive".into())
        );
        let text = content(&l);
        // The readiness labels follow pods.rdma and kubelet.devices.
        let checks = vec![
            Check::new(CheckId::new("pods.rdma"), Status::Warn, ""),
            Check::new(CheckId::new("kubelet.devices"), Status::Ok, ""),
        ];
        let seen = [Observation::KubeletResource {
            name: "rdma/hca".into(),
            devices: 2,
            rdma: true,
        }];
        let r = labels(&checks, &seen, &c);
        assert!(r.contains(&("rdma-node-agent.rdma-pods-ok".into(), "false".into())));
        assert!(r.contains(&("rdma-node-agent.rdma-advertised".into(), "true".into())));
        // `gpudirect` follows gpudirect.path's mechanism, and only when it could tell.
        for m in ["peermem", "none"] {
            let seen = [Observation::GpuDirectMechanism(Some(m))];
            let l = labels(&ok, &seen, &c);
            assert!(l.contains(&("rdma-node-agent.gpudirect".into(), m.into())));
        }
        let unknown = [Observation::GpuDirectMechanism(None)];
        assert!(
            !labels(&ok, &unknown, &c)
                .iter()
                .any(|(k, _)| k.ends_with(".gpudirect"))
        );
        let skipped = vec![Check::new(
            CheckId::new("kubelet.devices"),
            Status::Skipped,
            "",
        )];
        assert_eq!(labels(&skipped, &[], &c).len(), 2);
        assert!(text.contains("\nrdma-node-agent.ready=false\n"));
        let nfd = NfdConfig::default();
        assert!(decide(&nfd, Some(text.clone().into_bytes()), &l).is_none());
        assert!(decide(&nfd, None, &l).is_some());
    }
}
