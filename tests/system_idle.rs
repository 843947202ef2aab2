//! What the daemon costs while nothing changes, on real systemd (PID 1 in
//! systemd-nspawn) with the real containerd: the system calls of ten idle
//! reconciles, counted by strace from the host. The daemon keeps one runtime
//! and one D-Bus connection for its life: in those ten cycles it opens no
//! connection to the bus and makes no epoll instance (a runtime per cycle did).
//!
//! `RDMA_AGENT_COMPARE_BINARY=/path/to/an/older/rdma-node-agent` counts that
//! binary's ten cycles too, and prints both side by side (docs/performance.md);
//! `RDMA_AGENT_IDLE_BINARY` measures another build than the installed
//! package's (replaced in /usr/bin; a debug build checks every descriptor it
//! closes with an extra fcntl).

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::nspawn::Machine;
use support::service::{install_agent, status};

const CYCLES: u64 = 10;

/// The agent's host PID: the `serve` process in this machine's cgroup.
fn agent_pid(m: &Machine) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            if cmd.starts_with(b"/usr/bin/rdma-node-agent\0serve") && cg.contains(&m.name) {
                return pid;
            }
        }
        assert!(Instant::now() < deadline, "no agent process in {}", m.name);
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn reconciles(m: &Machine) -> u64 {
    let text = m.sh("curl -s http://127.0.0.1:9470/metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("rdma_node_agent_reconciles_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Per system call, how many the agent's own threads made during `CYCLES`
/// reconciles (the programs it runs, `containerd config dump` and `ctr`, apart);
/// and the bus connections it opened.
struct Count {
    calls: BTreeMap<String, u64>,
    children: u64,
    bus_connects: usize,
}

fn threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The cycles of the installed binary, or of `binary` put in its place.
fn count_idle_cycles(m: &Machine, binary: Option<&Path>) -> Count {
    m.sh("systemctl stop rdma-node-agent");
    if let Some(binary) = binary {
        m.install(binary, "/usr/bin/rdma-node-agent", 0o755);
    }
    m.sh_ok("systemctl start rdma-node-agent");
    // Idle: the first cycles have reported; nothing changes from now on.
    let deadline = Instant::now() + Duration::from_secs(60);
    while reconciles(m) < 2 {
        assert!(Instant::now() < deadline, "no reconcile: {}", status(m));
        std::thread::sleep(Duration::from_millis(200));
    }
    let pid = agent_pid(m);
    let mut own = threads(pid);
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(log.path())
        .args(["-p", &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace (scripts/test.sh installs it)");
    std::thread::sleep(Duration::from_millis(500));
    let from = reconciles(m);
    while reconciles(m) < from + CYCLES {
        assert!(
            Instant::now() < deadline + Duration::from_secs(60),
            "cycles stalled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    own.extend(threads(pid));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(strace.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    strace.wait().unwrap();
    let text = std::fs::read_to_string(log.path()).unwrap();
    if let Some(keep) = std::env::var_os("RDMA_AGENT_KEEP_TRACE") {
        std::fs::write(keep, &text).unwrap();
    }
    let mut calls = BTreeMap::new();
    let mut children = 0;
    let mut bus_connects = 0;
    for l in text.lines() {
        // "1234 epoll_create1(EPOLL_CLOEXEC) = 5"; "<... x resumed>" ends a call already counted.
        let mut f = l.splitn(2, ' ');
        let (Some(tid), Some(rest)) = (f.next(), f.next()) else {
            continue;
        };
        let Ok(tid) = tid.parse::<u32>() else {
            continue;
        };
        let Some((name, _)) = rest.trim_start().split_once('(') else {
            continue;
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            continue;
        }
        if !own.contains(&tid) {
            children += 1;
            continue;
        }
        if name == "connect" && rest.contains("system_bus_socket") {
            bus_connects += 1;
        }
        *calls.entry(name.to_owned()).or_insert(0) += 1;
    }
    assert!(!calls.is_empty(), "nothing traced:\n{text}");
    Count {
        calls,
        children,
        bus_connects,
    }
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn ten_idle_cycles_keep_one_runtime_and_one_bus_connection() {
    let m = Machine::boot();
    // Report only: nothing is written, every cycle is the same idle cycle.
    install_agent(&m, "mode = \"report\"\n\n[daemon]\ninterval_secs = 1\n");
    // The package's binary, or (to compare builds) RDMA_AGENT_IDLE_BINARY.
    let this = std::env::var_os("RDMA_AGENT_IDLE_BINARY").map(std::path::PathBuf::from);
    let after = count_idle_cycles(&m, this.as_deref());
    let before = std::env::var_os("RDMA_AGENT_COMPARE_BINARY")
        .map(|b| count_idle_cycles(&m, Some(Path::new(&b))));

    let total = |c: &Count| c.calls.values().sum::<u64>();
    let get = |c: &Count, s: &str| c.calls.get(s).copied().unwrap_or(0);
    println!("system calls of {CYCLES} idle cycles (strace -f on the service; its own threads):");
    println!("{:<16} {:>10} {:>10}", "syscall", "before", "this");
    let mut names: Vec<&String> = after.calls.keys().collect();
    if let Some(b) = &before {
        names.extend(b.calls.keys());
    }
    names.sort();
    names.dedup();
    for n in names {
        let b = before
            .as_ref()
            .map_or("-".into(), |b| get(b, n).to_string());
        println!("{n:<16} {b:>10} {:>10}", get(&after, n));
    }
    let b = before.as_ref().map_or("-".into(), |b| total(b).to_string());
    println!("{:<16} {b:>10} {:>10}", "total", total(&after));
    let bc = before
        .as_ref()
        .map_or("-".into(), |b| b.bus_connects.to_string());
    println!("{:<16} {bc:>10} {:>10}", "bus connects", after.bus_connects);
    let ch = before
        .as_ref()
        .map_or("-".into(), |b| b.children.to_string());
    println!("{:<16} {ch:>10} {:>10}", "its children's", after.children);

    assert_eq!(
        after.bus_connects, 0,
        "a new D-Bus connection in an idle cycle"
    );
    assert_eq!(
        get(&after, "epoll_create1"),
        0,
        "a new runtime (epoll instance) in an idle cycle"
    );
}
