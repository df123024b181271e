//! The `snapshots/` directory: the current snapshot, staging files, and the
//! build, read and install procedures over them.
//!
//! - `current.snap` is the one snapshot openraft knows. It is replaced only by
//!   renaming a complete, fsynced file over it, followed by a directory fsync.
//! - Before it is handed to openraft to send to a follower, `current.snap` is
//!   verified end to end. A corrupt file is moved to `quarantined.snap` (one
//!   kept for diagnosis) and a new snapshot is built from the current state,
//!   so no follower is ever sent a bad file.
//! - At start-up (`StateMachine::set_starting`) openraft only needs the
//!   file's meta. Each publish records the file's meta, length and trailing
//!   CRC in `raft_meta` (`PublishedSnapshot`); a file that matches its record
//!   is trusted without reading it whole, so start-up does not grow with the
//!   state. A file that does not match (or has no record) is verified end to
//!   end, and quarantined if corrupt, as above; so is a file ahead of the
//!   applied state (start-up is about to install it). Damage inside a
//!   matching file is found when it is first handed out, which verifies.
//! - Installing first stages a verified copy of the received file, then
//!   publishes it as `current.snap`, and only then replaces the state, with
//!   memory bounded whatever the state's size: one synced batch of range
//!   deletions clears every state column family *and the applied state*;
//!   each column family's records (one sorted run in the file) are written
//!   into SST files of at most `INGEST_FILE_BYTES` and ingested (RocksDB
//!   links them into the tree, no copy, no memtable); the applied state is
//!   written last, synced. Until that last write the applied state is
//!   absent, so a crash anywhere in between leaves a published snapshot newer
//!   than the applied state, and at start-up openraft installs it again
//!   (`StorageHelper::get_initial_state` → `restore_from_snapshot`): the node
//!   comes back with the old state (crash before the clearing batch) or the
//!   new one, never a mixture, and never with a snapshot older than the
//!   state it claims to describe (which would let openraft send a stale file).
//! - Every file operation runs on a blocking thread; transient shortages
//!   (`EMFILE`, `ENFILE`, `ENOSPC`) are retried (see `transient`), anything else
//!   is returned.
//! - If verification fails inside install (the receiver verified the file
//!   before handing it to openraft, so only a disk error can cause it), the
//!   error is returned and openraft stops this replica: its state and
//!   `current.snap` are unchanged, and after a restart the leader sends the
//!   snapshot again.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use om_proto::raft as pb;
use prost::Message;
use rocksdb::{DB, ReadOptions};

use crate::snapshot::{SnapshotError, SnapshotReader, SnapshotWriter, VerifiedSnapshot};
use crate::transient::retry;
use crate::{LogId, SnapshotMeta, codec, io_err, keys};

pub(crate) const CURRENT: &str = "current.snap";
pub(crate) const QUARANTINED: &str = "quarantined.snap";
/// Prefix of every staging file; leftovers are removed at open.
pub(crate) const TMP_PREFIX: &str = "tmp-";

/// The most bytes one incoming snapshot may stage: a bound on the disk a peer
/// can fill, far above a 100M-key state (installing streams the file into SST
/// files, so memory does not grow with it).
pub const MAX_SNAPSHOT_BYTES: u64 = 256 << 30;

/// Largest SST file an install writes before starting the next one: an SST
/// writer keeps its file's index in memory until it finishes the file, so
/// this bounds that index (a few MiB) whatever the size of a column family.
pub const INGEST_FILE_BYTES: u64 = 128 << 20;

/// Fault injection for tests of the snapshot paths. Production nodes never
/// arm these.
#[derive(Debug)]
pub struct SnapshotFaults {
    fail_creates: AtomicU32,
    create_errno: AtomicI32,
    fail_install_commit: AtomicBool,
    /// `u32::MAX` when off.
    fail_install_after_cfs: AtomicU32,
    /// `u64::MAX` when off.
    cut_incoming_after: AtomicU64,
}

impl Default for SnapshotFaults {
    fn default() -> Self {
        SnapshotFaults {
            fail_creates: AtomicU32::new(0),
            create_errno: AtomicI32::new(0),
            fail_install_commit: AtomicBool::new(false),
            fail_install_after_cfs: AtomicU32::new(u32::MAX),
            cut_incoming_after: AtomicU64::new(u64::MAX),
        }
    }
}

impl SnapshotFaults {
    /// Makes the next `n` snapshot file creations (build, install staging,
    /// incoming transfers) fail with `errno`.
    pub fn fail_next_creates(&self, n: u32, errno: i32) {
        self.create_errno.store(errno, Ordering::SeqCst);
        self.fail_creates.store(n, Ordering::SeqCst);
    }

    /// Makes the next install fail after it published the new snapshot file
    /// and before it committed the new state: what a crash there leaves.
    pub fn fail_next_install_commit(&self) {
        self.fail_install_commit.store(true, Ordering::SeqCst);
    }

    /// Makes the next install fail once it has ingested `n` column families
    /// into the cleared state: what a crash in the middle of an install leaves.
    pub fn fail_next_install_after_ingesting(&self, n: u32) {
        self.fail_install_after_cfs.store(n, Ordering::SeqCst);
    }

    /// Makes the next incoming transfer fail as a dropped connection does
    /// once it has staged at least `bytes` (what the sender resumes from).
    pub fn cut_next_incoming_after(&self, bytes: u64) {
        self.cut_incoming_after.store(bytes, Ordering::SeqCst);
    }

    pub(crate) fn incoming_cut(&self, staged: u64) -> bool {
        let at = self.cut_incoming_after.load(Ordering::SeqCst);
        staged >= at
            && self
                .cut_incoming_after
                .compare_exchange(at, u64::MAX, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    fn install_ingest_failure(&self, ingested: u32) -> bool {
        self.fail_install_after_cfs
            .compare_exchange(ingested, u32::MAX, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    fn create_failure(&self) -> Option<std::io::Error> {
        self.fail_creates
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| std::io::Error::from_raw_os_error(self.create_errno.load(Ordering::SeqCst)))
    }

    fn install_commit_failure(&self) -> bool {
        self.fail_install_commit.swap(false, Ordering::SeqCst)
    }
}

/// Counters of the snapshot paths, for tests and operators (the same events
/// are exported as metrics).
#[derive(Debug, Default)]
pub struct SnapshotStats {
    /// Transient failures that were retried.
    pub retries: AtomicU64,
    /// Corrupt `current.snap` files moved aside.
    pub quarantined: AtomicU64,
    /// Reads of `current.snap` that verified it end to end, and reads at
    /// start-up that trusted it by its `PublishedSnapshot` record.
    pub verified_reads: AtomicU64,
    pub trusted_reads: AtomicU64,
    /// Snapshots built.
    pub built: AtomicU64,
    /// Snapshots installed, and the SST files they were ingested as.
    pub installed: AtomicU64,
    pub ingested_files: AtomicU64,
    /// Incoming transfers that continued a partial file a dropped
    /// connection left, and the bytes they did not receive again.
    pub resumed: AtomicU64,
    pub resumed_bytes: AtomicU64,
}

/// What names one snapshot transfer: the encoded meta and the file's size.
/// A sender encodes the same meta the same way each time it sends a
/// snapshot, and a node's snapshot of one log id has the same bytes whoever
/// builds it, so equal ids mean equal files (the whole-file CRC and the
/// verification of the staged file check it anyway).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TransferId {
    pub(crate) meta: Vec<u8>,
    pub(crate) total: u64,
}

/// The staged part of an incoming transfer: its file, how many bytes of it
/// are good, and the CRC of those bytes.
pub(crate) struct Partial {
    pub(crate) id: Option<TransferId>,
    pub(crate) tmp: TmpFile,
    pub(crate) len: u64,
    pub(crate) crc: crc32fast::Hasher,
}

impl SnapshotStore {
    /// Bytes already staged of the transfer `id` (0 when none are).
    pub(crate) fn staged_offset(&self, id: &TransferId) -> u64 {
        match &*self.partial.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(p) if p.id.as_ref() == Some(id) => p.len,
            _ => 0,
        }
    }
}

/// A staging file that is removed unless it was published: dropping the
/// guard (an error, a cancelled transfer, a refused publish) cleans up.
pub(crate) struct TmpFile {
    path: PathBuf,
    armed: bool,
}

impl TmpFile {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Hands the file over (it was renamed away): nothing to remove.
    fn disarm(mut self) {
        self.armed = false;
    }

    /// Removes the file at once; for code already on a blocking thread.
    fn remove_now(mut self) {
        self.armed = false;
        remove_quietly(&self.path);
    }
}

impl Drop for TmpFile {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let path = std::mem::take(&mut self.path);
        // Off the async workers when there is a runtime to run it on (code on
        // a blocking thread calls `remove_now` instead).
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(move || remove_quietly(&path));
            }
            Err(_) => remove_quietly(&path),
        }
    }
}

fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a snapshot staging file");
    }
}

/// Runs blocking file work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SnapshotError> + Send + 'static,
) -> Result<T, SnapshotError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SnapshotError::Io(io_err(e)))?
}

pub(crate) struct SnapshotStore {
    pub(crate) db: Arc<DB>,
    pub(crate) dir: PathBuf,
    /// The replicated column families other than `sm_meta`.
    pub(crate) tables: Vec<String>,
    /// Serializes replacing `current.snap`, and remembers the last log id of
    /// the snapshot in it: `None` until first read, `Some(None)` for no
    /// snapshot (or one of the empty state).
    current: tokio::sync::Mutex<Option<Option<LogId>>>,
    tmp_counter: AtomicU64,
    /// At most one incoming snapshot is staged at a time.
    pub(crate) incoming: Arc<tokio::sync::Semaphore>,
    /// The partial file of the last transfer a dropped connection cut
    /// short, kept (one at most) so that the sender can continue it.
    pub(crate) partial: std::sync::Mutex<Option<Partial>>,
    /// Limit of one incoming snapshot (`MAX_SNAPSHOT_BYTES`; tests lower it).
    pub(crate) max_incoming_bytes: AtomicU64,
    /// Size at which an install starts a new SST file (`INGEST_FILE_BYTES`;
    /// tests lower it).
    pub(crate) ingest_file_bytes: AtomicU64,
    /// Install in one write batch instead (`StoreOptions::batch_snapshot_install`).
    pub(crate) batch_install: AtomicBool,
    /// Set while openraft starts: reads of `current.snap` may trust its
    /// `PublishedSnapshot` record.
    pub(crate) starting: AtomicBool,
    pub(crate) faults: Arc<SnapshotFaults>,
    pub(crate) stats: Arc<SnapshotStats>,
}

impl SnapshotStore {
    /// Opens `dir`, removing staging files a crash left behind. Blocking, like
    /// opening the database; nothing else is read until first use.
    pub(crate) fn open(
        db: Arc<DB>,
        dir: PathBuf,
        tables: Vec<String>,
    ) -> std::io::Result<SnapshotStore> {
        std::fs::create_dir_all(&dir)?;
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            if e.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
                if e.file_type()?.is_dir() {
                    std::fs::remove_dir_all(e.path())?;
                } else {
                    remove_quietly(&e.path());
                }
            }
        }
        Ok(SnapshotStore {
            db,
            dir,
            tables,
            current: tokio::sync::Mutex::new(None),
            tmp_counter: AtomicU64::new(0),
            incoming: Arc::new(tokio::sync::Semaphore::new(1)),
            partial: std::sync::Mutex::new(None),
            max_incoming_bytes: AtomicU64::new(MAX_SNAPSHOT_BYTES),
            ingest_file_bytes: AtomicU64::new(INGEST_FILE_BYTES),
            batch_install: AtomicBool::new(false),
            starting: AtomicBool::new(false),
            faults: Arc::default(),
            stats: Arc::default(),
        })
    }

    pub(crate) fn current_path(&self) -> PathBuf {
        self.dir.join(CURRENT)
    }

    /// A new staging file, created through the fault hook.
    pub(crate) fn create_tmp(&self, kind: &str) -> Result<(TmpFile, File), SnapshotError> {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!(
            "{TMP_PREFIX}{kind}-{}-{n}.snap",
            std::process::id()
        ));
        if let Some(e) = self.faults.create_failure() {
            return Err(e.into());
        }
        let f = File::create(&path)?;
        Ok((TmpFile { path, armed: true }, f))
    }

    /// Verifies the file at `path` against this node's tables (and `expected`).
    pub(crate) fn verify(
        &self,
        path: &Path,
        expected: Option<&SnapshotMeta>,
    ) -> Result<VerifiedSnapshot, SnapshotError> {
        crate::snapshot::verify_file(path, &self.tables, expected)
    }

    /// Writes a snapshot of the state as of now into a staging file and
    /// returns it with a read handle (valid whatever later happens to the path).
    fn build_file(&self) -> Result<(SnapshotMeta, TmpFile, File, u64), SnapshotError> {
        let db = &self.db;
        let snap = db.snapshot();
        let (last, membership) = read_applied(db, Some(&snap))?;
        let digest = read_digest(db, Some(&snap))?;
        let meta = SnapshotMeta {
            last_log_id: last,
            last_membership: membership,
        };
        let (tmp, file) = self.create_tmp("build")?;
        match self.write_state(&snap, &meta, &digest, file, tmp.path()) {
            Ok((read, bytes)) => Ok((meta, tmp, read, bytes)),
            Err(e) => {
                tmp.remove_now();
                Err(e)
            }
        }
    }

    fn write_state(
        &self,
        snap: &rocksdb::Snapshot<'_>,
        meta: &SnapshotMeta,
        digest: &crate::digest::Digest,
        file: File,
        path: &Path,
    ) -> Result<(File, u64), SnapshotError> {
        let db = &self.db;
        let header = pb::SnapshotMeta {
            state_digest: digest.to_vec(),
            ..codec::snapshot_meta_to_pb(meta)
        };
        let mut w = SnapshotWriter::new(file, &header, &self.tables)?;
        for (i, name) in self.tables.iter().enumerate() {
            let mut ro = ReadOptions::default();
            ro.set_snapshot(snap);
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
            it.status()?;
        }
        let bytes = w.finish()?;
        Ok((File::open(path)?, bytes))
    }

    /// Builds a snapshot and publishes it, retrying transient errors while
    /// `alive` (the state machine) exists.
    pub(crate) async fn build(
        self: &Arc<Self>,
        alive: &Weak<()>,
    ) -> Result<(SnapshotMeta, File, u64), SnapshotError> {
        let (meta, tmp, file, bytes) = retry(
            "build",
            &self.stats.retries,
            || {
                let s = self.clone();
                blocking(move || s.build_file())
            },
            SnapshotError::is_transient,
            || alive.strong_count() > 0,
        )
        .await?;
        let mut cur = self.current.lock().await;
        self.publish(&mut cur, tmp, meta.last_log_id).await?;
        self.stats.built.fetch_add(1, Ordering::Relaxed);
        Ok((meta, file, bytes))
    }

    /// Makes `tmp` the current snapshot unless a newer one is already
    /// current, in which case `tmp` is handed back.
    async fn publish(
        self: &Arc<Self>,
        cur: &mut Option<Option<LogId>>,
        tmp: TmpFile,
        last: Option<LogId>,
    ) -> Result<Option<TmpFile>, SnapshotError> {
        let current = match *cur {
            Some(c) => c,
            None => {
                let s = self.clone();
                blocking(move || Ok(s.read_current_last())).await?
            }
        };
        if current.is_some() && current > last {
            return Ok(Some(tmp));
        }
        let (dir, from) = (self.dir.clone(), tmp.path().to_path_buf());
        let to = self.current_path();
        retry(
            "publish",
            &self.stats.retries,
            || {
                let (dir, from, to) = (dir.clone(), from.clone(), to.clone());
                blocking(move || {
                    // A retry after the rename only repeats the directory fsync.
                    if from.exists() {
                        std::fs::rename(&from, &to)?;
                    }
                    File::open(&dir)?.sync_all()?;
                    Ok(())
                })
            },
            SnapshotError::is_transient,
            || true,
        )
        .await?;
        tmp.disarm();
        *cur = Some(last);
        let s = self.clone();
        if let Err(e) = blocking(move || s.record_published()).await {
            // Only start-up uses the record; without it the file is verified.
            tracing::warn!(error = %e, "cannot record the published snapshot");
        }
        Ok(None)
    }

    /// The meta, length and trailing CRC of `f` (`len` bytes): what a
    /// `PublishedSnapshot` record holds. Reads the header (from the start,
    /// leaving the file position after it) and the last 4 bytes.
    fn identify(&self, mut f: &File, len: u64) -> Result<pb::PublishedSnapshot, SnapshotError> {
        use std::os::unix::fs::FileExt;
        f.seek(SeekFrom::Start(0))?;
        let meta = SnapshotReader::open(f, len)?.meta;
        let mut crc = [0u8; 4];
        let at = len.checked_sub(4).ok_or(SnapshotError::Truncated {
            what: "trailer",
            need: 4,
            left: len,
        })?;
        f.read_exact_at(&mut crc, at)?;
        Ok(pb::PublishedSnapshot {
            meta: Some(meta),
            length: len,
            crc: u32::from_le_bytes(crc),
        })
    }

    /// Records the file just published as `current.snap` (it was built here
    /// or verified when staged). Not synced: a lost record only means a
    /// verification at the next start.
    fn record_published(&self) -> Result<(), SnapshotError> {
        let f = File::open(self.current_path())?;
        let len = f.metadata()?.len();
        let rec = self.identify(&f, len)?;
        self.db.put_cf(
            cf(&self.db, keys::RAFT_META_CF)?,
            keys::PUBLISHED_SNAPSHOT_KEY,
            rec.encode_to_vec(),
        )?;
        Ok(())
    }

    /// The meta of `f` (`len` bytes) if it is the file last recorded as
    /// published.
    fn recorded_meta(&self, f: &File, len: u64) -> Option<pb::SnapshotMeta> {
        let c = cf(&self.db, keys::RAFT_META_CF).ok()?;
        let bytes = self
            .db
            .get_pinned_cf(c, keys::PUBLISHED_SNAPSHOT_KEY)
            .ok()??;
        let rec = pb::PublishedSnapshot::decode(&bytes[..]).ok()?;
        let found = self.identify(f, len).ok()?;
        (found == rec).then_some(found.meta).flatten()
    }

    /// The last log id in `current.snap`'s meta (`None` if absent or unreadable:
    /// anything may replace it).
    fn read_current_last(&self) -> Option<LogId> {
        SnapshotReader::open_file(&self.current_path())
            .ok()
            .and_then(|r| codec::opt_log_id_from_pb(&r.meta.last_log_id))
    }

    /// The verified current snapshot, or `None` if there is none. A corrupt
    /// `current.snap` is quarantined and replaced by a new build.
    pub(crate) async fn current(
        self: &Arc<Self>,
        alive: &Weak<()>,
    ) -> Result<Option<(SnapshotMeta, File)>, SnapshotError> {
        let mut cur = self.current.lock().await;
        let path = self.current_path();
        let read = retry(
            "read current",
            &self.stats.retries,
            || {
                let (s, path) = (self.clone(), path.clone());
                blocking(move || {
                    let mut f = match File::open(&path) {
                        Ok(f) => f,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                        Err(e) => return Err(e.into()),
                    };
                    let len = f.metadata()?.len();
                    // A snapshot ahead of the applied state is about to be
                    // installed (a crash cut its install short): verify it
                    // here, where a corrupt one can still be quarantined.
                    let trusted = s
                        .starting
                        .load(Ordering::Relaxed)
                        .then(|| s.recorded_meta(&f, len))
                        .flatten()
                        .filter(|m| {
                            let last = codec::opt_log_id_from_pb(&m.last_log_id);
                            read_applied(&s.db, None).is_ok_and(|(applied, _)| last <= applied)
                        });
                    let meta = match trusted {
                        Some(meta) => {
                            s.stats.trusted_reads.fetch_add(1, Ordering::Relaxed);
                            meta
                        }
                        None => {
                            s.stats.verified_reads.fetch_add(1, Ordering::Relaxed);
                            f.seek(SeekFrom::Start(0))?;
                            crate::snapshot::verify(&f, len, &s.tables, None)?.meta
                        }
                    };
                    f.seek(SeekFrom::Start(0))?;
                    let meta = codec::snapshot_meta_from_pb(&meta)
                        .map_err(|e| SnapshotError::BadMeta(e.to_string()))?;
                    Ok(Some((meta, f)))
                })
            },
            SnapshotError::is_transient,
            || true,
        )
        .await;
        match read {
            Ok(Some((meta, f))) => {
                *cur = Some(meta.last_log_id);
                Ok(Some((meta, f)))
            }
            Ok(None) => {
                *cur = Some(None);
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "current snapshot is corrupt: quarantined as {QUARANTINED}; building a new one"
                );
                crate::metrics::snapshot_quarantined();
                self.stats.quarantined.fetch_add(1, Ordering::Relaxed);
                let (dir, q) = (self.dir.clone(), self.dir.join(QUARANTINED));
                blocking(move || {
                    std::fs::rename(&path, &q)?;
                    File::open(&dir)?.sync_all()?;
                    Ok(())
                })
                .await?;
                *cur = Some(None);
                drop(cur);
                let (meta, f, _) = self.build(alive).await?;
                Ok(Some((meta, f)))
            }
        }
    }

    /// Replaces the replicated state with the snapshot `src` described by
    /// `meta`: stage a verified copy, publish it, then commit the state.
    pub(crate) async fn install(
        self: &Arc<Self>,
        meta: &SnapshotMeta,
        src: File,
    ) -> Result<(), SnapshotError> {
        let src = Arc::new(src);
        let staged = retry(
            "install: stage",
            &self.stats.retries,
            || {
                let (s, src, meta) = (self.clone(), src.clone(), meta.clone());
                blocking(move || {
                    let (tmp, out) = s.create_tmp("install")?;
                    match s.stage(&src, out, tmp.path(), &meta) {
                        Ok(()) => Ok(tmp),
                        Err(e) => {
                            tmp.remove_now();
                            Err(e)
                        }
                    }
                })
            },
            SnapshotError::is_transient,
            || true,
        )
        .await?;
        let mut cur = self.current.lock().await;
        let refused = self.publish(&mut cur, staged, meta.last_log_id).await?;
        let path = match &refused {
            Some(tmp) => tmp.path().to_path_buf(),
            None => self.current_path(),
        };
        if self.faults.install_commit_failure() {
            return Err(SnapshotError::Io(io_err(
                "injected failure between publishing the snapshot and committing its state",
            )));
        }
        retry(
            "install: load",
            &self.stats.retries,
            || {
                let (s, path, meta) = (self.clone(), path.clone(), meta.clone());
                blocking(move || s.install_file(&meta, &path))
            },
            SnapshotError::is_transient,
            || true,
        )
        .await
    }

    /// Copies `src` into `out` (the staging file at `path`), fsyncs it and
    /// verifies the copy.
    fn stage(
        &self,
        src: &File,
        mut out: File,
        path: &Path,
        meta: &SnapshotMeta,
    ) -> Result<(), SnapshotError> {
        let mut input = src;
        input.seek(SeekFrom::Start(0))?;
        std::io::copy(&mut input, &mut out)?;
        out.sync_all()?;
        drop(out);
        self.verify(path, Some(meta))?;
        Ok(())
    }
}

mod install;

pub(crate) fn cf<'a>(db: &'a DB, name: &str) -> Result<&'a rocksdb::ColumnFamily, SnapshotError> {
    db.cf_handle(name)
        .ok_or_else(|| SnapshotError::Io(io_err(format!("column family {name} missing"))))
}

/// The state digest of the applied state (zeroes before the first entry).
pub(crate) fn read_digest(
    db: &DB,
    snapshot: Option<&rocksdb::Snapshot<'_>>,
) -> std::io::Result<crate::digest::Digest> {
    crate::digest::from_bytes(&crate::applied::read_record(db, snapshot)?.state_digest)
}

pub(crate) fn read_applied(
    db: &DB,
    snapshot: Option<&rocksdb::Snapshot<'_>>,
) -> std::io::Result<(Option<LogId>, crate::StoredMembership)> {
    let a = crate::applied::read_record(db, snapshot)?;
    let m = match &a.membership {
        Some(m) => codec::stored_membership_from_pb(m)?,
        None => crate::StoredMembership::default(),
    };
    Ok((codec::opt_log_id_from_pb(&a.last_applied), m))
}
