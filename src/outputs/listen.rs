//! Where and how the health endpoint accepts connections, bounded so that no
//! client load turns into an error loop: the connection limit fits the process's
//! real open-files limit, a connection over it gets a 503 and is closed, and
//! overload is logged at most once per [`LOG_EVERY`].

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{Notify, Semaphore};

use super::heap;

/// File descriptors kept for everything but HTTP clients: D-Bus, journald,
/// inotify, netlink, the files and pipes of a reconcile, the runtime's own.
pub const FD_RESERVE: u64 = 128;
/// At most one overload log line per this period.
pub const LOG_EVERY: Duration = Duration::from_secs(10);
/// Freed heap goes back to the kernel once no connection has closed for this
/// long (one trim per burst, none while idle)…
pub const TRIM_QUIET: Duration = Duration::from_secs(1);
/// …or this long after the first close, under a steady stream of them.
pub const TRIM_AT_LATEST: Duration = Duration::from_secs(10);

const OVERLOADED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 31\r\nConnection: close\r\nRetry-After: 1\r\n\r\nover the connection limit: retry\n";

/// Where the endpoint listens: `127.0.0.1:9470`, `[::1]:9470` or `unix:/path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(String),
    Unix(PathBuf),
}

impl Listen {
    pub fn parse(s: &str) -> Listen {
        match s.strip_prefix("unix:") {
            Some(p) => Listen::Unix(p.into()),
            None => Listen::Tcp(s.to_owned()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error(
        "cannot listen on unix:{path}: {what} is there; the agent only replaces a socket left by a previous run (one nothing answers on). Remove it or choose another path"
    )]
    Occupied { path: PathBuf, what: &'static str },
}

/// Limits that keep one client from starving another.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
}

/// The connection limit that fits this process's open-files limit, and a note
/// when it is lower than the configured one.
pub fn connection_limit(configured: usize) -> (usize, Option<String>) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    // The soft limit may be raised up to the hard one without privilege, as Go
    // programs do at start (under the unit's filter the call is refused: then
    // its LimitNOFILE= is what there is).
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        if soft < hard {
            let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(1 << 16).max(soft), hard);
        }
    }
    let soft = getrlimit(Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(1024);
    let fits = soft.saturating_sub(FD_RESERVE).max(1);
    if (configured as u64) <= fits {
        (configured, None)
    } else {
        (
            fits as usize,
            Some(format!(
                "http.max_connections = {configured} does not fit the open-files limit {soft} (LimitNOFILE=): serving at most {fits} connections at once, {FD_RESERVE} descriptors kept for the agent"
            )),
        )
    }
}

pub async fn bind(listen: &Listen) -> Result<Listener, HttpError> {
    let err = |source| HttpError::Bind {
        addr: match listen {
            Listen::Tcp(a) => a.clone(),
            Listen::Unix(p) => format!("unix:{}", p.display()),
        },
        source,
    };
    match listen {
        Listen::Tcp(a) => Ok(Listener::Tcp(TcpListener::bind(a).await.map_err(err)?)),
        Listen::Unix(p) => {
            remove_stale_socket(p)?;
            Ok(Listener::Unix(UnixListener::bind(p).map_err(err)?))
        }
    }
}

/// A socket left by a previous run would make bind fail: remove it, and only it.
fn remove_stale_socket(p: &Path) -> Result<(), HttpError> {
    let occupied = |what| HttpError::Occupied {
        path: p.to_owned(),
        what,
    };
    let meta = match std::fs::symlink_metadata(p) {
        Err(_) => return Ok(()),
        Ok(m) => m,
    };
    let ft = meta.file_type();
    if !ft.is_socket() {
        return Err(occupied(if ft.is_symlink() {
            "a symbolic link"
        } else if ft.is_dir() {
            "a directory"
        } else if ft.is_file() {
            "a regular file"
        } else {
            "something other than a socket"
        }));
    }
    // A live socket belongs to a running server (maybe another agent).
    if std::os::unix::net::UnixStream::connect(p).is_ok() {
        return Err(occupied("a socket another process is listening on"));
    }
    std::fs::remove_file(p).map_err(|source| HttpError::Bind {
        addr: format!("unix:{}", p.display()),
        source,
    })
}

pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// Logs a repeated condition at most once per [`LOG_EVERY`], with how many
/// times it happened since the last line.
struct RateLimited {
    start: Instant,
    /// Milliseconds since `start` of the last line, +1 (0: never).
    last: AtomicU64,
    since: AtomicU64,
}

impl RateLimited {
    fn new() -> RateLimited {
        RateLimited {
            start: Instant::now(),
            last: AtomicU64::new(0),
            since: AtomicU64::new(0),
        }
    }

    /// `Some(count)` when a line is due now.
    fn due(&self) -> Option<u64> {
        let n = self.since.fetch_add(1, Ordering::Relaxed) + 1;
        let now = self.start.elapsed().as_millis() as u64 + 1;
        let last = self.last.load(Ordering::Relaxed);
        let every = LOG_EVERY.as_millis() as u64;
        if last != 0 && now < last + every {
            return None;
        }
        self.last.store(now, Ordering::Relaxed);
        self.since.store(0, Ordering::Relaxed);
        Some(n)
    }
}

/// Accepts connections forever. Over the connection limit a new connection gets
/// a 503 and is closed rather than queued, so the ones being served stay fast.
pub async fn serve(listener: Listener, app: Router, limits: Limits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let over_limit = RateLimited::new();
    let draining = Arc::new(Semaphore::new(64));
    let accept_failed = RateLimited::new();
    let closed = Arc::new(Notify::new());
    tokio::spawn(release_after_bursts(closed.clone()));
    loop {
        let accepted = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning, and say so rarely.
                if let Some(n) = accept_failed.due() {
                    tracing::warn!("accept failed {n} time(s) (the last: {e}); backing off");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            if let Some(n) = over_limit.due() {
                tracing::warn!(
                    "{n} connection(s) over the limit of {} answered 503 and closed",
                    limits.max_connections
                );
            }
            // Answered here, without waiting: a fresh socket's buffer takes the
            // answer whole, so rejected clients never pile up descriptors.
            stream.try_write(OVERLOADED);
            // Reading what the client already sent before closing avoids a reset
            // that could destroy the 503 on its way: for a few at a time.
            if let Ok(drain) = draining.clone().try_acquire_owned() {
                let closed = closed.clone();
                tokio::spawn(async move {
                    let mut stream = stream.boxed();
                    let _ = tokio::time::timeout(
                        Duration::from_millis(100),
                        drain_request(&mut stream),
                    )
                    .await;
                    drop(drain);
                    closed.notify_one();
                });
            }
            continue;
        };
        let stream = stream.boxed();
        let app = app.clone();
        let closed = closed.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(limits.max_header_bytes);
            let service = TowerToHyperService::new(app);
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
            drop(permit);
            closed.notify_one();
        });
    }
}

/// The memory a burst of connections took (buffers, tasks) is freed when they
/// close, but glibc keeps it resident (see [`heap`]): hand it back once the
/// burst is over.
async fn release_after_bursts(closed: Arc<Notify>) {
    loop {
        closed.notified().await;
        let latest = tokio::time::Instant::now() + TRIM_AT_LATEST;
        while tokio::time::timeout(TRIM_QUIET, closed.notified())
            .await
            .is_ok()
            && tokio::time::Instant::now() < latest
        {}
        heap::release_free_memory();
    }
}

/// A client connection before it is served.
enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Stream {
    fn try_write(&self, bytes: &[u8]) {
        let _ = match self {
            Stream::Tcp(s) => s.try_write(bytes),
            Stream::Unix(s) => s.try_write(bytes),
        };
    }

    fn boxed(self) -> Box<dyn Io> {
        match self {
            Stream::Tcp(s) => Box::new(s),
            Stream::Unix(s) => Box::new(s),
        }
    }
}

/// Reads up to the end of a request's header (which usually came with the
/// connection), then shuts the connection down.
async fn drain_request(stream: &mut Box<dyn Io>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = stream.shutdown().await;
    let mut buf = [0u8; 4096];
    let mut tail = Vec::new();
    while let Ok(n) = stream.read(&mut buf).await {
        tail.extend_from_slice(&buf[..n]);
        if n == 0 || tail.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
        tail.drain(..tail.len().saturating_sub(3));
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_fits_the_open_files_limit() {
        let (n, note) = connection_limit(usize::MAX / 2);
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(n as u64, soft - FD_RESERVE);
        assert!(note.unwrap().contains("LimitNOFILE"));
        assert_eq!(connection_limit(10), (10, None));
    }

    #[test]
    fn overload_is_logged_once_per_period() {
        let r = RateLimited::new();
        assert_eq!(r.due(), Some(1));
        for _ in 0..1000 {
            assert_eq!(r.due(), None);
        }
    }

    #[tokio::test]
    async fn only_a_stale_socket_is_removed() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("file");
        std::fs::write(&file, "keep").unwrap();
        let e = bind(&Listen::Unix(file.clone())).await.err().unwrap();
        assert!(e.to_string().contains("a regular file is there"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        let sock = t.path().join("sock");
        let live = bind(&Listen::Unix(sock.clone())).await.unwrap();
        let e = bind(&Listen::Unix(sock.clone())).await.err().unwrap();
        assert!(
            e.to_string().contains("another process is listening"),
            "{e}"
        );
        drop(live);
        // Nothing listens any more: a stale socket, replaced.
        bind(&Listen::Unix(sock)).await.unwrap();
    }
}
