//! The local health endpoint. Read-only, and every answer is bytes rendered at
//! the end of the last reconcile: no request does host work, so probes stay fast
//! whatever the host is doing. Bounded: a connection limit, header size and
//! header-read timeouts, so idle or slow clients cannot starve a probe.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::outputs::Cycle;

pub use super::listen::{HttpError, Limits, Listen, Listener, bind, connection_limit, serve};

/// What a reconcile publishes for the endpoint.
pub struct Published {
    pub ready: bool,
    pub status: Bytes,
    pub readyz: Bytes,
    pub metrics: Bytes,
    pub at: Instant,
}

impl Published {
    pub fn new(cycle: &Cycle, metrics: String) -> Published {
        let failing: Vec<_> = cycle
            .report
            .iter()
            .flat_map(|r| &r.checks)
            .filter(|c| {
                !matches!(
                    c.status,
                    crate::check::Status::Ok
                        | crate::check::Status::Warn
                        | crate::check::Status::Skipped
                )
            })
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
            metrics: metrics.into(),
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

async fn metrics(State(s): State<AppState>) -> Response {
    match current(&s) {
        None => (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response(),
        Some(p) => Response::builder()
            .header(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
            .body(Body::from(p.metrics.clone()))
            .expect("static response"),
    }
}
