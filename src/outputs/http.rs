//! The local health endpoint. Read-only, and every answer is bytes rendered at
//! the end of the last reconcile: no request does host work, so probes stay fast
//! whatever the host is doing. Bounded: a connection limit, header size and
//! header-read timeouts, so idle or slow clients cannot starve a probe.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use crate::exposition::Format;
use crate::outputs::Cycle;
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
