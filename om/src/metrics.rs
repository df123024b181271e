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
            // Histograms as Prometheus histograms (so alerts and dashboards
            // can aggregate quantiles across members): 50 µs to ~13 s.
            let buckets: Vec<f64> = (0..19).map(|i| 50e-6 * 2f64.powi(i)).collect();
            let recorder = PrometheusBuilder::new()
                .set_buckets(&buckets)
                .expect("non-empty buckets")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by an embedding
            // test); then this handle renders only what it sees, which is fine.
            let _ = metrics::set_global_recorder(recorder);
            zero_counters();
            handle
        })
        .clone()
}

/// Counters that alerts and dashboards read but that count rare events,
/// exported at 0 from the start: a counter whose series appears only with
/// its first event never shows an increase in Prometheus (`increase()` sees
/// one sample), so the alert on that first event would stay silent. The
/// deploy tests' live Prometheus run checks every metric the rules read.
fn zero_counters() {
    for name in ["om_audit_dropped_total", "om_unauthenticated_total"] {
        metrics::counter!(name).increment(0);
    }
    for reason in ["not_leader", "timeout", "shutdown", "other"] {
        metrics::counter!("om_raft_proposals_failed_total", "reason" => reason).increment(0);
    }
}

/// Raft state as gauges, registered once: openraft publishes new metrics on
/// every commit and apply, so this runs thousands of times a second under
/// load and keeps its handles instead of looking names up each time.
pub struct RaftGauges {
    term: metrics::Gauge,
    leader_id: metrics::Gauge,
    has_leader: metrics::Gauge,
    is_leader: metrics::Gauge,
    last_log_index: metrics::Gauge,
    committed_index: metrics::Gauge,
    applied_index: metrics::Gauge,
    snapshot_index: metrics::Gauge,
    leader_changes: metrics::Counter,
    previous_leader: Option<u64>,
}

impl RaftGauges {
    pub fn new() -> RaftGauges {
        RaftGauges {
            term: metrics::gauge!("om_raft_term"),
            leader_id: metrics::gauge!("om_raft_leader_id"),
            has_leader: metrics::gauge!("om_raft_has_leader"),
            is_leader: metrics::gauge!("om_raft_is_leader"),
            last_log_index: metrics::gauge!("om_raft_last_log_index"),
            committed_index: metrics::gauge!("om_raft_committed_index"),
            applied_index: metrics::gauge!("om_raft_applied_index"),
            snapshot_index: metrics::gauge!("om_raft_snapshot_index"),
            leader_changes: metrics::counter!("om_raft_leader_changes_total"),
            previous_leader: None,
        }
    }

    /// Publishes `m`, with `heard` the leader this node heard from within
    /// an election timeout (`OmService::heard_leader`; none: leader id 0);
    /// counts and logs leader changes.
    pub fn publish(&mut self, m: &RaftMetrics<TypeConfig>, heard: Option<u64>) {
        let index = |l: Option<u64>| l.unwrap_or(0) as f64;
        self.term.set(m.current_term as f64);
        self.leader_id.set(index(heard));
        self.has_leader.set(if heard.is_some() { 1.0 } else { 0.0 });
        self.is_leader
            .set(if m.state == openraft::ServerState::Leader {
                1.0
            } else {
                0.0
            });
        self.last_log_index.set(index(m.last_log_index));
        self.committed_index
            .set(index(m.local_committed.as_ref().map(|l| l.index)));
        self.applied_index
            .set(index(m.last_applied.as_ref().map(|l| l.index)));
        self.snapshot_index
            .set(index(m.snapshot.as_ref().map(|l| l.index)));
        if m.current_leader != self.previous_leader {
            if m.current_leader.is_some() {
                self.leader_changes.increment(1);
            }
            // openraft's own state logs are kept at WARN by default: this is
            // the one line an operator reads when leadership moves.
            match m.current_leader {
                Some(l) if l == m.id => tracing::info!(term = m.current_term, "this node leads"),
                Some(l) => tracing::info!(term = m.current_term, leader = l, "leader changed"),
                None => tracing::info!(term = m.current_term, "no leader"),
            }
            self.previous_leader = m.current_leader;
        }
    }
}

impl Default for RaftGauges {
    fn default() -> Self {
        Self::new()
    }
}

/// A batch entry of `writes` writes this leader proposed
/// (`om_raft_batch_entries_total`, `om_raft_batched_writes_total`; their
/// ratio is the writes per batch).
pub fn proposed_batch(writes: usize) {
    metrics::counter!("om_raft_batch_entries_total").increment(1);
    metrics::counter!("om_raft_batched_writes_total").increment(writes as u64);
}

/// A write this node proposed to Raft that did not commit
/// (`om_raft_proposals_failed_total{reason}`): `not_leader` (it lost
/// leadership first), `timeout` (no commit within the request timeout: no
/// quorum, or a slow one), `shutdown`, `other`.
/// This leader handed leadership over for `reason` (`disk_space`: its
/// data volume ran short), `om_leadership_handovers_total`.
pub fn leadership_handed_over(reason: &'static str) {
    metrics::counter!("om_leadership_handovers_total", "reason" => reason).increment(1);
}

/// A scrub pass (`tasks::scrub`) read `records` records and `bytes` bytes
/// of every column family, each block's checksum verified.
pub fn scrubbed(records: u64, bytes: u64, seconds: f64) {
    metrics::counter!("om_scrub_passes_total").increment(1);
    metrics::gauge!("om_scrub_last_records").set(records as f64);
    metrics::gauge!("om_scrub_last_bytes").set(bytes as f64);
    metrics::gauge!("om_scrub_last_seconds").set(seconds);
    metrics::gauge!("om_scrub_last_pass_timestamp_seconds").set(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    );
}

pub fn proposal_failed(reason: &'static str) {
    metrics::counter!("om_raft_proposals_failed_total", "reason" => reason).increment(1);
}

/// Seconds from the start of the process's node to the end of a start-up
/// `phase`: `store_open` (RocksDB open with its WAL replay, and the checks on
/// the store), `raft_start` (openraft reading the log and vote, re-applying
/// committed entries), `leader_known` and `ready` (caught up with the leader;
/// what `/readyz` reports).
pub fn startup_phase(phase: &'static str, since_start: std::time::Duration) {
    metrics::gauge!("om_startup_seconds", "phase" => phase).set(since_start.as_secs_f64());
}

/// Prometheus's standard process metrics, read when scraped: CPU seconds
/// (user and system, all threads) and resident memory. Benchmarks divide the
/// CPU counter's growth by the operations done to get CPU-µs per operation.
pub fn process_text() -> String {
    let mut out = String::new();
    // SAFETY: getrusage only writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } == 0 {
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        out.push_str(&format!(
            "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {:.6}\n",
            secs(ru.ru_utime) + secs(ru.ru_stime)
        ));
    }
    // statm: size, resident, ... in pages.
    let resident = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok());
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if let (Some(pages), true) = (resident, page > 0) {
        out.push_str(&format!(
            "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}\n",
            pages * page as u64
        ));
    }
    out
}

/// `om_raft_replication_lag_entries{peer}` in Prometheus text, rendered from
/// this node's Raft state at scrape time: only a leader has per-peer series,
/// and only for current members, so a node that stepped down (or a removed
/// peer) exports none rather than its last values.
pub fn replication_lag_text(m: &RaftMetrics<TypeConfig>) -> String {
    let Some(rep) = &m.replication else {
        return String::new();
    };
    let last = m.last_log_index.unwrap_or(0);
    let mut out = String::from("# TYPE om_raft_replication_lag_entries gauge\n");
    for (id, matched) in rep.iter().filter(|(id, _)| **id != m.id) {
        let lag = last.saturating_sub(matched.as_ref().map_or(0, |l| l.index));
        out.push_str(&format!(
            "om_raft_replication_lag_entries{{peer=\"{id}\"}} {lag}\n"
        ));
    }
    out
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

/// Retry-cache gauges, read at scrape time: the age of the oldest entry (the
/// first of the oldest generation, or of the rules-10 expiry index; 0 when
/// empty) and RocksDB's estimate of the keys (a rules-10 entry is two, and
/// range-deleted keys count until compacted). With expiry keeping up, the
/// oldest age stays under twice the TTL whatever the write rate.
pub fn retry_cache(db: &rocksdb::DB, now_ms: u64) {
    let (oldest_ms, estimate) = crate::store::retry_cache_stats(db).unwrap_or((None, 0));
    let age = oldest_ms.map_or(0.0, |t| now_ms.saturating_sub(t) as f64 / 1000.0);
    metrics::gauge!("om_retry_cache_oldest_age_seconds").set(age);
    metrics::gauge!("om_retry_cache_entries_estimate").set(estimate as f64);
}

/// Per column family: live data, SST bytes on disk and pending compaction
/// bytes, as RocksDB estimates them (`om_db_*_bytes{cf}`).
pub fn db_sizes(db: &rocksdb::DB) {
    // Memory, against `--memory-budget`: the block cache is shared (any
    // column family reports it, memtable charges included); memtables and
    // table readers (index and filter blocks outside the cache) add up.
    let (mut memtables, mut readers, mut cache) = (0u64, 0u64, None);
    for cf in crate::store::keys::all_cfs() {
        let Some(h) = db.cf_handle(cf) else { continue };
        let get = |p: &str| db.property_int_value_cf(h, p).ok().flatten().unwrap_or(0);
        memtables += get("rocksdb.cur-size-all-mem-tables");
        readers += get("rocksdb.estimate-table-readers-mem");
        cache.get_or_insert_with(|| get("rocksdb.block-cache-usage"));
    }
    metrics::gauge!("om_db_memtable_bytes").set(memtables as f64);
    metrics::gauge!("om_db_table_readers_bytes").set(readers as f64);
    metrics::gauge!("om_db_block_cache_usage_bytes").set(cache.unwrap_or(0) as f64);
    for cf in crate::store::keys::all_cfs() {
        let Some(h) = db.cf_handle(cf) else { continue };
        for (name, prop) in [
            ("om_db_live_data_bytes", "rocksdb.estimate-live-data-size"),
            ("om_db_sst_files_bytes", "rocksdb.total-sst-files-size"),
            (
                "om_db_pending_compaction_bytes",
                "rocksdb.estimate-pending-compaction-bytes",
            ),
        ] {
            if let Ok(Some(v)) = db.property_int_value_cf(h, prop) {
                metrics::gauge!(name, "cf" => cf).set(v as f64);
            }
        }
    }
}

/// The count of ticker `name` in a RocksDB statistics dump (lines like
/// `rocksdb.block.cache.hit COUNT : 42`), read by name so it cannot drift
/// from the library's numbering.
pub fn ticker(stats: &str, name: &str) -> Option<u64> {
    stats.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(" COUNT : ")?;
        rest.trim().parse().ok()
    })
}

/// Block-cache hits and misses of the whole database (all column
/// families share the statistics): `om_db_block_cache_{hits,misses}_total`.
pub fn db_cache(options: &rocksdb::Options) {
    let Some(stats) = options.get_statistics() else {
        return;
    };
    for (metric, name) in [
        ("om_db_block_cache_hits_total", "rocksdb.block.cache.hit"),
        ("om_db_block_cache_misses_total", "rocksdb.block.cache.miss"),
    ] {
        if let Some(n) = ticker(&stats, name) {
            metrics::counter!(metric).absolute(n);
        }
    }
}

/// Whether this replica found its state to differ from the majority's
/// (`om_replica_diverged`, 0 or 1; see `divergence`).
pub fn replica_diverged(diverged: bool) {
    metrics::gauge!("om_replica_diverged").set(if diverged { 1.0 } else { 0.0 });
}

#[cfg(test)]
mod ticker_tests {
    #[test]
    fn tickers_are_read_by_name() {
        let dump = "rocksdb.block.cache.miss COUNT : 7\nrocksdb.block.cache.hit COUNT : 42\n\
                    rocksdb.block.cache.hit.extra COUNT : 1\n";
        assert_eq!(super::ticker(dump, "rocksdb.block.cache.hit"), Some(42));
        assert_eq!(super::ticker(dump, "rocksdb.block.cache.miss"), Some(7));
        assert_eq!(super::ticker(dump, "rocksdb.nothing"), None);
    }
}
