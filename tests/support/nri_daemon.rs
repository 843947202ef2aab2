//! The agent's `serve` on a tree whose config turns its NRI plugin on, for the
//! NRI tests on the host (tests/real_containerd_nri.rs; the VM tier runs the
//! agent's unit instead, tests/vm/nri_guest.rs): started on a free loopback
//! port with its log kept, killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http_get::get;

pub struct NriDaemon {
    child: Option<Child>,
    pub addr: String,
    log: PathBuf,
}

impl NriDaemon {
    pub fn start(agent: &Path, root: &Path, log: PathBuf) -> NriDaemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(agent)
            .arg("--root")
            .arg(root)
            .args(["serve", "--listen", &addr])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        NriDaemon {
            child: Some(child),
            addr,
            log,
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> Option<String> {
        get(&self.addr, path)
    }

    /// The `containerd.nri` check in the daemon's /status.
    pub fn nri_check(&self) -> Option<Value> {
        let v: Value = serde_json::from_str(&self.get("/status")?).ok()?;
        let checks = v["report"]["checks"]
            .as_array()
            .or(v["checks"].as_array())?;
        checks.iter().find(|c| c["id"] == "containerd.nri").cloned()
    }

    /// Waits up to `limit` until the plugin has registered `n` times and is
    /// registered now; that check.
    pub fn wait_registered(&self, n: u64, limit: Duration) -> Value {
        let start = Instant::now();
        loop {
            if let Some(c) = self.nri_check() {
                if c["details"]["registered"] == true
                    && c["details"]["registrations"].as_u64() >= Some(n)
                {
                    return c;
                }
            }
            assert!(
                start.elapsed() < limit,
                "the NRI plugin did not register ({n}) within {limit:?}: {:?}\n--- agent log ---\n{}",
                self.nri_check(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for NriDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}
