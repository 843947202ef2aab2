//! A hostile HTTP client for memory benchmarks and tests, bounded in count and
//! time and only ever aimed at 127.0.0.1: it opens `conns` connections and holds
//! them all, then sends on each at once either a request with one huge header or
//! one with a huge request line, reads what comes back, and closes everything.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Debug, Clone, Copy)]
pub struct Abuse {
    /// Connections held at once (half send a big header, half a long line).
    pub conns: usize,
    /// Bytes in the one header value (`X-Big: aaa…`).
    pub header_bytes: usize,
    /// Bytes in the query of the request line (`GET /metrics?aaa… HTTP/1.1`).
    pub line_bytes: usize,
    /// The whole round ends by then, whatever is left.
    pub deadline: Duration,
}

impl Default for Abuse {
    /// The pattern of issue 24: 2,000 held connections, 1 MiB headers, 100 kB lines.
    fn default() -> Abuse {
        Abuse {
            conns: 2000,
            header_bytes: 1 << 20,
            line_bytes: 100_000,
            deadline: Duration::from_secs(30),
        }
    }
}

/// What one round got back.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Answers by status code.
    pub codes: BTreeMap<u16, usize>,
    /// Connections closed or reset with no status line…
    pub unanswered: usize,
    /// …of which this many had been open 5 s or more (a header-read timeout's work).
    pub unanswered_late: usize,
    /// Connections that could not be opened.
    pub not_connected: usize,
    pub took: Duration,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let codes: Vec<String> = self.codes.iter().map(|(c, n)| format!("{n}x{c}")).collect();
        write!(
            f,
            "answers {}, unanswered {} ({} after 5 s or more), not connected {}, {:.1}s",
            if codes.is_empty() {
                "none".into()
            } else {
                codes.join(" ")
            },
            self.unanswered,
            self.unanswered_late,
            self.not_connected,
            self.took.as_secs_f64()
        )
    }
}

/// One round against `addr`, which must be 127.0.0.1.
pub fn round(addr: SocketAddr, abuse: Abuse) -> Outcome {
    assert_eq!(
        addr.ip(),
        Ipv4Addr::LOCALHOST,
        "the abuse client only targets 127.0.0.1"
    );
    raise_open_files(abuse.conns as u64 + 64);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(run(addr, abuse))
}

async fn run(addr: SocketAddr, abuse: Abuse) -> Outcome {
    let start = Instant::now();
    let end = tokio::time::Instant::now() + abuse.deadline;
    let mut out = Outcome::default();
    // Every connection open and held before any request is sent.
    let mut held = Vec::with_capacity(abuse.conns);
    for _ in 0..abuse.conns {
        match tokio::time::timeout_at(end, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => held.push((s, Instant::now())),
            _ => out.not_connected += 1,
        }
    }
    let big_header = format!(
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(abuse.header_bytes)
    );
    let long_line = format!(
        "GET /metrics?{} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        "a".repeat(abuse.line_bytes)
    );
    let requests: [Arc<[u8]>; 2] = [big_header.as_bytes().into(), long_line.as_bytes().into()];
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (s, opened)) in held.into_iter().enumerate() {
        let request = requests[i % 2].clone();
        tasks.spawn(async move {
            let code = tokio::time::timeout_at(end, exchange(s, request))
                .await
                .ok()
                .flatten();
            (code, opened.elapsed())
        });
    }
    while let Some(r) = tasks.join_next().await {
        match r {
            Ok((Some(code), _)) => *out.codes.entry(code).or_default() += 1,
            Ok((None, open)) => {
                out.unanswered += 1;
                out.unanswered_late += usize::from(open >= Duration::from_secs(5));
            }
            Err(_) => out.unanswered += 1,
        }
    }
    out.took = start.elapsed();
    out
}

/// Writes the request while reading the answer (a server that refuses early
/// answers before the request is all sent); returns the status code.
async fn exchange(s: TcpStream, request: Arc<[u8]>) -> Option<u16> {
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        for chunk in request.chunks(64 * 1024) {
            if w.write_all(chunk).await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The status line is all we need; stop at it or at the end.
    while !answer.contains(&b'\n') {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
    writer.abort();
    let line = String::from_utf8_lossy(&answer);
    line.strip_prefix("HTTP/1.1 ")
        .or_else(|| line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|c| c.parse().ok())
}

/// Enough descriptors for the held connections, up to the hard limit.
fn raise_open_files(want: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < want {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, want.min(hard), hard);
        }
    }
}

/// Resident memory of a process in KiB (VmRSS), 0 when it is gone.
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// Its anonymous part (RssAnon: heap, stacks), without the binary's code pages.
pub fn anon_kib(pid: u32) -> u64 {
    status_kib(pid, "RssAnon:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
