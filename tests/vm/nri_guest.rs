//! The VM tier's NRI proof, run inside the guest by tests/vm/guest.sh (boot 1),
//! as root on the real kernel with Soft-RoCE: the real containerd 2.1 (from the
//! payload) with NRI on, runc over CRI, and the agent's `serve` with
//! `memlock_via = "nri"` and nothing else raising memlock (no base spec, no
//! drop-in; containerd runs with a soft memlock of 64 KiB). ib_write_bw's server
//! and client run in one hostNetwork pod container given the real
//! /dev/infiniband/uverbs0, as an RDMA device plugin hands it: once while the
//! agent's plugin is registered, and once more after the agent stopped.
//!
//! Each run is recorded as guest.sh records a step (NAME.out, NAME.err, NAME.rc
//! under RESULTS); tests/vm/nri.rs asserts on them. A Rust CRI client because
//! Debian ships no crictl; tests/vm_rxe.rs builds it (`cargo build --example
//! vm-nri-guest`) and puts it in the payload.
//!
//!   vm-nri-guest AGENT CONTAINERD RESULTS

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_cri::v1::{ContainerConfig, Device, Mount};

#[allow(dead_code)] // the harness's other helpers serve the host tests
#[path = "../support/cri.rs"]
mod cri;
#[allow(dead_code)]
#[path = "../support/http_get.rs"]
mod http_get;
#[allow(dead_code)]
#[path = "../support/nri_daemon.rs"]
mod nri_daemon;

const NRI_SOCKET: &str = "/run/nri/nri.sock";
const UVERBS: &str = "/dev/infiniband/uverbs0";
/// The runc bundle test's script (guest.sh `bundle`): the limit and capabilities
/// the container got, then 5 iterations of 8 MiB over rxe0 on loopback.
const BW: &str = "grep 'Max locked memory' /proc/self/limits; grep Cap /proc/self/status; \
    mkdir -p /tmp; timeout 60 ib_write_bw -d rxe0 -s 8388608 -n 5 -F >/tmp/server.log 2>&1 & sleep 2; \
    timeout 60 ib_write_bw -d rxe0 -s 8388608 -n 5 -F 127.0.0.1; rc=$?; wait $!; src=$?; \
    echo \"--- server (exit $src) ---\"; cat /tmp/server.log; [ $rc = 0 ] && [ $src = 0 ]";

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [agent, containerd, results] = &args[..] else {
        eprintln!("usage: vm-nri-guest AGENT CONTAINERD RESULTS");
        std::process::exit(2);
    };
    let mut c = cri::Containerd::with_binary(containerd);
    let root = c.root();
    enable_nri(&root);
    fs::create_dir_all(root.join("etc/rdma-node-agent")).unwrap();
    fs::write(
        root.join("etc/rdma-node-agent/config.toml"),
        format!(
            "[containerd]\nmemlock_via = \"nri\"\nnri_socket = \"{NRI_SOCKET}\"\nbinary = \"{}\"\n\
             [systemd]\nenabled = false\n[daemon]\ninterval_secs = 1\n",
            containerd.display()
        ),
    )
    .unwrap();
    c.start();
    let limits = fs::read_to_string(format!("/proc/{}/limits", c.pid().unwrap())).unwrap();
    record(results, "nri-containerd-limits", &limits, "", 0);

    let mut serve = nri_daemon::NriDaemon::start(agent, &root, results.join("nri-agent.log"));
    let check = serve.wait_registered(1, Duration::from_secs(120));
    record(results, "nri-registered", &check.to_string(), "", 0);
    run_bw(&mut c, results, "nri-bw-plugin");
    serve.stop();
    run_bw(&mut c, results, "nri-bw-without-plugin");
}

/// NRI as containerd 2.x has it by default, its socket inside the tree.
fn enable_nri(root: &Path) {
    let config = root.join("etc/containerd/config.toml");
    let mut text = fs::read_to_string(&config).unwrap();
    text.push_str(&cri::nri_toml(
        &root.join(NRI_SOCKET.trim_start_matches('/')),
    ));
    fs::write(&config, text).unwrap();
}

/// ib_write_bw in a new pod: the guest's /usr (perftest, rdma-core and their
/// libraries) and libibverbs' provider list mounted read-only over the busybox
/// image, and the real uverbs node as a CRI device.
fn run_bw(c: &mut cri::Containerd, results: &Path, name: &str) {
    let ro = |host: &str, at: &str| Mount {
        container_path: at.into(),
        host_path: host.into(),
        readonly: true,
        ..Default::default()
    };
    let edit = |cfg: &mut ContainerConfig| {
        cfg.devices.push(Device {
            container_path: UVERBS.into(),
            host_path: UVERBS.into(),
            permissions: "rw".into(),
        });
        cfg.mounts.extend([
            ro("/usr", "/usr"),
            ro("/usr/lib", "/lib"),
            ro("/usr/lib64", "/lib64"),
            ro("/etc/libibverbs.d", "/etc/libibverbs.d"),
        ]);
    };
    let (_, id) = c.container_with(name, "runc", BW, true, edit);
    let (code, log) = c.wait_exit(name, &id, Duration::from_secs(300));
    record(
        results,
        name,
        &cri::cri_log_stream(&log, "stdout"),
        &cri::cri_log_stream(&log, "stderr"),
        code,
    );
}

fn record(results: &Path, name: &str, out: &str, err: &str, rc: i32) {
    fs::write(results.join(format!("{name}.out")), out).unwrap();
    fs::write(results.join(format!("{name}.err")), err).unwrap();
    fs::write(results.join(format!("{name}.rc")), format!("{rc}\n")).unwrap();
}
