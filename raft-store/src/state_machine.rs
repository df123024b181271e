//! The Raft state machine on RocksDB.
//!
//! Each applied entry is one atomic write batch holding the application's table
//! writes and the new `AppliedState` (last applied log id and membership), so
//! the data and the applied index can never disagree after a crash. Apply
//! batches are not fsynced: every entry applied was first fsynced in the log,
//! and the database has one WAL, so a crash loses at most applied state that
//! is re-applied from the log on restart.
//!
//! Snapshots are files in `snapshots/`; see `snapshot` for the format. Building
//! reads a RocksDB snapshot on a blocking thread, so writes go on meanwhile.
//! Installing verifies the file's checksum, then replaces every state column
//! family and the applied state in ONE synced write batch: a crash at any point
//! leaves either the previous state or the new one. (The batch holds the whole
//! state in memory; see ARCHITECTURE.md.)

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::{Stream, TryStreamExt};
use om_proto::raft as pb;
use om_proto::store::CommandResult;
use openraft::Snapshot;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::type_config::alias::SnapshotOf;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use prost::Message;
use rocksdb::{DB, ReadOptions, WriteBatch, WriteOptions};

use crate::snapshot::{SnapshotReader, SnapshotWriter};
use crate::{Applier, LogId, SnapshotMeta, StoredMembership, TypeConfig, codec, io_err, keys};

const CURRENT: &str = "current.snap";

struct Shared {
    db: Arc<DB>,
    snap_dir: PathBuf,
    /// The replicated column families other than `sm_meta`.
    tables: Vec<String>,
    /// Serializes replacing `current.snap` and remembers what it holds.
    current: tokio::sync::Mutex<Option<LogId>>,
    tmp_counter: AtomicU64,
}

#[derive(Clone)]
pub struct StateMachine {
    shared: Arc<Shared>,
    applier: Arc<dyn Applier>,
}

pub struct SnapshotBuilder {
    shared: Arc<Shared>,
}

impl StateMachine {
    pub(crate) fn new(
        db: Arc<DB>,
        snap_dir: PathBuf,
        tables: Vec<String>,
        applier: Arc<dyn Applier>,
    ) -> std::io::Result<StateMachine> {
        std::fs::create_dir_all(&snap_dir)?;
        // Leftovers of builds or transfers interrupted by a crash.
        for e in std::fs::read_dir(&snap_dir)? {
            let e = e?;
            if e.file_name().to_string_lossy().starts_with("tmp-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let current = match std::fs::metadata(snap_dir.join(CURRENT)) {
            Ok(_) => {
                let m = crate::snapshot::read_meta(&snap_dir.join(CURRENT))?;
                codec::opt_log_id_from_pb(&m.last_log_id)
            }
            Err(_) => None,
        };
        Ok(StateMachine {
            shared: Arc::new(Shared {
                db,
                snap_dir,
                tables,
                current: tokio::sync::Mutex::new(current),
                tmp_counter: AtomicU64::new(0),
            }),
            applier,
        })
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.shared.db
    }

    /// The last applied log id and membership, as stored.
    pub fn read_applied(&self) -> std::io::Result<(Option<LogId>, StoredMembership)> {
        read_applied(&self.shared.db, None)
    }

    fn apply_one(
        &self,
        entry: &crate::Entry,
        membership: &mut StoredMembership,
    ) -> std::io::Result<CommandResult> {
        let db = &self.shared.db;
        let mut batch = WriteBatch::default();
        let result = match &entry.payload {
            EntryPayload::Blank => CommandResult::default(),
            EntryPayload::Normal(cmd) => self
                .applier
                .apply(db, &mut batch, entry.log_id.index, cmd)
                .map_err(io_err)?,
            EntryPayload::Membership(m) => {
                *membership = StoredMembership::new(Some(entry.log_id), m.clone());
                CommandResult::default()
            }
        };
        let applied = pb::AppliedState {
            last_applied: Some(codec::log_id_to_pb(&entry.log_id)),
            membership: Some(codec::stored_membership_to_pb(membership)),
        };
        batch.put_cf(
            cf(db, keys::SM_META_CF)?,
            keys::APPLIED_KEY,
            applied.encode_to_vec(),
        );
        db.write(batch).map_err(io_err)?;
        Ok(result)
    }
}

fn cf<'a>(db: &'a DB, name: &str) -> std::io::Result<&'a rocksdb::ColumnFamily> {
    db.cf_handle(name)
        .ok_or_else(|| io_err(format!("column family {name} missing")))
}

fn read_applied(
    db: &DB,
    snapshot: Option<&rocksdb::Snapshot<'_>>,
) -> std::io::Result<(Option<LogId>, StoredMembership)> {
    let c = cf(db, keys::SM_META_CF)?;
    let bytes = match snapshot {
        Some(s) => {
            let mut ro = ReadOptions::default();
            ro.set_snapshot(s);
            db.get_cf_opt(c, keys::APPLIED_KEY, &ro).map_err(io_err)?
        }
        None => db.get_cf(c, keys::APPLIED_KEY).map_err(io_err)?,
    };
    match bytes {
        Some(b) => {
            let a = pb::AppliedState::decode(b.as_slice()).map_err(io_err)?;
            let m = match &a.membership {
                Some(m) => codec::stored_membership_from_pb(m)?,
                None => StoredMembership::default(),
            };
            Ok((codec::opt_log_id_from_pb(&a.last_applied), m))
        }
        None => Ok((None, StoredMembership::default())),
    }
}

impl Shared {
    fn tmp_path(&self) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        self.snap_dir
            .join(format!("tmp-{}-{n}.snap", std::process::id()))
    }

    /// Makes `tmp` the current snapshot unless a newer one is already current.
    async fn publish(&self, tmp: PathBuf, last: Option<LogId>) -> std::io::Result<bool> {
        let mut cur = self.current.lock().await;
        if cur.is_some() && *cur > last {
            let _ = std::fs::remove_file(&tmp);
            return Ok(false);
        }
        std::fs::rename(&tmp, self.snap_dir.join(CURRENT))?;
        File::open(&self.snap_dir)?.sync_all()?;
        *cur = last;
        Ok(true)
    }

    fn build_file(&self) -> std::io::Result<(SnapshotMeta, PathBuf, u64)> {
        let db = &self.db;
        let snap = db.snapshot();
        let (last, membership) = read_applied(db, Some(&snap))?;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: membership,
        };
        let tmp = self.tmp_path();
        let mut w = SnapshotWriter::create(&tmp, &codec::snapshot_meta_to_pb(&meta), &self.tables)?;
        for (i, name) in self.tables.iter().enumerate() {
            let mut ro = ReadOptions::default();
            ro.set_snapshot(&snap);
            ro.fill_cache(false);
            let mut it = db.raw_iterator_cf_opt(cf(db, name)?, ro);
            it.seek_to_first();
            while it.valid() {
                let (Some(k), Some(v)) = (it.key(), it.value()) else {
                    break;
                };
                w.record(i as u32, k, v)?;
                it.next();
            }
            it.status().map_err(io_err)?;
        }
        let bytes = w.finish()?;
        Ok((meta, tmp, bytes))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = File;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, File>, std::io::Error> {
        let started = Instant::now();
        let shared = self.shared.clone();
        let (meta, tmp, bytes) = tokio::task::spawn_blocking(move || shared.build_file())
            .await
            .map_err(io_err)??;
        self.shared.publish(tmp, meta.last_log_id).await?;
        crate::metrics::snapshot_built(started.elapsed().as_secs_f64(), bytes);
        tracing::info!(last = ?meta.last_log_id, bytes, "snapshot built");
        let file = File::open(self.shared.snap_dir.join(CURRENT))?;
        Ok(Snapshot {
            meta,
            snapshot: file,
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = File;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), std::io::Error> {
        self.read_applied()
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), std::io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, std::io::Error>>
            + Unpin
            + OptionalSend,
    {
        let (_, mut membership) = self.read_applied()?;
        while let Some((entry, responder)) = entries.try_next().await? {
            let result = self.apply_one(&entry, &mut membership)?;
            if let Some(r) = responder {
                r.send(result);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        mut snapshot: File,
    ) -> Result<(), std::io::Error> {
        let started = Instant::now();
        snapshot.seek(SeekFrom::Start(0))?;
        // Keep a verified copy as the new current snapshot.
        let tmp = self.shared.tmp_path();
        {
            let mut out = File::create(&tmp)?;
            std::io::copy(&mut snapshot, &mut out)?;
            out.sync_all()?;
        }
        let shared = self.shared.clone();
        let meta2 = meta.clone();
        let tmp2 = tmp.clone();
        tokio::task::spawn_blocking(move || install_file(&shared, &meta2, &tmp2))
            .await
            .map_err(io_err)??;
        self.shared.publish(tmp, meta.last_log_id).await?;
        crate::metrics::snapshot_installed(started.elapsed().as_secs_f64());
        tracing::info!(last = ?meta.last_log_id, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, File>>, std::io::Error> {
        let _cur = self.shared.current.lock().await;
        let path = self.shared.snap_dir.join(CURRENT);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let meta = codec::snapshot_meta_from_pb(&crate::snapshot::read_meta(&path)?)?;
        Ok(Some(Snapshot {
            meta,
            snapshot: file,
        }))
    }
}

/// Replaces the replicated state with the snapshot in `path`, atomically.
fn install_file(
    shared: &Shared,
    meta: &SnapshotMeta,
    path: &std::path::Path,
) -> std::io::Result<()> {
    let db = &shared.db;
    let mut reader = SnapshotReader::open(File::open(path)?)?;
    // Map the file's column families onto ours by name; unknown ones are an error.
    let mut targets = Vec::with_capacity(reader.cfs.len());
    for name in &reader.cfs {
        if !shared.tables.iter().any(|t| t == name) {
            return Err(io_err(format!(
                "snapshot holds unknown column family {name}"
            )));
        }
        targets.push(cf(db, name)?);
    }
    let mut batch = WriteBatch::default();
    let mut clear: Vec<&str> = shared.tables.iter().map(String::as_str).collect();
    clear.push(keys::SM_META_CF);
    for name in clear {
        let c = cf(db, name)?;
        let mut it = db.raw_iterator_cf(c);
        it.seek_to_last();
        if let Some(last) = it.key() {
            let mut end = last.to_vec();
            end.push(0);
            batch.delete_range_cf(c, Vec::<u8>::new(), end);
        }
        it.status().map_err(io_err)?;
    }
    while let Some((i, k, v)) = reader.next_record()? {
        batch.put_cf(targets[i as usize], k, v);
    }
    let applied = pb::AppliedState {
        last_applied: codec::opt_log_id_to_pb(&meta.last_log_id),
        membership: Some(codec::stored_membership_to_pb(&meta.last_membership)),
    };
    batch.put_cf(
        cf(db, keys::SM_META_CF)?,
        keys::APPLIED_KEY,
        applied.encode_to_vec(),
    );
    let mut wo = WriteOptions::default();
    wo.set_sync(true);
    db.write_opt(batch, &wo).map_err(io_err)
}
