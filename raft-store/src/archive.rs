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
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_proto::raft as pb;
use prost::Message;

use crate::{Entry, LogId, codec, io_err};

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
}

impl LogArchive {
    /// Archives into `dir` (the lineage's subdirectory, see `lineage_dir`).
    pub fn open(dir: &Path, start: Start) -> std::io::Result<LogArchive> {
        let dir = lineage_dir(dir, &start.lineage);
        std::fs::create_dir_all(&dir)?;
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
    let mut nonce = [0u8; 8];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut nonce).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        nonce = (t ^ u64::from(std::process::id()).rotate_left(32)).to_be_bytes();
    }
    format!("{first:020}-{:016x}{SUFFIX}", u64::from_be_bytes(nonce))
}

fn header_bytes(h: &pb::ArchiveSegmentHeader) -> Vec<u8> {
    let body = h.encode_to_vec();
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

fn write_loop(dir: &Path, start: &Start, rx: Receiver<Record>) -> std::io::Result<()> {
    let mut out: Option<(BufWriter<File>, u64)> = None;
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
            };
            let p = dir.join(segment_name(log_id.index));
            let f = File::options().create_new(true).write(true).open(&p)?;
            let mut w = BufWriter::with_capacity(1 << 20, f);
            let h = header_bytes(&header);
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

/// Why a replay stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replayed {
    /// Every entry through the last index asked for.
    Complete { last: u64 },
    /// The visitor stopped before entry `at` (not replayed).
    Stopped { last: u64, at: u64 },
    /// The archive holds nothing from `missing` on (last is the last
    /// replayed, `missing - 1`).
    Gap { last: u64, missing: u64 },
}

/// The history a replay continues.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The log id of the last entry the backup applied (the replay starts
    /// right after it); `None`: from the first entry.
    pub after: Option<LogId>,
    /// The backup's cluster id (empty: unknown): segments of another
    /// cluster are skipped.
    pub cluster_id: String,
    /// The backup store's lineage: segments of another are skipped.
    pub lineage: String,
}

/// One segment file, as listed.
struct Segment {
    path: PathBuf,
    first: u64,
    header: Option<pb::ArchiveSegmentHeader>,
    /// Where its records begin.
    records_at: u64,
}

/// Reads a segment's header, if it has one (`None` for a segment written
/// before headers existed).
fn read_header(path: &Path) -> std::io::Result<Option<(pb::ArchiveSegmentHeader, u64)>> {
    let mut f = File::open(path)?;
    let mut magic = [0u8; 8];
    if read_exact_or_end(&mut f, &mut magic)?.is_none() || magic != MAGIC {
        return Ok(None);
    }
    let mut lc = [0u8; 8];
    let bad = || io_err(format!("{}: the segment header is damaged", path.display()));
    read_exact_or_end(&mut f, &mut lc)?.ok_or_else(bad)?;
    let len = u32::from_be_bytes([lc[0], lc[1], lc[2], lc[3]]);
    let crc = u32::from_be_bytes([lc[4], lc[5], lc[6], lc[7]]);
    if len > MAX_HEADER_BYTES {
        return Err(bad());
    }
    let mut body = vec![0u8; len as usize];
    read_exact_or_end(&mut f, &mut body)?.ok_or_else(bad)?;
    if crc32fast::hash(&body) != crc {
        return Err(bad());
    }
    let h = pb::ArchiveSegmentHeader::decode(&body[..]).map_err(|_| bad())?;
    Ok(Some((h, 16 + u64::from(len))))
}

/// The segments in `dir` and in its subdirectories (lineages), sorted by
/// first index.
fn list_segments(dir: &Path) -> std::io::Result<Vec<Segment>> {
    let mut dirs = vec![dir.to_path_buf()];
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            dirs.push(e.path());
        }
    }
    let mut out = Vec::new();
    for d in dirs {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(SUFFIX) else {
                continue;
            };
            let Some(first) = stem.split('-').next().and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            let path = e.path();
            let (header, records_at) = match read_header(&path)? {
                Some((h, at)) => (Some(h), at),
                None => (None, 0),
            };
            out.push(Segment {
                path,
                first,
                header,
                records_at,
            });
        }
    }
    out.sort_by(|a, b| (a.first, &a.path).cmp(&(b.first, &b.path)));
    Ok(out)
}

/// What a cursor knows of the entry before its next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Prev {
    Known(LogId),
    /// The segment begins with the log's first entry.
    Origin,
    /// The segment began without saying (no header, or after a jump).
    Unknown,
}

/// A segment being read, one record ahead.
struct Cursor {
    path: PathBuf,
    reader: BufReader<File>,
    prev: Prev,
    next: Option<Entry>,
}

impl Cursor {
    fn open(s: &Segment) -> std::io::Result<Cursor> {
        let mut f = File::open(&s.path)?;
        f.seek(SeekFrom::Start(s.records_at))?;
        let prev = match (&s.header, s.header.as_ref().and_then(|h| h.prev.as_ref())) {
            (_, Some(p)) => Prev::Known(codec::log_id_from_pb(p)),
            (Some(_), None) if s.first <= 1 => Prev::Origin,
            _ => Prev::Unknown,
        };
        let mut c = Cursor {
            path: s.path.clone(),
            reader: BufReader::new(f),
            prev,
            next: None,
        };
        c.next = c.read()?;
        Ok(c)
    }

    /// The next record's entry; `None` at the end or at a torn record.
    fn read(&mut self) -> std::io::Result<Option<Entry>> {
        let mut head = [0u8; 16];
        if read_exact_or_end(&mut self.reader, &mut head)?.is_none() {
            return Ok(None);
        }
        let index = u64::from_be_bytes(head[..8].try_into().unwrap_or_default());
        let len = u32::from_be_bytes(head[8..12].try_into().unwrap_or_default());
        let crc = u32::from_be_bytes(head[12..].try_into().unwrap_or_default());
        if len > MAX_ENTRY_BYTES {
            return Ok(None);
        }
        let mut body = vec![0u8; len as usize];
        if read_exact_or_end(&mut self.reader, &mut body)?.is_none()
            || crc32fast::hash(&body) != crc
        {
            // A torn tail: what follows is in a later segment, if anywhere.
            return Ok(None);
        }
        let entry = codec::entry_from_pb(&pb::Entry::decode(&body[..]).map_err(io_err)?)?;
        if entry.log_id.index != index {
            return Err(io_err(format!(
                "{}: record of index {index} holds entry {}",
                self.path.display(),
                entry.log_id
            )));
        }
        Ok(Some(entry))
    }

    /// Moves past every record before `index`.
    fn skip_to(&mut self, index: u64) -> std::io::Result<()> {
        while let Some(e) = &self.next {
            if e.log_id.index >= index {
                break;
            }
            let at = e.log_id;
            let n = self.read()?;
            // Within a segment, indexes follow each other.
            self.prev = Prev::Known(at);
            self.next = n.filter(|e| e.log_id.index == at.index + 1);
        }
        Ok(())
    }
}

fn fork(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

/// Visits the archived entries of `history` from `from` through `to`
/// (`None`: as far as the archive continues it without a gap), in index
/// order, each once, proving each follows the one before (see the module
/// docs). The visitor returns `false` to stop before an entry.
pub fn replay(
    dir: &Path,
    from: u64,
    to: Option<u64>,
    history: &History,
    mut visit: impl FnMut(&Entry) -> std::io::Result<bool>,
) -> std::io::Result<Replayed> {
    let mut skipped = Vec::new();
    let mut pending = std::collections::VecDeque::new();
    for s in list_segments(dir)? {
        let (cluster, lineage) = s
            .header
            .as_ref()
            .map_or(("", ""), |h| (h.cluster_id.as_str(), h.lineage.as_str()));
        let foreign_cluster =
            !history.cluster_id.is_empty() && !cluster.is_empty() && cluster != history.cluster_id;
        if foreign_cluster || lineage != history.lineage {
            skipped.push(s.path.display().to_string());
            continue;
        }
        pending.push_back(s);
    }
    if !skipped.is_empty() {
        tracing::info!(
            segments = skipped.len(),
            first = %skipped[0],
            "skipped the archive segments of another cluster or lineage"
        );
    }
    let mut active: Vec<Cursor> = Vec::new();
    let mut next = from;
    // The log id the replayed history holds at `next - 1`.
    let mut last: Option<LogId> = history.after.filter(|a| a.index + 1 == from);
    let mut unverified_warned = false;
    let done = |next: u64| to.is_some_and(|t| next > t);
    while !done(next) {
        while pending.front().is_some_and(|s| s.first <= next) {
            if let Some(s) = pending.pop_front() {
                active.push(Cursor::open(&s)?);
            }
        }
        for c in &mut active {
            c.skip_to(next)?;
        }
        active.retain(|c| c.next.is_some());
        let holding: Vec<&Cursor> = active
            .iter()
            .filter(|c| c.next.as_ref().is_some_and(|e| e.log_id.index == next))
            .collect();
        if holding.is_empty() {
            break;
        }
        let continuing: Vec<&Cursor> = holding
            .iter()
            .copied()
            .filter(|c| match (c.prev, last) {
                (Prev::Known(p), Some(l)) => p == l,
                (Prev::Origin, None) => next <= 1,
                _ => false,
            })
            .collect();
        let chosen: Vec<&Cursor> = if !continuing.is_empty() {
            continuing
        } else {
            // Only segments that cannot say what they follow (written before
            // headers existed): taken as they come, as before.
            let unknown: Vec<&Cursor> = holding
                .iter()
                .copied()
                .filter(|c| c.prev == Prev::Unknown)
                .collect();
            if unknown.is_empty() {
                let c = holding[0];
                return Err(fork(format!(
                    "{} holds entry {next} following {}, but the history replayed so far has {}                      at index {}: it belongs to another history (a fork); move it out of the                      archive directory, or restore from a backup of its own history",
                    c.path.display(),
                    match c.prev {
                        Prev::Known(p) => p.to_string(),
                        Prev::Origin => "nothing (the log's start)".to_string(),
                        Prev::Unknown => "an unknown entry".to_string(),
                    },
                    last.map_or("nothing".to_string(), |l| l.to_string()),
                    next.saturating_sub(1)
                )));
            }
            if !unverified_warned {
                tracing::warn!(
                    segment = %unknown[0].path.display(),
                    index = next,
                    "an archive segment does not say which entry it follows: replayed unverified"
                );
                unverified_warned = true;
            }
            unknown
        };
        let entry = chosen[0].next.clone().ok_or_else(|| io_err("no entry"))?;
        if let Some(other) = chosen
            .iter()
            .find(|c| c.next.as_ref().is_some_and(|e| e.log_id != entry.log_id))
        {
            return Err(fork(format!(
                "the archive forks at index {next}: {} holds {} and {} holds {}, both following \
                 the history replayed so far; move the segments of the history not wanted out \
                 of the archive directory",
                chosen[0].path.display(),
                entry.log_id,
                other.path.display(),
                other
                    .next
                    .as_ref()
                    .map_or(String::new(), |e| e.log_id.to_string())
            )));
        }
        if !visit(&entry)? {
            return Ok(Replayed::Stopped {
                last: next.saturating_sub(1),
                at: next,
            });
        }
        last = Some(entry.log_id);
        next += 1;
    }
    let last_index = next.saturating_sub(1);
    Ok(match to {
        Some(t) if next <= t => Replayed::Gap {
            last: last_index,
            missing: next,
        },
        _ => Replayed::Complete { last: last_index },
    })
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
mod tests {
    use super::*;
    use openraft::EntryPayload;
    use openraft::vote::leader_id_adv::LeaderId;

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(LeaderId { term, node_id: 1 }, index)
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: id(term, index),
            payload: EntryPayload::Blank,
        }
    }

    fn label(c: &str) -> Option<LabelSource> {
        let c = c.to_string();
        Some(LabelSource(Arc::new(move || Label {
            cluster_id: c.clone(),
            incarnation: 0,
        })))
    }

    /// A writer of cluster `cluster` and `lineage` whose store applied
    /// `applied`, archiving `entries`.
    fn write(dir: &Path, cluster: &str, lineage: &str, applied: Option<LogId>, entries: &[Entry]) {
        let a = LogArchive::open(
            dir,
            Start {
                lineage: lineage.to_string(),
                applied,
                label: label(cluster),
            },
        )
        .unwrap();
        for e in entries {
            a.push(e).unwrap();
        }
    }

    fn run(
        dir: &Path,
        from: u64,
        to: Option<u64>,
        h: &History,
    ) -> std::io::Result<(Vec<LogId>, Replayed)> {
        let mut seen = Vec::new();
        let r = replay(dir, from, to, h, |e| {
            seen.push(e.log_id);
            Ok(true)
        })?;
        Ok((seen, r))
    }

    fn history(cluster: &str, after: Option<LogId>) -> History {
        History {
            after,
            cluster_id: cluster.to_string(),
            lineage: String::new(),
        }
    }

    fn segments(dir: &Path) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "omlog"))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn overlapping_and_torn_segments_replay_each_index_once() {
        let d = tempfile::tempdir().unwrap();
        let all: Vec<Entry> = (1..=15).map(|i| entry(1, i)).collect();
        write(d.path(), "c", "", None, &all[..10]);
        // A restart applies 8.. again (its store had applied 7) into a new
        // segment, which never reuses a name.
        write(d.path(), "c", "", Some(id(1, 7)), &all[7..]);
        // And a third time: no "file exists".
        write(d.path(), "c", "", Some(id(1, 7)), &all[7..9]);
        assert_eq!(segments(d.path()).len(), 3);
        // A torn record at the end of the second segment.
        let second = segments(d.path())
            .into_iter()
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{:020}", 8))
                    && std::fs::metadata(p).unwrap().len() > 200
            })
            .unwrap();
        let mut f = File::options().append(true).open(&second).unwrap();
        f.write_all(&16u64.to_be_bytes()).unwrap();
        drop(f);
        let h = history("c", Some(id(1, 2)));
        let (seen, r) = run(d.path(), 3, Some(12), &h).unwrap();
        assert_eq!(seen, (3..=12).map(|i| id(1, i)).collect::<Vec<_>>());
        assert_eq!(r, Replayed::Complete { last: 12 });
        let (seen, r) = run(d.path(), 1, None, &history("c", None)).unwrap();
        assert_eq!(seen.len(), 15);
        assert_eq!(r, Replayed::Complete { last: 15 });
        let (_, r) = run(d.path(), 5, Some(20), &history("c", Some(id(1, 4)))).unwrap();
        assert_eq!(
            r,
            Replayed::Gap {
                last: 15,
                missing: 16
            }
        );
        let r = replay(d.path(), 2, None, &history("c", Some(id(1, 1))), |e| {
            Ok(e.log_id.index < 6)
        })
        .unwrap();
        assert_eq!(r, Replayed::Stopped { last: 5, at: 6 });
    }

    /// Two clusters archived into one directory: each replay takes only its
    /// own cluster's segments.
    #[test]
    fn two_clusters_segments_in_one_directory() {
        let d = tempfile::tempdir().unwrap();
        let a: Vec<Entry> = (1..=10).map(|i| entry(1, i)).collect();
        let b: Vec<Entry> = (1..=10).map(|i| entry(3, i)).collect();
        write(d.path(), "a", "", None, &a);
        write(d.path(), "b", "", None, &b);
        let (seen, r) = run(d.path(), 5, Some(10), &history("a", Some(id(1, 4)))).unwrap();
        assert_eq!(seen, (5..=10).map(|i| id(1, i)).collect::<Vec<_>>());
        assert_eq!(r, Replayed::Complete { last: 10 });
        let (seen, _) = run(d.path(), 5, Some(10), &history("b", Some(id(3, 4)))).unwrap();
        assert_eq!(seen, (5..=10).map(|i| id(3, i)).collect::<Vec<_>>());
        // Without a cluster id to go by, the two fork at the first index.
        let e = run(d.path(), 1, Some(10), &history("", None)).unwrap_err();
        assert!(e.to_string().contains("forks at index 1"), "{e}");
    }

    /// A cluster restored from a backup at index 5 archives its own history
    /// into its lineage's directory: the old cluster's replay ignores it, the
    /// restored one's follows it. Its segments copied beside the old ones are
    /// a fork, refused, naming them.
    #[test]
    fn a_fork_after_restore() {
        let d = tempfile::tempdir().unwrap();
        let old: Vec<Entry> = (1..=10).map(|i| entry(1, i)).collect();
        write(d.path(), "c", "", None, &old);
        let restored: Vec<Entry> = (6..=9).map(|i| entry(2, i)).collect();
        write(d.path(), "", "restored-1", Some(id(1, 5)), &restored);
        assert!(d.path().join("restored-1").is_dir());
        let (seen, _) = run(d.path(), 6, Some(10), &history("c", Some(id(1, 5)))).unwrap();
        assert_eq!(seen, (6..=10).map(|i| id(1, i)).collect::<Vec<_>>());
        let mine = History {
            after: Some(id(1, 5)),
            cluster_id: String::new(),
            lineage: "restored-1".into(),
        };
        let (seen, r) = run(d.path(), 6, Some(9), &mine).unwrap();
        assert_eq!(seen, (6..=9).map(|i| id(2, i)).collect::<Vec<_>>());
        assert_eq!(r, Replayed::Complete { last: 9 });
        // The restored history's segments written beside the old ones.
        for p in segments(&d.path().join("restored-1")) {
            let to = d.path().join(p.file_name().unwrap());
            let mut bytes = std::fs::read(&p).unwrap();
            // Re-label them as the original lineage: what an archive shared
            // by two histories holds.
            let (mut h, at) = read_header(&p).unwrap().unwrap();
            h.lineage.clear();
            let mut out = header_bytes(&h);
            out.extend_from_slice(&bytes.split_off(at as usize));
            std::fs::write(to, out).unwrap();
        }
        let e = run(d.path(), 6, Some(10), &history("c", Some(id(1, 5)))).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("forks at index 6"), "{msg}");
        assert!(msg.contains(".omlog"), "names the segments: {msg}");
    }

    /// A gap (the archiving member installed a snapshot) ends the replay
    /// where the entries stop; a segment that continues another history
    /// (another term at the same index) is refused.
    #[test]
    fn a_gap_and_another_history() {
        let d = tempfile::tempdir().unwrap();
        let all: Vec<Entry> = (1..=12).map(|i| entry(1, i)).collect();
        write(d.path(), "c", "", None, &all[..5]);
        write(d.path(), "c", "", Some(id(1, 8)), &all[8..]);
        let (_, r) = run(d.path(), 1, Some(12), &history("c", None)).unwrap();
        assert_eq!(
            r,
            Replayed::Gap {
                last: 5,
                missing: 6
            }
        );

        let e = tempfile::tempdir().unwrap();
        write(e.path(), "c", "", None, &all[..5]);
        let other: Vec<Entry> = (6..=8).map(|i| entry(2, i)).collect();
        write(e.path(), "c", "", Some(id(2, 5)), &other);
        let err = run(e.path(), 1, Some(8), &history("c", None)).unwrap_err();
        assert!(err.to_string().contains("another history"), "{err}");
        // From a backup that did hold (2, 5), the same archive replays.
        let (seen, _) = run(e.path(), 6, Some(8), &history("c", Some(id(2, 5)))).unwrap();
        assert_eq!(seen, (6..=8).map(|i| id(2, i)).collect::<Vec<_>>());
    }

    /// A segment written before headers existed is still read.
    #[test]
    fn a_segment_without_header_is_read() {
        let d = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        for i in 1..=4 {
            let b = codec::encode_entry(&entry(1, i));
            bytes.extend_from_slice(&i.to_be_bytes());
            bytes.extend_from_slice(&(b.len() as u32).to_be_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&b).to_be_bytes());
            bytes.extend_from_slice(&b);
        }
        std::fs::write(d.path().join(format!("{:020}.omlog", 1)), bytes).unwrap();
        let (seen, r) = run(d.path(), 2, Some(4), &history("c", Some(id(1, 1)))).unwrap();
        assert_eq!(seen, (2..=4).map(|i| id(1, i)).collect::<Vec<_>>());
        assert_eq!(r, Replayed::Complete { last: 4 });
    }
}
