//! The store under a node: opened within the memory budget, recovered as the
//! operator asked (`--force-new-cluster`), and Raft started over it.

use std::sync::Arc;
use std::time::Duration;

use om_raft_store::network::{LeaderContact, NetworkFactory};
use om_raft_store::{LogStore, Raft, StateMachine};
use rocksdb::DB;

use super::{BoxError, NodeOptions};
use crate::apply::OmApplier;
use crate::audit::AuditLog;
use crate::backup::Backups;
use crate::cluster_id::ClusterId;
use crate::config::Config;
use crate::divergence::Divergence;
use crate::incarnation::Incarnation;
use crate::store::keys;

/// What a node's store holds open, before Raft starts over it.
pub(super) struct Storage {
    pub db: Arc<DB>,
    pub db_options: Arc<rocksdb::Options>,
    pub log_store: LogStore,
    pub state_machine: StateMachine,
    pub backups: Arc<Backups>,
    pub cluster_id: Arc<ClusterId>,
    /// This member's cluster incarnation and fence (see `incarnation`).
    pub incarnation: Arc<Incarnation>,
    /// When this follower last heard its leader (stale-read bounds).
    pub leader_contact: Arc<LeaderContact>,
    /// This member's data volume space and, leading, its followers'.
    pub disk: Arc<om_raft_store::disk::DiskSpace>,
    /// Whether the data directory held nothing (a new or wiped member).
    pub empty_store: bool,
    /// The newest command time applied (the clock's floor).
    pub latest_time: Arc<std::sync::atomic::AtomicU64>,
}

impl Storage {
    pub async fn open(
        cfg: &Config,
        max_open_files: u64,
        audit: Option<&Arc<AuditLog>>,
    ) -> Result<Storage, BoxError> {
        let memory = om_raft_store::memory::MemoryBudget::new(cfg.memory_budget);
        metrics::gauge!("om_db_memory_budget_bytes").set(cfg.memory_budget as f64);
        tracing::info!(
            budget = cfg.memory_budget,
            memtables = cfg.memory_budget / 4,
            memtable_per_table = memory.write_buffer_size(),
            "RocksDB memory budget: one block cache, memtables charged to it"
        );
        // Archive segments name the member's cluster and incarnation, known
        // once the store is open.
        let label_of: Arc<std::sync::OnceLock<Arc<Incarnation>>> = Arc::default();
        let label = om_raft_store::archive::LabelSource({
            let label_of = label_of.clone();
            Arc::new(move || {
                let i = label_of.get();
                om_raft_store::archive::Label {
                    cluster_id: i
                        .and_then(|i| i.cluster_id())
                        .map(|c| c.to_string())
                        .unwrap_or_default(),
                    incarnation: i.map_or(0, |i| i.id()),
                }
            })
        });
        let keys = match (&cfg.archive_log, &cfg.backup_key_file) {
            (Some(_), Some(k)) => Some(Arc::new(
                om_backup_format::keys::MacKeys::load(k).map_err(std::io::Error::other)?,
            )),
            _ => None,
        };
        let latest_time = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let store = open_store(
            &cfg.data_dir,
            max_open_files,
            memory,
            cfg.archive_log.as_deref().map(|a| (a, label, keys.clone())),
            latest_time.clone(),
        )
        .await?;
        if let Some(a) = &cfg.archive_log {
            tracing::info!(
                dir = %a.display(),
                signed_under = keys.as_ref().map(|k| k.current()),
                "archiving every applied entry"
            );
        }
        let db = store.db.clone();
        let cluster_id = ClusterId::new(db.clone());
        let incarnation = Incarnation::open(&cfg.data_dir, cluster_id.clone())?;
        let _ = label_of.set(incarnation.clone());
        if cfg.force_new_cluster {
            let forced = crate::restore::force_new_cluster(
                &db,
                &incarnation,
                cfg,
                &cfg.raft_addr.to_string(),
                &cfg.grpc_addr.to_string(),
            )?;
            if let (Some(index), Some(a)) = (forced, audit) {
                a.record(crate::audit::Event {
                    time_ms: crate::service::now_ms(),
                    principal: "operator".into(),
                    via: "none",
                    operation: "ForceNewCluster".into(),
                    resource: "/".into(),
                    result: "OK".into(),
                    detail: format!(
                        "node {} is the only voter from log index {index}, incarnation {}",
                        cfg.node_id,
                        incarnation.id()
                    ),
                    ..Default::default()
                });
            }
        }
        let backups = Backups::open(
            &cfg.data_dir,
            keys::TABLE_CFS.iter().map(|t| t.to_string()).collect(),
            cfg.backup_rate,
        )?;
        crate::store::tune_tables(&db)?;
        Ok(Storage {
            empty_store: store.holds_nothing()?,
            cluster_id,
            incarnation,
            db,
            db_options: store.options.clone(),
            log_store: store.log_store,
            state_machine: store.state_machine,
            backups,
            leader_contact: Arc::new(LeaderContact::default()),
            disk: Arc::new(om_raft_store::disk::DiskSpace::new(
                cfg.node_id,
                cfg.min_free_bytes,
            )),
            latest_time,
        })
    }

    /// Opens the replica-divergence state and starts Raft over the store.
    pub async fn start_raft(
        &self,
        cfg: &Config,
        opts: &NodeOptions,
        peer_tls: Option<Arc<om_tls::ClientTls>>,
    ) -> Result<(Raft, Arc<Divergence>), BoxError> {
        let state_machine = &self.state_machine;
        let divergence = Divergence::open(
            cfg.node_id,
            &cfg.data_dir,
            state_machine.digests(),
            state_machine.pins(),
            state_machine.apply_faults(),
            peer_tls.clone(),
        )?;
        state_machine.set_starting(true);
        let raft = Raft::new(
            cfg.node_id,
            Arc::new(raft_config(cfg)?),
            NetworkFactory::new(cfg.node_id, opts.faults.clone())
                .with_tls(peer_tls)
                .with_identity(self.incarnation.clone())
                .with_disk(self.disk.clone()),
            self.log_store.clone(),
            self.state_machine.clone(),
        )
        .await;
        state_machine.set_starting(false);
        let raft = raft?;
        self.incarnation.set_history_probe({
            let raft = raft.clone();
            Arc::new(move || {
                use openraft::async_runtime::WatchReceiver;
                let m = raft.metrics().borrow_watched().clone();
                m.last_log_index.is_some() || m.snapshot.is_some()
            })
        });
        Ok((raft, divergence))
    }
}

/// Opens the store, waiting (up to 10 s) for a previous instance in this
/// process to release the directory: the last handle of a stopped node may
/// still be closing RocksDB on a background thread.
async fn open_store(
    dir: &std::path::Path,
    max_open_files: u64,
    memory: om_raft_store::memory::MemoryBudget,
    archive_log: Option<(
        &std::path::Path,
        om_raft_store::archive::LabelSource,
        Option<Arc<om_backup_format::keys::MacKeys>>,
    )>,
    latest_time: Arc<std::sync::atomic::AtomicU64>,
) -> std::io::Result<om_raft_store::OpenedStore> {
    // The store is the cluster's metadata and ACLs: readable by om's user
    // only, whatever the umask (files inside inherit the protection).
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let opts = om_raft_store::StoreOptions {
        max_open_files: Some(max_open_files),
        // The old install path, kept only to measure the two side by side
        // (BENCHMARKS.md, "Scale"): memory grows with the state.
        batch_snapshot_install: std::env::var("OM_SNAPSHOT_INSTALL").as_deref() == Ok("batch"),
        // Fault injection for the crash tests of real processes
        // (`tests/tests/faults/divergence.rs`): while the named file exists, log
        // appends are held in memory, unflushed and unacknowledged.
        hold_wal_flush_while: std::env::var_os("OM_TEST_HOLD_WAL_FLUSH").map(Into::into),
        memory: Some(memory),
        archive_log: archive_log.as_ref().map(|(a, _, _)| a.to_path_buf()),
        archive_keys: archive_log.as_ref().and_then(|(_, _, k)| k.clone()),
        archive_label: archive_log.map(|(_, l, _)| l),
    };
    loop {
        let tables = crate::store::table_descriptors_with(opts.memory.as_ref());
        let applier = Arc::new(OmApplier {
            latest_time: latest_time.clone(),
        });
        match om_raft_store::open_with(dir, tables, applier, &opts) {
            Err(e) if e.to_string().contains("lock") && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r => return r,
        }
    }
}

fn raft_config(cfg: &Config) -> Result<openraft::Config, BoxError> {
    let election = cfg.election_timeout.as_millis() as u64;
    let c = openraft::Config {
        cluster_name: "om".to_string(),
        heartbeat_interval: cfg.heartbeat.as_millis() as u64,
        election_timeout_min: election,
        election_timeout_max: election * 2,
        install_snapshot_timeout: 30_000,
        // Snapshots are triggered by `snapshot_policy`, which also weighs
        // the snapshot's size against the log written since.
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: cfg.snapshot_keep_logs,
        // Purge in steps no larger than the snapshot interval, so a purge
        // follows every snapshot once enough log lies behind it.
        purge_batch_size: cfg.snapshot_every.clamp(1, 256),
        // A node that cannot win an election (just restarted while the leader
        // still backs off reconnecting to it, or cut off) asks first instead
        // of raising its term and deposing a healthy leader.
        enable_pre_vote: Some(true),
        // A restarted node never resumes leading in the term it led before
        // (openraft's default does, at once, from its stored vote). Entries
        // leave a leader before its own WAL fsync covers them, so a leader
        // killed with -9 can come back with a shorter log than a follower
        // holds; leading again in the same term, it would write other
        // entries under log ids that follower already has, and the follower
        // would keep its own (they match by (term, index)): the replicas
        // diverge for good. Demoted, it must win an election in a higher
        // term, whose log ids no node holds yet, and a candidate missing
        // entries that a quorum holds cannot win it.
        enable_leader_restore: Some(false),
        ..Default::default()
    };
    Ok(c.validate()?)
}
