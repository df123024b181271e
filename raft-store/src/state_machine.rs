//! The Raft state machine on RocksDB.
//!
//! Committed entries are applied in runs (`overlay`, and ARCHITECTURE.md,
//! "Applying in runs"): each run is one atomic write batch holding the
//! application's writes of every entry in it and the new `AppliedState`
//! (the run's last log id, membership and state digest), so the data and
//! the applied index can never disagree after a crash. Apply batches are
//! not fsynced: every entry applied was first fsynced in the log, and the
//! database has one WAL, so a crash loses at most applied state that is
//! re-applied from the log on restart. The membership half of the applied
//! state changes only with a membership entry or a snapshot, so it is kept
//! encoded between entries (`AppliedMembership`) instead of being read back
//! and re-encoded for each one.
//!
//! Snapshots are files in `snapshots/`, owned by `snapshot_store` (format in
//! `snapshot`). Building reads a RocksDB snapshot on a blocking thread, so
//! writes go on meanwhile. Installing stages and verifies a copy of the file,
//! publishes it, then replaces every state column family by ingesting SST
//! files written from it, with the applied state written last, so memory
//! stays bounded at any state size and a crash leaves the old state or the
//! new one (see `snapshot_store`).

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::{Stream, TryStreamExt};
use om_proto::raft as pb;
use om_proto::store::CommandResult;
use openraft::Snapshot;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::type_config::alias::SnapshotOf;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use prost::Message;
use rocksdb::{DB, WriteBatch};

use crate::digest::{self, ApplyFaults, Contribution, Digest, Digests};
use crate::hot::HotRecords;
use crate::overlay::{ApplyView, EntryWrites, Overlay, Tables};
use crate::pins::Pins;
use crate::snapshot_store::{
    SnapshotFaults, SnapshotStats, SnapshotStore, cf, read_applied, read_digest,
};
use crate::{
    Applier, LogId, Position, SnapshotMeta, StoredMembership, TypeConfig, codec, io_err, keys,
};

#[derive(Clone)]
pub struct StateMachine {
    snapshots: Arc<SnapshotStore>,
    applier: Arc<dyn Applier>,
    /// Held by every clone; a snapshot build retrying a transient error stops
    /// once the last clone (openraft's) is gone.
    alive: Arc<()>,
    /// The stored membership and state digest as of the last entry applied
    /// through this value (openraft's, which alone applies and installs);
    /// `None` until the first apply and after an install, which replaces
    /// them on disk.
    tail: Option<AppliedTail>,
    /// The state digests this replica can answer for.
    digests: Digests,
    faults: Arc<ApplyFaults>,
    /// States pinned at verification entries (`pins`).
    pins: Arc<Pins>,
    /// Where applied entries are archived (`--archive-log`), if anywhere.
    archive: Option<Arc<crate::archive::LogArchive>>,
    /// The tables apply writes.
    tables: Arc<Tables>,
    /// Records almost every write reads, equal to the store's (`hot`).
    hot: Arc<HotRecords>,
}

/// Most entries one run applies in one write batch.
pub const MAX_RUN_ENTRIES: usize = 1024;

/// Bytes of staged keys and values past which a run is written.
pub const MAX_RUN_BYTES: usize = 16 << 20;

/// Entries applied but not yet written: the overlay of their writes and
/// what each reports once the run is written.
struct Run {
    overlay: Overlay,
    pending: Vec<Pending>,
}

impl Run {
    fn new(tables: &Tables) -> Run {
        Run {
            overlay: Overlay::new(tables),
            pending: Vec::new(),
        }
    }
}

struct Pending {
    entry: crate::Entry,
    result: CommandResult,
    /// The state digest after this entry.
    digest: Digest,
    /// Whether the state is pinned right after this entry.
    pins: bool,
    staged_secs: f64,
}

/// What every applied entry's record repeats from the one before.
#[derive(Clone)]
struct AppliedTail {
    membership: AppliedMembership,
    digest: Digest,
}

/// The membership of the applied state, encoded.
#[derive(Clone)]
struct AppliedMembership {
    /// `AppliedState { membership, .. }` encoded without `last_applied`:
    /// field 2 of the record alone. Protobuf fields concatenate and prost
    /// writes them in field-number order, so the encoded `last_applied`
    /// followed by these bytes is exactly the whole record's encoding
    /// (`applied_state_bytes`; replicas store identical bytes).
    encoded: Vec<u8>,
}

impl AppliedMembership {
    fn new(membership: &StoredMembership) -> AppliedMembership {
        let encoded = pb::AppliedState {
            membership: Some(codec::stored_membership_to_pb(membership)),
            ..Default::default()
        }
        .encode_to_vec();
        AppliedMembership { encoded }
    }

    /// The `AppliedState` record of `last` with this membership and the
    /// state digest `digest` (field 3, after the membership's field 2).
    fn applied_state_bytes(&self, last: &LogId, digest: &Digest) -> std::io::Result<Vec<u8>> {
        let head = pb::AppliedState {
            last_applied: Some(codec::log_id_to_pb(last)),
            ..Default::default()
        };
        let tail = pb::AppliedState {
            state_digest: digest.to_vec(),
            ..Default::default()
        };
        let mut out =
            Vec::with_capacity(head.encoded_len() + self.encoded.len() + tail.encoded_len());
        head.encode(&mut out).map_err(io_err)?;
        out.extend_from_slice(&self.encoded);
        tail.encode(&mut out).map_err(io_err)?;
        Ok(out)
    }
}

pub struct SnapshotBuilder {
    snapshots: Arc<SnapshotStore>,
    alive: std::sync::Weak<()>,
}

/// What the Raft gRPC service needs to receive a snapshot for this state
/// machine: where to stage it, the tables it may name, the staging limits.
#[derive(Clone)]
pub struct SnapshotInbox {
    pub(crate) snapshots: Arc<SnapshotStore>,
}

impl StateMachine {
    pub(crate) fn new(
        db: Arc<DB>,
        snap_dir: PathBuf,
        tables: Vec<String>,
        applier: Arc<dyn Applier>,
    ) -> std::io::Result<StateMachine> {
        let table_set = Tables::new(&db, &tables)?;
        let hot = Arc::new(HotRecords::new(
            (0..table_set.len())
                .map(|t| applier.hot_tables().contains(&table_set.name(t)))
                .collect(),
        ));
        Ok(StateMachine {
            tables: Arc::new(table_set),
            hot,
            digests: Digests::new(db.clone()),
            pins: Arc::new(Pins::new(tables.clone())),
            snapshots: Arc::new(SnapshotStore::open(db, snap_dir, tables)?),
            applier,
            alive: Arc::new(()),
            tail: None,
            faults: Arc::default(),
            archive: None,
        })
    }

    /// Archives every entry applied from now on into `archive`.
    pub(crate) fn archive_to(&mut self, archive: Arc<crate::archive::LogArchive>) {
        self.archive = Some(archive);
    }

    /// Applies `entry` outside Raft, as if it came next in the log: for a
    /// restore replaying archived entries on a store no Raft runs on.
    pub fn replay_one(&mut self, entry: &crate::Entry) -> std::io::Result<()> {
        let mut tail = match self.tail.take() {
            Some(t) => t,
            None => self.read_tail()?,
        };
        let mut run = Run::new(&self.tables);
        self.stage(&mut run, entry.clone(), &mut tail)?;
        self.write_run(&mut run, &tail)?;
        self.tail = Some(tail);
        Ok(())
    }

    /// The states pinned for verification (`pins`).
    pub fn pins(&self) -> Arc<Pins> {
        self.pins.clone()
    }

    /// The state digests this replica can answer for (`digest`).
    pub fn digests(&self) -> Digests {
        self.digests.clone()
    }

    /// The cache of records almost every write reads (`hot`).
    pub fn hot_records(&self) -> Arc<HotRecords> {
        self.hot.clone()
    }

    /// Every record the cache of hot records keeps, by table name.
    pub fn hot_record_list(&self) -> Vec<(String, Vec<u8>, Vec<u8>)> {
        self.hot
            .records()
            .into_iter()
            .map(|(t, k, v)| (self.tables.name(t).to_string(), k, v))
            .collect()
    }

    /// Fault injection for apply (tests of divergence detection only).
    pub fn apply_faults(&self) -> Arc<ApplyFaults> {
        self.faults.clone()
    }

    /// Fault injection for the snapshot paths (tests only).
    pub fn snapshot_faults(&self) -> Arc<SnapshotFaults> {
        self.snapshots.faults.clone()
    }

    /// Counters of the snapshot paths.
    pub fn snapshot_stats(&self) -> Arc<SnapshotStats> {
        self.snapshots.stats.clone()
    }

    /// Lowers the size limit of one incoming snapshot (tests of the limit;
    /// production nodes keep `MAX_SNAPSHOT_BYTES`).
    pub fn limit_incoming_snapshots(&self, bytes: u64) {
        self.snapshots
            .max_incoming_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes installs start a new SST file every `bytes` of records (tests
    /// use this to cover multi-file column families with small states).
    pub fn limit_ingest_file_bytes(&self, bytes: u64) {
        self.snapshots
            .ingest_file_bytes
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Makes installs write the whole state in one write batch (the old
    /// path, for side-by-side measurements only).
    pub(crate) fn install_in_one_batch(&self) {
        self.snapshots
            .batch_install
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Marks openraft's start-up (`Raft::new`): while set, reading the
    /// current snapshot trusts a file that matches its `PublishedSnapshot`
    /// record instead of verifying it whole (openraft reads it twice at start
    /// for its meta; a full read would make start-up grow with the state).
    /// Reads to send a snapshot come later and always verify.
    pub fn set_starting(&self, starting: bool) {
        self.snapshots
            .starting
            .store(starting, std::sync::atomic::Ordering::Relaxed);
    }

    /// The receiving side of snapshot transfers for this state machine.
    pub fn snapshot_inbox(&self) -> SnapshotInbox {
        SnapshotInbox {
            snapshots: self.snapshots.clone(),
        }
    }

    pub fn db(&self) -> &Arc<DB> {
        &self.snapshots.db
    }

    /// Whether a published snapshot (`current.snap`) exists.
    pub fn has_snapshot(&self) -> bool {
        self.snapshots.current_path().exists()
    }

    /// The size of the published snapshot file, if there is one.
    pub fn snapshot_bytes(&self) -> Option<u64> {
        std::fs::metadata(self.snapshots.current_path())
            .ok()
            .map(|m| m.len())
    }

    /// The last applied log id and membership, as stored.
    pub fn read_applied(&self) -> std::io::Result<(Option<LogId>, StoredMembership)> {
        read_applied(&self.snapshots.db, None)
    }

    /// The membership and digest of the stored applied state.
    fn read_tail(&self) -> std::io::Result<AppliedTail> {
        Ok(AppliedTail {
            membership: AppliedMembership::new(&self.read_applied()?.1),
            digest: read_digest(&self.snapshots.db, None)?,
        })
    }

    /// Applies `entry` into `run`: its writes join the run's overlay, its
    /// result and digest wait in `run.pending` until the run is written.
    fn stage(
        &self,
        run: &mut Run,
        entry: crate::Entry,
        tail: &mut AppliedTail,
    ) -> std::io::Result<()> {
        let started = Instant::now();
        let db = &self.snapshots.db;
        let index = entry.log_id.index;
        if let EntryPayload::Normal(cmd) = &entry.payload
            && !cmd.command().batch.is_empty()
        {
            return self.stage_batch(run, entry, tail, started);
        }
        let mut writes = EntryWrites::new(&self.tables);
        let result = match &entry.payload {
            EntryPayload::Blank => CommandResult::default(),
            EntryPayload::Normal(cmd) => {
                let view = ApplyView::new(db, &self.tables, &run.overlay).with_hot(&self.hot);
                let r = self
                    .applier
                    .apply(&view, &mut writes, Position::entry(index), cmd.command())
                    .map_err(io_err)?;
                self.perturb(&mut writes, index)?;
                r
            }
            EntryPayload::Membership(m) => {
                tail.membership =
                    AppliedMembership::new(&StoredMembership::new(Some(entry.log_id), m.clone()));
                CommandResult::default()
            }
        };
        let what = match &entry.payload {
            EntryPayload::Blank => Contribution::Blank,
            EntryPayload::Normal(_) => Contribution::Writes(writes.data()),
            EntryPayload::Membership(_) => Contribution::Membership(&tail.membership.encoded),
        };
        let next = digest::next(&tail.digest, &entry.log_id, what);
        run.overlay.absorb(writes)?;
        tail.digest = next;
        let pins = matches!(&entry.payload, EntryPayload::Normal(cmd) if self.applier.pins_state(cmd.command()));
        run.pending.push(Pending {
            entry,
            result,
            digest: next,
            pins,
            staged_secs: started.elapsed().as_secs_f64(),
        });
        Ok(())
    }

    /// Applies a batch entry (`Command.batch`) into `run`: each write in
    /// order, its writes joining the overlay before the next is applied (so
    /// it reads them as it would from an entry of its own), and one digest
    /// step over all of them. The entry's result holds one per write.
    fn stage_batch(
        &self,
        run: &mut Run,
        entry: crate::Entry,
        tail: &mut AppliedTail,
        started: Instant,
    ) -> std::io::Result<()> {
        let db = &self.snapshots.db;
        let index = entry.log_id.index;
        let EntryPayload::Normal(cmd) = &entry.payload else {
            return Err(io_err("a batch entry is a normal entry"));
        };
        let mut digest = digest::BatchDigest::new(&tail.digest, &entry.log_id);
        let mut results = Vec::with_capacity(cmd.command().batch.len());
        for (slot, write) in cmd.command().batch.iter().enumerate() {
            let mut writes = EntryWrites::new(&self.tables);
            let view = ApplyView::new(db, &self.tables, &run.overlay).with_hot(&self.hot);
            let at = Position {
                index,
                slot: Some(slot as u32),
            };
            results.push(
                self.applier
                    .apply(&view, &mut writes, at, write)
                    .map_err(io_err)?,
            );
            if slot == 0 {
                self.perturb(&mut writes, index)?;
            }
            digest.write(writes.data());
            run.overlay.absorb(writes)?;
        }
        tail.digest = digest.finish();
        run.pending.push(Pending {
            entry,
            result: CommandResult {
                batch: results,
                ..Default::default()
            },
            digest: tail.digest,
            pins: false,
            staged_secs: started.elapsed().as_secs_f64(),
        });
        Ok(())
    }

    /// Whether `run` must be written before another entry joins it: it is
    /// long or large enough, or its last entry pins the state (a pin reads
    /// the database right after that entry).
    fn run_full(run: &Run) -> bool {
        run.pending.len() >= MAX_RUN_ENTRIES
            || run.overlay.bytes() >= MAX_RUN_BYTES
            || run.pending.last().is_some_and(|p| p.pins)
    }

    /// Sends each written entry's result to its client, if one waits.
    fn answer(
        &self,
        written: Vec<(crate::Entry, CommandResult)>,
        responders: &mut Vec<Option<openraft::storage::ApplyResponder<TypeConfig>>>,
    ) {
        for ((_, result), responder) in written.into_iter().zip(responders.drain(..)) {
            if let Some(r) = responder {
                r.send(result);
            }
        }
    }

    /// Writes `run` as one batch with the applied state of its last entry,
    /// then reports each entry (pins, digests, archive) in log order. The
    /// results are returned in the same order, for the caller to answer.
    fn write_run(
        &self,
        run: &mut Run,
        tail: &AppliedTail,
    ) -> std::io::Result<Vec<(crate::Entry, CommandResult)>> {
        let Some(last) = run.pending.last().map(|p| p.entry.log_id) else {
            return Ok(Vec::new());
        };
        let started = Instant::now();
        let db = &self.snapshots.db;
        let mut batch = WriteBatch::default();
        for t in 0..self.tables.len() {
            if run.overlay.touched(t) {
                let points = run.overlay.points(t, &[], None);
                self.hot.write_through(t, run.overlay.has_ranges(t), points);
            }
        }
        run.overlay.drain_into(db, &self.tables, &mut batch);
        let meta = cf(db, keys::SM_META_CF)?;
        for p in &run.pending {
            let index = p.entry.log_id.index;
            if index.is_multiple_of(digest::CHECKPOINT_EVERY) {
                batch.put_cf(meta, digest::checkpoint_key(index), p.digest);
                let span = digest::CHECKPOINT_EVERY * digest::CHECKPOINTS_KEPT;
                if let Some(old) = index.checked_sub(span) {
                    batch.delete_cf(meta, digest::checkpoint_key(old));
                }
            }
        }
        batch.put_cf(
            meta,
            keys::APPLIED_KEY,
            tail.membership.applied_state_bytes(&last, &tail.digest)?,
        );
        if let Err(e) = db.write(batch) {
            // The cache took the run's writes in; the store did not.
            self.hot.clear();
            return Err(io_err(e));
        }
        let share = started.elapsed().as_secs_f64() / run.pending.len() as f64;
        crate::metrics::applied_run(run.pending.len());
        let mut out = Vec::with_capacity(run.pending.len());
        for p in run.pending.drain(..) {
            let index = p.entry.log_id.index;
            if p.pins {
                self.pins.pin(db, index);
            }
            self.pins.note_applied(index);
            self.digests.push(index, p.digest);
            if let Some(a) = &self.archive {
                a.push(&p.entry)?;
            }
            crate::metrics::applied(p.staged_secs + share);
            out.push((p.entry, p.result));
        }
        Ok(out)
    }

    /// Test-only fault: one extra record in this replica's batch.
    fn perturb(&self, batch: &mut EntryWrites<'_>, index: u64) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        let left = self.faults.perturb.load(Ordering::Relaxed);
        if left == 0 {
            return Ok(());
        }
        self.faults.perturb.store(left - 1, Ordering::Relaxed);
        let table = self
            .snapshots
            .tables
            .first()
            .ok_or_else(|| io_err("no table to perturb"))?;
        batch.put_cf(
            cf(&self.snapshots.db, table)?,
            b"\xffperturbed",
            index.to_be_bytes(),
        );
        tracing::warn!(index, "apply perturbed on this replica (test fault)");
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = File;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, File>, std::io::Error> {
        let started = Instant::now();
        let (meta, file, bytes) = self.snapshots.build(&self.alive).await?;
        crate::metrics::snapshot_built(started.elapsed().as_secs_f64(), bytes);
        tracing::info!(last = ?meta.last_log_id, bytes, "snapshot built");
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
        // Taken for the call: an error leaves `None`, so the next call
        // reads the membership and digest back from the store.
        let mut tail = match self.tail.take() {
            Some(t) => t,
            None => self.read_tail()?,
        };
        // Entries are applied in runs (`overlay`): each run is one write
        // batch, and its clients are answered once it is written.
        let mut run = Run::new(&self.tables);
        let mut responders = Vec::new();
        while let Some((entry, responder)) = entries.try_next().await? {
            self.stage(&mut run, entry, &mut tail)?;
            responders.push(responder);
            if Self::run_full(&run) {
                self.answer(self.write_run(&mut run, &tail)?, &mut responders);
            }
        }
        self.answer(self.write_run(&mut run, &tail)?, &mut responders);
        self.tail = Some(tail);
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            snapshots: self.snapshots.clone(),
            alive: Arc::downgrade(&self.alive),
        }
    }

    /// The file was verified by the receiver before openraft got it; it is
    /// verified again as it is staged. See `snapshot_store` for the order of
    /// publishing and committing, and for what an error here means.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: File,
    ) -> Result<(), std::io::Error> {
        let started = Instant::now();
        // The install writes the snapshot's membership and digest.
        self.tail = None;
        self.digests.clear();
        // Cleared before and after: the install replaces every table, and
        // a failed one may have replaced some.
        self.hot.clear();
        let installed = self.snapshots.install(meta, snapshot).await;
        self.hot.clear();
        installed?;
        crate::metrics::snapshot_installed(started.elapsed().as_secs_f64());
        tracing::info!(last = ?meta.last_log_id, "snapshot installed");
        Ok(())
    }

    /// Only a verified file is returned; a corrupt one is replaced by a new
    /// build first, so no follower is sent a file it would refuse.
    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, File>>, std::io::Error> {
        let alive = Arc::downgrade(&self.alive);
        Ok(self
            .snapshots
            .current(&alive)
            .await?
            .map(|(meta, snapshot)| Snapshot { meta, snapshot }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use openraft::vote::leader_id_adv::LeaderId;

    use super::*;
    use crate::{Membership, OmNode};

    /// The record written for each entry is byte for byte the encoding of
    /// the whole `AppliedState`, for an empty and a three-voter membership
    /// and log ids from the first to the largest.
    #[test]
    fn applied_state_bytes_are_the_whole_records_encoding() {
        let nodes: BTreeMap<u64, OmNode> = (1..=3)
            .map(|id| {
                (
                    id,
                    OmNode {
                        raft_addr: format!("raft-{id}:9872"),
                        grpc_addr: format!("om-{id}:9862"),
                    },
                )
            })
            .collect();
        let three = Membership::new(vec![(1..=3).collect()], nodes).unwrap();
        let log_id = |term, index| LogId::new(LeaderId { term, node_id: 2 }, index);
        for m in [
            StoredMembership::default(),
            StoredMembership::new(Some(log_id(3, 17)), three),
        ] {
            let cached = AppliedMembership::new(&m);
            for last in [log_id(0, 0), log_id(3, 300), log_id(u64::MAX, u64::MAX)] {
                let digest = [last.index as u8; 32];
                let whole = pb::AppliedState {
                    last_applied: Some(codec::log_id_to_pb(&last)),
                    membership: Some(codec::stored_membership_to_pb(&m)),
                    state_digest: digest.to_vec(),
                };
                let bytes = cached.applied_state_bytes(&last, &digest).unwrap();
                assert_eq!(bytes, whole.encode_to_vec());
                assert_eq!(pb::AppliedState::decode(&*bytes).unwrap(), whole);
            }
        }
    }
}
