//! Node status published while the node runs: the gRPC health service in
//! step with readiness, the start-up phases, and Raft's gauges.

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::WatchReceiver;
use tokio::sync::watch;

use super::catch_up::{CatchUp, readiness};
use super::rejoin::Admission;
use crate::service::OmService;

/// Keeps the gRPC health service in step with readiness (`catch_up::readiness`):
/// the whole server ("") and both public services are SERVING while the
/// node is ready, NOT_SERVING otherwise and once it stops.
pub async fn report_health(
    health: tonic_health::server::HealthReporter,
    svc: Arc<OmService>,
    admission: Admission,
    catch_up: CatchUp,
    mut stop: watch::Receiver<bool>,
) {
    use tonic_health::ServingStatus;
    const SERVICES: [&str; 3] = ["", "om.v1.OzoneManager", "om.v1.Cluster"];
    let mut last = None;
    loop {
        let status = if *stop.borrow() {
            ServingStatus::NotServing
        } else if readiness(&svc, &admission, &catch_up).is_ok() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        if last != Some(status) {
            for s in SERVICES {
                health.set_service_status(s, status).await;
            }
            last = Some(status);
        }
        if *stop.borrow() {
            return;
        }
        tokio::select! {
            _ = stop.changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
}

/// Records when this node first knew a leader and first was ready (both
/// since `started`, like the earlier phases), as `om_startup_seconds` and one
/// log line, so a slow start says which phase took the time.
pub async fn report_startup(
    started: std::time::Instant,
    svc: Arc<OmService>,
    admission: Admission,
    catch_up: CatchUp,
    mut stop: watch::Receiver<bool>,
) {
    let mut leader_known = None;
    loop {
        if leader_known.is_none()
            && svc
                .raft()
                .metrics()
                .borrow_watched()
                .current_leader
                .is_some()
        {
            let t = started.elapsed();
            crate::metrics::startup_phase("leader_known", t);
            leader_known = Some(t);
        }
        if readiness(&svc, &admission, &catch_up).is_ok() {
            let ready = started.elapsed();
            crate::metrics::startup_phase("ready", ready);
            tracing::info!(
                ready_s = ready.as_secs_f64(),
                leader_known_s = leader_known.unwrap_or(ready).as_secs_f64(),
                "ready"
            );
            return;
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}

/// Publishes Raft's metrics as gauges on every change, and at least every
/// `LEADER_RECHECK` (a leader that falls silent changes no metric), until
/// `stop`.
pub async fn publish_raft_metrics(svc: Arc<OmService>, mut stop: watch::Receiver<bool>) {
    const LEADER_RECHECK: Duration = Duration::from_millis(250);
    let mut rx = svc.raft().metrics();
    let mut gauges = crate::metrics::RaftGauges::new();
    let mut silent_since: Option<(u64, std::time::Instant)> = None;
    loop {
        // Read in place: cloning the metrics (membership maps, replication
        // progress) on every commit showed in the leader's profile.
        {
            let m = rx.borrow_watched();
            let heard = svc.heard_leader(&m);
            gauges.publish(&m, heard);
            match (m.current_leader, heard) {
                (Some(l), None) if silent_since.is_none_or(|(s, _)| s != l) => {
                    tracing::warn!(
                        leader = l,
                        term = m.current_term,
                        "no word from leader {l} within an election timeout: reporting no leader"
                    );
                    silent_since = Some((l, std::time::Instant::now()));
                }
                (_, Some(_)) => silent_since = None,
                _ => {}
            }
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(LEADER_RECHECK) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
