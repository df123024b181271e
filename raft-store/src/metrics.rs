//! Metrics owned by the Raft store.
//!
//! Metrics recorded on every log fsync or applied entry keep their handles
//! (registered on first use, after the server installed its recorder), so
//! the hot paths do not look their names up each time.

use std::sync::OnceLock;

use metrics::{Counter, Histogram};

struct FsyncMetrics {
    fsyncs: Counter,
    seconds: Histogram,
    appends: Counter,
}

/// Counts one WAL fsync, which took `seconds`, that made `appends` log
/// appends durable.
pub fn log_fsync(appends: usize, seconds: f64) {
    static M: OnceLock<FsyncMetrics> = OnceLock::new();
    let m = M.get_or_init(|| FsyncMetrics {
        fsyncs: metrics::counter!("om_raft_log_fsyncs_total"),
        seconds: metrics::histogram!("om_raft_fsync_seconds"),
        appends: metrics::counter!("om_raft_log_appends_total"),
    });
    m.fsyncs.increment(1);
    m.seconds.record(seconds);
    m.appends.increment(appends as u64);
}

pub fn snapshot_built(seconds: f64, bytes: u64) {
    metrics::counter!("om_raft_snapshots_built_total").increment(1);
    metrics::histogram!("om_raft_snapshot_build_seconds").record(seconds);
    metrics::gauge!("om_raft_snapshot_bytes").set(bytes as f64);
}

pub fn snapshot_installed(seconds: f64) {
    metrics::counter!("om_raft_snapshots_installed_total").increment(1);
    metrics::histogram!("om_raft_snapshot_install_seconds").record(seconds);
}

/// A snapshot file operation (`op`: build, publish, install, …) hit a
/// transient storage error and will be retried.
pub fn snapshot_retry(op: &'static str) {
    metrics::counter!("om_raft_snapshot_retries_total", "op" => op).increment(1);
}

/// A corrupt `current.snap` was moved aside (and a new snapshot built).
pub fn snapshot_quarantined() {
    metrics::counter!("om_raft_snapshots_quarantined_total").increment(1);
}

/// An incoming snapshot was refused before it reached openraft; `reason` is
/// a short stable word (corrupt, too_large, busy, transient, protocol).
pub fn snapshot_refused(reason: &'static str) {
    metrics::counter!("om_raft_snapshots_refused_total", "reason" => reason).increment(1);
}

/// One TCP connection attempt to peer `peer` at `addr`.
pub fn peer_connect_attempt(peer: u64, addr: &str) {
    metrics::counter!(
        "om_raft_peer_connect_attempts_total",
        "peer" => peer.to_string(),
        "addr" => addr.to_string()
    )
    .increment(1);
}

/// Whether this node currently reaches `peer` (1) or backs off from it (0).
pub fn peer_up(peer: u64, addr: &str, up: bool) {
    metrics::gauge!(
        "om_raft_peer_up",
        "peer" => peer.to_string(),
        "addr" => addr.to_string()
    )
    .set(if up { 1.0 } else { 0.0 });
}

/// One committed entry applied (its batch written) in `seconds`.
pub fn applied(seconds: f64) {
    static H: OnceLock<Histogram> = OnceLock::new();
    H.get_or_init(|| metrics::histogram!("om_raft_apply_seconds"))
        .record(seconds);
}

/// One run of `entries` committed entries written in one batch
/// (`om_raft_apply_runs_total`, `om_raft_apply_run_entries_total`; their
/// ratio is the mean run length).
pub fn applied_run(entries: usize) {
    static M: OnceLock<(Counter, Counter)> = OnceLock::new();
    let (runs, n) = M.get_or_init(|| {
        (
            metrics::counter!("om_raft_apply_runs_total"),
            metrics::counter!("om_raft_apply_run_entries_total"),
        )
    });
    runs.increment(1);
    n.increment(entries as u64);
}

/// What `peer` last said of its data volume (`om_raft_peer_disk_space`:
/// 0 ok, 1 low, 2 full), as a leader heard it.
pub fn peer_space(peer: u64, code: u32) {
    metrics::gauge!("om_raft_peer_disk_space", "peer" => peer.to_string()).set(code as f64);
}

/// An append carrying entries was refused because this member's data
/// volume is full (`om_raft_appends_refused_total{reason="disk_full"}`).
pub fn append_refused_disk_full() {
    metrics::counter!("om_raft_appends_refused_total", "reason" => "disk_full").increment(1);
}
