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

use crate::rejoin::{Admission, Phase};
use crate::service::OmService;

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

/// The leader's last log index as a follower last heard it (`track`), so
/// readiness can wait until the follower has applied that far.
#[derive(Clone, Default)]
pub struct CatchUp {
    seen: Arc<std::sync::Mutex<Option<(u64, u64)>>>,
}

impl CatchUp {
    /// The leader's id and last log index, when asked since it led.
    pub fn target(&self) -> Option<(u64, u64)> {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, v: Option<(u64, u64)>) {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = v;
    }

    /// Asks the leader (on its Raft port, as members ask each other) for
    /// its last log index every `every` while this node follows and has not
    /// applied that far, every ten times `every` once it has.
    pub async fn track(
        self,
        svc: Arc<OmService>,
        tls: Option<Arc<om_tls::ClientTls>>,
        every: std::time::Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            let m = svc.raft().metrics().borrow_watched().clone();
            match m.current_leader {
                Some(l) if l != m.id => {
                    let addr = m
                        .membership_config
                        .membership()
                        .get_node(&l)
                        .map(|n| n.raft_addr.clone());
                    if let Some(addr) = addr {
                        match crate::grpc::peer::peer_state(&addr, m.id, tls.as_ref()).await {
                            Ok(v) if v.node_id == l => self.set(Some((l, v.last_log_index))),
                            Ok(_) => {}
                            Err(e) => tracing::debug!(error = %e, "asking the leader's progress"),
                        }
                    }
                }
                _ => self.set(None),
            }
            let applied = m.last_applied.as_ref().map_or(0, |l| l.index);
            let caught_up = self.target().is_some_and(|(_, t)| applied >= t);
            let pause = if caught_up { every * 10 } else { every };
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

async fn metrics(State(s): State<HttpState>) -> String {
    crate::metrics::db_counters();
    crate::metrics::retry_cache(&s.svc);
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

/// Ready once Raft runs, a leader is known and this node takes full part in
/// Raft (a member that lost its data says why it does not, see `rejoin`);
/// else why not. `/readyz` and the gRPC health service both answer this.
pub fn readiness(svc: &OmService, admission: &Admission, catch_up: &CatchUp) -> Result<(), String> {
    let m = svc.raft().metrics().borrow_watched().clone();
    let applied = m.last_applied.as_ref().map_or(0, |l| l.index);
    if admission.phase() != Phase::Open {
        return Err(format!("not admitted: {}", admission.message()));
    }
    if let Some(why) = svc.divergence().and_then(|d| d.diverged()) {
        return Err(format!("replica diverged: {why}"));
    }
    if m.running_state.is_err() {
        return Err("raft stopped".to_string());
    }
    let Some(leader) = m.current_leader else {
        return Err("no leader".to_string());
    };
    if leader == m.id {
        return Ok(());
    }
    match catch_up.target() {
        Some((l, target)) if l == leader && applied >= target => Ok(()),
        Some((l, target)) if l == leader => Err(format!(
            "catching up: applied {applied} of the leader's {target}"
        )),
        _ => Err("catching up: the leader's progress is not known yet".to_string()),
    }
}

async fn readyz(State(s): State<HttpState>) -> (StatusCode, String) {
    match readiness(&s.svc, &s.admission, &s.catch_up) {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}
