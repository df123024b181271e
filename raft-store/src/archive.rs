//! The log archive (`--archive-log DIR`): every entry this replica applies,
//! appended to segment files, so a restore can replay past its backup to a
//! chosen index or time.
//!
//! Only applied entries are archived, and an applied entry is committed: no
//! entry in the archive is ever truncated away. A segment is
//! `DIR/<first index, 20 digits>.omlog`, a series of records `index (u64 BE)
//! | length (u32 BE) | CRC32 of the entry (u32 BE) | entry (om.raft.v1.Entry)`.
//! A writer never appends to an existing file: it starts a new segment at
//! start-up and past [`SEGMENT_BYTES`]. Segments may overlap (entries applied
//! again after a restart) and the last may end in a torn record; a reader
//! takes each index once, in order, and says where the archive has a gap.
//!
//! Archiving is on the apply path through a bounded queue: a slow archive
//! disk slows apply rather than losing entries. The writer syncs its file
//! every [`SYNC_EVERY`] and when it closes a segment.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use prost::Message;

use crate::{Entry, codec, io_err};

/// A segment is closed past this many bytes.
pub const SEGMENT_BYTES: u64 = 64 << 20;
/// The writer syncs at least this often while entries arrive.
pub const SYNC_EVERY: Duration = Duration::from_secs(1);
/// Entries queued for the writer before apply waits.
const QUEUE: usize = 4096;
/// Largest entry a reader accepts.
const MAX_ENTRY_BYTES: u32 = 64 << 20;
const SUFFIX: &str = ".omlog";

/// An entry's index and encoding, on their way to the writer.
type Record = (u64, Vec<u8>);

/// The writing end, held by the state machine.
pub struct LogArchive {
    tx: Mutex<Option<SyncSender<Record>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    dir: PathBuf,
}

impl LogArchive {
    pub fn open(dir: &Path) -> std::io::Result<LogArchive> {
        std::fs::create_dir_all(dir)?;
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let d = dir.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("om-log-archive".into())
            .spawn(move || {
                if let Err(e) = write_loop(&d, rx) {
                    tracing::error!(dir = %d.display(), error = %e, "the log archive stopped");
                }
            })?;
        Ok(LogArchive {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            dir: dir.to_path_buf(),
        })
    }

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
        tx.send((entry.log_id.index, bytes))
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

fn segment_name(first: u64) -> String {
    format!("{first:020}{SUFFIX}")
}

fn write_loop(dir: &Path, rx: Receiver<Record>) -> std::io::Result<()> {
    let mut out: Option<(BufWriter<File>, u64)> = None;
    let mut synced = Instant::now();
    loop {
        let next = rx.recv_timeout(SYNC_EVERY);
        let (index, bytes) = match next {
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
        if out.as_ref().is_none_or(|(_, n)| *n >= SEGMENT_BYTES) {
            if let Some((mut w, _)) = out.take() {
                w.flush()?;
                w.get_ref().sync_all()?;
            }
            let p = dir.join(segment_name(index));
            let f = File::options().create_new(true).write(true).open(&p)?;
            File::open(dir)?.sync_all()?;
            out = Some((BufWriter::with_capacity(1 << 20, f), 0));
        }
        let Some((w, n)) = &mut out else { continue };
        w.write_all(&index.to_be_bytes())?;
        w.write_all(&(bytes.len() as u32).to_be_bytes())?;
        w.write_all(&crc32fast::hash(&bytes).to_be_bytes())?;
        w.write_all(&bytes)?;
        *n += 16 + bytes.len() as u64;
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

/// Visits the archived entries `from..=to` (`to` `None`: as far as the
/// archive goes without a gap) in index order, each once. The visitor
/// returns `false` to stop before an entry.
pub fn replay(
    dir: &Path,
    from: u64,
    to: Option<u64>,
    mut visit: impl FnMut(&Entry) -> std::io::Result<bool>,
) -> std::io::Result<Replayed> {
    let mut segments: Vec<(u64, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(first) = name
            .strip_suffix(SUFFIX)
            .and_then(|n| n.parse::<u64>().ok())
        {
            segments.push((first, e.path()));
        }
    }
    segments.sort();
    let mut next = from;
    let done = |next: u64| to.is_some_and(|t| next > t);
    for (first, path) in segments {
        if done(next) {
            break;
        }
        if first > next {
            // Segments are sorted: nothing later holds `next`.
            break;
        }
        let mut r = std::io::BufReader::new(File::open(&path)?);
        loop {
            if done(next) {
                break;
            }
            let mut head = [0u8; 16];
            if read_exact_or_end(&mut r, &mut head)?.is_none() {
                break;
            }
            let index = u64::from_be_bytes(head[..8].try_into().unwrap_or_default());
            let len = u32::from_be_bytes(head[8..12].try_into().unwrap_or_default());
            let crc = u32::from_be_bytes(head[12..].try_into().unwrap_or_default());
            if len > MAX_ENTRY_BYTES {
                break;
            }
            let mut body = vec![0u8; len as usize];
            if read_exact_or_end(&mut r, &mut body)?.is_none() || crc32fast::hash(&body) != crc {
                // A torn tail: what follows is in a later segment, if anywhere.
                break;
            }
            if index < next {
                continue;
            }
            if index > next {
                break;
            }
            let entry =
                codec::entry_from_pb(&om_proto::raft::Entry::decode(&body[..]).map_err(io_err)?)?;
            if entry.log_id.index != index {
                return Err(io_err(format!(
                    "{}: record of index {index} holds entry {}",
                    path.display(),
                    entry.log_id
                )));
            }
            if !visit(&entry)? {
                return Ok(Replayed::Stopped {
                    last: next.saturating_sub(1),
                    at: next,
                });
            }
            next += 1;
        }
    }
    let last = next.saturating_sub(1);
    Ok(match to {
        Some(t) if next <= t => Replayed::Gap {
            last,
            missing: next,
        },
        _ => Replayed::Complete { last },
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

    fn blank(index: u64) -> Entry {
        Entry {
            log_id: crate::LogId::new(
                LeaderId {
                    term: 1,
                    node_id: 1,
                },
                index,
            ),
            payload: EntryPayload::Blank,
        }
    }

    fn indexes(dir: &Path, from: u64, to: Option<u64>) -> (Vec<u64>, Replayed) {
        let mut seen = Vec::new();
        let r = replay(dir, from, to, |e| {
            seen.push(e.log_id.index);
            Ok(true)
        })
        .unwrap();
        (seen, r)
    }

    #[test]
    fn overlapping_and_torn_segments_replay_each_index_once() {
        let d = tempfile::tempdir().unwrap();
        {
            let a = LogArchive::open(d.path()).unwrap();
            for i in 1..=10 {
                a.push(&blank(i)).unwrap();
            }
        }
        // A restart applies 8.. again into a new segment.
        {
            let a = LogArchive::open(d.path()).unwrap();
            for i in 8..=15 {
                a.push(&blank(i)).unwrap();
            }
        }
        // A torn record at the end of the last segment.
        let last = d.path().join(segment_name(8));
        let mut f = File::options().append(true).open(&last).unwrap();
        f.write_all(&16u64.to_be_bytes()).unwrap();
        drop(f);
        let (seen, r) = indexes(d.path(), 3, Some(12));
        assert_eq!(seen, (3..=12).collect::<Vec<_>>());
        assert_eq!(r, Replayed::Complete { last: 12 });
        let (seen, r) = indexes(d.path(), 1, None);
        assert_eq!(seen, (1..=15).collect::<Vec<_>>());
        assert_eq!(r, Replayed::Complete { last: 15 });
        let (_, r) = indexes(d.path(), 5, Some(20));
        assert_eq!(
            r,
            Replayed::Gap {
                last: 15,
                missing: 16
            }
        );
        let (seen, r) = indexes(d.path(), 0, Some(3));
        assert!(seen.is_empty());
        assert_eq!(
            r,
            Replayed::Gap {
                last: 0,
                missing: 0
            }
        );
        let r = replay(d.path(), 2, None, |e| Ok(e.log_id.index < 6)).unwrap();
        assert_eq!(r, Replayed::Stopped { last: 5, at: 6 });
    }
}
