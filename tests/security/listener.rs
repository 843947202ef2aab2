//! The health endpoint under a flood, and its unix socket path.

use std::fs;

use super::support::*;
use super::{Daemon, code, stdout_of};

/// 2000 simultaneous loopback connections against a daemon whose open-files
/// limit (512) is far below `max_connections` (4096): every connection is served or answered
/// 503 and closed, none is left hanging, overload is logged a few times (not
/// every 50 ms), and a probe is answered once the flood is gone.
#[test]
fn two_thousand_connections_get_an_answer_or_a_clean_503() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use std::io::{Read, Write};
    use std::os::unix::process::CommandExt;
    use std::time::{Duration, Instant};
    const CLIENTS: usize = 2000;
    const IDLE: usize = 1200;

    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard.min(8192), hard).unwrap();
    let t = node("v100");
    let addr = free_addr();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"));
    cmd.arg("--root")
        .arg(t.path())
        .args(["serve", "--listen", &addr])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| setrlimit(Resource::RLIMIT_NOFILE, 512, 512).map_err(std::io::Error::from));
    }
    let d = Daemon::spawn(&mut cmd);
    let start = Instant::now();
    while !http_get_opt(&addr, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
        assert!(start.elapsed() < Duration::from_secs(20), "no answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    // 1200 idle clients first: they fill every slot the daemon has (and more).
    let mut conns: Vec<std::net::TcpStream> = (0..IDLE)
        .map(|i| {
            std::net::TcpStream::connect(&addr)
                .unwrap_or_else(|e| panic!("connection {i} was not even accepted: {e}"))
        })
        .collect();
    // Then 800 more that ask at once, while those are still open.
    let asking: Vec<std::net::TcpStream> = (IDLE..CLIENTS)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(&addr)
                .unwrap_or_else(|e| panic!("connection {i} was not even accepted: {e}"));
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            c
        })
        .collect();
    let (mut ok, mut rejected) = (0, 0);
    for (i, mut c) in asking.into_iter().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = Vec::new();
        let r = c.read_to_end(&mut buf);
        let text = String::from_utf8_lossy(&buf);
        if text.starts_with("HTTP/1.1 503") {
            rejected += 1;
        } else if text.starts_with("HTTP/1.1 200") {
            ok += 1;
        } else {
            panic!("connection {} got no answer: {r:?} {text:?}", IDLE + i);
        }
    }

    // Idle ones over the limit were told so too, not left hanging.
    let mut told = 0;
    for c in &mut conns {
        c.set_nonblocking(true).unwrap();
        let mut first = [0u8; 12];
        if c.read(&mut first).is_ok_and(|n| n > 0) {
            assert!(first.starts_with(b"HTTP/1.1 503"));
            told += 1;
        }
    }
    // Slots free up as idle clients hit the 5 s header timeout, so on a slow
    // machine a later client may be served instead: but some were over the limit.
    assert!(
        rejected + told > 0,
        "{ok} served, none over the limit was told so"
    );
    drop(conns);
    let start = Instant::now();
    while !http_get_opt(&addr, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no answer after the flood"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = stdout_of(&d.stop().stderr);
    assert!(!log.contains("Too many open files"), "{log}");
    let overload = log.lines().filter(|l| l.contains("over the limit")).count();
    assert!(
        (1..=2).contains(&overload),
        "{overload} overload lines:\n{log}"
    );
    assert!(
        log.contains("does not fit the open-files limit 512"),
        "{log}"
    );
}

fn http_get_opt(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// `serve --listen unix:PATH` never removes what is not its own stale socket.
#[test]
fn a_unix_listener_removes_only_a_stale_socket() {
    let t = node("v100");
    let victim = t.path().join("etc/important");
    fs::write(&victim, "keep\n").unwrap();
    let mut d = std::process::Command::new(env!("CARGO_BIN_EXE_rdma-node-agent"))
        .arg("--root")
        .arg(t.path())
        .args(["serve", "--listen", &format!("unix:{}", victim.display())])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // It must give up at once; one that serves was given the file's place.
    let start = std::time::Instant::now();
    while d.try_wait().unwrap().is_none() && start.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let running = d.try_wait().unwrap().is_none();
    let _ = d.kill();
    let o = d.wait_with_output().unwrap();
    assert!(
        !running,
        "serve replaced {} with its socket",
        victim.display()
    );
    assert_ne!(code(&o), 0);
    assert!(
        stderr(&o).contains("a regular file is there"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "keep\n");
}
