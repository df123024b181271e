//! The HTTP side: `/metrics` (Prometheus text), `/healthz` (the process and
//! Raft are running) and `/readyz` (a leader is known, this node is a full
//! member, and it has applied the log as far as the leader had it when last
//! asked, so requests can be served and stopping another member leaves a
//! caught-up quorum).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use openraft::async_runtime::WatchReceiver;

use crate::service::OmService;
use crate::tasks::catch_up::{CatchUp, readiness};
use crate::tasks::rejoin::Admission;

/// Longest a request's head may take to arrive: a client that sends it
/// byte by byte (or not at all after its first bytes) is closed then.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves `app` over HTTP/1.1 on `listener` until `stop` completes: every
/// request's head must arrive within `HEADER_READ_TIMEOUT`, on top of the
/// port's own limits (`net`). Connections still open at `stop` are closed
/// by the port's `Closer`.
pub async fn serve(
    mut listener: crate::net::LimitedListener,
    app: Router,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut stop => return,
            c = listener.accept_limited() => c,
        };
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
        });
    }
}

#[derive(Clone)]
struct HttpState {
    svc: Arc<OmService>,
    prom: PrometheusHandle,
    admission: Admission,
    catch_up: CatchUp,
    db_options: Arc<rocksdb::Options>,
}

pub fn router(
    svc: Arc<OmService>,
    prom: PrometheusHandle,
    admission: Admission,
    catch_up: CatchUp,
    db_options: Arc<rocksdb::Options>,
) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(HttpState {
            svc,
            prom,
            admission,
            catch_up,
            db_options,
        })
}

async fn metrics(State(s): State<HttpState>) -> String {
    crate::metrics::db_counters();
    crate::metrics::retry_cache(s.svc.db(), s.svc.now_ms());
    crate::metrics::db_sizes(s.svc.db());
    crate::metrics::db_cache(&s.db_options);
    s.prom.run_upkeep();
    let mut text = s.prom.render();
    let m = s.svc.raft().metrics().borrow_watched().clone();
    text.push_str(&crate::metrics::replication_lag_text(&m));
    text.push_str(&crate::metrics::process_text());
    text
}

async fn healthz(State(s): State<HttpState>) -> (StatusCode, &'static str) {
    let m = s.svc.raft().metrics().borrow_watched().clone();
    match m.running_state {
        Ok(()) => (StatusCode::OK, "ok\n"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "raft stopped\n"),
    }
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, String) {
    match readiness(&s.svc, &s.admission, &s.catch_up) {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}
