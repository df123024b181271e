//! The scrub: every `--scrub-interval-s` (and a first time soon after
//! start) read every record of every column family from disk, bypassing
//! the block cache, so RocksDB verifies each block's checksum. A block that
//! rotted on disk, or a read the disk fails, is found even if no client
//! reads it; the member then stops (`fault`) and is rebuilt from a
//! peer, instead of serving it or sending it in a snapshot. Reads are paced
//! (`SCRUB_BYTES_PER_SEC`) to leave the disk to serving.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rocksdb::DB;
use tokio::sync::watch;

/// At most this many bytes read per second.
pub const SCRUB_BYTES_PER_SEC: u64 = 64 << 20;
/// The first pass comes at most this long after start.
pub const FIRST_PASS_AFTER: Duration = Duration::from_secs(60);

/// What one pass read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Scrubbed {
    pub records: u64,
    pub bytes: u64,
}

/// Reads every record of `db`, checksums verified, pacing to `rate` bytes
/// per second; the first error RocksDB returns, or `stop` set, ends it.
pub fn scrub(db: &DB, rate: u64, stop: &watch::Receiver<bool>) -> Result<Scrubbed, rocksdb::Error> {
    let started = Instant::now();
    let mut done = Scrubbed::default();
    for cf in crate::store::keys::all_cfs() {
        let Some(h) = db.cf_handle(cf) else { continue };
        let mut ro = rocksdb::ReadOptions::default();
        ro.set_verify_checksums(true);
        ro.fill_cache(false);
        ro.set_readahead_size(2 << 20);
        let mut it = db.raw_iterator_cf_opt(&h, ro);
        it.seek_to_first();
        while it.valid() {
            done.records += 1;
            done.bytes +=
                (it.key().map_or(0, <[u8]>::len) + it.value().map_or(0, <[u8]>::len)) as u64;
            if done.records.is_multiple_of(4096) {
                if *stop.borrow() {
                    return Ok(done);
                }
                let due = Duration::from_secs_f64(done.bytes as f64 / rate.max(1) as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            it.next();
        }
        it.status()?;
    }
    Ok(done)
}

/// Scrubs `db` every `every` (never if zero) until `stop`; on an error
/// that says the store cannot be trusted, latches it (the node stops).
pub async fn run(db: Arc<DB>, every: Duration, mut stop: watch::Receiver<bool>) {
    if every.is_zero() {
        return;
    }
    let mut wait = every.min(FIRST_PASS_AFTER);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        wait = every;
        let (db, stop_rx) = (db.clone(), stop.clone());
        let t = Instant::now();
        let r =
            tokio::task::spawn_blocking(move || scrub(&db, SCRUB_BYTES_PER_SEC, &stop_rx)).await;
        match r {
            Ok(Ok(s)) => {
                crate::metrics::scrubbed(s.records, s.bytes, t.elapsed().as_secs_f64());
                tracing::info!(records = s.records, bytes = s.bytes, took = ?t.elapsed(), "scrub pass done");
            }
            Ok(Err(e)) => {
                if !crate::fault::check(&e) {
                    tracing::warn!(error = %e, "scrub pass failed");
                }
            }
            Err(e) => tracing::warn!(error = %e, "scrub pass panicked"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_reads_every_record_of_every_column_family() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs: Vec<&str> = crate::store::keys::all_cfs().collect();
        let db = DB::open_cf(&opts, dir.path(), &cfs).unwrap();
        for (i, cf) in cfs.iter().enumerate() {
            let h = db.cf_handle(cf).unwrap();
            for k in 0..=i {
                db.put_cf(&h, format!("k{k:02}"), b"vv").unwrap();
            }
            db.flush_cf(&h).unwrap();
        }
        let n = cfs.len() as u64;
        let (_tx, rx) = watch::channel(false);
        let s = scrub(&db, u64::MAX, &rx).unwrap();
        assert_eq!(s.records, n * (n + 1) / 2);
        assert_eq!(s.bytes, s.records * 5);
    }
}
