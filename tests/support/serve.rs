//! `rdma-node-agent serve` on a tree, for the tests that talk to its endpoint:
//! started on a free loopback port, up once `/healthz` answers 200, killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Serve {
    pub fn start(root: &Path) -> Serve {
        let addr = super::free_addr();
        let child = Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
            .arg("--root")
            .arg(root)
            .args(["serve", "--listen", &addr])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = Serve { child, addr };
        let start = Instant::now();
        while super::http_get::status_code(&s.addr, "/healthz") != Some(200) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "daemon did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// A 200's body, or empty (nothing listening yet, or another status).
    pub fn get(&self, path: &str) -> String {
        super::http_get::get(&self.addr, path).unwrap_or_default()
    }

    /// `rdma_node_agent_reconciles_total`, 0 before the first.
    pub fn reconciles(&self) -> u64 {
        self.get("/metrics")
            .lines()
            .find_map(|l| l.strip_prefix("rdma_node_agent_reconciles_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Until `n` reconciles have run (20 s at most).
    pub fn wait_reconciles(&self, n: u64) {
        let start = Instant::now();
        while self.reconciles() < n {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no reconcile {n}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGHUP, then the /status of that reconcile: read between two equal
    /// counts above the one before, so that it is not an earlier one's.
    pub fn reconcile(&self) -> serde_json::Value {
        let before = self.reconciles();
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let start = Instant::now();
        loop {
            let n = self.reconciles();
            let status: serde_json::Value =
                serde_json::from_str(&self.get("/status")).unwrap_or_default();
            if n > before && status["trigger"] == "SIGHUP" && n == self.reconciles() {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no SIGHUP reconcile"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
