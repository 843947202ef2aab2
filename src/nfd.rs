//! Node Feature Discovery labels from the checks, so RDMA pods can be scheduled
//! only on prepared nodes: a feature file in NFD's local source directory,
//! written atomically (dot-file, then rename) and removed by `revert`.

use crate::check::{Check, Report};
use crate::config::{Config, NfdConfig};
use crate::plan::FileChange;

/// `feature.node.kubernetes.io/<name>` once NFD picks them up.
pub fn labels(checks: &[Check], config: &Config) -> Vec<(String, String)> {
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
    if let Some(mode) = checks
        .iter()
        .find(|c| c.id == "rdma.netns")
        .and_then(|c| c.details.get("mode"))
        .and_then(|m| m.as_str())
    {
        out.push(("rdma-node-agent.netns-mode".to_owned(), mode.to_owned()));
    }
    out
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Status;

    #[test]
    fn labels_follow_the_checks() {
        let c = Config::default();
        let ok = vec![Check::new("containerd.memlock", Status::Ok, "")];
        let l = labels(&ok, &c);
        assert_eq!(l[0], ("rdma-node-agent.ready".into(), "true".into()));
        assert_eq!(l[1], ("rdma-node-agent.memlock".into(), "unlimited".into()));
        let failing = vec![
            Check::new("containerd.memlock", Status::Fail, ""),
            Check::new("rdma.netns", Status::Ok, "")
                .with_details(serde_json::json!({"mode": "exclusive"})),
        ];
        let l = labels(&failing, &c);
        assert_eq!(l[0].1, "false");
        assert_eq!(
            l[2],
            ("rdma-node-agent.netns-mode".into(), "exclusive".into())
        );
        let text = content(&l);
        assert!(text.contains("\nrdma-node-agent.ready=false\n"));
        let nfd = NfdConfig::default();
        assert!(decide(&nfd, Some(text.clone().into_bytes()), &l).is_none());
        assert!(decide(&nfd, None, &l).is_some());
    }
}
