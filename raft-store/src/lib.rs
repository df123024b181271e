//! om's Raft storage and transport: an openraft log store and state machine on
//! ONE RocksDB instance, and the gRPC network between replicas.
//!
//! This crate owns the database: it opens it with the Raft column families
//! (`raft_log`, `raft_meta`, `sm_meta`) plus the table column families the
//! application names, guarantees the Raft durability contract, and builds and
//! installs snapshots. It knows nothing of volumes or keys: applying a command
//! is delegated to an [`Applier`] supplied by the application.
//!
//! It must never: acknowledge an append before the WAL is fsynced, return from
//! `save_vote` before the vote is durable, write table data and the applied
//! log id in separate batches, hand openraft a snapshot file it has not
//! verified, or turn a transient storage shortage in the snapshot paths into
//! an error (openraft ends its core on any storage error).

mod applied;
pub mod archive;
pub mod backup;
pub mod codec;
pub mod command;
pub mod digest;
pub mod disk;
pub mod hot;
pub mod keys;
pub mod log_store;
pub mod memory;
pub mod metrics;
pub mod network;
pub mod overlay;
pub mod pins;
pub mod snapshot;
pub mod snapshot_store;
pub mod state_machine;
pub mod transient;
pub mod wal;

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use om_proto::store::{Command, CommandResult};
use rocksdb::{ColumnFamilyDescriptor, DB, Options};

pub use command::SharedCommand;
pub use log_store::LogStore;
pub use overlay::{ApplyView, EntryWrites, Overlay, Staged, Tables, ViewValue};
pub use state_machine::{SnapshotInbox, StateMachine};

pub type NodeId = u64;

/// Where a replica can be reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct OmNode {
    /// Address of the internal Raft gRPC service.
    pub raft_addr: String,
    /// Address of the public gRPC API, for redirecting clients to the leader.
    pub grpc_addr: String,
}

impl fmt::Display for OmNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "raft={} grpc={}", self.raft_addr, self.grpc_addr)
    }
}

openraft::declare_raft_types!(
    /// om's Raft types: commands and results are protobuf messages; a
    /// command travels with its encoding ([`SharedCommand`]).
    pub TypeConfig:
        D = SharedCommand,
        R = CommandResult,
        NodeId = NodeId,
        Node = OmNode,
        AsyncRuntime = openraft_rt_tokio::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig, StateMachine>;
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
pub type Membership = openraft::Membership<NodeId, OmNode>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;

/// A storage failure while applying: fatal to the replica, never a request error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("apply failed: {0}")]
pub struct ApplyError(pub String);

/// Where a write sits in the log: its entry's index, and its slot in a
/// batch entry (`Command.batch`) when it is one of those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub index: u64,
    pub slot: Option<u32>,
}

impl Position {
    /// A plain entry's command.
    pub fn entry(index: u64) -> Position {
        Position { index, slot: None }
    }
}

/// The application half of the state machine. It must be deterministic: the
/// same command on the same state yields the same writes and result on every
/// replica. Reads through `view` see the state before this entry (the
/// database under the writes of the entries applied before it in the same
/// run, `overlay`); writes go into `writes`, which become part of the run's
/// one batch, committed atomically with the applied log id.
pub trait Applier: Send + Sync + 'static {
    /// Applies `cmd`, one write, at `at`: a plain entry's command, or one
    /// write of a batch entry (`Command.batch`), which the state machine
    /// applies one after another, each seeing the writes before it.
    fn apply(
        &self,
        view: &ApplyView<'_>,
        writes: &mut EntryWrites<'_>,
        at: Position,
        cmd: &Command,
    ) -> Result<CommandResult, ApplyError>;

    /// The tables whose records apply reads through the cache of hot
    /// records (`hot`): small tables that almost every write reads.
    fn hot_tables(&self) -> &[&'static str] {
        &[]
    }

    /// Whether every replica pins its state right after applying `cmd`, for
    /// a verification that compares table digests at one index (`pins`).
    fn pins_state(&self, _cmd: &Command) -> bool {
        false
    }
}

/// An opened store: the database and the two openraft storage halves over it.
pub struct OpenedStore {
    pub db: Arc<DB>,
    pub log_store: LogStore,
    pub state_machine: StateMachine,
    /// The database's options, which hold its statistics (ticker counts
    /// such as block-cache hits; `Options::get_statistics`).
    pub options: Arc<Options>,
}

impl OpenedStore {
    /// Whether the store holds nothing at all: no vote, no log entry, no
    /// applied state and no snapshot (a first boot, or a wiped data
    /// directory). Read from storage before Raft starts: Raft's metrics
    /// report an empty node until its core has loaded the store, so they
    /// cannot tell a restarted node from a wiped one.
    pub fn holds_nothing(&self) -> std::io::Result<bool> {
        let cf = |name: &str| {
            self.db
                .cf_handle(name)
                .ok_or_else(|| io_err(format!("column family {name} missing")))
        };
        if self
            .db
            .get_pinned_cf(cf(keys::RAFT_META_CF)?, keys::VOTE_KEY)
            .map_err(io_err)?
            .is_some()
        {
            return Ok(false);
        }
        let mut it = self.db.raw_iterator_cf(cf(keys::LOG_CF)?);
        it.seek_to_first();
        if it.valid() {
            return Ok(false);
        }
        it.status().map_err(io_err)?;
        if self.state_machine.read_applied()?.0.is_some() {
            return Ok(false);
        }
        Ok(!self.state_machine.has_snapshot())
    }
}

/// Opens (or creates) the database in `dir/db`, with snapshots in `dir/snapshots`.
/// `tables` are the application's column families; together with `sm_meta` they
/// are the replicated state that snapshots carry.
pub fn open(
    dir: &Path,
    tables: Vec<ColumnFamilyDescriptor>,
    applier: Arc<dyn Applier>,
) -> std::io::Result<OpenedStore> {
    open_with(dir, tables, applier, &StoreOptions::default())
}

/// Database-wide settings the application chooses.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// RocksDB's `max_open_files` (SST files kept open), so the server can
    /// budget its descriptors; `None` keeps every file open (RocksDB's default).
    pub max_open_files: Option<u64>,
    /// Install snapshots the old way, as one write batch holding the whole
    /// state in memory, instead of ingesting SST files. Only for measuring
    /// the two side by side; memory then grows with the state.
    pub batch_snapshot_install: bool,
    /// Fault injection for tests of what a crash loses: while this file
    /// exists, the log's flusher holds appends in RocksDB's in-memory WAL
    /// buffer (no write, no fsync, no acknowledgement), so a SIGKILL loses
    /// them although followers may already hold them. `None` in production.
    pub hold_wal_flush_while: Option<std::path::PathBuf>,
    /// One bound for memtables and caches (`memory`); `None`: RocksDB's
    /// defaults per column family.
    pub memory: Option<memory::MemoryBudget>,
    /// Archive every applied entry into this directory (`archive`).
    pub archive_log: Option<std::path::PathBuf>,
    /// What each new archive segment says about its writer.
    pub archive_label: Option<archive::LabelSource>,
    /// Signs archive segments under the first of these keys.
    pub archive_keys: Option<Arc<om_backup_format::keys::MacKeys>>,
}

/// Live WAL bytes past which RocksDB flushes the memtables pinning the
/// oldest WAL file (restart replays at most about this much).
pub const MAX_TOTAL_WAL_BYTES: u64 = 128 << 20;

/// 64 bits no other name drawn here shares: from the OS's random source,
/// else the clock and the process id.
pub(crate) fn nonce() -> u64 {
    let mut b = [0u8; 8];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).is_ok() {
        return u64::from_be_bytes(b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

/// The store's log-archive lineage (`archive`; empty: the cluster's
/// original history).
pub fn archive_lineage(db: &DB) -> std::io::Result<String> {
    let meta = db
        .cf_handle(keys::RAFT_META_CF)
        .ok_or_else(|| io_err("raft meta column family missing"))?;
    Ok(db
        .get_pinned_cf(meta, keys::ARCHIVE_LINEAGE_KEY)
        .map_err(std::io::Error::other)?
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .unwrap_or_default())
}

/// `open` with database-wide settings.
pub fn open_with(
    dir: &Path,
    tables: Vec<ColumnFamilyDescriptor>,
    applier: Arc<dyn Applier>,
    store: &StoreOptions,
) -> std::io::Result<OpenedStore> {
    std::fs::create_dir_all(dir)?;
    let mut opts = Options::default();
    if let Some(n) = store.max_open_files {
        opts.set_max_open_files(i32::try_from(n).unwrap_or(i32::MAX));
    }
    opts.create_if_missing(true);
    opts.create_missing_column_families(true);
    // Recover to the last consistent point of the WAL after a crash; every
    // acknowledged log append was fsynced, so nothing acknowledged is lost.
    opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
    opts.set_max_background_jobs(2);
    // Bound the WAL a restart replays: past this many bytes of live WAL,
    // RocksDB flushes the column families whose memtables still pin the
    // oldest WAL file (rarely written ones: Raft meta, counters, settings),
    // instead of keeping every WAL since they were last flushed. Unset, the
    // bound is 4x the memtable budget of all 19 column families (~10 GiB):
    // a node killed after 500k writes replayed 2.1 s of WAL at start.
    opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
    // Writes append their WAL records to an in-memory buffer instead of a
    // write(2) each; the log store's flusher writes and fsyncs the buffer in
    // one go (`FlushWAL(sync)`) before any append is acknowledged, sync
    // writes flush it first, and RocksDB writes it out before switching WAL
    // files and on close. The WAL stays one ordered stream, so a crash keeps
    // a prefix of it: what it can lose is only unacknowledged appends and
    // applied state that is re-applied from the log, as before. At 64
    // clients the per-write write(2) calls were ~3% of the leader's CPU.
    opts.set_manual_wal_flush(true);
    // Ticker counts (block-cache hits and misses) for /metrics, read by
    // name from the statistics dump. Timers off: RocksDB's default level
    // (kExceptDetailedTimers) times every Get, write and seek into a
    // histogram nobody reads, two clock reads and a histogram update each
    // (about 3 % of a follower's instructions per PutKey). The crate's
    // `ExceptHistogramOrTimers` is 2, which RocksDB 11 reads as
    // kExceptTimers (the crate's variants are one off against RocksDB 11's
    // enum): tickers and non-timer histograms, no timers.
    opts.enable_statistics();
    opts.set_statistics_level(rocksdb::statistics::StatsLevel::ExceptHistogramOrTimers);
    let cf_options = || {
        store
            .memory
            .as_ref()
            .map_or_else(Options::default, memory::MemoryBudget::cf_options)
    };
    let table_names: Vec<String> = tables.iter().map(|d| d.name().to_string()).collect();
    let mut cfs = vec![
        ColumnFamilyDescriptor::new(keys::LOG_CF, cf_options()),
        ColumnFamilyDescriptor::new(keys::RAFT_META_CF, cf_options()),
        ColumnFamilyDescriptor::new(keys::SM_META_CF, cf_options()),
    ];
    if let Some(m) = &store.memory {
        m.apply_to_db(&mut opts);
    }
    cfs.extend(tables);
    // RocksDB's point-in-time recovery would open a WAL with rotted bytes
    // and drop what follows them: refuse it instead (`wal`).
    wal::check_dir(&dir.join("db"))?;
    let db = DB::open_cf_descriptors(&opts, dir.join("db"), cfs).map_err(std::io::Error::other)?;
    let db = Arc::new(db);
    let log_store = LogStore::new(db.clone(), store.hold_wal_flush_while.clone())?;
    let mut state_machine =
        StateMachine::new(db.clone(), dir.join("snapshots"), table_names, applier)?;
    if let Some(a) = &store.archive_log {
        let lineage = archive_lineage(&db)?;
        let (applied, _) = snapshot_store::read_applied(&db, None)?;
        state_machine.archive_to(Arc::new(archive::LogArchive::open(
            a,
            archive::Start {
                lineage,
                applied,
                label: store.archive_label.clone(),
                keys: store.archive_keys.clone(),
            },
        )?));
    }
    if store.batch_snapshot_install {
        state_machine.install_in_one_batch();
    }
    Ok(OpenedStore {
        db,
        log_store,
        state_machine,
        options: Arc::new(opts),
    })
}

pub(crate) fn io_err(e: impl fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}
