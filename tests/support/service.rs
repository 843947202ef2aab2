//! The agent installed as a service on a real-systemd machine (support::nspawn),
//! shared by the system tests.

use std::path::PathBuf;

use super::nspawn::Machine;

/// The .deb scripts/package.sh built, as scripts/test.sh names it in
/// RDMA_AGENT_DEB. Without it the tests fail: they test the product as
/// installed, never the debug binary instead.
pub fn deb() -> PathBuf {
    let Some(p) = std::env::var_os("RDMA_AGENT_DEB").map(PathBuf::from) else {
        panic!(
            "RDMA_AGENT_DEB is not set: the live tiers install the package as users do. \
             Build it with `CARGO_TARGET_DIR=/var/cache/rdma-node-agent/target-release \
             scripts/package.sh`, then set RDMA_AGENT_DEB to the \
             dist/rdma-node-agent_<version>-1_amd64.deb it lists (scripts/test.sh does both)"
        )
    };
    assert!(
        p.is_file(),
        "RDMA_AGENT_DEB={} does not exist: build it with `scripts/package.sh` \
         (CARGO_TARGET_DIR names where; its dist/ holds the .deb)",
        p.display()
    );
    p
}

/// Installs the package with `dpkg -i` and `config` (plus `machine_config`'s
/// module list) in place, as an operator who templates the config before the
/// first start: the unit enabled, not started (a policy-rc.d that denies it,
/// which the package's postinst honours). Callers start it with systemctl.
pub fn install_agent(m: &Machine, config: &str) {
    m.install(&deb(), "/var/tmp/rdma-node-agent.deb", 0o644);
    m.write("/etc/rdma-node-agent/config.toml", &machine_config(config));
    // The operator's config is kept (it exists before the package's conffile).
    m.sh_ok(
        "printf '#!/bin/sh\\nexit 101\\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d \
         && dpkg --force-confdef --force-confold -i /var/tmp/rdma-node-agent.deb >/dev/null \
         && rm /usr/sbin/policy-rc.d /var/tmp/rdma-node-agent.deb",
    );
    assert_eq!(
        m.sh("systemctl is-enabled rdma-node-agent; systemctl is-active rdma-node-agent || true"),
        "enabled\ninactive\n",
        "the package installed the unit enabled and did not start it"
    );
}

/// The test machines' kernel has no module support (no /proc/modules): no module
/// can be required there.
pub fn machine_config(config: &str) -> String {
    format!("{config}\n[kernel]\nrequired_modules = []\n")
}

pub fn cri_ok(m: &Machine) -> bool {
    m.sh("ctr plugins ls 2>/dev/null | awk '$1==\"io.containerd.grpc.v1\" && $2==\"cri\" {print $NF}'")
        .trim()
        == "ok"
}

/// The agent's `/status` inside the machine (Null while it does not answer).
pub fn status(m: &Machine) -> serde_json::Value {
    serde_json::from_str(&m.sh("curl -s http://127.0.0.1:9470/status"))
        .unwrap_or(serde_json::Value::Null)
}

/// A check of the agent's `/status` (Null while there is none).
pub fn status_check(m: &Machine, id: &str) -> serde_json::Value {
    status(m)["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == id).cloned())
        .unwrap_or(serde_json::Value::Null)
}

/// How many times systemd has started containerd.service since the machine booted.
pub fn containerd_starts(m: &Machine) -> usize {
    m.sh("journalctl -b -u containerd.service --no-pager -o cat")
        .lines()
        .filter(|l| l.starts_with("Started containerd"))
        .count()
}

/// The agent (memlock 4 MiB) started and containerd prepared; returns the
/// config as repaired and as a hand edit that drops every base spec line.
pub fn prepared_and_hand_edited(m: &Machine) -> (String, String) {
    const CONFIG: &str = "/etc/containerd/config.toml";
    install_agent(
        m,
        "[containerd]\nmemlock = \"4MiB\"\n\n[systemd]\nmemlock = \"4MiB\"\n",
    );
    m.sh_ok("systemctl start rdma-node-agent");
    m.wait(
        "containerd prepared",
        std::time::Duration::from_secs(30),
        |m| cri_ok(m) && m.read(CONFIG).contains("base_runtime_spec"),
    );
    let repaired = m.read(CONFIG);
    let edited = repaired
        .lines()
        .filter(|l| !l.contains("base_runtime_spec"))
        .map(|l| format!("{l}\n"))
        .collect();
    (repaired, edited)
}
