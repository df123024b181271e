//! Table digests at one applied index, for comparing replicas record by
//! record while they serve.
//!
//! A verification is an entry in the log (the application decides which
//! commands pin: `Applier::pins_state`). Every replica, right after it wrote
//! that entry's batch and before it writes the next, pins its state there:
//! a thread of its own takes a RocksDB snapshot (apply waits only for the
//! snapshot, not for the scan), digests every table through it, and keeps
//! the snapshot to answer for the keys of one chunk until the pin expires.
//! Because every replica pins at the same log entry, the digests compare the
//! same state on every replica, whatever else is being applied meanwhile.
//!
//! A table's digest is SHA-256 over its entries in key order (each key and
//! value length-prefixed); its entries are also cut into chunks of
//! [`CHUNK_ENTRIES`] with a digest each, so the first chunk that differs
//! between two replicas holds the first key that does (the chunks before it
//! hold the same entries), and that chunk's keys with their value digests
//! name it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ring::digest::{Context, SHA256};
use rocksdb::{DB, ReadOptions};

/// Entries per chunk digest.
pub const CHUNK_ENTRIES: u64 = 1024;
/// Most chunks per table: past this many the last chunk takes the rest (the
/// answer stays below a few megabytes at any size).
pub const MAX_CHUNKS: u64 = 16_384;
/// How long a pinned state is kept for questions.
pub const PIN_TTL: Duration = Duration::from_secs(300);
/// Pins kept at once; an older one is released for a newer.
pub const MAX_PINS: usize = 2;

/// One table's digest at a pinned index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    pub name: String,
    pub entries: u64,
    pub digest: [u8; 32],
    /// One digest per chunk of [`CHUNK_ENTRIES`] entries, in key order.
    pub chunks: Vec<[u8; 32]>,
}

/// One entry of a chunk: its key and the SHA-256 of its value.
pub type KeyDigest = (Vec<u8>, [u8; 32]);

enum Question {
    Chunk {
        table: String,
        chunk: u64,
        answer: mpsc::Sender<Result<Vec<KeyDigest>, String>>,
    },
}

/// A pin's table digests, once its scan finished (or failed).
type Summary = Arc<Mutex<Option<Result<Vec<TableSummary>, String>>>>;

struct Pin {
    summary: Summary,
    questions: mpsc::Sender<Question>,
    /// Set when the pin is released early (evicted, or the node stops):
    /// its thread stops scanning and lets the snapshot and database go.
    cancel: Arc<AtomicBool>,
}

/// The pinned states of this replica, by log index.
#[derive(Default)]
pub struct Pins {
    pins: Mutex<BTreeMap<u64, Pin>>,
    /// Signalled when a pin is added or a summary is ready.
    changed: std::sync::Condvar,
    tables: Vec<String>,
    /// The newest index applied (a pin asked for at or below it that does
    /// not exist never will).
    applied: AtomicU64,
    /// The node is stopping: no new pins, no waiting.
    closed: AtomicBool,
}

fn len_prefixed(ctx: &mut Context, bytes: &[u8]) {
    ctx.update(&(bytes.len() as u64).to_be_bytes());
    ctx.update(bytes);
}

fn finish(ctx: Context) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

impl Pins {
    pub fn new(tables: Vec<String>) -> Pins {
        Pins {
            tables,
            ..Default::default()
        }
    }

    /// Records that `index` was applied (after a pin there, if any).
    pub(crate) fn note_applied(&self, index: u64) {
        self.applied.store(index, Ordering::Release);
    }

    /// Releases every pin and refuses new ones: the pins' threads stop and
    /// release the database (a stopping node waits for that).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        for p in pins.values() {
            p.cancel.store(true, Ordering::Release);
        }
        pins.clear();
        drop(pins);
        self.changed.notify_all();
    }

    /// Pins the state `db` holds now as index `index`. Returns once the
    /// snapshot is taken; the digests are computed behind it.
    pub(crate) fn pin(self: &Arc<Self>, db: &Arc<DB>, index: u64) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let (taken_tx, taken_rx) = mpsc::channel::<()>();
        let (questions, asked) = mpsc::channel::<Question>();
        let summary: Summary = Arc::default();
        let cancel = Arc::new(AtomicBool::new(false));
        {
            let mut pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
            while pins.len() >= MAX_PINS {
                if let Some((_, old)) = pins.pop_first() {
                    old.cancel.store(true, Ordering::Release);
                }
            }
            pins.insert(
                index,
                Pin {
                    summary: summary.clone(),
                    questions,
                    cancel: cancel.clone(),
                },
            );
        }
        let (db, me, tables) = (db.clone(), Arc::downgrade(self), self.tables.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("pin-{index}"))
            .spawn(move || {
                let snap = db.snapshot();
                let _ = taken_tx.send(());
                let read = || {
                    let mut o = ReadOptions::default();
                    o.set_snapshot(&snap);
                    o.fill_cache(false);
                    o
                };
                let result = summarize(&db, &tables, read, &cancel, &|_| {});
                *summary.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                if let Some(p) = me.upgrade() {
                    p.changed.notify_all();
                }
                let until = Instant::now() + PIN_TTL;
                while Instant::now() < until && !cancel.load(Ordering::Acquire) {
                    let wait = until
                        .saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(200));
                    match asked.recv_timeout(wait) {
                        Ok(Question::Chunk {
                            table,
                            chunk,
                            answer,
                        }) => {
                            let _ = answer.send(chunk_keys(&db, &table, chunk, read(), &cancel));
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                if let Some(p) = me.upgrade() {
                    p.pins
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&index);
                }
            });
        match spawned {
            Ok(_) => {
                let _ = taken_rx.recv();
            }
            Err(e) => {
                tracing::warn!(index, error = %e, "cannot pin the state for verification");
                self.pins
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&index);
            }
        }
        self.changed.notify_all();
    }

    /// The table digests at `index`, waiting at most `wait` for this replica
    /// to apply it and finish the scan.
    pub fn summary(&self, index: u64, wait: Duration) -> Result<Vec<TableSummary>, String> {
        let deadline = Instant::now() + wait;
        let mut pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Err("the node is stopping".into());
            }
            if !pins.contains_key(&index) && self.applied.load(Ordering::Acquire) >= index {
                return Err(format!(
                    "no state pinned at index {index}: this replica applied past it without \
                     pinning (installed from a snapshot, restarted, or the pin expired)"
                ));
            }
            if let Some(p) = pins.get(&index)
                && let Some(s) = p.summary.lock().unwrap_or_else(|e| e.into_inner()).clone()
            {
                return s;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(match pins.get(&index) {
                    Some(_) => {
                        format!("the table digests at index {index} are still being computed")
                    }
                    None => format!(
                        "no state pinned at index {index} (not applied yet, installed from a snapshot past it, or expired)"
                    ),
                });
            }
            pins = self
                .changed
                .wait_timeout(pins, left.min(Duration::from_millis(100)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The keys of chunk `chunk` of `table` at `index`, with value digests.
    pub fn chunk(&self, index: u64, table: &str, chunk: u64) -> Result<Vec<KeyDigest>, String> {
        let (tx, rx) = mpsc::channel();
        {
            let pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
            let p = pins
                .get(&index)
                .ok_or_else(|| format!("no state pinned at index {index}"))?;
            p.questions
                .send(Question::Chunk {
                    table: table.to_string(),
                    chunk,
                    answer: tx,
                })
                .map_err(|_| format!("the pin at index {index} expired"))?;
        }
        rx.recv_timeout(Duration::from_secs(60))
            .map_err(|_| format!("no answer for chunk {chunk} of {table} at index {index}"))?
    }
}

/// Entries between two looks at a pin's cancel flag.
const CANCEL_EVERY: u64 = 4096;

pub(crate) fn summarize(
    db: &DB,
    tables: &[String],
    read: impl Fn() -> ReadOptions,
    cancel: &AtomicBool,
    pace: &dyn Fn(u64),
) -> Result<Vec<TableSummary>, String> {
    let mut out = Vec::with_capacity(tables.len());
    let mut unpaced = 0u64;
    for name in tables {
        let cf = db
            .cf_handle(name)
            .ok_or_else(|| format!("column family {name} missing"))?;
        let mut it = db.raw_iterator_cf_opt(&cf, read());
        it.seek_to_first();
        let (mut all, mut chunk) = (Context::new(&SHA256), Context::new(&SHA256));
        let (mut entries, mut chunks) = (0u64, Vec::new());
        while it.valid() {
            let (k, v) = (it.key().unwrap_or_default(), it.value().unwrap_or_default());
            for ctx in [&mut all, &mut chunk] {
                len_prefixed(ctx, k);
                len_prefixed(ctx, v);
            }
            entries += 1;
            unpaced += (k.len() + v.len()) as u64;
            if entries.is_multiple_of(CANCEL_EVERY) {
                if cancel.load(Ordering::Acquire) {
                    return Err("the pin was released".into());
                }
                pace(std::mem::take(&mut unpaced));
            }
            if entries.is_multiple_of(CHUNK_ENTRIES) && (chunks.len() as u64) < MAX_CHUNKS - 1 {
                chunks.push(finish(std::mem::replace(&mut chunk, Context::new(&SHA256))));
            }
            it.next();
        }
        it.status().map_err(|e| format!("reading {name}: {e}"))?;
        if !entries.is_multiple_of(CHUNK_ENTRIES) || chunks.len() as u64 == MAX_CHUNKS - 1 {
            chunks.push(finish(chunk));
        }
        out.push(TableSummary {
            name: name.clone(),
            entries,
            digest: finish(all),
            chunks,
        });
    }
    Ok(out)
}

fn chunk_keys(
    db: &DB,
    table: &str,
    chunk: u64,
    read: ReadOptions,
    cancel: &AtomicBool,
) -> Result<Vec<KeyDigest>, String> {
    let cf = db
        .cf_handle(table)
        .ok_or_else(|| format!("no table {table}"))?;
    let mut it = db.raw_iterator_cf_opt(&cf, read);
    it.seek_to_first();
    let first = chunk * CHUNK_ENTRIES;
    let last = if chunk + 1 >= MAX_CHUNKS {
        u64::MAX
    } else {
        first + CHUNK_ENTRIES
    };
    let mut out = Vec::new();
    let mut i = 0u64;
    while it.valid() && i < last {
        if i >= first {
            let mut ctx = Context::new(&SHA256);
            ctx.update(it.value().unwrap_or_default());
            out.push((it.key().unwrap_or_default().to_vec(), finish(ctx)));
            // The answer stays bounded even in the last, open-ended chunk.
            if out.len() as u64 >= CHUNK_ENTRIES * 4 {
                break;
            }
        }
        i += 1;
        if i.is_multiple_of(CANCEL_EVERY) && cancel.load(Ordering::Acquire) {
            return Err("the pin was released".into());
        }
        it.next();
    }
    it.status().map_err(|e| format!("reading {table}: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &std::path::Path, tables: &[&str]) -> Arc<DB> {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        Arc::new(DB::open_cf(&o, dir, tables).unwrap())
    }

    #[test]
    fn a_pin_sees_the_state_of_its_index_and_names_the_first_different_key() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let tables = ["a", "b"];
        let (x, y) = (db(d1.path(), &tables), db(d2.path(), &tables));
        for db in [&x, &y] {
            let cf = db.cf_handle("b").unwrap();
            for i in 0..3000u32 {
                db.put_cf(&cf, format!("k{i:05}"), i.to_be_bytes()).unwrap();
            }
        }
        // One value differs on y, in the third chunk.
        y.put_cf(&y.cf_handle("b").unwrap(), "k02500", b"other")
            .unwrap();
        let names: Vec<String> = tables.iter().map(|s| s.to_string()).collect();
        let (px, py) = (
            Arc::new(Pins::new(names.clone())),
            Arc::new(Pins::new(names)),
        );
        px.pin(&x, 7);
        py.pin(&y, 7);
        // Written after the pin: not seen by it.
        x.put_cf(&x.cf_handle("a").unwrap(), "late", b"1").unwrap();
        let (sx, sy) = (
            px.summary(7, Duration::from_secs(10)).unwrap(),
            py.summary(7, Duration::from_secs(10)).unwrap(),
        );
        assert_eq!(sx[0], sy[0], "table a is empty at the pin on both");
        assert_eq!(sx[0].entries, 0);
        assert_eq!((sx[1].entries, sx[1].chunks.len()), (3000, 3));
        assert_ne!(sx[1].digest, sy[1].digest);
        let first = (0..3).find(|c| sx[1].chunks[*c] != sy[1].chunks[*c]);
        assert_eq!(first, Some(2));
        let (kx, ky) = (px.chunk(7, "b", 2).unwrap(), py.chunk(7, "b", 2).unwrap());
        assert_eq!(kx.len(), 3000 - 2048);
        let diff = kx.iter().zip(&ky).find(|(a, b)| a != b).unwrap();
        assert_eq!(diff.0.0, b"k02500");
        assert!(px.summary(8, Duration::from_millis(10)).is_err());
        // Applied past an index it never pinned: refused at once.
        px.note_applied(9);
        let t = Instant::now();
        assert!(px.summary(8, Duration::from_secs(30)).is_err());
        assert!(t.elapsed() < Duration::from_secs(5));
        // Closing releases the pins and the database.
        px.close();
        assert!(px.summary(7, Duration::from_secs(30)).is_err());
        let weak = Arc::downgrade(&x);
        drop(x);
        let t = Instant::now();
        while weak.strong_count() > 0 && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            weak.strong_count(),
            0,
            "a pin's thread still holds the database"
        );
    }
}
