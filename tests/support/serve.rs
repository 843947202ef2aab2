//! `rdma-node-agent serve` on a tree, for the tests that talk to its endpoint:
//! started on a free loopback port, up once `/healthz` answers 200, killed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
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
        while status_code(&s.addr, "/healthz") != Some(200) {
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

/// One plain HTTP GET; the body of a 200 (`None` for anything else, or while
/// nothing answers).
pub fn get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    b.starts_with("HTTP/1.1 200")
        .then(|| b.split_once("\r\n\r\n").unwrap().1.to_owned())
}

/// The status code of a GET, `None` while nothing answers.
fn status_code(addr: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.split_whitespace().nth(1)?.parse().ok()
}
