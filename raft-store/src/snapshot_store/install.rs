//! Installing a verified snapshot file: the state column families are
//! cleared and refilled by ingesting SST files written from the file, with the
//! applied state written last (the order and what a crash leaves are in the
//! parent module's docs). The old one-batch install stays for side-by-side
//! measurements only.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use om_proto::raft as pb;
use prost::Message;
use rocksdb::{DB, WriteBatch, WriteOptions};

use super::{SnapshotStats, SnapshotStore, TMP_PREFIX, cf};
use crate::snapshot::{SnapshotError, SnapshotReader};
use crate::{SnapshotMeta, codec, io_err, keys};

/// The encoded applied state an installed snapshot leaves: its last log id,
/// membership and state digest (from the file's header).
fn applied_state(meta: &SnapshotMeta, digest: &[u8]) -> Vec<u8> {
    pb::AppliedState {
        last_applied: codec::opt_log_id_to_pb(&meta.last_log_id),
        membership: Some(codec::stored_membership_to_pb(&meta.last_membership)),
        state_digest: digest.to_vec(),
    }
    .encode_to_vec()
}

impl SnapshotStore {
    /// Replaces every state column family and the applied state with the
    /// snapshot at `path` (order and crash behaviour in the module docs).
    pub(super) fn install_file(
        &self,
        meta: &SnapshotMeta,
        path: &Path,
    ) -> Result<(), SnapshotError> {
        if self.batch_install.load(Ordering::Relaxed) {
            return self.install_file_in_one_batch(meta, path);
        }
        let db = &self.db;
        let mut reader = SnapshotReader::open_file(path)?;
        let digest = reader.meta.state_digest.clone();
        let targets = self.targets(&reader)?;
        let mut clear = WriteBatch::default();
        self.clear_state(&mut clear)?;
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        db.write_opt(clear, &wo)?;

        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
        let dir = TmpDir::create(
            self.dir
                .join(format!("{TMP_PREFIX}ingest-{}-{n}", std::process::id())),
        )?;
        let opts = rocksdb::Options::default();
        let mut run = SstRun::new(
            &opts,
            &dir.path,
            self.ingest_file_bytes.load(Ordering::Relaxed),
        );
        let mut ingested = 0u32;
        while let Some((i, k, v)) = reader.next_record()? {
            if run.cf != Some(i) {
                if let Some(prev) = run.cf {
                    run.ingest(db, targets[prev as usize], &self.stats)?;
                    ingested += 1;
                    self.ingest_fault(ingested)?;
                }
                run.cf = Some(i);
            }
            run.put(&k, &v)?;
        }
        if let Some(prev) = run.cf {
            run.ingest(db, targets[prev as usize], &self.stats)?;
            ingested += 1;
            self.ingest_fault(ingested)?;
        }
        drop(run);
        drop(dir);

        db.put_cf_opt(
            cf(db, keys::SM_META_CF)?,
            keys::APPLIED_KEY,
            applied_state(meta, &digest),
            &wo,
        )?;
        self.stats.installed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The old install: every record and the applied state in one synced
    /// write batch, which holds the whole state in memory. Kept only to
    /// measure against the SST path.
    fn install_file_in_one_batch(
        &self,
        meta: &SnapshotMeta,
        path: &Path,
    ) -> Result<(), SnapshotError> {
        let db = &self.db;
        let mut reader = SnapshotReader::open_file(path)?;
        let digest = reader.meta.state_digest.clone();
        let targets = self.targets(&reader)?;
        let mut batch = WriteBatch::default();
        self.clear_state(&mut batch)?;
        while let Some((i, k, v)) = reader.next_record()? {
            batch.put_cf(targets[i as usize], k, v);
        }
        batch.put_cf(
            cf(db, keys::SM_META_CF)?,
            keys::APPLIED_KEY,
            applied_state(meta, &digest),
        );
        let mut wo = WriteOptions::default();
        wo.set_sync(true);
        db.write_opt(batch, &wo)?;
        self.stats.installed.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The file's column families mapped onto ours by name.
    fn targets<R: std::io::Read>(
        &self,
        reader: &SnapshotReader<R>,
    ) -> Result<Vec<&rocksdb::ColumnFamily>, SnapshotError> {
        let mut targets = Vec::with_capacity(reader.cfs.len());
        for name in &reader.cfs {
            if !self.tables.contains(name) {
                return Err(SnapshotError::UnknownColumnFamily(name.clone()));
            }
            targets.push(cf(&self.db, name)?);
        }
        Ok(targets)
    }

    /// Adds to `batch` a range deletion of everything in every state column
    /// family and in `sm_meta` (the applied state).
    fn clear_state(&self, batch: &mut WriteBatch) -> Result<(), SnapshotError> {
        let db = &self.db;
        let mut names: Vec<&str> = self.tables.iter().map(String::as_str).collect();
        names.push(keys::SM_META_CF);
        for name in names {
            let c = cf(db, name)?;
            let mut it = db.raw_iterator_cf(c);
            it.seek_to_last();
            if let Some(last) = it.key() {
                let mut end = last.to_vec();
                end.push(0);
                batch.delete_range_cf(c, Vec::<u8>::new(), end);
            }
            it.status()?;
        }
        Ok(())
    }

    fn ingest_fault(&self, ingested: u32) -> Result<(), SnapshotError> {
        if self.faults.install_ingest_failure(ingested) {
            return Err(SnapshotError::Io(io_err(format!(
                "injected failure after ingesting {ingested} column families of a snapshot"
            ))));
        }
        Ok(())
    }
}

/// A staging directory removed (with what is left in it) when dropped.
struct TmpDir {
    path: PathBuf,
}

impl TmpDir {
    fn create(path: PathBuf) -> std::io::Result<TmpDir> {
        std::fs::create_dir(&path)?;
        Ok(TmpDir { path })
    }
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot remove a snapshot staging directory");
        }
    }
}

/// One column family's sorted run of records, written into SST files of
/// about `file_bytes` each and ingested together.
struct SstRun<'a> {
    opts: &'a rocksdb::Options,
    dir: &'a Path,
    file_bytes: u64,
    cf: Option<u32>,
    writer: Option<rocksdb::SstFileWriter<'a>>,
    bytes: u64,
    files: Vec<PathBuf>,
    seq: u64,
}

impl<'a> SstRun<'a> {
    fn new(opts: &'a rocksdb::Options, dir: &'a Path, file_bytes: u64) -> Self {
        SstRun {
            opts,
            dir,
            file_bytes,
            cf: None,
            writer: None,
            bytes: 0,
            files: Vec::new(),
            seq: 0,
        }
    }

    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<(), SnapshotError> {
        if self.bytes >= self.file_bytes {
            self.finish_file()?;
        }
        let w = match &mut self.writer {
            Some(w) => w,
            None => {
                let path = self.dir.join(format!("{:06}.sst", self.seq));
                self.seq += 1;
                let w = rocksdb::SstFileWriter::create(self.opts);
                w.open(&path)?;
                self.files.push(path);
                self.bytes = 0;
                self.writer.insert(w)
            }
        };
        w.put(k, v)?;
        self.bytes += (k.len() + v.len()) as u64;
        Ok(())
    }

    fn finish_file(&mut self) -> Result<(), SnapshotError> {
        if let Some(mut w) = self.writer.take() {
            w.finish()?;
        }
        Ok(())
    }

    /// Finishes the last file and ingests the run's files into `cf`
    /// (moved, not copied: they are links into the database afterwards).
    fn ingest(
        &mut self,
        db: &DB,
        cf: &rocksdb::ColumnFamily,
        stats: &SnapshotStats,
    ) -> Result<(), SnapshotError> {
        self.finish_file()?;
        let mut o = rocksdb::IngestExternalFileOptions::default();
        o.set_move_files(true);
        let files = std::mem::take(&mut self.files);
        let n = files.len() as u64;
        db.ingest_external_file_cf_opts(cf, &o, files)?;
        stats.ingested_files.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}
