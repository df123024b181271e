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
    crate::metrics::db_sizes(s.svc.db());
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
/// Raft (a member that lost its data says why it does not, see `rejoin`);
/// else why not. `/readyz` and the gRPC health service both answer this.
pub fn readiness(svc: &OmService, admission: &Admission) -> Result<(), String> {
    let m = svc.raft().metrics().borrow_watched().clone();
    if admission.phase() != Phase::Open {
        Err(format!("not admitted: {}", admission.message()))
    } else if m.running_state.is_err() {
        Err("raft stopped".to_string())
    } else if m.current_leader.is_none() {
        Err("no leader".to_string())
    } else {
        Ok(())
    }
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, String) {
    match readiness(&s.svc, &s.admission) {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}
