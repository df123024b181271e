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

/// The least time between two handovers for want of space.
pub const HANDOVER_EVERY: Duration = Duration::from_secs(10);

/// How often the data volume's space is read.
pub const DISK_SPACE_EVERY: Duration = Duration::from_secs(1);

/// Publishes the data volume's size and the bytes left for om
/// (`om_data_volume_size_bytes`, `om_data_volume_available_bytes`), so an
/// alert fires before the volume fills (OmDataVolumeLow), and tells the
/// service, which refuses writes that add data below `--min-free-bytes`.
///
/// A leader whose volume is short hands leadership to a member with room
/// (at most once per `HANDOVER_EVERY`).
pub async fn publish_disk_space(svc: Arc<OmService>, mut stop: watch::Receiver<bool>) {
    let path = svc.db().path().to_path_buf();
    let mut handed_over: Option<std::time::Instant> = None;
    loop {
        let p = path.clone();
        if let Ok(Some((size, available))) =
            tokio::task::spawn_blocking(move || volume_space(&p)).await
        {
            metrics::gauge!("om_data_volume_size_bytes").set(size as f64);
            metrics::gauge!("om_data_volume_available_bytes").set(available as f64);
            svc.disk().set_free(available);
        }
        if handed_over.is_none_or(|t| t.elapsed() >= HANDOVER_EVERY)
            && svc.disk().space() != om_raft_store::disk::Space::Ok
            && svc.hand_over_for_space().await.is_some()
        {
            handed_over = Some(std::time::Instant::now());
        }
        tokio::select! {
            _ = tokio::time::sleep(DISK_SPACE_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// The size of the filesystem holding `path` and the bytes an unprivileged
/// writer may still use there.
pub fn volume_space(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a NUL-terminated path and `s` a zeroed statvfs the
    // call fills.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let frsize = s.f_frsize as u64;
    Some((
        (s.f_blocks as u64).saturating_mul(frsize),
        (s.f_bavail as u64).saturating_mul(frsize),
    ))
}

#[cfg(test)]
mod disk_tests {
    #[test]
    fn the_volume_of_a_directory_has_a_size() {
        let d = tempfile::tempdir().unwrap();
        let (size, available) = super::volume_space(d.path()).unwrap();
        assert!(size > 0 && available <= size, "{size} {available}");
    }
}
