//! The return-to-service gate's selftest on real systemd (PID 1 in
//! systemd-nspawn): the daemon's own code (`daemon::gate_selftest`) on a
//! closed gate starts `rdma-node-agent selftest` as a transient unit through
//! the agent's D-Bus client, with its sandbox properties (systemd 252 must
//! accept every one); the selftest runs under them, keeps its verdict in the
//! agent's state directory (the one path it may write) and, the machine
//! having no RDMA port, the verdict is no pass, so the gate stays closed; it is
//! not started again for the same event.

mod support;

use std::path::Path;
use std::sync::Arc;

use rdma_node_agent::concerns::rdma::peers::gate::{self, GateState, Identity};
use rdma_node_agent::daemon::gate_selftest::GateSelftest;
use rdma_node_agent::host::Host;
use rdma_node_agent::host::dbus::Dbus;
use rdma_node_agent::host::service::ServiceManager;
use rdma_node_agent::host::stop::Stop;
use support::nspawn::Machine;

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn a_closed_gate_runs_the_selftest_as_a_sandboxed_transient_unit() {
    let m = Machine::boot();
    m.install(
        Path::new(env!("CARGO_BIN_EXE_rdma-node-agent")),
        "/usr/bin/rdma-node-agent",
        0o755,
    );
    m.write("/etc/rdma-node-agent/config.toml", "");
    // The boot id as the agent reads it, which the daemon's gate and the
    // selftest's verdict both hold: the kernel's (nspawn shows a shell in the
    // container a made-up one on /proc; the agent's reader does not see it).
    let boot = rdma_node_agent::host::snapshot::Snapshot::new(Host::new("/"))
        .boot_id()
        .expect("the kernel's boot id");
    let closed = GateState {
        identity: Identity {
            boot_id: boot.clone(),
            kernel: "6.1.0".into(),
            driver: String::new(),
        },
        opened_unix: None,
        closed_since_unix: 1,
        closed_why: "a boot".into(),
    };
    m.write(gate::FILE, &serde_json::to_string(&closed).unwrap());
    // SAFETY: set before any connection, and this binary's only test.
    unsafe { std::env::set_var("DBUS_SYSTEM_BUS_ADDRESS", m.bus_address()) };
    let dbus: Arc<dyn ServiceManager> = Arc::new(Dbus::system().expect("the machine's bus"));
    let root = Host::new(m.root_path("/"));
    let mut g = GateSelftest::default();
    let run = |g: &mut GateSelftest| {
        g.maybe_run_with(
            &root,
            &boot,
            Some(dbus.clone()),
            Path::new("/etc/rdma-node-agent/config.toml"),
            &Stop::new(),
            "/usr/bin/rdma-node-agent".into(),
        )
    };
    let unit = run(&mut g).expect("a closed gate owes a selftest");

    // The selftest ran under its sandbox and kept its verdict: no pass here.
    let verdict: serde_json::Value = serde_json::from_str(
        &m.read("/var/lib/rdma-node-agent/selftest.json"),
    )
    .unwrap_or_else(|e| {
        panic!(
            "no verdict kept ({e}): {}",
            m.sh("journalctl --no-pager -o cat -n 40")
        )
    });
    assert_eq!(verdict["boot_id"], boot.as_str(), "{verdict}");
    assert_eq!(verdict["passed"], false, "{verdict}");
    let journal = m.journal(&unit);
    assert!(
        journal.contains("selftest not run: no RDMA device"),
        "{journal}"
    );
    // Not again for the same event.
    assert_eq!(run(&mut g), None);
}
