//! The log archive (`--archive-log DIR`): every entry this replica applies,
//! appended to segment files, so a restore can replay past its backup to a
//! chosen index or time.
//!
//! Only applied entries are archived, and an applied entry is committed: no
//! entry in the archive is ever truncated away. A segment is
//! `DIR/<first index, 20 digits>-<16 hex digits>.omlog`: a header (`MAGIC`,
//! length (u32 BE), CRC32 (u32 BE), `om.raft.v1.ArchiveSegmentHeader`: the
//! writer's cluster id and incarnation, its store's lineage, the log id of
//! the first entry and of the one before it), then records `index (u64 BE) |
//! length (u32 BE) | CRC32 of the entry (u32 BE) | entry (om.raft.v1.Entry)`.
//! A writer never appends to an existing file: it starts a new segment at
//! start-up, past [`SEGMENT_BYTES`] and after a jump in the indexes (a
//! snapshot installed), under a name no other writer uses. Segments may
//! overlap (entries applied again after a restart, several members
//! archiving into one directory) and the last may end in a torn record.
//! Segments written before headers existed (`<first index>.omlog`, records
//! only) are still read.
//!
//! With a backup key (`--backup-key-file`) a segment is **signed**: its
//! header names the key (`mac_key_id`), and each record is followed by a
//! 32-byte HMAC-SHA256 tag over the previous tag, the index and the entry,
//! the chain starting from a tag over the header. A replay given the keys
//! refuses a record whose tag does not match (an altered or appended
//! record), and an unsigned segment it would take an entry from, naming the
//! file; without keys it reads signed segments unverified.
//!
//! A store restored from a backup starts a new **lineage** (its history
//! forks from the backup's at the backup's index) and archives into
//! `DIR/<lineage>/`, never beside the history it forked from.
//!
//! A replay (`replay`) proves the history it rebuilds: it starts from the
//! backup's last log id and takes entry `i + 1` only from a segment whose
//! entry `i` (or, for its first, the header's previous log id) is the one
//! it replayed; segments of another cluster or lineage are skipped, and a
//! fork (two segments continuing the history differently) or a segment that
//! holds the next index but continues another history is refused, naming
//! the segments.
//!
//! Archiving is on the apply path through a bounded queue: a slow archive
//! disk slows apply rather than losing entries. The writer syncs its file
//! every [`SYNC_EVERY`] and when it closes a segment.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_proto::raft as pb;
use prost::Message;

use crate::{Entry, LogId, codec, io_err};

mod replay;
pub use replay::{History, Replayed, replay};

/// A segment is closed past this many bytes.
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// The writer syncs at least this often while entries arrive.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);
/// Entries queued for the writer before apply waits.
const QUEUE: usize = 4096;
/// Largest entry a reader accepts.
const MAX_ENTRY_BYTES: u32 = 64 << 20;
/// Largest segment header a reader accepts.
const MAX_HEADER_BYTES: u32 = 64 << 10;
/// The first bytes of a segment with a header. As a record's index it
/// would be about 5.7e18, which no log reaches.
pub const MAGIC: [u8; 8] = *b"OMLOG\x02\0\0";
const SUFFIX: &str = ".omlog";

/// What the archiving member says about itself in each new segment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Label {
    pub cluster_id: String,
    pub incarnation: u64,
}

/// Where the label of a new segment comes from (read when it begins).
#[derive(Clone)]
pub struct LabelSource(pub Arc<dyn Fn() -> Label + Send + Sync>);

impl std::fmt::Debug for LabelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LabelSource")
    }
}

/// An entry's log id and encoding, on their way to the writer.
type Record = (LogId, Vec<u8>);

/// The writing end, held by the state machine.
pub struct LogArchive {
    tx: Mutex<Option<SyncSender<Record>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    dir: PathBuf,
}

/// Where a store of `lineage` archives under `dir`.
pub fn lineage_dir(dir: &Path, lineage: &str) -> PathBuf {
    if lineage.is_empty() {
        dir.to_path_buf()
    } else {
        dir.join(lineage)
    }
}

/// What a writer knows when it starts.
#[derive(Debug, Clone, Default)]
pub struct Start {
    /// The store's lineage (empty: the cluster's original history).
    pub lineage: String,
    /// The log id of the last entry the store applied: the one before the
    /// first it will archive.
    pub applied: Option<LogId>,
    pub label: Option<LabelSource>,
    /// Signs segments under the first key.
    pub keys: Option<Arc<om_backup_format::keys::MacKeys>>,
}

/// Where a signed segment's tag chain starts: the tag of its header.
pub(crate) fn header_tag(
    keys: &om_backup_format::keys::MacKeys,
    key_id: &str,
    header_body: &[u8],
) -> Result<[u8; TAG_LEN], om_backup_format::keys::Refused> {
    keys.tag_with(key_id, &[b"om-archive-header\0", header_body])
}

/// Bytes of a record's tag in a signed segment.
pub const TAG_LEN: usize = om_backup_format::keys::TAG_LEN;

impl LogArchive {
    /// Archives into `dir` (the lineage's subdirectory, see `lineage_dir`).
    pub fn open(root: &Path, start: Start) -> std::io::Result<LogArchive> {
        let dir = lineage_dir(root, &start.lineage);
        std::fs::create_dir_all(&dir)?;
        // The log holds the whole state, credentials included: private.
        {
            use std::os::unix::fs::PermissionsExt;
            for d in [root, dir.as_path()] {
                std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?;
            }
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let d = dir.clone();
        let thread = std::thread::Builder::new()
            .name("om-log-archive".into())
            .spawn(move || {
                if let Err(e) = write_loop(&d, &start, rx) {
                    tracing::error!(dir = %d.display(), error = %e, "the log archive stopped");
                }
            })?;
        Ok(LogArchive {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            dir,
        })
    }

    /// Where this writer puts its segments.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues `entry`; waits while the queue is full.
    pub fn push(&self, entry: &Entry) -> std::io::Result<()> {
        let bytes = codec::encode_entry(entry);
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| io_err("the log archive is closed"))?;
        tx.send((entry.log_id, bytes))
            .map_err(|_| io_err("the log archive's writer stopped"))
    }
}

impl Drop for LogArchive {
    fn drop(&mut self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// A name no other writer picks: the first index, then 64 random bits.
fn segment_name(first: u64) -> String {
    format!("{first:020}-{:016x}{SUFFIX}", crate::nonce())
}

fn header_bytes(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn write_loop(dir: &Path, start: &Start, rx: Receiver<Record>) -> std::io::Result<()> {
    let mut out: Option<(BufWriter<File>, u64)> = None;
    // The last tag of a signed segment.
    let mut chain: Option<[u8; TAG_LEN]> = None;
    let mut synced = Instant::now();
    // The last entry written, or the store's applied one before any.
    let mut last: Option<LogId> = start.applied;
    loop {
        let next = rx.recv_timeout(SYNC_EVERY);
        let (log_id, bytes) = match next {
            Ok(v) => v,
            Err(RecvTimeoutError::Timeout) => {
                if let Some((w, _)) = &mut out {
                    w.flush()?;
                    w.get_ref().sync_data()?;
                    synced = Instant::now();
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let follows = last.is_some_and(|l| l.index + 1 == log_id.index) || log_id.index == 1;
        if out.is_none() || out.as_ref().is_some_and(|(_, n)| *n >= SEGMENT_BYTES) || !follows {
            if let Some((mut w, _)) = out.take() {
                w.flush()?;
                w.get_ref().sync_all()?;
            }
            let label = start.label.as_ref().map(|l| (l.0)()).unwrap_or_default();
            let header = pb::ArchiveSegmentHeader {
                cluster_id: label.cluster_id,
                incarnation: label.incarnation,
                // Vouched for only when the first entry follows it.
                prev: if follows {
                    last.map(|l| codec::log_id_to_pb(&l))
                } else {
                    None
                },
                first: Some(codec::log_id_to_pb(&log_id)),
                lineage: start.lineage.clone(),
                mac_key_id: start
                    .keys
                    .as_ref()
                    .map_or(String::new(), |k| k.current().to_string()),
            };
            let body = header.encode_to_vec();
            chain = match &start.keys {
                Some(k) => Some(header_tag(k, k.current(), &body).map_err(io_err)?),
                None => None,
            };
            let p = dir.join(segment_name(log_id.index));
            let f = {
                use std::os::unix::fs::OpenOptionsExt;
                File::options()
                    .create_new(true)
                    .write(true)
                    .mode(0o600)
                    .open(&p)?
            };
            let mut w = BufWriter::with_capacity(1 << 20, f);
            let h = header_bytes(&body);
            w.write_all(&h)?;
            File::open(dir)?.sync_all()?;
            out = Some((w, h.len() as u64));
        }
        let Some((w, n)) = &mut out else { continue };
        w.write_all(&log_id.index.to_be_bytes())?;
        w.write_all(&(bytes.len() as u32).to_be_bytes())?;
        w.write_all(&crc32fast::hash(&bytes).to_be_bytes())?;
        w.write_all(&bytes)?;
        *n += 16 + bytes.len() as u64;
        if let (Some(k), Some(prev)) = (&start.keys, &mut chain) {
            let tag = k.tag(&[&prev[..], &log_id.index.to_be_bytes(), &bytes]);
            w.write_all(&tag)?;
            *n += TAG_LEN as u64;
            *prev = tag;
        }
        last = Some(log_id);
        if synced.elapsed() >= SYNC_EVERY {
            w.flush()?;
            w.get_ref().sync_data()?;
            synced = Instant::now();
        }
    }
    if let Some((mut w, _)) = out {
        w.flush()?;
        w.get_ref().sync_all()?;
    }
    Ok(())
}

/// Fills `buf`, or returns `None` at a clean or torn end of the file.
fn read_exact_or_end(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<Option<()>> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => return Ok(None),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(()))
}

#[cfg(test)]
mod tests;
