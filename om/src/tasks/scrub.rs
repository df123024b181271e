//! The scrub: every `--scrub-interval-s` (and a first time soon after
//! start) read every record of every column family from disk, bypassing
//! the block cache, so RocksDB verifies each block's checksum. A block that
//! rotted on disk, or a read the disk fails, is found even if no client
//! reads it; the member then stops (`fault`) and is rebuilt from a
//! peer, instead of serving it or sending it in a snapshot. Reads are paced
//! (`SCRUB_BYTES_PER_SEC`) to leave the disk to serving.
//!
//! When a pass finishes, its time goes to `LAST_PASS_FILE` in the data
//! directory, so a restart waits out the rest of the interval instead of
//! reading the whole store again a minute after every start. It is this
//! node's alone (no replicated state) and only schedules: a lost or
//! unreadable file means a pass soon after start, as on a new directory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rocksdb::DB;
use tokio::sync::watch;

/// At most this many bytes read per second.
pub const SCRUB_BYTES_PER_SEC: u64 = 64 << 20;
/// The first pass comes at most this long after start, unless a recent
/// pass (`LAST_PASS_FILE`) leaves part of the interval to wait.
pub const FIRST_PASS_AFTER: Duration = Duration::from_secs(60);
/// The file in the data directory holding when the last pass finished
/// (seconds since the Unix epoch, as text).
pub const LAST_PASS_FILE: &str = "scrub-last-pass";

/// How long after start the first pass comes: the rest of the interval
/// since the last pass (`since`), but no sooner than a minute (or the
/// interval, if shorter) after start.
pub fn first_wait(every: Duration, since: Option<Duration>) -> Duration {
    let soon = every.min(FIRST_PASS_AFTER);
    match since {
        Some(since) => every.saturating_sub(since).max(soon),
        None => soon,
    }
}

/// How long ago the last pass recorded in `dir` finished; `None` without
/// a readable record. A time in the future (the clock went back) counts
/// as just now.
pub fn since_last_pass(dir: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(dir.join(LAST_PASS_FILE)).ok()?;
    let at = UNIX_EPOCH + Duration::from_secs(text.trim().parse().ok()?);
    Some(SystemTime::now().duration_since(at).unwrap_or_default())
}

/// Records that a pass finished now (replacing the file whole).
fn record_pass(dir: &Path) -> std::io::Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let tmp = dir.join(format!("{LAST_PASS_FILE}.tmp"));
    std::fs::write(&tmp, format!("{now}\n"))?;
    std::fs::rename(tmp, dir.join(LAST_PASS_FILE))
}

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

/// Scrubs `db` every `every` (never if zero) until `stop`, recording each
/// finished pass in `dir`; on an error that says the store cannot be
/// trusted, latches it (the node stops).
pub async fn run(db: Arc<DB>, dir: PathBuf, every: Duration, mut stop: watch::Receiver<bool>) {
    if every.is_zero() {
        return;
    }
    let mut wait = first_wait(every, since_last_pass(&dir));
    if wait > every.min(FIRST_PASS_AFTER) {
        tracing::info!(next_in = ?wait, "the last scrub pass was recent; the next waits out the interval");
    }
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
                if let Err(e) = record_pass(&dir) {
                    tracing::warn!(error = %e, "could not record the scrub pass");
                }
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
    fn the_first_pass_waits_out_the_interval_since_the_last() {
        let day = Duration::from_secs(86_400);
        let min = |m: u64| Duration::from_secs(60 * m);
        // A new directory, or no record: within a minute.
        assert_eq!(first_wait(day, None), min(1));
        // A pass an hour ago: the rest of the day.
        assert_eq!(first_wait(day, Some(min(60))), day - min(60));
        // Long ago, or seconds before the interval ends: a minute.
        assert_eq!(first_wait(day, Some(day * 3)), min(1));
        assert_eq!(first_wait(day, Some(day - Duration::from_secs(5))), min(1));
        // A short interval (tests): never later than it.
        let s = Duration::from_secs(1);
        assert_eq!(first_wait(s, None), s);
        assert_eq!(first_wait(s, Some(Duration::ZERO)), s);
    }

    #[test]
    fn a_recorded_pass_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(since_last_pass(dir.path()), None);
        record_pass(dir.path()).unwrap();
        let since = since_last_pass(dir.path()).unwrap();
        assert!(since < Duration::from_secs(5), "{since:?}");
        // In the future (a clock that went back): just now.
        std::fs::write(dir.path().join(LAST_PASS_FILE), "99999999999\n").unwrap();
        assert_eq!(since_last_pass(dir.path()), Some(Duration::ZERO));
        std::fs::write(dir.path().join(LAST_PASS_FILE), "garbage").unwrap();
        assert_eq!(since_last_pass(dir.path()), None);
    }

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
