//! Many agents at once for the fleet test: each `serve` on its own tree and
//! loopback port, asked over plain HTTP, stopped on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::http_get::get;

/// Each agent's process; all stopped on drop.
pub struct Agents(pub Vec<Option<Child>>);

impl Drop for Agents {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
        }
        for c in self.0.iter_mut().flatten() {
            let _ = c.wait();
        }
    }
}

/// Each `serve` holds an inotify instance, and a user has 128 by default (as root,
/// every test of the suite shares them): raised for the test, put back after.
pub struct InotifyLimit(Option<String>);

const INOTIFY: &str = "/proc/sys/fs/inotify/max_user_instances";

impl InotifyLimit {
    pub fn raise(by: usize) -> InotifyLimit {
        let old = std::fs::read_to_string(INOTIFY).unwrap();
        let n: usize = old.trim().parse().unwrap();
        if n >= 4 * by {
            return InotifyLimit(None);
        }
        std::fs::write(INOTIFY, format!("{}\n", n + by + 64))
            .expect("raising fs.inotify.max_user_instances needs root: run scripts/test.sh");
        InotifyLimit(Some(old))
    }
}

impl Drop for InotifyLimit {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            let _ = std::fs::write(INOTIFY, old);
        }
    }
}

pub fn serve(root: &Path, addr: &str, log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(root)
        .args(["serve", "--listen", addr])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

pub fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Series (sample lines) in an exposition.
pub fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count()
}

/// The healthy node, with eight ports (eight single-port RoCE functions of
/// tests/support/sysfs.rs) instead of the sample's two: the series a big node exports.
pub fn eight_port_series(dir: &Path, log: &Path) -> (usize, usize) {
    super::copy_tree(&super::fixtures().join("nodes/v100"), dir);
    std::fs::remove_dir_all(dir.join("sys")).unwrap();
    std::fs::remove_dir_all(dir.join("proc/4301")).unwrap();
    super::sysfs::sriov_tree(dir, 8, 0);
    super::fleet::put(dir, "/sys/module/ib_core/parameters/netns_mode", "Y\n");
    super::fleet::put(
        dir,
        "/etc/rdma-node-agent/config.toml",
        "mode = \"report\"\n[containerd]\nenabled = false\n[systemd]\nenabled = false\n[gpudirect]\nenabled = false\n",
    );
    let addr = super::free_addr();
    let _a = Agents(vec![Some(serve(dir, &addr, log))]);
    let mut text = String::new();
    wait_until("the 8-port agent", Duration::from_secs(30), || {
        get(&addr, "/metrics").map(|t| text = t).is_some()
    });
    assert!(
        text.contains("rdma_node_agent_ready 1\n"),
        "the 8-port node is not ready:\n{text}"
    );
    assert_eq!(text.matches("rdma_node_agent_port_active{").count(), 8);
    (series(&text), text.len())
}
