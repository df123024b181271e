//! Metrics owned by the Raft store.

/// Counts one WAL fsync that made `appends` log appends durable.
pub fn log_fsync(appends: usize) {
    metrics::counter!("om_raft_log_fsyncs_total").increment(1);
    metrics::counter!("om_raft_log_appends_total").increment(appends as u64);
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
