//! The PCI config helper on real systemd (PID 1 in systemd-nspawn): the
//! agent's own D-Bus client starts `rdma-node-agent pci-config` as a transient
//! unit with its sandbox properties (systemd 252 must accept every one), the
//! helper runs with CAP_SYS_ADMIN alone, answers under
//! /run/rdma-node-agent/pci-config, and the client reads and removes it. The
//! machine sees the host's PCI functions (sysfs is the host's): on this CI
//! host none is a bridge, so the helper refuses each by its header type —
//! which it can only say after reading it.

mod support;

use std::path::Path;

use rdma_node_agent::host::Host;
use rdma_node_agent::host::dbus::Dbus;
use rdma_node_agent::host::pci_helper::Helper;
use support::nspawn::Machine;

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn the_helper_runs_as_a_sandboxed_transient_unit() {
    let m = Machine::boot();
    m.install(
        Path::new(env!("CARGO_BIN_EXE_rdma-node-agent")),
        "/usr/bin/rdma-node-agent",
        0o755,
    );
    // The client is the agent's own, on the machine's bus.
    // SAFETY: set before any connection, and this binary's only test.
    unsafe { std::env::set_var("DBUS_SYSTEM_BUS_ADDRESS", m.bus_address()) };
    let dbus = Dbus::system().expect("the machine's bus");
    let root = Host::new(m.root_path("/"));
    let functions: Vec<String> = std::fs::read_dir("/sys/bus/pci/devices")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .take(4)
        .collect();
    assert!(
        !functions.is_empty(),
        "no PCI function on this host to read"
    );
    let helper = Helper {
        manager: &dbus,
        host: &root,
        exe: "/usr/bin/rdma-node-agent".into(),
    };
    let got = helper
        .read(&functions)
        .unwrap_or_else(|e| panic!("{e}\n{}", m.sh("journalctl --no-pager -o cat -n 30")));
    for f in &functions {
        let header_type = std::fs::read(format!("/sys/bus/pci/devices/{f}/config"))
            .ok()
            .and_then(|c| c.get(0x0e).copied())
            .map(|t| t & 0x7f);
        match (&got[f], header_type) {
            (Ok(c), Some(1)) => assert!(c.len() > 64, "{f}: {} bytes", c.len()),
            (Err(e), Some(t)) if t != 1 => assert!(e.contains("not a PCI bridge"), "{f}: {e}"),
            (r, t) => panic!("{f} (header type {t:?}): {r:?}"),
        }
    }
    // Nothing left behind; the unit is gone (CollectMode=inactive-or-failed).
    assert_eq!(m.sh("ls -A /run/rdma-node-agent/pci-config").trim(), "");
    assert!(
        m.sh("systemctl list-units --all --no-legend 'rdma-node-agent-pci-config-*'")
            .trim()
            .is_empty()
    );
    // Its journal names the run (what an operator looks for).
    let journal = m.sh("journalctl --no-pager -o cat | grep -c 'rdma-node-agent: /usr/bin/rdma-node-agent pci-config read' || true");
    assert!(journal.trim().parse::<u32>().unwrap_or(0) >= 1, "{journal}");
}
