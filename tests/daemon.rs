//! `serve` on fixture trees through the real binary: converges at start, repairs a
//! hand edit on the file watch (not the 300 s timer), never writes in report
//! mode, one instance at a time, stops promptly on SIGTERM. How fast a repair
//! follows an edit is a figure printed here (and benched), not asserted: a
//! timed assertion fails on a loaded CI machine without a defect.

mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

const CONFIG: &str = "/etc/containerd/config.toml";
/// How long a repair may take to count as the watch's: the fixtures keep the
/// default 300 s interval, so a repair inside this came from the file event.
const WATCH: Duration = Duration::from_secs(20);

/// The daemon, killed on drop so a failing test never leaves it behind.
struct Serve(Child);

impl Serve {
    fn start(root: &Path) -> Serve {
        Self::start_at(root, &free_addr())
    }

    fn start_at(root: &Path, addr: &str) -> Serve {
        let child = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
            .arg("--root")
            .arg(root)
            .args(["serve", "--listen", addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Serve(child)
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0.id() as i32), sig).unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

fn has_spec(root: &Path) -> bool {
    read(root, CONFIG).contains("base_runtime_spec")
}

#[test]
fn converges_at_start_and_repairs_hand_edits_on_the_watch() {
    let t = node("v100");
    let root = t.path();
    let d = Serve::start(root);
    wait_for("the first reconcile", Duration::from_secs(10), || {
        has_spec(root)
    });

    for round in 0..3 {
        // What an admin's editor does: write a new file and rename it over the old one.
        let edited = read(root, CONFIG).replace("base_runtime_spec", "# removed by hand:");
        write(root, "/etc/containerd/.config.toml.swp", &edited);
        std::fs::rename(
            root.join("etc/containerd/.config.toml.swp"),
            root.join("etc/containerd/config.toml"),
        )
        .unwrap();
        // Within WATCH, far below the 300 s reconcile interval: only the watch repairs it.
        let took = wait_for("the repair", WATCH, || has_spec(root));
        println!("round {round}: hand edit of config.toml repaired in {took:?}");
    }

    // The drop-in is watched too.
    let dropin = root.join("etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf");
    std::fs::remove_file(&dropin).unwrap();
    let took = wait_for("the drop-in to return", WATCH, || dropin.exists());
    println!("removed drop-in restored in {took:?}");

    let start = Instant::now();
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let mut d = d;
    let status = d.0.wait().unwrap();
    let took = start.elapsed();
    println!("SIGTERM to exit: {took:?}");
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_secs(1), "stop took {took:?}");
}

/// A config.toml that is a link (config management): a hand edit at its target,
/// in another directory, is seen and repaired there, and the link stays.
#[test]
fn a_hand_edit_behind_a_linked_config_is_repaired() {
    let t = node("v100");
    let root = t.path();
    let dir = root.join("etc/containerd");
    std::fs::create_dir_all(dir.join("managed")).unwrap();
    std::fs::rename(dir.join("config.toml"), dir.join("managed/config.toml")).unwrap();
    std::os::unix::fs::symlink("managed/config.toml", dir.join("config.toml")).unwrap();
    let _d = Serve::start(root);
    wait_for("the first reconcile", Duration::from_secs(10), || {
        has_spec(root)
    });
    // Past the reconcile that follows new watches: only a watch sees the edit now.
    std::thread::sleep(Duration::from_millis(800));
    let target = dir.join("managed/config.toml");
    let edited = std::fs::read_to_string(&target)
        .unwrap()
        .replace("base_runtime_spec", "# removed by hand:");
    std::fs::write(&target, edited).unwrap();
    let took = wait_for("the repair", WATCH, || has_spec(root));
    println!("hand edit behind the link repaired in {took:?}");
    assert!(
        dir.join("config.toml").is_symlink(),
        "the link was replaced"
    );
}

#[test]
fn report_mode_never_writes() {
    let t = node("v100");
    let root = t.path();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n",
    );
    let before = snapshot(root);
    let d = Serve::start(root);
    std::thread::sleep(Duration::from_millis(800));
    d.signal(nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    drop(d);
    assert_eq!(snapshot(root), before);
}

#[test]
fn one_daemon_per_host() {
    let t = node("v100");
    let root = t.path();
    let _d = Serve::start(root);
    wait_for("the first daemon", Duration::from_secs(10), || {
        has_spec(root)
    });
    let o = agent(root, &["serve", "--listen", &free_addr()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("a daemon is already running on this host"),
        "{err}"
    );
    assert!(err.contains("daemon.lock"), "{err}");
}

#[test]
fn bad_agent_config_is_reported_not_acted_on_and_then_picked_up() {
    let t = node("v100");
    let root = t.path();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nmemlok = 1\n",
    );
    let before = snapshot(root);
    let _d = Serve::start(root);
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(
        snapshot(root),
        before,
        "an invalid config must not be acted on"
    );
    // Fixing the config is noticed without a restart or SIGHUP.
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nmemlock = \"4MiB\"\n",
    );
    wait_for(
        "the fixed config to be applied",
        Duration::from_secs(5),
        || {
            root.join("etc/containerd/rdma-node-agent/base-spec.json")
                .exists()
        },
    );
    assert!(read(root, "/etc/containerd/rdma-node-agent/base-spec.json").contains("4194304"));
}

/// A config that stops loading while the daemon runs: the checks go on with the
/// last good config (never the defaults), the error is reported, and nothing is
/// acted on until it is fixed.
#[test]
fn a_config_broken_later_keeps_the_last_good_one_and_says_so() {
    let t = node("v100");
    let root = t.path();
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nmemlock = \"4MiB\"\n",
    );
    let addr = free_addr();
    let _d = Serve::start_at(root, &addr);
    wait_for("the config to be applied", Duration::from_secs(5), || {
        root.join("etc/containerd/rdma-node-agent/base-spec.json")
            .exists()
    });
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        "[containerd]\nmemlok = 1\n",
    );
    let mut last = String::new();
    wait_for(
        "the broken config to be reported",
        Duration::from_secs(5),
        || {
            let o = agent(root, &["status", "--json", "--listen", &addr]);
            last = stdout(&o);
            last.contains("last config that loaded")
        },
    );
    // `status` prints the daemon's error line before the document.
    let v: serde_json::Value = serde_json::from_str(&last[last.find('{').unwrap()..]).unwrap();
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("memlok"), "{e}");
    // The report is the last good config's: its memlock, not the default's.
    let checks = v["checks"].as_array().expect("checks go on");
    let memlock = checks
        .iter()
        .find(|c| c["id"] == "containerd.memlock")
        .unwrap();
    assert!(
        memlock["message"].as_str().unwrap().contains("4MiB"),
        "{memlock}"
    );
    assert_eq!(v["mode"], "report", "{last}");
}
