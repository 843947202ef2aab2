//! The local health endpoint. Read-only, and every answer is bytes rendered at
//! the end of the last reconcile: no request does host work, so probes stay fast
//! whatever the host is doing. Bounded: a connection limit, header size and
//! header-read timeouts, so idle or slow clients cannot starve a probe.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;

use crate::outputs::Cycle;
use crate::outputs::exposition::Format;
use crate::outputs::metrics::Rendered;

/// What a reconcile publishes for the endpoint.
pub struct Published {
    pub ready: bool,
    pub status: Bytes,
    pub readyz: Bytes,
    /// Text 0.0.4 and OpenMetrics, chosen per request by its `Accept`.
    pub metrics_text: Bytes,
    pub metrics_openmetrics: Bytes,
    pub at: Instant,
}

impl Published {
    pub fn new(cycle: &Cycle, metrics: Rendered) -> Published {
        // The README's rule, in one place (`Status::blocks_ready`): a check that
        // fails or cannot tell makes the node not ready; warn and skipped do not.
        let failing: Vec<_> = cycle
            .report
            .iter()
            .flat_map(|r| &r.checks)
            .filter(|c| c.status.blocks_ready())
            .collect();
        let ready = cycle.report.as_ref().is_some_and(|r| r.ok);
        let readyz = json!({
            "ready": ready,
            "summary": cycle.report.as_ref().map(|r| r.summary.as_str()),
            "error": cycle.error,
            "failing": failing,
        });
        Published {
            ready,
            status: serde_json::to_vec_pretty(cycle)
                .expect("cycle serializes")
                .into(),
            readyz: serde_json::to_vec(&readyz).expect("json serializes").into(),
            metrics_text: metrics.text.into(),
            metrics_openmetrics: metrics.openmetrics.into(),
            at: Instant::now(),
        }
    }
}

pub type Board = Arc<RwLock<Option<Arc<Published>>>>;

#[derive(Clone)]
struct AppState {
    board: Board,
    /// Past this age without a new reconcile, the loop is considered stuck.
    stale_after: Duration,
}

pub fn router(board: Board, stale_after: Duration) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .with_state(AppState { board, stale_after })
}

fn current(s: &AppState) -> Option<Arc<Published>> {
    s.board.read().expect("board lock").clone()
}

fn json_response(code: StatusCode, body: Bytes) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn healthz(State(s): State<AppState>) -> Response {
    match current(&s) {
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting: no reconcile finished yet\n",
        )
            .into_response(),
        Some(p) if p.at.elapsed() > s.stale_after => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "stale: last reconcile finished {}s ago\n",
                p.at.elapsed().as_secs()
            ),
        )
            .into_response(),
        Some(_) => (StatusCode::OK, "ok\n").into_response(),
    }
}

async fn readyz(State(s): State<AppState>) -> Response {
    match current(&s) {
        None => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            Bytes::from_static(
                br#"{"ready":false,"summary":"starting: no reconcile finished yet","failing":[]}"#,
            ),
        ),
        Some(p) if p.ready => json_response(StatusCode::OK, p.readyz.clone()),
        Some(p) => json_response(StatusCode::SERVICE_UNAVAILABLE, p.readyz.clone()),
    }
}

async fn status(State(s): State<AppState>) -> Response {
    match current(&s) {
        None => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            Bytes::from_static(br#"{"error":"starting: no reconcile finished yet"}"#),
        ),
        Some(p) => json_response(StatusCode::OK, p.status.clone()),
    }
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let format = Format::negotiate(headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()));
    match current(&s) {
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
        Some(p) => Response::builder()
            .header(header::CONTENT_TYPE, format.content_type())
            .body(Body::from(match format {
                Format::Text => p.metrics_text.clone(),
                Format::OpenMetrics => p.metrics_openmetrics.clone(),
            }))
            .expect("static response"),
    }
}

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
}

/// Limits that keep one client from starving another.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
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
            // A socket left by a previous run would make bind fail.
            let _ = std::fs::remove_file(p);
            Ok(Listener::Unix(UnixListener::bind(p).map_err(err)?))
        }
    }
}

pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// Accepts connections forever. Over the connection limit a new connection is
/// closed at once rather than queued, so the ones being served stay fast.
pub async fn serve(listener: Listener, app: Router, limits: Limits) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let accepted: std::io::Result<Box<dyn Io>> = match &listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| {
                let _ = s.set_nodelay(true);
                Box::new(s) as Box<dyn Io>
            }),
            Listener::Unix(l) => l.accept().await.map(|(s, _)| Box::new(s) as Box<dyn Io>),
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let app = app.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(limits.max_header_bytes);
            let service = TowerToHyperService::new(app);
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
            drop(permit);
        });
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
