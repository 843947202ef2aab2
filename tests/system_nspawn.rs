//! The harness for system tests on real systemd (PID 1 in systemd-nspawn) proves
//! itself: boot, containerd.service up, a drop-in + daemon-reload + restart round
//! trip visible in /proc, journald, D-Bus from the host, and no process left after
//! poweroff or a panic. Needs root, systemd-nspawn, mmdebstrap and a Debian
//! mirror; run with `scripts/test.sh` (or `cargo test --test system_nspawn --
//! --include-ignored` as root). Missing prerequisites fail, they never skip.

mod support;

use std::fs;
use std::time::Duration;

use support::nspawn::Machine;

const DROPIN: &str = "/etc/systemd/system/containerd.service.d/50-memlock-test.conf";

fn memlock_line(limits: &str) -> String {
    limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .unwrap_or_else(|| panic!("no memlock line in:\n{limits}"))
        .split_whitespace()
        .skip(3)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn boots_with_containerd_serving() {
    let m = Machine::boot();
    assert_eq!(m.sh_ok("systemctl is-active containerd").trim(), "active");
    // The client reaches the daemon: both sides answer.
    let version = m.sh_ok("ctr version");
    assert!(version.contains("Server:"), "{version}");
    // The CRI plugin loads (it would not when e.g. the snapshotter cannot run here).
    let plugins = m.sh_ok("ctr plugins ls");
    assert!(
        plugins
            .lines()
            .any(|l| l.starts_with("io.containerd.grpc.v1")
                && l.contains(" cri ")
                && l.trim_end().ends_with("ok")),
        "{plugins}"
    );
    // The machine runs in a cgroup of its own on the host (not a shared /payload).
    let cgroup = fs::read_to_string(format!("/proc/{}/cgroup", m.pid1)).unwrap();
    let unified = cgroup.lines().find(|l| l.starts_with("0::")).unwrap();
    assert!(
        unified.starts_with(&format!("0::/{}/payload/", m.name)),
        "{cgroup}"
    );
    // Files written from the host are what the container sees.
    m.write("/etc/rdma-test/hello", "from the host\n");
    assert_eq!(m.sh_ok("cat /etc/rdma-test/hello"), "from the host\n");
    m.install(
        std::path::Path::new("/bin/true"),
        "/usr/local/bin/host-true",
        0o755,
    );
    assert!(m.exec(&["host-true"]).status.success());
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn containerd_imports_and_mounts_images() {
    support::cri::require_root_and_tools();
    let (busybox, _) = support::cri::images();
    let m = Machine::boot();
    m.install(&busybox, "/tmp/busybox.tar", 0o644);
    m.sh_ok("ctr images import /tmp/busybox.tar");
    // Mounting a snapshot proves the overlayfs snapshotter really works here.
    m.sh_ok(&format!(
        "mkdir -p /mnt/img && ctr images mount {} /mnt/img",
        support::cri::BUSYBOX_IMAGE
    ));
    assert!(m.sh_ok("ls /mnt/img/bin").contains("busybox"));
    m.sh_ok("ctr images unmount --rm /mnt/img");
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn dropin_reload_restart_reaches_containerd() {
    let m = Machine::boot();
    let before = m.main_pid("containerd");
    assert_ne!(before, 0);

    // 4 MiB: below this host's hard memlock limit (8 MiB), so the process can have it.
    m.write(DROPIN, "[Service]\nLimitMEMLOCK=4M\n");
    m.sh_ok("systemctl daemon-reload && systemctl restart containerd");
    assert_eq!(m.sh_ok("systemctl is-active containerd").trim(), "active");
    let after = m.main_pid("containerd");
    assert_ne!(after, before, "containerd was not restarted");
    assert_eq!(memlock_line(&m.limits(after)), "4194304 4194304");
    assert_eq!(
        m.sh_ok("systemctl show -P LimitMEMLOCK containerd").trim(),
        "4194304"
    );
    assert!(
        m.sh_ok("systemctl show -P DropInPaths containerd")
            .contains("50-memlock-test.conf")
    );

    // infinity: systemd reports it (a process here cannot exceed the host's hard
    // limit, so /proc is not asserted).
    m.write(DROPIN, "[Service]\nLimitMEMLOCK=infinity\n");
    m.sh_ok("systemctl daemon-reload");
    assert_eq!(
        m.sh_ok("systemctl show -P LimitMEMLOCK containerd").trim(),
        "infinity"
    );
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn journald_holds_containerd_lines() {
    let m = Machine::boot();
    // journald gets containerd's lines asynchronously: wait a little for this one.
    m.wait(
        "containerd's start in the journal",
        Duration::from_secs(10),
        |m| {
            m.journal("containerd")
                .contains("containerd successfully booted")
        },
    );
    let journal = m.journal("containerd");
    assert!(journal.lines().count() > 5, "{journal}");
    // Lines carry the container's hostname, which is the machine's name.
    assert!(journal.contains(&m.name), "{journal}");
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Manager",
    default_service = "org.freedesktop.systemd1",
    default_path = "/org/freedesktop/systemd1"
)]
trait Manager {
    fn get_unit(&self, name: &str) -> zbus::Result<zbus::OwnedObjectPath>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Unit",
    default_service = "org.freedesktop.systemd1"
)]
trait Unit {
    #[zbus(property)]
    fn active_state(&self) -> zbus::Result<String>;
}

#[zbus::proxy(
    interface = "org.freedesktop.systemd1.Service",
    default_service = "org.freedesktop.systemd1"
)]
trait Service {
    #[zbus(property, name = "MainPID")]
    fn main_pid(&self) -> zbus::Result<u32>;
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn dbus_from_the_host_reaches_the_containers_systemd() {
    let m = Machine::boot();
    let main_pid = m.main_pid("containerd");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (state, pid) = rt.block_on(async {
        let conn = tokio::time::timeout(
            Duration::from_secs(10),
            zbus::connection::Builder::address(m.bus_address().as_str()).build(),
        )
        .await
        .expect("D-Bus connection timed out")
        .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", m.bus_address()));
        let manager = ManagerProxy::new(&conn).await.unwrap();
        let path = manager.get_unit("containerd.service").await.unwrap();
        let unit = UnitProxy::builder(&conn)
            .path(path.clone())
            .build()
            .await
            .unwrap();
        let service = ServiceProxy::builder(&conn)
            .path(path)
            .build()
            .await
            .unwrap();
        (
            unit.active_state().await.unwrap(),
            service.main_pid().await.unwrap(),
        )
    });
    assert_eq!(state, "active");
    // The PID is in the container's namespace: the same number systemctl shows.
    assert_eq!(pid, main_pid);
}

/// Nothing of the machine is left on the host: no nspawn, no container process,
/// no cgroup.
fn assert_gone(nspawn: i32, pid1: i32, name: &str) {
    for pid in [nspawn, pid1] {
        // The PID may be reused, but not by nspawn or by a process of the machine.
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        assert!(
            comm.is_empty() || !(comm.starts_with("systemd") || comm.starts_with("init")),
            "{name}: PID {pid} ({}) still runs",
            comm.trim()
        );
    }
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(name),
            "{name}: a process is left: {}",
            String::from_utf8_lossy(&cmdline).replace('\0', " ")
        );
    }
    for root in [
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/systemd",
        "/sys/fs/cgroup",
    ] {
        assert!(
            !std::path::Path::new(root).join(name).exists(),
            "{name}: cgroup left under {root}"
        );
    }
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn poweroff_and_panic_leave_nothing_behind() {
    let mut m = Machine::boot();
    let (nspawn, pid1, name) = (m.nspawn_pid(), m.pid1, m.name.clone());
    let took = m.poweroff();
    assert!(took < Duration::from_secs(10), "poweroff took {took:?}");
    assert_gone(nspawn, pid1, &name);
    drop(m); // a second poweroff is a no-op

    // A test that panics with a machine running: unwinding powers it off.
    let ids = std::sync::Mutex::new(None);
    let result = std::panic::catch_unwind(|| {
        let m = Machine::boot();
        *ids.lock().unwrap() = Some((m.nspawn_pid(), m.pid1, m.name.clone()));
        panic!("deliberate panic: the machine must still be powered off");
    });
    assert!(result.is_err());
    let (nspawn, pid1, name) = ids.into_inner().unwrap().unwrap();
    assert_gone(nspawn, pid1, &name);
}
