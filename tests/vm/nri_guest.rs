//! The VM tier's NRI proof, run inside the guest by tests/vm/guest.sh (boot 1),
//! as root on the real kernel with Soft-RoCE, against the node as installed:
//! the real containerd 2.1 (from the payload) run by its own systemd unit with
//! NRI on and a soft memlock of 64 KiB, runc over CRI, and the agent's unit
//! (the .deb's) with `memlock_via = "nri"` and nothing else raising memlock (no
//! base spec, no drop-in). guest.sh writes both units' configs and starts
//! containerd's unit; this driver starts and stops the agent's with
//! `systemctl`, reads its check from `/status`, and runs ib_write_bw's server
//! and client in one hostNetwork pod container given the real
//! /dev/infiniband/uverbs0, as an RDMA device plugin hands it: once while the
//! agent's plugin is registered, and once more after the agent stopped.
//!
//! Each run is recorded as guest.sh records a step (NAME.out, NAME.err, NAME.rc
//! under RESULTS); tests/vm/nri.rs asserts on them. A Rust CRI client because
//! Debian ships no crictl; tests/vm_rxe.rs builds it (`cargo build --example
//! vm-nri-guest`) and puts it in the payload.
//!
//!   vm-nri-guest containerd-config DIR NRI_SOCKET   (prints containerd's config)
//!   vm-nri-guest run CONTAINERD_SOCKET RESULTS

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_cri::v1::{ContainerConfig, Device, Mount};
use serde_json::Value;

#[allow(dead_code)] // the harness's other helpers serve the host tests
#[path = "../support/cri.rs"]
mod cri;
#[allow(dead_code)]
#[path = "../support/http_get.rs"]
mod http_get;

/// The agent's unit, as the .deb installs it, and its default listener.
const UNIT: &str = "rdma-node-agent";
const LISTEN: &str = "127.0.0.1:9470";
const UVERBS: &str = "/dev/infiniband/uverbs0";
/// The runc bundle test's script (guest.sh `bundle`): the limit and capabilities
/// the container got, then 5 iterations of 8 MiB over rxe0 on loopback.
const BW: &str = "grep 'Max locked memory' /proc/self/limits; grep Cap /proc/self/status; \
    mkdir -p /tmp; timeout 60 ib_write_bw -d rxe0 -s 8388608 -n 5 -F >/tmp/server.log 2>&1 & sleep 2; \
    timeout 60 ib_write_bw -d rxe0 -s 8388608 -n 5 -F 127.0.0.1; rc=$?; wait $!; src=$?; \
    echo \"--- server (exit $src) ---\"; cat /tmp/server.log; [ $rc = 0 ] && [ $src = 0 ]";

fn main() {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    match &args[..] {
        [cmd, dir, nri] if cmd == Path::new("containerd-config") => {
            // The host tests' config (runc handlers, host-network pods) with
            // NRI on as containerd 2.x has it by default.
            print!("{}{}", cri::config_toml(dir), cri::nri_toml(nri));
        }
        [cmd, socket, results] if cmd == Path::new("run") => run(socket, results),
        _ => {
            eprintln!(
                "usage: vm-nri-guest containerd-config DIR NRI_SOCKET | run CONTAINERD_SOCKET RESULTS"
            );
            std::process::exit(2);
        }
    }
}

fn run(socket: &Path, results: &Path) {
    let mut c = cri::Containerd::attach(socket);
    systemctl("start");
    let check = wait_registered(Duration::from_secs(120));
    record(results, "nri-registered", &check.to_string(), "", 0);
    run_bw(&mut c, results, "nri-bw-plugin");
    systemctl("stop");
    run_bw(&mut c, results, "nri-bw-without-plugin");
}

fn systemctl(verb: &str) {
    let status = Command::new("systemctl")
        .args([verb, UNIT])
        .status()
        .unwrap();
    assert!(status.success(), "systemctl {verb} {UNIT}: {status}");
}

/// The `containerd.nri` check in the unit's `/status`, once the plugin has
/// registered and is registered now.
fn wait_registered(limit: Duration) -> Value {
    let start = Instant::now();
    let mut last = None;
    loop {
        let check = http_get::get(LISTEN, "/status")
            .and_then(|body| serde_json::from_str::<Value>(&body).ok())
            .and_then(|v| {
                let checks = v["report"]["checks"]
                    .as_array()
                    .or(v["checks"].as_array())?;
                checks.iter().find(|c| c["id"] == "containerd.nri").cloned()
            });
        if let Some(c) = &check {
            if c["details"]["registered"] == true
                && c["details"]["registrations"].as_u64() >= Some(1)
            {
                return c.clone();
            }
        }
        last = check.or(last);
        assert!(
            start.elapsed() < limit,
            "the unit's NRI plugin did not register within {limit:?}; last containerd.nri: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
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
