//! The snapshot file: a consistent point-in-time copy of the replicated state.
//!
//! It is built from a RocksDB snapshot (a consistent view that does not block
//! writers) of every state column family, and laid out as:
//!
//! ```text
//! "OMSNAP01"
//! u32 LE meta length, om.raft.v1.SnapshotMeta
//! u32 LE number of column families, then each as u16 LE length + name
//! records: u8 1, u32 LE cf index, u32 LE key length, key, u32 LE value length, value
//! end:     u8 0, u64 LE record count, u32 LE CRC32 of every byte before it
//! ```
//!
//! Records are in strictly ascending (cf index, key) order, keys compared
//! bytewise (every column family uses RocksDB's default comparator): each
//! column family's records form one sorted run, which an installing node
//! writes straight into SST files and ingests (see `snapshot_store`).
//!
//! Nothing read from a snapshot file is trusted before [`verify_file`] (or a
//! full pass of [`SnapshotReader`]) accepted it: every length is checked
//! against its limit below and against the bytes left in the file before a
//! buffer is allocated, so a damaged or hostile file is refused without a
//! large allocation.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use om_proto::raft as pb;
use prost::Message;

const MAGIC: &[u8; 8] = b"OMSNAP01";
const TAG_RECORD: u8 = 1;
const TAG_END: u8 = 0;
/// Bytes of the trailer after its tag: record count and CRC.
const TRAILER_BYTES: u64 = 8 + 4;

/// Largest encoded `SnapshotMeta`: a log id and the membership (a few
/// addresses per member); 1 MiB is far above any real cluster.
pub const MAX_META_BYTES: u32 = 1 << 20;
/// Most column families one snapshot may name (om has about a dozen).
pub const MAX_COLUMN_FAMILIES: u32 = 64;
/// Longest column-family name.
pub const MAX_CF_NAME_BYTES: u16 = 255;
/// Largest key of a record. om's keys are at most a few names of at most
/// 1 KiB each plus fixed-width ids; 64 KiB leaves ample room.
pub const MAX_KEY_BYTES: u32 = 64 << 10;
/// Largest value of a record. om's largest records are block lists (a 5 TiB
/// key in 256 MiB blocks, or a 10,000-part upload) of well under 2 MiB; the
/// writer refuses to build a file past this limit, so every file a node
/// builds is one its peers accept.
pub const MAX_VALUE_BYTES: u32 = 32 << 20;

/// Why a snapshot file was refused (or could not be read or written).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("snapshot read from the database: {0}")]
    Db(#[from] rocksdb::Error),
    #[error("not an om snapshot file (bad magic)")]
    BadMagic,
    #[error("snapshot {what} of {len} bytes exceeds the limit of {limit}")]
    TooLarge {
        what: &'static str,
        len: u64,
        limit: u64,
    },
    #[error("snapshot truncated: {what} needs {need} bytes, {left} left")]
    Truncated {
        what: &'static str,
        need: u64,
        left: u64,
    },
    #[error("snapshot meta does not decode: {0}")]
    BadMeta(String),
    #[error("snapshot column-family name is not UTF-8")]
    BadName,
    #[error("snapshot names column family {0:?} twice")]
    DuplicateColumnFamily(String),
    #[error("snapshot holds column family {0:?}, which this node does not have")]
    UnknownColumnFamily(String),
    #[error("snapshot record names column family #{index}, the file names {count}")]
    BadColumnFamilyIndex { index: u32, count: usize },
    #[error("corrupt snapshot record tag {0}")]
    BadTag(u8),
    #[error("snapshot checksum mismatch")]
    ChecksumMismatch,
    #[error("snapshot record count mismatch: the trailer says {trailer}, the file holds {found}")]
    RecordCountMismatch { trailer: u64, found: u64 },
    #[error("{0} bytes after the snapshot trailer")]
    TrailingBytes(u64),
    #[error("snapshot meta in the file differs from the meta it came with")]
    MetaMismatch,
    #[error(
        "snapshot record #{0} is not after the one before it (records must ascend by column family, then key)"
    )]
    OutOfOrder(u64),
}

impl SnapshotError {
    /// A resource shortage (file descriptors, disk space) that may clear up:
    /// the operation is worth retrying, the file is not at fault.
    pub fn is_transient(&self) -> bool {
        match self {
            SnapshotError::Io(e) => crate::transient::is_transient_io(e),
            SnapshotError::Db(e) => crate::transient::is_transient_db(e),
            _ => false,
        }
    }

    /// The file does not exist (no snapshot yet).
    pub fn is_not_found(&self) -> bool {
        matches!(self, SnapshotError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

impl From<SnapshotError> for std::io::Error {
    fn from(e: SnapshotError) -> Self {
        match e {
            SnapshotError::Io(e) => e,
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// Streams records into a snapshot file, computing its checksum as it goes.
pub struct SnapshotWriter {
    out: BufWriter<File>,
    crc: crc32fast::Hasher,
    records: u64,
    bytes: u64,
    order: RecordOrder,
}

/// The (cf index, key) of the last record, to check that records ascend.
#[derive(Default)]
struct RecordOrder {
    last: Option<(u32, Vec<u8>)>,
}

impl RecordOrder {
    /// Accepts `(cf, key)` only if it is after the previous record.
    fn next(&mut self, cf: u32, key: &[u8]) -> bool {
        let after = match &self.last {
            None => true,
            Some((c, k)) => (cf, key) > (*c, k.as_slice()),
        };
        if after {
            match &mut self.last {
                Some((c, k)) => {
                    *c = cf;
                    k.clear();
                    k.extend_from_slice(key);
                }
                None => self.last = Some((cf, key.to_vec())),
            }
        }
        after
    }
}

impl SnapshotWriter {
    /// Starts a snapshot in `file` (created by the caller, which owns its path).
    pub fn new(file: File, meta: &pb::SnapshotMeta, cfs: &[String]) -> Result<Self, SnapshotError> {
        let mut w = SnapshotWriter {
            out: BufWriter::with_capacity(1 << 20, file),
            crc: crc32fast::Hasher::new(),
            records: 0,
            bytes: 0,
            order: RecordOrder::default(),
        };
        w.put(MAGIC)?;
        let m = meta.encode_to_vec();
        check_limit("meta", m.len() as u64, MAX_META_BYTES as u64)?;
        w.put(&(m.len() as u32).to_le_bytes())?;
        w.put(&m)?;
        check_limit(
            "column-family count",
            cfs.len() as u64,
            MAX_COLUMN_FAMILIES as u64,
        )?;
        w.put(&(cfs.len() as u32).to_le_bytes())?;
        for cf in cfs {
            check_limit(
                "column-family name",
                cf.len() as u64,
                MAX_CF_NAME_BYTES as u64,
            )?;
            w.put(&(cf.len() as u16).to_le_bytes())?;
            w.put(cf.as_bytes())?;
        }
        Ok(w)
    }

    /// `new` on a freshly created file at `path`.
    pub fn create(
        path: &Path,
        meta: &pb::SnapshotMeta,
        cfs: &[String],
    ) -> Result<Self, SnapshotError> {
        Self::new(File::create(path)?, meta, cfs)
    }

    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.crc.update(b);
        self.bytes += b.len() as u64;
        self.out.write_all(b)
    }

    /// Appends one record. A key or value past its limit is refused here, so
    /// a node never builds a file that its peers would refuse.
    pub fn record(&mut self, cf_index: u32, key: &[u8], value: &[u8]) -> Result<(), SnapshotError> {
        check_limit("key", key.len() as u64, MAX_KEY_BYTES as u64)?;
        check_limit("value", value.len() as u64, MAX_VALUE_BYTES as u64)?;
        if !self.order.next(cf_index, key) {
            return Err(SnapshotError::OutOfOrder(self.records));
        }
        self.put(&[TAG_RECORD])?;
        self.put(&cf_index.to_le_bytes())?;
        self.put(&(key.len() as u32).to_le_bytes())?;
        self.put(key)?;
        self.put(&(value.len() as u32).to_le_bytes())?;
        self.put(value)?;
        self.records += 1;
        Ok(())
    }

    /// Writes the trailer and fsyncs the file. Returns its size in bytes.
    pub fn finish(mut self) -> Result<u64, SnapshotError> {
        self.put(&[TAG_END])?;
        let n = self.records;
        self.put(&n.to_le_bytes())?;
        let crc = self.crc.clone().finalize();
        self.out.write_all(&crc.to_le_bytes())?;
        let file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(self.bytes + 4)
    }
}

fn check_limit(what: &'static str, len: u64, limit: u64) -> Result<(), SnapshotError> {
    if len > limit {
        return Err(SnapshotError::TooLarge { what, len, limit });
    }
    Ok(())
}

/// One record: column-family index, key, value.
pub type SnapshotRecord = (u32, Vec<u8>, Vec<u8>);

/// Reads a snapshot file record by record; the last `next_record` (the one
/// returning `None`) checks the trailer, the CRC and that nothing follows.
pub struct SnapshotReader<R: Read> {
    input: BufReader<R>,
    crc: crc32fast::Hasher,
    /// Bytes of the file not read yet: no length read from the file may exceed it.
    left: u64,
    pub meta: pb::SnapshotMeta,
    pub cfs: Vec<String>,
    records: u64,
    done: bool,
    order: RecordOrder,
}

impl SnapshotReader<File> {
    /// Opens the snapshot file at `path`, taking its length from the file system.
    pub fn open_file(path: &Path) -> Result<Self, SnapshotError> {
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        SnapshotReader::open(f, len)
    }
}

impl<R: Read> SnapshotReader<R> {
    /// Reads the header of a snapshot of `len` bytes from `r`.
    pub fn open(r: R, len: u64) -> Result<Self, SnapshotError> {
        let mut s = SnapshotReader {
            input: BufReader::with_capacity(64 << 10, r),
            crc: crc32fast::Hasher::new(),
            left: len,
            meta: pb::SnapshotMeta::default(),
            cfs: Vec::new(),
            records: 0,
            done: false,
            order: RecordOrder::default(),
        };
        let magic = s.take("magic", 8)?;
        if magic != MAGIC {
            return Err(SnapshotError::BadMagic);
        }
        let mlen = s.u32("meta length")?;
        check_limit("meta", mlen as u64, MAX_META_BYTES as u64)?;
        let m = s.take("meta", mlen as u64)?;
        s.meta = pb::SnapshotMeta::decode(m.as_slice())
            .map_err(|e| SnapshotError::BadMeta(e.to_string()))?;
        let n = s.u32("column-family count")?;
        check_limit("column-family count", n as u64, MAX_COLUMN_FAMILIES as u64)?;
        for _ in 0..n {
            let l = u16::from_le_bytes(s.array::<2>("column-family name length")?);
            check_limit("column-family name", l as u64, MAX_CF_NAME_BYTES as u64)?;
            let name = String::from_utf8(s.take("column-family name", l as u64)?)
                .map_err(|_| SnapshotError::BadName)?;
            if s.cfs.contains(&name) {
                return Err(SnapshotError::DuplicateColumnFamily(name));
            }
            s.cfs.push(name);
        }
        Ok(s)
    }

    /// Reads `n` bytes, after checking that the file still holds them (so a
    /// corrupt length never allocates more than the file's size).
    fn take(&mut self, what: &'static str, n: u64) -> Result<Vec<u8>, SnapshotError> {
        if n > self.left {
            return Err(SnapshotError::Truncated {
                what,
                need: n,
                left: self.left,
            });
        }
        let mut b = vec![0; n as usize];
        self.input.read_exact(&mut b)?;
        self.crc.update(&b);
        self.left -= n;
        Ok(b)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], SnapshotError> {
        let v = self.take(what, N as u64)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&v);
        Ok(a)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, SnapshotError> {
        Ok(u32::from_le_bytes(self.array::<4>(what)?))
    }

    /// The next record as (cf index, key, value), or `None` at the trailer,
    /// which is verified then.
    pub fn next_record(&mut self) -> Result<Option<SnapshotRecord>, SnapshotError> {
        if self.done {
            return Ok(None);
        }
        let tag = self.array::<1>("record tag")?[0];
        match tag {
            TAG_RECORD => {
                let cf = self.u32("column-family index")?;
                if cf as usize >= self.cfs.len() {
                    return Err(SnapshotError::BadColumnFamilyIndex {
                        index: cf,
                        count: self.cfs.len(),
                    });
                }
                let kl = self.u32("key length")?;
                check_limit("key", kl as u64, MAX_KEY_BYTES as u64)?;
                let k = self.take("key", kl as u64)?;
                let vl = self.u32("value length")?;
                check_limit("value", vl as u64, MAX_VALUE_BYTES as u64)?;
                let v = self.take("value", vl as u64)?;
                if !self.order.next(cf, &k) {
                    return Err(SnapshotError::OutOfOrder(self.records));
                }
                self.records += 1;
                Ok(Some((cf, k, v)))
            }
            TAG_END => {
                if self.left < TRAILER_BYTES {
                    return Err(SnapshotError::Truncated {
                        what: "trailer",
                        need: TRAILER_BYTES,
                        left: self.left,
                    });
                }
                let n = u64::from_le_bytes(self.array::<8>("record count")?);
                let expected = self.crc.clone().finalize();
                let mut c = [0u8; 4];
                self.input.read_exact(&mut c)?;
                self.left -= 4;
                if u32::from_le_bytes(c) != expected {
                    return Err(SnapshotError::ChecksumMismatch);
                }
                if n != self.records {
                    return Err(SnapshotError::RecordCountMismatch {
                        trailer: n,
                        found: self.records,
                    });
                }
                if self.left != 0 {
                    return Err(SnapshotError::TrailingBytes(self.left));
                }
                self.done = true;
                Ok(None)
            }
            t => Err(SnapshotError::BadTag(t)),
        }
    }
}

/// What a verified snapshot file holds.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedSnapshot {
    pub meta: pb::SnapshotMeta,
    pub records: u64,
    pub bytes: u64,
}

/// Reads the whole file at `path` and accepts it only if its format, lengths,
/// CRC and record count are right, it names only column families in `known`,
/// and (when given) its meta equals `expected` once decoded.
pub fn verify_file(
    path: &Path,
    known: &[String],
    expected: Option<&crate::SnapshotMeta>,
) -> Result<VerifiedSnapshot, SnapshotError> {
    let f = File::open(path)?;
    let bytes = f.metadata()?.len();
    verify(f, bytes, known, expected)
}

/// `verify_file` over any reader of `len` bytes.
pub fn verify<R: Read>(
    r: R,
    len: u64,
    known: &[String],
    expected: Option<&crate::SnapshotMeta>,
) -> Result<VerifiedSnapshot, SnapshotError> {
    let mut reader = SnapshotReader::open(r, len)?;
    if let Some(unknown) = reader.cfs.iter().find(|c| !known.contains(c)) {
        return Err(SnapshotError::UnknownColumnFamily(unknown.clone()));
    }
    if let Some(expected) = expected {
        let meta = crate::codec::snapshot_meta_from_pb(&reader.meta)
            .map_err(|e| SnapshotError::BadMeta(e.to_string()))?;
        if &meta != expected {
            return Err(SnapshotError::MetaMismatch);
        }
    }
    let mut records = 0u64;
    while reader.next_record()?.is_some() {
        records += 1;
    }
    Ok(VerifiedSnapshot {
        meta: reader.meta,
        records,
        bytes: len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(path: &Path, records: &[(u32, &[u8], &[u8])]) -> pb::SnapshotMeta {
        let meta = pb::SnapshotMeta {
            snapshot_id: "x".into(),
            ..Default::default()
        };
        let mut w = SnapshotWriter::create(path, &meta, &["a".into(), "b".into()]).unwrap();
        for (cf, k, v) in records {
            w.record(*cf, k, v).unwrap();
        }
        w.finish().unwrap();
        meta
    }

    fn known() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn round_trip_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        build(&p, &[(0, b"k1", b"v1"), (1, b"k2", b"")]);
        let mut r = SnapshotReader::open_file(&p).unwrap();
        assert_eq!(r.meta.snapshot_id, "x");
        assert_eq!(
            r.next_record().unwrap(),
            Some((0, b"k1".to_vec(), b"v1".to_vec()))
        );
        assert_eq!(r.next_record().unwrap(), Some((1, b"k2".to_vec(), vec![])));
        assert_eq!(r.next_record().unwrap(), None);
        let v = verify_file(&p, &known(), None).unwrap();
        assert_eq!(v.records, 2);

        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 10] ^= 0x55;
        std::fs::write(&p, &bytes).unwrap();
        assert!(verify_file(&p, &known(), None).is_err());
    }

    #[test]
    fn records_must_ascend_by_column_family_then_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        let meta = pb::SnapshotMeta::default();
        let mut w = SnapshotWriter::create(&p, &meta, &known()).unwrap();
        w.record(0, b"k2", b"").unwrap();
        for (cf, k) in [(0, &b"k2"[..]), (0, b"k1"), (1, b"a")] {
            let r = w.record(cf, k, b"");
            if cf == 1 {
                r.unwrap();
            } else {
                assert!(matches!(r, Err(SnapshotError::OutOfOrder(1))), "{r:?}");
            }
        }
        assert!(matches!(
            w.record(0, b"z", b""),
            Err(SnapshotError::OutOfOrder(2))
        ));
        w.finish().unwrap();
        assert_eq!(verify_file(&p, &known(), None).unwrap().records, 2);

        // A file whose records were swapped (CRC recomputed) is refused by a reader.
        build(&p, &[(0, b"k1", b"1"), (0, b"k2", b"2")]);
        let mut bytes = std::fs::read(&p).unwrap();
        let at = first_key_len_offset(&bytes) + 4;
        assert_eq!(&bytes[at..at + 2], b"k1");
        bytes[at + 1] = b'3';
        let n = bytes.len();
        let crc = crc32fast::hash(&bytes[..n - 4]);
        bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
        let r = verify(bytes.as_slice(), n as u64, &known(), None);
        assert!(matches!(r, Err(SnapshotError::OutOfOrder(1))), "{r:?}");
    }

    /// Offset of the first record's key-length field in a file built by `build`.
    fn first_key_len_offset(bytes: &[u8]) -> usize {
        let mlen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        // magic, meta, cf count, "a" and "b" with their lengths, tag, cf index
        8 + 4 + mlen + 4 + (2 + 1) * 2 + 1 + 4
    }

    #[test]
    fn a_huge_length_is_refused_before_allocating() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        build(&p, &[(0, b"k1", b"v1")]);
        let mut bytes = std::fs::read(&p).unwrap();
        let at = first_key_len_offset(&bytes);
        assert_eq!(&bytes[at..at + 4], &2u32.to_le_bytes());
        // Within the key limit but far past the end of the file.
        bytes[at..at + 4].copy_from_slice(&(MAX_KEY_BYTES).to_le_bytes());
        let r = verify(bytes.as_slice(), bytes.len() as u64, &known(), None);
        assert!(
            matches!(r, Err(SnapshotError::Truncated { what: "key", .. })),
            "{r:?}"
        );
        // Past the key limit.
        bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let r = verify(bytes.as_slice(), bytes.len() as u64, &known(), None);
        assert!(
            matches!(r, Err(SnapshotError::TooLarge { what: "key", .. })),
            "{r:?}"
        );
        // A meta length past its limit.
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let r = verify(bytes.as_slice(), bytes.len() as u64, &known(), None);
        assert!(
            matches!(r, Err(SnapshotError::TooLarge { what: "meta", .. })),
            "{r:?}"
        );
    }

    #[test]
    fn unknown_column_families_trailing_bytes_and_other_meta_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        build(&p, &[(0, b"k1", b"v1")]);
        let r = verify_file(&p, &["a".to_string()], None);
        assert!(
            matches!(&r, Err(SnapshotError::UnknownColumnFamily(n)) if n == "b"),
            "{r:?}"
        );
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.push(0);
        let r = verify(bytes.as_slice(), bytes.len() as u64, &known(), None);
        assert!(matches!(r, Err(SnapshotError::TrailingBytes(1))), "{r:?}");
        let other = crate::SnapshotMeta {
            last_log_id: Some(crate::LogId::new(
                openraft::vote::leader_id_adv::LeaderId {
                    term: 1,
                    node_id: 1,
                },
                5,
            )),
            ..Default::default()
        };
        let r = verify_file(&p, &known(), Some(&other));
        assert!(matches!(r, Err(SnapshotError::MetaMismatch)), "{r:?}");
        assert!(verify_file(&p, &known(), Some(&crate::SnapshotMeta::default())).is_ok());
    }

    #[test]
    fn the_writer_refuses_records_its_peers_would_refuse() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SnapshotWriter::create(
            &dir.path().join("s"),
            &pb::SnapshotMeta::default(),
            &known(),
        )
        .unwrap();
        let key = vec![0u8; MAX_KEY_BYTES as usize + 1];
        assert!(matches!(
            w.record(0, &key, b""),
            Err(SnapshotError::TooLarge { what: "key", .. })
        ));
    }
}
