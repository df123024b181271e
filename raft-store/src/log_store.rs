//! The Raft log on RocksDB, with group commit.
//!
//! `append` writes its entries in one batch without waiting for the disk, so
//! they are readable at once, and hands the completion callback to a flusher
//! thread. The flusher takes every callback queued so far, fsyncs the WAL once
//! (`FlushWAL(sync)`, which covers every earlier write, since the database has
//! one WAL), records the durable sequence number and only then fires the
//! callbacks. Many appends share one fsync; none is acknowledged early.
//! `save_vote` and `truncate_after` write with `sync = true` and return after
//! the disk has them.
//!
//! The newest appended entries are also kept in memory (`EntryCache`, at most
//! `CACHE_MAX_ENTRIES` entries and `CACHE_MAX_BYTES` encoded bytes): openraft
//! reads every entry back soon after appending it, to replicate it and to
//! apply it, and those reads are served without an iterator, a seek and a
//! decode. The cache always holds a contiguous run ending at the last entry
//! of the log; appends fill it after the database has the entries, and
//! truncation and purging empty it before the database drops them, so it
//! never holds an entry the log does not.

use std::collections::VecDeque;
use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use om_proto::raft as pb;
use openraft::OptionalSend;
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use prost::Message;
use rocksdb::{DB, ReadOptions, WriteBatch, WriteOptions};

use crate::codec;
use crate::keys::{self, LOG_CF, RAFT_META_CF};
use crate::{Entry, LogId, TypeConfig, Vote, io_err};

struct Pending {
    written_seq: u64,
    callback: IOFlushed<TypeConfig>,
}

struct Shared {
    db: Arc<DB>,
    /// Highest RocksDB sequence number known to be fsynced.
    durable_seq: AtomicU64,
    fsyncs: AtomicU64,
    cache: Mutex<EntryCache>,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    /// Encoded bytes of every entry appended since the store was opened.
    appended_bytes: AtomicU64,
}

/// Most entries the in-memory tail of the log holds.
pub const CACHE_MAX_ENTRIES: usize = 4096;
/// Most encoded bytes the in-memory tail of the log holds (one entry larger
/// than this is not cached). A cached entry holds its command decoded and
/// encoded, a few times its encoded size (PutKeys' many small strings): at 16 MiB a 1M-key bulk load left each
/// node ~90 MiB larger. Openraft reads entries back within milliseconds of
/// appending them, so a small tail serves nearly every read.
pub const CACHE_MAX_BYTES: usize = 2 << 20;

/// A contiguous run of the newest log entries with their encoded sizes.
#[derive(Default)]
struct EntryCache {
    entries: VecDeque<(Entry, usize)>,
    bytes: usize,
}

impl EntryCache {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.log_id.index)
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    /// Adds an entry just written to the log. An entry that does not follow
    /// the cached run (the first append after a restart, a snapshot or a
    /// truncation) starts a new run.
    fn push(&mut self, entry: Entry, size: usize) {
        let follows = self
            .entries
            .back()
            .is_some_and(|(e, _)| e.log_id.index.checked_add(1) == Some(entry.log_id.index));
        // An entry too large to keep ends the run: the run must always end
        // at the log's last entry.
        if !follows || size > CACHE_MAX_BYTES {
            self.clear();
        }
        if size > CACHE_MAX_BYTES {
            return;
        }
        self.bytes += size;
        self.entries.push_back((entry, size));
        while self.entries.len() > CACHE_MAX_ENTRIES || self.bytes > CACHE_MAX_BYTES {
            if let Some((_, s)) = self.entries.pop_front() {
                self.bytes -= s;
            }
        }
    }

    /// Drops every entry at or after `from`.
    fn truncate_from(&mut self, from: u64) {
        while let Some((e, s)) = self.entries.back() {
            if e.log_id.index < from {
                break;
            }
            self.bytes -= *s;
            self.entries.pop_back();
        }
    }

    /// Drops every entry at or before `upto`.
    fn purge_upto(&mut self, upto: u64) {
        while let Some((e, s)) = self.entries.front() {
            if e.log_id.index > upto {
                break;
            }
            self.bytes -= *s;
            self.entries.pop_front();
        }
    }

    /// The entries `[start, end)` (`end` None: to the end of the log), if
    /// the run holds all of them. The run always ends at the log's last
    /// entry, so an unbounded range is covered once its start is.
    fn get(&self, start: u64, end: Option<u64>) -> Option<Vec<Entry>> {
        let first = self.first_index()?;
        let last = self.entries.back()?.0.log_id.index;
        if start < first || end.is_some_and(|e| e > last + 1) {
            return None;
        }
        let end = end.unwrap_or(last + 1).max(start);
        let from = usize::try_from(start - first).ok()?;
        let to = usize::try_from(end - first).ok()?.min(self.entries.len());
        Some(
            self.entries
                .range(from.min(to)..to)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }
}

/// The flusher thread's handle; dropping the last one stops and joins the
/// thread, so the database is released when the log store is.
struct Flusher {
    tx: Option<mpsc::Sender<Pending>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
    flusher: Arc<Flusher>,
}

impl LogStore {
    pub(crate) fn new(
        db: Arc<DB>,
        hold_flush_while: Option<std::path::PathBuf>,
    ) -> std::io::Result<LogStore> {
        let shared = Arc::new(Shared {
            durable_seq: AtomicU64::new(db.latest_sequence_number()),
            fsyncs: AtomicU64::new(0),
            cache: Mutex::new(EntryCache::default()),
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
            appended_bytes: AtomicU64::new(0),
            db,
        });
        let (tx, rx) = mpsc::channel::<Pending>();
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("om-wal-sync".to_string())
            .spawn(move || flusher(s, rx, hold_flush_while))?;
        Ok(LogStore {
            shared,
            flusher: Arc::new(Flusher {
                tx: Some(tx),
                thread: Some(thread),
            }),
        })
    }

    fn db(&self) -> &DB {
        &self.shared.db
    }

    /// Highest database sequence number known to be on disk.
    pub fn durable_sequence(&self) -> u64 {
        self.shared.durable_seq.load(Ordering::Acquire)
    }

    /// WAL fsyncs performed for log appends so far.
    pub fn fsync_count(&self) -> u64 {
        self.shared.fsyncs.load(Ordering::Relaxed)
    }

    /// Reads of log entries served from the in-memory tail, and reads that
    /// went to RocksDB.
    pub fn cache_reads(&self) -> (u64, u64) {
        (
            self.shared.cache_hits.load(Ordering::Relaxed),
            self.shared.cache_misses.load(Ordering::Relaxed),
        )
    }

    /// Encoded bytes of the entries appended since the store was opened
    /// (the snapshot policy weighs the log written since a snapshot).
    pub fn appended_bytes(&self) -> u64 {
        self.shared.appended_bytes.load(Ordering::Relaxed)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, EntryCache> {
        // The cache holds no invariant a panicking holder could break
        // half-way that a reader would trust: recover it, emptied.
        self.shared.cache.lock().unwrap_or_else(|poisoned| {
            let mut c = poisoned.into_inner();
            c.clear();
            c
        })
    }

    fn cf(&self, name: &str) -> std::io::Result<&rocksdb::ColumnFamily> {
        self.db()
            .cf_handle(name)
            .ok_or_else(|| io_err(format!("column family {name} missing")))
    }

    fn get_meta<M: Message + Default>(&self, key: &[u8]) -> std::io::Result<Option<M>> {
        match self
            .db()
            .get_pinned_cf(self.cf(RAFT_META_CF)?, key)
            .map_err(io_err)?
        {
            Some(b) => Ok(Some(M::decode(b.as_ref()).map_err(io_err)?)),
            None => Ok(None),
        }
    }

    fn last_purged(&self) -> std::io::Result<Option<LogId>> {
        Ok(self
            .get_meta::<pb::LogId>(keys::LAST_PURGED_KEY)?
            .map(|l| codec::log_id_from_pb(&l)))
    }

    fn sync_write(&self, batch: WriteBatch) -> std::io::Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        self.db().write_opt(batch, &wo).map_err(io_err)
    }

    fn read_range(&self, start: u64, end: Option<u64>) -> std::io::Result<Vec<Entry>> {
        if let Some(entries) = self.cache().get(start, end) {
            self.shared.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(entries);
        }
        self.shared.cache_misses.fetch_add(1, Ordering::Relaxed);
        let mut ro = ReadOptions::default();
        ro.set_iterate_lower_bound(keys::log_key(start).to_vec());
        if let Some(e) = end {
            ro.set_iterate_upper_bound(keys::log_key(e).to_vec());
        }
        let mut it = self.db().raw_iterator_cf_opt(self.cf(LOG_CF)?, ro);
        it.seek(keys::log_key(start));
        let mut out = Vec::new();
        while it.valid() {
            let v = it
                .value()
                .ok_or_else(|| io_err("log iterator lost its value"))?;
            out.push(codec::decode_entry(v)?);
            it.next();
        }
        it.status().map_err(io_err)?;
        Ok(out)
    }
}

/// The log id of the last entry the log holds (none when it is empty).
pub(crate) fn last_entry_id(db: &DB) -> std::io::Result<Option<LogId>> {
    let cf = db
        .cf_handle(LOG_CF)
        .ok_or_else(|| io_err(format!("column family {LOG_CF} missing")))?;
    let mut it = db.raw_iterator_cf(cf);
    it.seek_to_last();
    if it.valid() {
        let v = it
            .value()
            .ok_or_else(|| io_err("log iterator lost its value"))?;
        return Ok(Some(codec::decode_entry(v)?.log_id));
    }
    it.status().map_err(io_err)?;
    Ok(None)
}

fn flusher(
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Pending>,
    hold_while: Option<std::path::PathBuf>,
) {
    while let Ok(first) = rx.recv() {
        // Test-only fault: appends stay in RocksDB's WAL buffer while the
        // file exists (see `StoreOptions::hold_wal_flush_while`).
        if let Some(path) = &hold_while {
            while path.exists() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let target = shared.db.latest_sequence_number();
        let started = std::time::Instant::now();
        let result = shared.db.flush_wal(true);
        match result {
            Ok(()) => {
                shared.durable_seq.fetch_max(target, Ordering::AcqRel);
                shared.fsyncs.fetch_add(1, Ordering::Relaxed);
                crate::metrics::log_fsync(batch.len(), started.elapsed().as_secs_f64());
                for p in batch {
                    debug_assert!(p.written_seq <= target);
                    p.callback.io_completed(Ok(()));
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "WAL fsync failed");
                for p in batch {
                    p.callback.io_completed(Err(io_err(&e)));
                }
            }
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, std::io::Error> {
        let start = match range.start_bound() {
            Bound::Included(s) => *s,
            Bound::Excluded(s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(e) => e.checked_add(1),
            Bound::Excluded(e) => Some(*e),
            Bound::Unbounded => None,
        };
        if end.is_some_and(|e| e <= start) {
            return Ok(Vec::new());
        }
        self.read_range(start, end)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, std::io::Error> {
        Ok(self
            .get_meta::<pb::Vote>(keys::VOTE_KEY)?
            .map(|v| codec::vote_from_pb(&v)))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, std::io::Error> {
        let last_purged = self.last_purged()?;
        let last = last_entry_id(self.db())?;
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last.or(last_purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), std::io::Error> {
        let mut b = WriteBatch::default();
        b.put_cf(
            self.cf(RAFT_META_CF)?,
            keys::VOTE_KEY,
            codec::vote_to_pb(vote).encode_to_vec(),
        );
        self.sync_write(b)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), std::io::Error> {
        let cf = self.cf(RAFT_META_CF)?;
        let mut b = WriteBatch::default();
        match committed {
            Some(c) => b.put_cf(
                cf,
                keys::COMMITTED_KEY,
                codec::log_id_to_pb(&c).encode_to_vec(),
            ),
            None => b.delete_cf(cf, keys::COMMITTED_KEY),
        }
        // Not synced: a lost commit index is re-learned from the leader, and
        // the WAL keeps it ordered before any later synced write.
        self.db().write(b).map_err(io_err)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, std::io::Error> {
        Ok(self
            .get_meta::<pb::LogId>(keys::COMMITTED_KEY)?
            .map(|l| codec::log_id_from_pb(&l)))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), std::io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let cf = self.cf(LOG_CF)?;
        let mut b = WriteBatch::default();
        let mut written = Vec::new();
        for e in entries {
            let bytes = codec::encode_entry(&e);
            b.put_cf(cf, keys::log_key(e.log_id.index), &bytes);
            written.push((e, bytes.len()));
        }
        if let Err(e) = self.db().write(b) {
            // What the failed batch replaced is unknown: forget the tail.
            self.cache().clear();
            return Err(io_err(e));
        }
        let bytes: usize = written.iter().map(|(_, size)| size).sum();
        self.shared
            .appended_bytes
            .fetch_add(bytes as u64, Ordering::Relaxed);
        {
            let mut cache = self.cache();
            for (e, size) in written {
                cache.push(e, size);
            }
        }
        let written_seq = self.db().latest_sequence_number();
        self.flusher
            .tx
            .as_ref()
            .ok_or_else(|| io_err("WAL flusher stopped"))?
            .send(Pending {
                written_seq,
                callback,
            })
            .map_err(|_| io_err("WAL flusher stopped"))?;
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), std::io::Error> {
        let from = last_log_id.map_or(0, |l| l.index + 1);
        self.cache().truncate_from(from);
        let mut b = WriteBatch::default();
        b.delete_range_cf(
            self.cf(LOG_CF)?,
            &keys::log_key(from)[..],
            &keys::LOG_END[..],
        );
        self.sync_write(b)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), std::io::Error> {
        self.cache().purge_upto(log_id.index);
        let mut b = WriteBatch::default();
        b.put_cf(
            self.cf(RAFT_META_CF)?,
            keys::LAST_PURGED_KEY,
            codec::log_id_to_pb(&log_id).encode_to_vec(),
        );
        b.delete_range_cf(
            self.cf(LOG_CF)?,
            keys::log_key(0).to_vec(),
            keys::log_end_after(log_id.index),
        );
        // One batch: the purge mark and the deletion land together or not at all.
        self.db().write(b).map_err(io_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::EntryPayload;
    use openraft::vote::leader_id_adv::LeaderId;

    fn entry(index: u64) -> Entry {
        Entry {
            log_id: LogId::new(
                LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index,
            ),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(v: Option<Vec<Entry>>) -> Option<Vec<u64>> {
        v.map(|v| v.iter().map(|e| e.log_id.index).collect())
    }

    #[test]
    fn the_tail_is_bounded_by_entries_and_bytes() {
        let mut c = EntryCache::default();
        for i in 1..=(CACHE_MAX_ENTRIES as u64 + 10) {
            c.push(entry(i), 100);
        }
        assert_eq!(c.entries.len(), CACHE_MAX_ENTRIES);
        assert_eq!(c.first_index(), Some(11));
        assert_eq!(c.bytes, 100 * CACHE_MAX_ENTRIES);
        assert_eq!(indexes(c.get(10, Some(12))), None, "evicted");
        assert_eq!(indexes(c.get(11, Some(13))), Some(vec![11, 12]));

        // Bytes: a few large entries push the old ones out.
        c.push(entry(CACHE_MAX_ENTRIES as u64 + 11), CACHE_MAX_BYTES / 2);
        c.push(entry(CACHE_MAX_ENTRIES as u64 + 12), CACHE_MAX_BYTES / 2);
        assert!(c.bytes <= CACHE_MAX_BYTES);
        assert_eq!(c.entries.len(), 2);
        // One entry over the limit is not kept, and ends the run.
        c.push(entry(CACHE_MAX_ENTRIES as u64 + 13), CACHE_MAX_BYTES + 1);
        assert!(c.entries.is_empty());
        assert_eq!(c.bytes, 0);
        assert_eq!(indexes(c.get(1, None)), None);
    }

    #[test]
    fn ranges_are_served_only_when_wholly_held() {
        let mut c = EntryCache::default();
        for i in 5..=9 {
            c.push(entry(i), 10);
        }
        assert_eq!(indexes(c.get(5, None)), Some(vec![5, 6, 7, 8, 9]));
        assert_eq!(indexes(c.get(7, Some(10))), Some(vec![7, 8, 9]));
        assert_eq!(indexes(c.get(9, Some(9))), Some(vec![]));
        assert_eq!(indexes(c.get(4, Some(6))), None, "starts before the run");
        assert_eq!(indexes(c.get(8, Some(11))), None, "ends past the log");
        c.truncate_from(8);
        assert_eq!(indexes(c.get(5, None)), Some(vec![5, 6, 7]));
        c.purge_upto(6);
        assert_eq!(indexes(c.get(7, None)), Some(vec![7]));
        assert_eq!(c.bytes, 10);
        // A gap starts a new run.
        c.push(entry(20), 10);
        assert_eq!(indexes(c.get(20, None)), Some(vec![20]));
        assert_eq!(indexes(c.get(7, None)), None);
    }
}
