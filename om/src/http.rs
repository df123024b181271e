//! The HTTP side: `/metrics` (Prometheus text), `/healthz` (the process and
//! Raft are running) and `/readyz` (a leader is known and this node is a full
//! member, so requests can be served).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::async_runtime::WatchReceiver;

use crate::rejoin::{Admission, Phase};
use crate::service::OmService;

#[derive(Clone)]
struct HttpState {
    svc: Arc<OmService>,
    prom: PrometheusHandle,
    admission: Admission,
}

pub fn router(svc: Arc<OmService>, prom: PrometheusHandle, admission: Admission) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(HttpState {
            svc,
            prom,
            admission,
        })
}

async fn metrics(State(s): State<HttpState>) -> String {
    crate::metrics::db_counters();
    crate::metrics::retry_cache(&s.svc);
    s.prom.run_upkeep();
    let mut text = s.prom.render();
    let m = s.svc.raft().metrics().borrow_watched().clone();
    text.push_str(&crate::metrics::replication_lag_text(&m));
    text
}

async fn healthz(State(s): State<HttpState>) -> (StatusCode, &'static str) {
    let m = s.svc.raft().metrics().borrow_watched().clone();
    match m.running_state {
        Ok(()) => (StatusCode::OK, "ok\n"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "raft stopped\n"),
    }
}

/// Ready once Raft runs, a leader is known and this node takes full part in
/// Raft (a member that lost its data says why it does not, see `rejoin`).
async fn readyz(State(s): State<HttpState>) -> (StatusCode, String) {
    let m = s.svc.raft().metrics().borrow_watched().clone();
    if s.admission.phase() != Phase::Open {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not admitted: {}\n", s.admission.message()),
        )
    } else if m.running_state.is_ok() && m.current_leader.is_some() {
        (StatusCode::OK, "ready\n".to_string())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no leader\n".to_string())
    }
}
