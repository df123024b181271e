//! Random and mutated snapshot files fed to verification and install: every
//! one is refused with an error (no panic, no allocation beyond the file's
//! size and the reader's buffer), and the store's state (every column family)
//! and its current snapshot are unchanged.
//!
//! The normal run tries a bounded number of cases; for a longer run:
//! `PROPTEST_CASES=100000 cargo test --release --workspace --test store -- snapshot_fuzz::`.

use crate::common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{apply, build, dump, open_store, put};
use om_raft_store::snapshot::{MAX_KEY_BYTES, MAX_VALUE_BYTES, verify};
use om_raft_store::{SnapshotMeta, StateMachine};
use openraft::storage::RaftStateMachine;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Records the largest single allocation made by a thread while it is tracing.
struct TracingAlloc;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
thread_local! {
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

unsafe impl GlobalAlloc for TracingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if TRACING.with(Cell::get) {
            LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        }
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if TRACING.with(Cell::get) {
            LARGEST.fetch_max(new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: TracingAlloc = TracingAlloc;

/// The reader's own buffer (64 KiB) plus slack for small bookkeeping.
const ALLOCATION_ALLOWANCE: usize = 128 << 10;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// How a valid file is damaged.
#[derive(Debug, Clone)]
enum Mutation {
    /// Random bytes, not a snapshot at all.
    Random(Vec<u8>),
    /// XOR a byte at a position (fraction of the length) with a non-zero mask.
    Flip(f64, u8),
    /// Keep only a prefix.
    Truncate(f64),
    /// Append bytes after the trailer.
    Append(Vec<u8>),
    /// Overwrite a u32 length field (meta, key or value) with a huge value.
    HugeLength(LengthField, u32),
    /// Rename the column family, fixing up the CRC so only the name check can refuse it.
    UnknownColumnFamily(String),
    /// Change the trailer's record count, fixing up the CRC.
    WrongRecordCount(u64),
}

#[derive(Debug, Clone, Copy)]
enum LengthField {
    Meta,
    FirstKey,
    FirstValue,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..4096).prop_map(Mutation::Random),
        (0.0..1.0f64, 1..=255u8).prop_map(|(p, m)| Mutation::Flip(p, m)),
        (0.0..1.0f64).prop_map(Mutation::Truncate),
        proptest::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Append),
        (
            prop_oneof![
                Just(LengthField::Meta),
                Just(LengthField::FirstKey),
                Just(LengthField::FirstValue)
            ],
            // Past every limit, within the key limit, within the value limit
            // (each far past the end of the small file), or anything.
            prop_oneof![
                Just(u32::MAX),
                4096..=MAX_KEY_BYTES,
                MAX_KEY_BYTES..=MAX_VALUE_BYTES,
                any::<u32>()
            ]
        )
            .prop_map(|(f, n)| Mutation::HugeLength(f, n)),
        "[a-z]{1,8}"
            .prop_filter("not the real name", |s| s != common::KV)
            .prop_map(Mutation::UnknownColumnFamily),
        any::<u64>().prop_map(Mutation::WrongRecordCount),
    ]
}

/// Byte offsets in a valid file of one column family (`kv`).
struct Offsets {
    meta_len_at: usize,
    cf_name_at: usize,
    first_key_len_at: usize,
    first_value_len_at: usize,
    trailer_count_at: usize,
}

fn offsets(bytes: &[u8]) -> Offsets {
    let mlen = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let cf_count_at = 12 + mlen;
    let cf_name_at = cf_count_at + 4 + 2;
    let first_record = cf_name_at + common::KV.len();
    let first_key_len_at = first_record + 1 + 4;
    let klen = u32::from_le_bytes(
        bytes[first_key_len_at..first_key_len_at + 4]
            .try_into()
            .unwrap(),
    ) as usize;
    Offsets {
        meta_len_at: 8,
        cf_name_at,
        first_key_len_at,
        first_value_len_at: first_key_len_at + 4 + klen,
        trailer_count_at: bytes.len() - 12,
    }
}

fn fix_crc(bytes: &mut [u8]) {
    let n = bytes.len();
    let crc = crc32fast::hash(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn mutate(valid: &[u8], m: &Mutation) -> Vec<u8> {
    let mut b = valid.to_vec();
    let at = |p: f64, len: usize| ((p * len as f64) as usize).min(len.saturating_sub(1));
    let l = offsets(valid);
    match m {
        Mutation::Random(r) => b = r.clone(),
        Mutation::Flip(p, mask) => {
            let i = at(*p, b.len());
            b[i] ^= mask;
        }
        Mutation::Truncate(p) => b.truncate(at(*p, b.len())),
        Mutation::Append(extra) => b.extend_from_slice(extra),
        Mutation::HugeLength(f, n) => {
            let i = match f {
                LengthField::Meta => l.meta_len_at,
                LengthField::FirstKey => l.first_key_len_at,
                LengthField::FirstValue => l.first_value_len_at,
            };
            b[i..i + 4].copy_from_slice(&n.to_le_bytes());
        }
        Mutation::UnknownColumnFamily(name) => {
            // Same length as "kv" keeps every other offset valid.
            let name: String = name.chars().chain(std::iter::repeat('z')).take(2).collect();
            let name = if name == common::KV {
                "zz".to_string()
            } else {
                name
            };
            b[l.cf_name_at..l.cf_name_at + 2].copy_from_slice(name.as_bytes());
            fix_crc(&mut b);
        }
        Mutation::WrongRecordCount(n) => {
            let real = u64::from_le_bytes(
                b[l.trailer_count_at..l.trailer_count_at + 8]
                    .try_into()
                    .unwrap(),
            );
            let n = if *n == real { n.wrapping_add(1) } else { *n };
            b[l.trailer_count_at..l.trailer_count_at + 8].copy_from_slice(&n.to_le_bytes());
            fix_crc(&mut b);
        }
    }
    b
}

/// A store with some state and a snapshot of a different state to damage.
struct Fixture {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    sm: StateMachine,
    db: std::sync::Arc<rocksdb::DB>,
    meta: SnapshotMeta,
    valid: Vec<u8>,
    scratch: std::path::PathBuf,
    snaps: std::path::PathBuf,
}

async fn fixture() -> Fixture {
    let src = tempfile::tempdir().unwrap();
    let (_, mut sm_src, _) = open_store(src.path()).unwrap();
    let entries = (1..=20)
        .map(|i| put(i, &format!("key-{i:03}"), &"v".repeat(i as usize * 7)))
        .collect();
    apply(&mut sm_src, entries).await.unwrap();
    let snap = build(&mut sm_src).await;
    let valid = std::fs::read(src.path().join("snapshots/current.snap")).unwrap();

    let dst = tempfile::tempdir().unwrap();
    let (_, mut sm, db) = open_store(dst.path()).unwrap();
    apply(&mut sm, vec![put(1, "mine", "x"), put(2, "also-mine", "y")])
        .await
        .unwrap();
    build(&mut sm).await;
    let scratch = dst.path().join("incoming.snap");
    let snaps = dst.path().join("snapshots");
    Fixture {
        _dirs: (src, dst),
        sm,
        db,
        meta: snap.meta,
        valid,
        scratch,
        snaps,
    }
}

fn read_current(snaps: &Path) -> Vec<u8> {
    std::fs::read(snaps.join("current.snap")).unwrap()
}

/// Verification of `bytes` on this thread, with the largest allocation it made.
fn verify_traced(bytes: &[u8], meta: &SnapshotMeta) -> (bool, usize) {
    let tables = vec![common::KV.to_string()];
    LARGEST.store(0, Ordering::Relaxed);
    TRACING.with(|t| t.set(true));
    let r = verify(bytes, bytes.len() as u64, &tables, Some(meta));
    TRACING.with(|t| t.set(false));
    (r.is_ok(), LARGEST.load(Ordering::Relaxed))
}

#[test]
fn damaged_snapshots_are_refused_and_change_nothing() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let f = rt.block_on(fixture());
    // The undamaged file passes, so every refusal below is the damage's doing.
    assert!(verify_traced(&f.valid, &f.meta).0);
    let state = dump(&f.db);
    let current = read_current(&f.snaps);

    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&mutation(), |m| {
            let bytes = mutate(&f.valid, &m);
            let (ok, largest) = verify_traced(&bytes, &f.meta);
            prop_assert!(!ok, "verification accepted damage {m:?}");
            prop_assert!(
                largest <= bytes.len() + ALLOCATION_ALLOWANCE,
                "verifying {} bytes allocated {largest} at once ({m:?})",
                bytes.len()
            );
            std::fs::write(&f.scratch, &bytes).unwrap();
            let file = std::fs::File::open(&f.scratch).unwrap();
            let mut sm = f.sm.clone();
            let r = rt.block_on(sm.install_snapshot(&f.meta, file));
            prop_assert!(r.is_err(), "install accepted damage {m:?}");
            prop_assert!(dump(&f.db) == state, "install changed the state ({m:?})");
            prop_assert!(
                read_current(&f.snaps) == current,
                "install replaced the current snapshot ({m:?})"
            );
            let left = common::files_in(&f.snaps);
            prop_assert!(left == ["current.snap"], "files left behind: {left:?}");
            Ok(())
        })
        .unwrap();
    // And the store still installs a good snapshot afterwards.
    std::fs::write(&f.scratch, &f.valid).unwrap();
    let file = std::fs::File::open(&f.scratch).unwrap();
    let mut sm = f.sm.clone();
    rt.block_on(sm.install_snapshot(&f.meta, file)).unwrap();
    assert_eq!(common::kv(&f.db, "key-020").map(|v| v.len()), Some(140));
    assert_eq!(common::kv(&f.db, "mine"), None);
}
