//! The server side of online backups: copies of the store taken on request
//! (`StartBackup`), read file by file (`ReadBackupFile`) and released
//! (`FinishBackup`, or when unread for [`IDLE`]).
//!
//! A copy is a RocksDB checkpoint in `DATA_DIR/backups/SESSION`: hard links
//! of the live SST files, so taking it costs no copying, but it keeps those
//! files on disk after compaction drops them from the store, until released.
//! Hence the bound on copies ([`MAX_SESSIONS`]) and the idle release. Reads
//! share one byte rate (`--backup-rate`), so a backup cannot take the disk
//! from the foreground, and every thread that takes, scans or reads a copy
//! runs at the lowest CPU and I/O priority, so where the member is short of
//! CPU its requests go first.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_raft_store::backup::Description;
use rocksdb::DB;
use tokio::sync::{mpsc, watch};

use crate::error::OmError;

/// Copies that may exist at once.
pub const MAX_SESSIONS: usize = 2;
/// A copy no one has read for this long is released.
pub const IDLE: Duration = Duration::from_secs(600);
/// Bytes per streamed chunk.
pub const CHUNK_BYTES: usize = 1 << 20;
/// The default read rate of backups, all together (table scans included).
pub const DEFAULT_RATE: u64 = 32 << 20;

/// The subdirectory of the data directory holding copies.
pub const DIR: &str = "backups";

/// Nice value of the threads that take, scan and read copies: on a member
/// short of CPU, foreground requests run first (Linux applies it per
/// thread; 19 is the lowest priority, still never starved outright).
const BACKUP_NICE: libc::c_int = 19;

/// Lowers the calling thread's CPU priority to [`BACKUP_NICE`] and its I/O
/// priority to the lowest best-effort level, so a backup yields to the
/// foreground wherever the machine is short of either. Best effort: a
/// failure only costs the foreground more.
fn background_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on the calling thread's own id.
    unsafe {
        let tid = libc::gettid();
        if libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, BACKUP_NICE) != 0 {
            tracing::debug!("backup thread: setpriority failed");
        }
        // ioprio_set(IOPRIO_WHO_PROCESS, tid, best-effort class, level 7).
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const BEST_EFFORT_LOWEST: libc::c_long = (2 << 13) | 7;
        if libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            libc::c_long::from(tid),
            BEST_EFFORT_LOWEST,
        ) != 0
        {
            tracing::debug!("backup thread: ioprio_set failed");
        }
    }
}

/// Runs `f` on a thread of its own at background priority (not a pooled
/// thread: the priority would stay with the pool).
pub async fn in_background<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, OmError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawn_background(name, move || {
        let _ = tx.send(f());
    })?;
    rx.await
        .map_err(|_| OmError::Internal("a backup thread ended without an answer".into()))
}

fn spawn_background(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), OmError> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            background_priority();
            f()
        })
        .map(drop)
        .map_err(|e| OmError::Internal(format!("starting a backup thread: {e}")))
}

struct Session {
    dir: PathBuf,
    files: HashMap<String, u64>,
    last_used: Instant,
    /// File streams still reading it.
    readers: usize,
}

/// The copies this node holds, and the rate their reads share.
pub struct Backups {
    dir: PathBuf,
    tables: Vec<String>,
    sessions: Mutex<HashMap<String, Session>>,
    rate: u64,
    /// When the shared rate next allows a byte.
    next_free: Mutex<Instant>,
}

impl Backups {
    /// Copies live in `data_dir/backups`; what a previous run left there is
    /// released. `rate` bytes per second are shared by all reads.
    pub fn open(data_dir: &Path, tables: Vec<String>, rate: u64) -> std::io::Result<Arc<Backups>> {
        let dir = data_dir.join(DIR);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(Arc::new(Backups {
            dir,
            tables,
            sessions: Mutex::new(HashMap::new()),
            rate: rate.max(1),
            next_free: Mutex::new(Instant::now()),
        }))
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a copy of `db` and describes it. Blocking: run it off the
    /// async workers.
    pub fn start(&self, db: &DB) -> Result<(String, Description), OmError> {
        self.release_idle();
        let session = hex::encode(rand::random::<[u8; 16]>());
        {
            let mut s = self.sessions();
            if s.len() >= MAX_SESSIONS {
                return Err(OmError::precondition(
                    "TOO_MANY_BACKUPS",
                    "",
                    format!(
                        "{MAX_SESSIONS} backups are in progress on this node; finish one \
                         or wait until it has been unread for {} s",
                        IDLE.as_secs()
                    ),
                ));
            }
            // Reserved now so that concurrent starts count.
            s.insert(
                session.clone(),
                Session {
                    dir: self.dir.join(&session),
                    files: HashMap::new(),
                    last_used: Instant::now(),
                    readers: 1,
                },
            );
        }
        let dir = self.dir.join(&session);
        // The scan of every table shares the read rate with the file reads.
        let pace = |n: u64| std::thread::sleep(self.reserve(n, 0));
        let taken = om_raft_store::backup::checkpoint(db, &dir)
            .and_then(|()| om_raft_store::backup::describe(&dir, &self.tables, &pace));
        let mut s = self.sessions();
        match taken {
            Ok(d) => {
                if let Some(e) = s.get_mut(&session) {
                    e.files = d.files.iter().cloned().collect();
                    e.readers = 0;
                    e.last_used = Instant::now();
                }
                tracing::info!(
                    session = %session,
                    applied = ?d.applied,
                    files = d.files.len(),
                    bytes = d.files.iter().map(|f| f.1).sum::<u64>(),
                    "backup copy taken"
                );
                Ok((session, d))
            }
            Err(e) => {
                s.remove(&session);
                drop(s);
                let _ = std::fs::remove_dir_all(&dir);
                Err(OmError::Internal(format!("backup copy: {e}")))
            }
        }
    }

    /// Opens `name` of `session` for reading; the reader is counted until
    /// the returned guard drops.
    fn open_file(
        self: &Arc<Self>,
        session: &str,
        name: &str,
    ) -> Result<(std::fs::File, u64, ReaderGuard), OmError> {
        let mut s = self.sessions();
        let e = s.get_mut(session).ok_or_else(|| {
            OmError::not_found(
                "BACKUP_NOT_FOUND",
                "session",
                "no backup in progress by that session on this node (finished, released \
                 after being unread, or taken by another node)",
            )
        })?;
        let bytes = *e.files.get(name).ok_or_else(|| {
            OmError::not_found(
                "BACKUP_FILE_NOT_FOUND",
                "name",
                "the backup has no such file",
            )
        })?;
        let f = std::fs::File::open(e.dir.join(name))
            .map_err(|err| OmError::Internal(format!("backup file {name}: {err}")))?;
        e.readers += 1;
        e.last_used = Instant::now();
        Ok((
            f,
            bytes,
            ReaderGuard {
                backups: self.clone(),
                session: session.to_string(),
            },
        ))
    }

    /// Releases `session`'s copy.
    pub fn finish(&self, session: &str) -> Result<(), OmError> {
        let removed = self.sessions().remove(session);
        match removed {
            Some(e) => {
                let _ = std::fs::remove_dir_all(&e.dir);
                tracing::info!(session, "backup copy released");
                Ok(())
            }
            None => Err(OmError::not_found(
                "BACKUP_NOT_FOUND",
                "session",
                "no backup in progress by that session on this node",
            )),
        }
    }

    /// Releases the copies unread for [`IDLE`].
    pub fn release_idle(&self) {
        let idle: Vec<Session> = {
            let mut s = self.sessions();
            let ids: Vec<String> = s
                .iter()
                .filter(|(_, e)| e.readers == 0 && e.last_used.elapsed() >= IDLE)
                .map(|(k, _)| k.clone())
                .collect();
            ids.iter().filter_map(|k| s.remove(k)).collect()
        };
        for e in idle {
            tracing::info!(dir = %e.dir.display(), "backup copy released after being unread");
            let _ = std::fs::remove_dir_all(&e.dir);
        }
    }

    /// Copies held now.
    pub fn held(&self) -> usize {
        self.sessions().len()
    }

    /// How long to wait before sending `n` bytes at `rate` (at most the
    /// shared rate), reserving them.
    fn reserve(&self, n: u64, rate: u64) -> Duration {
        let rate = if rate == 0 {
            self.rate
        } else {
            rate.min(self.rate)
        };
        let cost = Duration::from_secs_f64(n as f64 / rate as f64);
        let mut next = self.next_free.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let start = (*next).max(now);
        *next = start + cost;
        start - now
    }

    /// Streams `name` of `session` in chunks of [`CHUNK_BYTES`], the last
    /// carrying the SHA-256 of everything sent.
    pub fn stream(
        self: &Arc<Self>,
        session: &str,
        name: &str,
        rate: u64,
    ) -> Result<mpsc::Receiver<Result<om_proto::v1::BackupFileChunk, OmError>>, OmError> {
        let (mut f, bytes, guard) = self.open_file(session, name)?;
        let (tx, rx) = mpsc::channel(2);
        let me = self.clone();
        let name = name.to_string();
        spawn_background("om-backup-read", move || {
            let _guard = guard;
            let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
            let mut sent = 0u64;
            loop {
                let mut buf = vec![0u8; CHUNK_BYTES];
                let n = match read_full(&mut f, &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(OmError::Internal(format!(
                            "backup file {name}: {e}"
                        ))));
                        return;
                    }
                };
                buf.truncate(n);
                sent += n as u64;
                ctx.update(&buf);
                let last = n < CHUNK_BYTES;
                if last && sent != bytes {
                    let _ = tx.blocking_send(Err(OmError::Internal(format!(
                        "backup file {name} is {sent} bytes, not {bytes}"
                    ))));
                    return;
                }
                std::thread::sleep(me.reserve(n as u64, rate));
                let chunk = om_proto::v1::BackupFileChunk {
                    data: buf,
                    sha256: if last {
                        hex::encode(ctx.clone().finish().as_ref())
                    } else {
                        String::new()
                    },
                };
                if tx.blocking_send(Ok(chunk)).is_err() || last {
                    return;
                }
            }
        })?;
        Ok(rx)
    }

    /// Releases idle copies every minute until `stop`.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(60)) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.release_idle()).await;
        }
    }
}

/// Counts one reader of a session while it lives.
struct ReaderGuard {
    backups: Arc<Backups>,
    session: String,
}

impl Drop for ReaderGuard {
    fn drop(&mut self) {
        if let Some(e) = self.backups.sessions().get_mut(&self.session) {
            e.readers = e.readers.saturating_sub(1);
            e.last_used = Instant::now();
        }
    }
}

/// Reads until `buf` is full or the file ends.
fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_rate_spaces_reads() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backups::open(dir.path(), vec![], 1 << 20).unwrap();
        assert_eq!(b.reserve(1 << 20, 0), Duration::ZERO);
        // The second MiB waits for the first second to pass, a faster
        // request rate does not beat the shared one.
        let w = b.reserve(1 << 20, 100 << 20);
        assert!(w > Duration::from_millis(900), "{w:?}");
        let w = b.reserve(1 << 19, 0);
        assert!(w > Duration::from_millis(1900), "{w:?}");
    }
}
