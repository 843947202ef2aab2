//! The agent installed as a service on a real-systemd machine (support::nspawn),
//! shared by the system tests.

use std::path::Path;

use super::nspawn::Machine;

pub fn install_agent(m: &Machine, config: &str) {
    m.install(
        Path::new(env!("CARGO_BIN_EXE_rdma-node-agent")),
        "/usr/bin/rdma-node-agent",
        0o755,
    );
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/rdma-node-agent.service");
    m.install(&unit, "/etc/systemd/system/rdma-node-agent.service", 0o644);
    m.write("/etc/rdma-node-agent/config.toml", &machine_config(config));
    m.sh("systemctl daemon-reload");
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
