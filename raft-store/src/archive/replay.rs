//! Replaying the archive (`replay`): the history a restore rebuilds, proved
//! entry by entry (see the module docs of `archive`).

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use om_backup_format::keys::MacKeys;

use om_proto::raft as pb;
use prost::Message;

use super::{
    MAGIC, MAX_ENTRY_BYTES, MAX_HEADER_BYTES, SUFFIX, TAG_LEN, header_tag, read_exact_or_end,
};
use crate::{Entry, LogId, codec, io_err};

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
    /// With keys, every entry replayed must come from a signed segment
    /// whose tags match.
    pub keys: Option<Arc<MacKeys>>,
}

/// One segment file, as listed.
struct Segment {
    path: PathBuf,
    first: u64,
    header: Option<pb::ArchiveSegmentHeader>,
    /// The header's encoded bytes (a signed segment's tags start from them).
    header_body: Vec<u8>,
    /// Where its records begin.
    records_at: u64,
}

/// Reads a segment's header, if it has one (`None` for a segment written
/// before headers existed), with where its records begin.
#[cfg(test)]
pub(super) fn read_header(path: &Path) -> std::io::Result<Option<(pb::ArchiveSegmentHeader, u64)>> {
    Ok(read_header_bytes(path)?.map(|(h, _, at)| (h, at)))
}

/// `read_header` with the header's encoded bytes.
fn read_header_bytes(
    path: &Path,
) -> std::io::Result<Option<(pb::ArchiveSegmentHeader, Vec<u8>, u64)>> {
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
    Ok(Some((h, body, 16 + u64::from(len))))
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
            let (header, header_body, records_at) = match read_header_bytes(&path)? {
                Some((h, body, at)) => (Some(h), body, at),
                None => (None, Vec::new(), 0),
            };
            out.push(Segment {
                path,
                first,
                header,
                header_body,
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

/// How a segment's records are authenticated.
enum Signing {
    /// No tags.
    Unsigned,
    /// Tags, read past unverified (no keys given).
    Unchecked,
    /// Tags checked under the key `id`; the last one read.
    Checked {
        keys: Arc<MacKeys>,
        id: String,
        last: [u8; TAG_LEN],
    },
}

/// A segment being read, one record ahead.
struct Cursor {
    path: PathBuf,
    reader: BufReader<File>,
    prev: Prev,
    next: Option<Entry>,
    signing: Signing,
}

impl Cursor {
    fn open(s: &Segment, keys: Option<&Arc<MacKeys>>) -> std::io::Result<Cursor> {
        let mut f = File::open(&s.path)?;
        f.seek(SeekFrom::Start(s.records_at))?;
        let prev = match (&s.header, s.header.as_ref().and_then(|h| h.prev.as_ref())) {
            (_, Some(p)) => Prev::Known(codec::log_id_from_pb(p)),
            (Some(_), None) if s.first <= 1 => Prev::Origin,
            _ => Prev::Unknown,
        };
        let signed = s.header.as_ref().map_or("", |h| h.mac_key_id.as_str());
        let signing = match (signed, keys) {
            ("", _) => Signing::Unsigned,
            (_, None) => Signing::Unchecked,
            (id, Some(k)) => Signing::Checked {
                last: header_tag(k, id, &s.header_body)
                    .map_err(|why| fork(format!("{}: {why}", s.path.display())))?,
                keys: k.clone(),
                id: id.to_string(),
            },
        };
        let mut c = Cursor {
            path: s.path.clone(),
            reader: BufReader::new(f),
            prev,
            next: None,
            signing,
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
        if !matches!(self.signing, Signing::Unsigned) {
            let mut tag = [0u8; TAG_LEN];
            if read_exact_or_end(&mut self.reader, &mut tag)?.is_none() {
                return Ok(None);
            }
            if let Signing::Checked { keys, id, last } = &mut self.signing {
                let parts: [&[u8]; 3] = [&last[..], &index.to_be_bytes(), &body];
                keys.check(id, &parts, &tag).map_err(|why| {
                    fork(format!(
                        "{}: the record of index {index} was altered or added without the \
                         backup key ({why}); nothing is replayed from an archive that was \
                         tampered with",
                        self.path.display()
                    ))
                })?;
                *last = tag;
            }
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
    let mut unchecked_warned = false;
    let done = |next: u64| to.is_some_and(|t| next > t);
    while !done(next) {
        while pending.front().is_some_and(|s| s.first <= next) {
            if let Some(s) = pending.pop_front() {
                active.push(Cursor::open(&s, history.keys.as_ref())?);
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
        if history.keys.is_some()
            && let Some(c) = chosen
                .iter()
                .find(|c| matches!(c.signing, Signing::Unsigned))
        {
            return Err(fork(format!(
                "{} holds entry {next} unsigned, and a backup key was given: only signed \
                 segments are replayed (archive with --backup-key-file)",
                c.path.display()
            )));
        }
        if history.keys.is_none()
            && !unchecked_warned
            && chosen
                .iter()
                .any(|c| matches!(c.signing, Signing::Unchecked))
        {
            tracing::warn!(
                segment = %chosen[0].path.display(),
                "the archive is signed, but no --backup-key-file was given: replayed unverified"
            );
            unchecked_warned = true;
        }
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
