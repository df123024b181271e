//! A check of RocksDB's write-ahead log before the store opens: rotted
//! bytes in written data stop the member; a torn tail does not.
//!
//! RocksDB replays its WAL at open with point-in-time recovery: at the
//! first record that fails its checksum it stops, keeping everything
//! before and silently dropping everything after. That is right for what a
//! power cut leaves, a torn tail of data never synced (and so never
//! acknowledged), and wrong for a bit that rotted in the middle of synced
//! data: the member would come back without log entries it acknowledged,
//! which Raft counts on it keeping (a vote it cast may go too). Neither
//! RocksDB mode tells the two apart (the stricter ones also refuse a torn
//! tail), so this check does, as etcd's WAL does: a tear leaves zeros (an
//! append the disk never wrote reads back as zeros or as the end of the
//! file), rot leaves changed bytes amid intact ones.
//!
//! A damaged record is a torn write when the file ends inside it, when
//! zeros stand where its header should be, when it holds a whole zeroed
//! 512-byte sector, or when its bytes end in zeros that run on to a
//! sector's end (a page written only in part, the pages after it written).
//! Anything else is rot: `check_dir` refuses to open the store, naming the
//! file and the offset. After a tear everything later is unsynced (a sync
//! covers the files in order, each to its end), so the scan stops at the
//! first one and leaves the rest to RocksDB.
//!
//! The format (RocksDB's `log_format.h`): 32 KiB blocks of physical
//! records, each a header (masked CRC32C of the type and payload, 2-byte
//! length, 1-byte type; 4 more bytes of log number for the recyclable
//! types) then its payload; a record never spans a block, and a block's
//! last bytes, too few for a header, are zero padding.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

const BLOCK: usize = 32 * 1024;
const HEADER: usize = 7;
const RECYCLABLE_HEADER: usize = 11;
const SECTOR: usize = 512;

/// How one WAL file ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every record is intact.
    Clean,
    /// A write that did not finish: the file ends inside a record, or
    /// zeros stand where a record's bytes should be.
    Torn { offset: u64 },
    /// A record that fails its checksum amid intact data.
    Rotted { offset: u64, why: &'static str },
}

/// What a scan of one WAL file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// Each intact physical record: its offset and payload length.
    pub records: Vec<(u64, usize)>,
    pub ending: Ending,
}

/// Refuses (`InvalidData`) a store whose WAL has rotted bytes in it; see
/// the module's documentation. A directory without WAL files passes. It
/// only reads: a process still writing the WAL (one about to give the
/// store up) is never disturbed, and what it appends while the check runs
/// is not looked at.
pub fn check_dir(db_dir: &Path) -> io::Result<()> {
    for path in wal_files(db_dir)? {
        match scan(&path)?.ending {
            Ending::Clean => {}
            // Everything after a tear is unsynced; RocksDB stops there.
            Ending::Torn { offset } => {
                tracing::info!(
                    wal = %path.display(),
                    offset,
                    "the write-ahead log ends in a write cut short (a crash or power cut); \
                     what precedes it is replayed"
                );
                return Ok(());
            }
            Ending::Rotted { offset, why } => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the write-ahead log {} is corrupt at byte {offset} ({why}, with intact \
                         records after it): entries this member wrote and acknowledged were \
                         lost, so it must not serve or vote; rebuild it from a peer \
                         (docs/operations.md, \"A member's store is corrupt\")",
                        path.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The WAL files (`NNNNNN.log`) in `db_dir`, oldest first.
pub fn wal_files(db_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(db_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut logs: Vec<(u64, PathBuf)> = Vec::new();
    for e in entries {
        let path = e?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(n) = number {
            logs.push((n, path));
        }
    }
    logs.sort();
    Ok(logs.into_iter().map(|(_, p)| p).collect())
}

/// Scans one WAL file, block by block.
pub fn scan(path: &Path) -> io::Result<Scan> {
    let file = std::fs::File::open(path)?;
    // The file as long as it is now: a writer may still append to it.
    let len = file.metadata()?.len();
    let mut file = file.take(len);
    let mut records = Vec::new();
    // The block being read and the one after it (to know the last).
    let mut block = read_block(&mut file)?;
    let mut next = read_block(&mut file)?;
    let mut base = 0u64;
    while !block.is_empty() {
        let at_eof = next.is_empty();
        let mut pos = 0;
        while block.len() - pos >= HEADER {
            let offset = base + pos as u64;
            let h = &block[pos..];
            let len = usize::from(u16::from_le_bytes([h[4], h[5]]));
            let kind = h[6];
            if kind == 0 && len == 0 {
                // Zeros where a header should be: an append never written
                // (RocksDB skips the rest of the block).
                if h[..HEADER].iter().all(|b| *b == 0) {
                    return Ok(Scan {
                        records,
                        ending: Ending::Torn { offset },
                    });
                }
            }
            let header = if matches!(kind, 5..=8 | 11 | 131) {
                RECYCLABLE_HEADER
            } else {
                HEADER
            };
            let end = pos + header + len;
            if end > block.len() {
                if at_eof {
                    // The file ends inside the record.
                    return Ok(Scan {
                        records,
                        ending: Ending::Torn { offset },
                    });
                }
                let ending = classify(offset, &block[pos..], &[], "bad record length");
                return Ok(Scan { records, ending });
            }
            let expected = unmask(u32::from_le_bytes([h[0], h[1], h[2], h[3]]));
            if crc32c(&block[pos + 6..end]) != expected {
                let ending = classify(offset, &block[pos..end], &block[end..], "checksum mismatch");
                return Ok(Scan { records, ending });
            }
            records.push((offset, len));
            pos = end;
        }
        base += block.len() as u64;
        block = next;
        next = read_block(&mut file)?;
    }
    Ok(Scan {
        records,
        ending: Ending::Clean,
    })
}

/// Whether the damaged record `bytes` at `offset`, followed by `after`
/// (the rest of its block), is a torn write or rot.
fn classify(offset: u64, bytes: &[u8], after: &[u8], why: &'static str) -> Ending {
    // Sectors are aligned in the file; blocks are too.
    let first_sector = (SECTOR - (offset as usize % SECTOR)) % SECTOR;
    let zero_sector = bytes
        .get(first_sector..)
        .unwrap_or_default()
        .chunks_exact(SECTOR)
        .any(|s| s.iter().all(|b| *b == 0));
    // Zeros from inside the record on to a sector's end (a block's end is
    // one): a write that stopped there.
    let end = offset as usize + bytes.len();
    let to_boundary = end.next_multiple_of(SECTOR) - end;
    let zero_tail = bytes.last() == Some(&0) && after.iter().take(to_boundary).all(|b| *b == 0);
    if zero_sector || zero_tail {
        Ending::Torn { offset }
    } else {
        Ending::Rotted { offset, why }
    }
}

/// Reads up to one block; empty at the end of the file.
fn read_block(file: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(BLOCK);
    file.by_ref().take(BLOCK as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// RocksDB stores CRCs masked (`crc32c::Mask`).
fn unmask(masked: u32) -> u32 {
    let rot = masked.wrapping_sub(0xa282_ead8);
    rot.rotate_left(15)
}

/// CRC-32C (Castagnoli), as RocksDB computes it.
pub fn crc32c(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU has SSE 4.2, checked just above.
            return unsafe { crc32c_sse42(data) };
        }
    }
    let table = table();
    let mut crc = !0u32;
    for b in data {
        crc = table[((crc ^ u32::from(*b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};
    let mut crc = !0u64;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let mut crc = crc as u32;
    for b in words.remainder() {
        crc = _mm_crc32_u8(crc, *b);
    }
    !crc
}

fn table() -> &'static [u32; 256] {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 == 1 {
                    0x82f6_3b78 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        t
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store with a WAL of `n` writes and no flush.
    fn store_with_wal(dir: &Path, n: u32) -> PathBuf {
        store_with_wal_of(dir, n, |i| 100 + (i as usize * 37) % 3000)
    }

    /// `store_with_wal`, the i-th value `size(i)` bytes long.
    fn store_with_wal_of(dir: &Path, n: u32, size: impl Fn(u32) -> usize) -> PathBuf {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        let db = rocksdb::DB::open(&opts, dir).unwrap();
        let mut sync = rocksdb::WriteOptions::default();
        sync.set_sync(true);
        for i in 0..n {
            let value = vec![(i % 251) as u8 + 1; size(i)];
            db.put_opt(format!("key{i:06}"), value, &sync).unwrap();
        }
        drop(db);
        let logs = wal_files(dir).unwrap();
        assert_eq!(logs.len(), 1, "{logs:?}");
        logs[0].clone()
    }

    fn reopened_keys(dir: &Path) -> usize {
        let mut opts = rocksdb::Options::default();
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        let db = rocksdb::DB::open(&opts, dir).unwrap();
        db.iterator(rocksdb::IteratorMode::Start).count()
    }

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        let t = table();
        let mut crc = !0u32;
        for b in b"123456789" {
            crc = t[((crc ^ u32::from(*b)) & 0xff) as usize] ^ (crc >> 8);
        }
        assert_eq!(!crc, 0xe306_9283);
    }

    #[test]
    fn an_intact_wal_is_clean_and_every_record_is_found() {
        let tmp = tempfile::tempdir().unwrap();
        let log = store_with_wal(tmp.path(), 400);
        let s = scan(&log).unwrap();
        assert_eq!(s.ending, Ending::Clean);
        // Records larger than a block's rest are split in fragments.
        assert!(s.records.len() >= 400, "{}", s.records.len());
        check_dir(tmp.path()).unwrap();
        assert_eq!(reopened_keys(tmp.path()), 400);
    }

    #[test]
    fn a_rotted_byte_amid_intact_records_refuses_the_store() {
        let tmp = tempfile::tempdir().unwrap();
        let log = store_with_wal(tmp.path(), 400);
        let s = scan(&log).unwrap();
        let (offset, len) = s.records[s.records.len() / 2];
        let mut bytes = std::fs::read(&log).unwrap();
        let at = offset as usize + HEADER + len / 2;
        bytes[at] ^= 0x5a;
        std::fs::write(&log, &bytes).unwrap();
        assert!(matches!(
            scan(&log).unwrap().ending,
            Ending::Rotted { offset: o, why: "checksum mismatch" } if o == offset
        ));
        let e = check_dir(tmp.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(
            e.to_string().contains(&format!("corrupt at byte {offset}")),
            "{e}"
        );
        // Without the check, RocksDB opens it and drops every later write.
        assert!(reopened_keys(tmp.path()) < 400);
    }

    #[test]
    fn a_rotted_length_is_rot_too() {
        let tmp = tempfile::tempdir().unwrap();
        let log = store_with_wal(tmp.path(), 400);
        let s = scan(&log).unwrap();
        let (offset, _) = s.records[s.records.len() / 3];
        let mut bytes = std::fs::read(&log).unwrap();
        bytes[offset as usize + 4] ^= 0x01;
        std::fs::write(&log, &bytes).unwrap();
        assert!(matches!(scan(&log).unwrap().ending, Ending::Rotted { .. }));
    }

    /// The keys a reopened store holds are `key000000` on, without a gap.
    fn keys_form_a_prefix(dir: &Path) -> usize {
        let mut opts = rocksdb::Options::default();
        opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        let db = rocksdb::DB::open(&opts, dir).unwrap();
        let keys: Vec<String> = db
            .iterator(rocksdb::IteratorMode::Start)
            .map(|kv| String::from_utf8(kv.unwrap().0.to_vec()).unwrap())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(*k, format!("key{i:06}"), "a gap in the replayed keys");
        }
        keys.len()
    }

    #[test]
    fn torn_tails_pass_and_rocksdb_keeps_the_intact_prefix() {
        let tmp = tempfile::tempdir().unwrap();
        let log = store_with_wal(tmp.path(), 400);
        let whole = std::fs::read(&log).unwrap();
        let s = scan(&log).unwrap();
        let (offset, len) = s.records[s.records.len() - 5];
        let mid = offset as usize + HEADER + len / 2;
        // Cut off inside a record.
        std::fs::write(&log, &whole[..mid]).unwrap();
        assert_eq!(scan(&log).unwrap().ending, Ending::Torn { offset });
        check_dir(tmp.path()).unwrap();
        // Zeros from inside a record to the end of the file.
        let mut zeroed = whole.clone();
        zeroed[mid..].fill(0);
        std::fs::write(&log, &zeroed).unwrap();
        assert_eq!(scan(&log).unwrap().ending, Ending::Torn { offset });
        // A page written in part, the ones after it whole: zeros from
        // inside a record to the next sector's end, intact bytes after.
        let (offset, len) = s.records[s.records.len() - 9];
        let from = offset as usize + HEADER + len - 3;
        let mut part = whole.clone();
        part[from..(from + 1).next_multiple_of(SECTOR)].fill(0);
        std::fs::write(&log, &part).unwrap();
        assert_eq!(scan(&log).unwrap().ending, Ending::Torn { offset });
        // A lost page amid kept ones: a zeroed sector inside a record.
        let (offset, len) = s
            .records
            .iter()
            .rev()
            .find(|(_, len)| *len > 2 * SECTOR)
            .copied()
            .unwrap();
        let mut holed = whole.clone();
        let from = (offset as usize + HEADER).next_multiple_of(SECTOR);
        holed[from..from + SECTOR].fill(0);
        assert!(from + SECTOR <= offset as usize + HEADER + len);
        std::fs::write(&log, &holed).unwrap();
        assert_eq!(scan(&log).unwrap().ending, Ending::Torn { offset });
        check_dir(tmp.path()).unwrap();
        let kept = keys_form_a_prefix(tmp.path());
        assert!(kept > 0 && kept < 400, "{kept}");
    }
}
