//! The long run's view of the daemon from outside: the process, its
//! `/metrics` over one kept-alive connection, and its /proc figures.

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon, killed on drop so a failing run never leaves it behind.
pub struct Serve {
    child: Child,
    pub addr: String,
}

impl Serve {
    pub fn start(bin: &Path, root: &Path, log: &Path) -> Serve {
        let addr = super::support::free_addr();
        let log = std::fs::File::create(log).unwrap();
        let child = Command::new(bin)
            .arg("--root")
            .arg(root)
            .args(["serve", "--listen", &addr])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        Serve { child, addr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig).unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the run must keep level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figures {
    pub fds: usize,
    pub threads: usize,
    pub rss_kib: u64,
    /// RSS split: anonymous (heap, stacks) and file pages (the binary's code).
    pub anon_kib: u64,
    pub file_kib: u64,
}

impl Figures {
    pub fn of(pid: u32) -> Figures {
        let count = |what: &str| {
            std::fs::read_dir(format!("/proc/{pid}/{what}"))
                .unwrap()
                .count()
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib = |field: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        };
        Figures {
            fds: count("fd"),
            threads: count("task"),
            rss_kib: kib("VmRSS:"),
            anon_kib: kib("RssAnon:"),
            file_kib: kib("RssFile:"),
        }
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "fds {}, threads {}, RSS {} KiB (anon {}, file {})",
            self.fds, self.threads, self.rss_kib, self.anon_kib, self.file_kib
        )
    }
}

/// One HTTP/1.1 connection kept alive across requests, so that polling adds no
/// descriptor churn of its own (and leaves no TIME_WAIT pile-up).
pub struct Client {
    addr: String,
    conn: Option<BufReader<TcpStream>>,
    log: std::path::PathBuf,
}

impl Client {
    pub fn connect(addr: &str, log: &Path) -> Client {
        let mut c = Client {
            addr: addr.to_owned(),
            conn: None,
            log: log.to_owned(),
        };
        let start = Instant::now();
        while c.try_get("/healthz").is_err() {
            c.fail_after(start, Duration::from_secs(10), "the health endpoint");
            std::thread::sleep(Duration::from_millis(20));
        }
        c
    }

    fn fail_after(&self, start: Instant, limit: Duration, what: &str) {
        if start.elapsed() > limit {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<_> = log.lines().rev().take(30).collect();
            let tail: Vec<_> = tail.into_iter().rev().collect();
            panic!(
                "timed out after {limit:?} waiting for {what}; the daemon's log ends:\n{}",
                tail.join("\n")
            );
        }
    }

    fn try_get(&mut self, path: &str) -> std::io::Result<String> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            self.conn = Some(BufReader::new(s));
        }
        let result = Self::exchange(self.conn.as_mut().unwrap(), path);
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn exchange(conn: &mut BufReader<TcpStream>, path: &str) -> std::io::Result<String> {
        let eof = || std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        write!(conn.get_mut(), "GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n")?;
        let mut len = 0;
        let mut line = String::new();
        loop {
            line.clear();
            if conn.read_line(&mut line)? == 0 {
                return Err(eof());
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().map_err(|_| eof())?;
                }
            }
        }
        let mut body = vec![0; len];
        conn.read_exact(&mut body)?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// A request that may meet a connection the server closed: one reconnect.
    pub fn get(&mut self, path: &str) -> String {
        self.try_get(path)
            .or_else(|_| self.try_get(path))
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// `rdma_node_agent_reconciles_total`: cycles completed (0 before the first).
    pub fn reconciles(&mut self) -> u64 {
        let m = self.get("/metrics");
        m.lines()
            .find_map(|l| l.strip_prefix("rdma_node_agent_reconciles_total "))
            .map_or(0, |v| v.trim().parse().unwrap())
    }

    pub fn wait_past(&mut self, before: u64, limit: Duration) -> u64 {
        let start = Instant::now();
        loop {
            let n = self.reconciles();
            if n > before {
                return n;
            }
            self.fail_after(start, limit, "a reconcile after the churn");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The count once no cycle has finished for a while: any follow-up of the
    /// last change (the agent's own repair, seen by its watches) has run.
    pub fn settle(&mut self) -> u64 {
        let mut n = self.reconciles();
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let m = self.reconciles();
            if m == n {
                return n;
            }
            n = m;
        }
    }

    pub fn wait_converged(&mut self, limit: Duration) {
        self.wait_past(0, limit);
        self.settle();
    }
}
