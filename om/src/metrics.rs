//! Metrics owned by the server: the Prometheus recorder, Raft gauges and the
//! per-table iterator counters. Names follow `om_<subsystem>_<thing>_<unit>`.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use om_raft_store::TypeConfig;
use openraft::RaftMetrics;

/// Installs the process-wide recorder once and returns its handle.
pub fn recorder() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by an embedding
            // test); then this handle renders only what it sees, which is fine.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// Publishes Raft state as gauges; counts leader changes.
pub fn raft(m: &RaftMetrics<TypeConfig>, previous_leader: &mut Option<u64>) {
    metrics::gauge!("om_raft_term").set(m.current_term as f64);
    metrics::gauge!("om_raft_leader_id").set(m.current_leader.unwrap_or(0) as f64);
    metrics::gauge!("om_raft_is_leader").set(if m.state == openraft::ServerState::Leader {
        1.0
    } else {
        0.0
    });
    metrics::gauge!("om_raft_last_log_index").set(m.last_log_index.unwrap_or(0) as f64);
    metrics::gauge!("om_raft_committed_index")
        .set(m.local_committed.as_ref().map_or(0, |l| l.index) as f64);
    metrics::gauge!("om_raft_applied_index")
        .set(m.last_applied.as_ref().map_or(0, |l| l.index) as f64);
    metrics::gauge!("om_raft_snapshot_index")
        .set(m.snapshot.as_ref().map_or(0, |l| l.index) as f64);
    if m.current_leader != *previous_leader {
        if m.current_leader.is_some() {
            metrics::counter!("om_raft_leader_changes_total").increment(1);
        }
        *previous_leader = m.current_leader;
    }
    if let Some(rep) = &m.replication {
        let last = m.last_log_index.unwrap_or(0);
        for (id, matched) in rep {
            let lag = last.saturating_sub(matched.as_ref().map_or(0, |l| l.index));
            metrics::gauge!("om_raft_replication_lag_entries", "peer" => id.to_string())
                .set(lag as f64);
        }
    }
}

/// Copies the iterator counters into the registry before a scrape.
pub fn db_counters() {
    for (table, s) in crate::store::iter::all_table_counters() {
        metrics::counter!("om_db_seeks_total", "table" => table).absolute(s.seeks);
        metrics::counter!("om_db_nexts_total", "table" => table).absolute(s.nexts);
        metrics::counter!("om_db_tombstones_skipped_total", "table" => table)
            .absolute(s.tombstones);
    }
}
