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
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
