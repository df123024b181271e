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
//! Readers verify the CRC before anything read from the file is committed.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use om_proto::raft as pb;
use prost::Message;

use crate::io_err;

const MAGIC: &[u8; 8] = b"OMSNAP01";
const TAG_RECORD: u8 = 1;
const TAG_END: u8 = 0;
/// Upper bound on a single key or value, to reject garbage before allocating.
const MAX_FIELD: u32 = 64 * 1024 * 1024;

/// Streams records into a snapshot file, computing its checksum as it goes.
pub struct SnapshotWriter {
    out: BufWriter<File>,
    crc: crc32fast::Hasher,
    records: u64,
    bytes: u64,
}

impl SnapshotWriter {
    pub fn create(path: &Path, meta: &pb::SnapshotMeta, cfs: &[String]) -> std::io::Result<Self> {
        let mut w = SnapshotWriter {
            out: BufWriter::with_capacity(1 << 20, File::create(path)?),
            crc: crc32fast::Hasher::new(),
            records: 0,
            bytes: 0,
        };
        w.put(MAGIC)?;
        let m = meta.encode_to_vec();
        w.put(&(m.len() as u32).to_le_bytes())?;
        w.put(&m)?;
        w.put(&(cfs.len() as u32).to_le_bytes())?;
        for cf in cfs {
            w.put(&(cf.len() as u16).to_le_bytes())?;
            w.put(cf.as_bytes())?;
        }
        Ok(w)
    }

    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.crc.update(b);
        self.bytes += b.len() as u64;
        self.out.write_all(b)
    }

    pub fn record(&mut self, cf_index: u32, key: &[u8], value: &[u8]) -> std::io::Result<()> {
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
    pub fn finish(mut self) -> std::io::Result<u64> {
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

/// One record: column-family index, key, value.
pub type SnapshotRecord = (u32, Vec<u8>, Vec<u8>);

/// Reads a snapshot file record by record; `finish` checks the trailer and CRC.
pub struct SnapshotReader<R: Read> {
    input: BufReader<R>,
    crc: crc32fast::Hasher,
    pub meta: pb::SnapshotMeta,
    pub cfs: Vec<String>,
    records: u64,
    done: bool,
}

impl<R: Read> SnapshotReader<R> {
    pub fn open(r: R) -> std::io::Result<Self> {
        let mut s = SnapshotReader {
            input: BufReader::with_capacity(1 << 20, r),
            crc: crc32fast::Hasher::new(),
            meta: pb::SnapshotMeta::default(),
            cfs: Vec::new(),
            records: 0,
            done: false,
        };
        let magic = s.take(8)?;
        if magic != MAGIC {
            return Err(io_err("not an om snapshot file"));
        }
        let mlen = s.u32()?;
        let m = s.take(mlen as usize)?;
        s.meta = pb::SnapshotMeta::decode(m.as_slice()).map_err(io_err)?;
        let n = s.u32()?;
        for _ in 0..n.min(4096) {
            let l = u16::from_le_bytes(s.take(2)?.try_into().expect("2 bytes"));
            let name = String::from_utf8(s.take(l as usize)?).map_err(io_err)?;
            s.cfs.push(name);
        }
        Ok(s)
    }

    fn take(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        let mut b = vec![0; n];
        self.input.read_exact(&mut b)?;
        self.crc.update(&b);
        Ok(b)
    }

    fn u32(&mut self) -> std::io::Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    /// The next record as (cf index, key, value), or `None` at the trailer,
    /// which is verified then.
    pub fn next_record(&mut self) -> std::io::Result<Option<SnapshotRecord>> {
        if self.done {
            return Ok(None);
        }
        let tag = self.take(1)?[0];
        match tag {
            TAG_RECORD => {
                let cf = self.u32()?;
                if cf as usize >= self.cfs.len() {
                    return Err(io_err("snapshot record names an unknown column family"));
                }
                let kl = self.u32()?;
                if kl > MAX_FIELD {
                    return Err(io_err("snapshot key too large"));
                }
                let k = self.take(kl as usize)?;
                let vl = self.u32()?;
                if vl > MAX_FIELD {
                    return Err(io_err("snapshot value too large"));
                }
                let v = self.take(vl as usize)?;
                self.records += 1;
                Ok(Some((cf, k, v)))
            }
            TAG_END => {
                let n = u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
                let expected = self.crc.clone().finalize();
                let mut c = [0u8; 4];
                self.input.read_exact(&mut c)?;
                if u32::from_le_bytes(c) != expected {
                    return Err(io_err("snapshot checksum mismatch"));
                }
                if n != self.records {
                    return Err(io_err("snapshot record count mismatch"));
                }
                self.done = true;
                Ok(None)
            }
            _ => Err(io_err("corrupt snapshot record tag")),
        }
    }
}

/// Reads just the meta of a snapshot file.
pub fn read_meta(path: &Path) -> std::io::Result<pb::SnapshotMeta> {
    Ok(SnapshotReader::open(File::open(path)?)?.meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s");
        let meta = pb::SnapshotMeta {
            snapshot_id: "x".into(),
            ..Default::default()
        };
        let mut w = SnapshotWriter::create(&p, &meta, &["a".into(), "b".into()]).unwrap();
        w.record(0, b"k1", b"v1").unwrap();
        w.record(1, b"k2", b"").unwrap();
        w.finish().unwrap();
        let mut r = SnapshotReader::open(File::open(&p).unwrap()).unwrap();
        assert_eq!(r.meta.snapshot_id, "x");
        assert_eq!(
            r.next_record().unwrap(),
            Some((0, b"k1".to_vec(), b"v1".to_vec()))
        );
        assert_eq!(r.next_record().unwrap(), Some((1, b"k2".to_vec(), vec![])));
        assert_eq!(r.next_record().unwrap(), None);

        let mut bytes = std::fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 10] ^= 0x55;
        std::fs::write(&p, &bytes).unwrap();
        let mut r = SnapshotReader::open(File::open(&p).unwrap()).unwrap();
        let mut failed = false;
        for _ in 0..4 {
            match r.next_record() {
                Err(_) => {
                    failed = true;
                    break;
                }
                Ok(None) => break,
                Ok(Some(_)) => {}
            }
        }
        assert!(failed, "a flipped byte must fail verification");
    }
}
