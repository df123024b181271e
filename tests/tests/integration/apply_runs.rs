//! Applying committed entries in runs (one write batch per run, reads
//! through the run's overlay) gives the same state wherever the runs are
//! cut and however often the store restarts in between: the same log is
//! applied entry by entry, in one call, and in random slices with restarts,
//! and every table (the retry cache holds every entry's result) and the
//! applied state with its state digest must be byte-identical.

use std::sync::Arc;

use futures::stream;
use om_proto::store::{self as st, command::Op};
use om_raft_store::{Entry, LogId, SharedCommand};
use openraft::EntryPayload;
use openraft::storage::RaftStateMachine;
use openraft::vote::leader_id_adv::LeaderId;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const V: &str = "v";
const BUCKETS: [&str; 3] = ["o", "ver", "o2"];
const PATHS: [&str; 7] = ["a", "a/b", "a/b/c", "a/f", "b", "b/x", "a/b/g"];
const ETAG: &str = "0cc175b9c0f1b6a831c399e269772661";

#[derive(Debug, Clone)]
enum Step {
    Put(usize, u8, u16),
    Delete(usize, u8),
    Copy(usize, u8, u8),
    Open(u8),
    /// Commits the session opened `back` entries ago (if that was an open).
    Commit(u16),
    Initiate(u8),
    Part(u16, u8),
    Abort(u16),
    Dir(usize),
    File(usize),
    DeletePath(usize, bool),
    Rename(usize, usize),
    Purge,
    /// Proposes an earlier entry's command again (a client's retry).
    Retry(u16),
    ExpireRetries,
    Versioning(bool),
    Blank,
}

fn step() -> impl Strategy<Value = Step> {
    let b = 0..BUCKETS.len();
    let k = 0u8..6;
    let p = 0..PATHS.len();
    prop_oneof![
        4 => (b.clone(), k.clone(), 1u16..2000).prop_map(|(b, k, s)| Step::Put(b, k, s)),
        2 => (b.clone(), k.clone()).prop_map(|(b, k)| Step::Delete(b, k)),
        1 => (b, k.clone(), k.clone()).prop_map(|(b, s, d)| Step::Copy(b, s, d)),
        1 => k.clone().prop_map(Step::Open),
        1 => (1u16..12).prop_map(Step::Commit),
        1 => k.prop_map(Step::Initiate),
        1 => (1u16..12, 1u8..4).prop_map(|(b, n)| Step::Part(b, n)),
        1 => (1u16..16).prop_map(Step::Abort),
        2 => p.clone().prop_map(Step::Dir),
        2 => p.clone().prop_map(Step::File),
        1 => (p.clone(), any::<bool>()).prop_map(|(p, r)| Step::DeletePath(p, r)),
        1 => (p.clone(), p).prop_map(|(a, b)| Step::Rename(a, b)),
        1 => Just(Step::Purge),
        2 => (1u16..20).prop_map(Step::Retry),
        1 => Just(Step::ExpireRetries),
        1 => any::<bool>().prop_map(Step::Versioning),
        1 => Just(Step::Blank),
    ]
}

fn log_id(index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term: 1,
            node_id: 1,
        },
        index,
    )
}

/// Every fifth entry is stamped with the rules before retry-cache
/// generations (its entry stored the old way, with an expiry index), and
/// every third asks apply to look for entries stored that way too.
fn command(index: u64, op: Op) -> st::Command {
    st::Command {
        now_ms: 1_000_000 + index * 10,
        op: Some(op),
        rules: if index.is_multiple_of(5) {
            om::rules::RETRY_GENERATIONS.since - 1
        } else {
            om::apply::RULES
        },
        retry_legacy: index.is_multiple_of(3),
        client_id: "client".into(),
        seq: index,
        ..Default::default()
    }
}

/// The log: setup, then one entry per step.
fn log(steps: &[Step]) -> Vec<Entry> {
    let mut ops: Vec<Option<Op>> = vec![
        Some(Op::CreateVolume(st::CreateVolume {
            name: V.into(),
            ..Default::default()
        })),
        Some(Op::CreateBucket(st::CreateBucket {
            volume: V.into(),
            name: "o".into(),
            layout: om::apply::LAYOUT_OBJECT_STORE,
            ..Default::default()
        })),
        Some(Op::CreateBucket(st::CreateBucket {
            volume: V.into(),
            name: "ver".into(),
            layout: om::apply::LAYOUT_OBJECT_STORE,
            ..Default::default()
        })),
        Some(Op::CreateBucket(st::CreateBucket {
            volume: V.into(),
            name: "o2".into(),
            layout: om::apply::LAYOUT_OBJECT_STORE,
            ..Default::default()
        })),
        Some(Op::CreateBucket(st::CreateBucket {
            volume: V.into(),
            name: "f".into(),
            layout: om::apply::LAYOUT_FSO,
            ..Default::default()
        })),
        Some(Op::SetBucketVersioning(st::SetBucketVersioning {
            volume: V.into(),
            bucket: "ver".into(),
            versioning: 1,
        })),
    ];
    let mut commands: Vec<Option<st::Command>> = Vec::new();
    for (i, op) in ops.drain(..).enumerate() {
        commands.push(op.map(|op| command(i as u64 + 1, op)));
    }
    let key = |k: u8| format!("k{k}");
    // Generations started so far (each proposal from the current one does).
    let mut advances = 0u64;
    for s in steps {
        let index = commands.len() as u64 + 1;
        let earlier = |back: u16| index.saturating_sub(u64::from(back)).max(1);
        let id = |back: u16| om::apply::object_id(earlier(back), 0);
        // The key an earlier open or initiate named (or k0).
        let key_of = |back: u16| {
            let e = earlier(back) as usize - 1;
            match commands[e].as_ref().and_then(|c| c.op.as_ref()) {
                Some(Op::OpenKey(o)) => o.key.clone(),
                Some(Op::InitiateMultipart(m)) => m.key.clone(),
                _ => "k0".to_string(),
            }
        };
        let op = match s {
            Step::Put(b, k, size) => Some(Op::PutKey(st::PutKey {
                volume: V.into(),
                bucket: BUCKETS[*b].into(),
                key: key(*k),
                size: u64::from(*size),
                etag: ETAG.into(),
                block_size: om::apply::BLOCK_SIZE,
                ..Default::default()
            })),
            Step::Delete(b, k) => Some(Op::DeleteKey(st::DeleteKey {
                volume: V.into(),
                bucket: BUCKETS[*b].into(),
                key: key(*k),
                ..Default::default()
            })),
            Step::Copy(b, src, dst) => Some(Op::CopyKey(st::CopyKey {
                src_volume: V.into(),
                src_bucket: BUCKETS[*b].into(),
                src_key: key(*src),
                volume: V.into(),
                bucket: "o".into(),
                key: key(*dst),
                ..Default::default()
            })),
            Step::Open(k) => Some(Op::OpenKey(st::OpenKey {
                volume: V.into(),
                bucket: "o".into(),
                key: key(*k),
                blocks: 1,
                block_size: om::apply::BLOCK_SIZE,
                ..Default::default()
            })),
            Step::Commit(back) => Some(Op::CommitKey(st::CommitKey {
                volume: V.into(),
                bucket: "o".into(),
                key: key_of(*back),
                session_id: id(*back),
                size: 100,
                etag: ETAG.into(),
                ..Default::default()
            })),
            Step::Initiate(k) => Some(Op::InitiateMultipart(st::InitiateMultipart {
                volume: V.into(),
                bucket: "o".into(),
                key: key(*k),
                ..Default::default()
            })),
            Step::Part(back, n) => Some(Op::CommitPart(st::CommitPart {
                volume: V.into(),
                bucket: "o".into(),
                key: key_of(*back),
                upload_id: id(*back),
                part_number: u32::from(*n),
                size: 5 << 20,
                etag: ETAG.into(),
                block_size: om::apply::BLOCK_SIZE,
                ..Default::default()
            })),
            Step::Abort(back) => Some(Op::AbortMultipart(st::AbortMultipart {
                volume: V.into(),
                bucket: "o".into(),
                key: key_of(*back),
                upload_id: id(*back),
            })),
            Step::Dir(p) => Some(Op::CreateDirectory(st::CreateDirectory {
                volume: V.into(),
                bucket: "f".into(),
                path: PATHS[*p].into(),
            })),
            Step::File(p) => Some(Op::CreateFile(st::CreateFile {
                volume: V.into(),
                bucket: "f".into(),
                path: PATHS[*p].into(),
                recursive: true,
                overwrite: true,
                blocks: 1,
                block_size: om::apply::BLOCK_SIZE,
                ..Default::default()
            })),
            Step::DeletePath(p, recursive) => Some(Op::DeletePath(st::DeletePath {
                volume: V.into(),
                bucket: "f".into(),
                path: PATHS[*p].into(),
                recursive: *recursive,
            })),
            Step::Rename(a, b) => Some(Op::RenamePath(st::RenamePath {
                volume: V.into(),
                bucket: "f".into(),
                from: PATHS[*a].into(),
                to: PATHS[*b].into(),
                max_path_depth: 64,
                max_path_bytes: 4096,
            })),
            Step::Purge => Some(Op::PurgeDeletedDirs(st::PurgeDeletedDirs {
                max_children: 3,
            })),
            // Starts the next generation (as proposed from the current one,
            // or from the one before: a stale proposal), or expires entries
            // stored the old way.
            Step::ExpireRetries => Some(Op::ExpireRetryCache(match index % 3 {
                0 => st::ExpireRetryCache {
                    before_ms: 1_000_000 + index.saturating_sub(30) * 10,
                    max_entries: 4,
                    ..Default::default()
                },
                stale => {
                    let from = advances.saturating_sub(stale - 1);
                    // An entry of the older rules (`command`) ignores it.
                    advances += u64::from(from == advances && !index.is_multiple_of(5));
                    st::ExpireRetryCache {
                        advance_generation: true,
                        from_generation: from,
                        ..Default::default()
                    }
                }
            })),
            Step::Versioning(on) => Some(Op::SetBucketVersioning(st::SetBucketVersioning {
                volume: V.into(),
                bucket: "o2".into(),
                versioning: if *on { 1 } else { 2 },
            })),
            Step::Retry(back) => {
                let e = earlier(*back) as usize - 1;
                commands.push(commands[e].clone());
                continue;
            }
            Step::Blank => None,
        };
        commands.push(op.map(|op| command(index, op)));
    }
    commands
        .into_iter()
        .enumerate()
        .map(|(i, c)| Entry {
            log_id: log_id(i as u64 + 1),
            payload: match c {
                Some(c) => EntryPayload::Normal(SharedCommand::new(c)),
                None => EntryPayload::Blank,
            },
        })
        .collect()
}

/// `log` with runs of consecutive batchable writes (of at most `sizes[i]`
/// writes, cycling) merged into batch entries, as a leader proposes writes
/// that waited. Each batch entry is followed by blank entries, so every
/// other entry keeps its index; opens and initiates stay alone, since later
/// steps name the ids their index gave them.
fn batched(log: &[Entry], sizes: &[u8]) -> Vec<Entry> {
    let candidate = |e: &Entry| match &e.payload {
        EntryPayload::Normal(c) => {
            let c = c.command();
            om::rules::BATCHED_WRITES.holds(c.rules)
                && c.op.as_ref().is_some_and(|op| {
                    om::apply::ops::batchable(op)
                        && !matches!(op, Op::OpenKey(_) | Op::InitiateMultipart(_))
                })
        }
        _ => false,
    };
    let mut out: Vec<Entry> = Vec::with_capacity(log.len());
    let mut group: Vec<st::Command> = Vec::new();
    let mut size = sizes.iter().copied().cycle();
    let mut limit = size.next().unwrap_or(1).max(1) as usize;
    let mut flush = |group: &mut Vec<st::Command>, out: &mut Vec<Entry>, limit: &mut usize| {
        if group.is_empty() {
            return;
        }
        let n = group.len();
        let first = out.len() as u64 + 1;
        let cmd = if n == 1 {
            group.pop().unwrap()
        } else {
            st::Command {
                rules: om::apply::RULES,
                batch: std::mem::take(group),
                ..Default::default()
            }
        };
        out.push(Entry {
            log_id: log_id(first),
            payload: EntryPayload::Normal(SharedCommand::new(cmd)),
        });
        for i in 1..n as u64 {
            out.push(Entry {
                log_id: log_id(first + i),
                payload: EntryPayload::Blank,
            });
        }
        *limit = size.next().unwrap_or(1).max(1) as usize;
    };
    for e in log {
        if candidate(e) {
            let EntryPayload::Normal(c) = &e.payload else {
                unreachable!()
            };
            group.push(c.command().clone());
            if group.len() >= limit {
                flush(&mut group, &mut out, &mut limit);
            }
        } else {
            flush(&mut group, &mut out, &mut limit);
            out.push(e.clone());
        }
    }
    flush(&mut group, &mut out, &mut limit);
    out
}

/// Each write's outcome as its retry-cache record holds it: accepted (and
/// what it returned) or refused (and why), by the record's key, without
/// the ids a batch entry gives differently.
fn outcomes(state: &[(String, Vec<u8>, Vec<u8>)]) -> std::collections::BTreeMap<Vec<u8>, String> {
    state
        .iter()
        .filter(|(t, k, _)| {
            t == om::store::keys::RETRY_CACHE_CF
                && !k.starts_with(om::store::keys::RETRY_EXPIRY_PREFIX)
        })
        .map(|(_, k, v)| {
            let rec = <st::RetryCacheRecord as prost::Message>::decode(&v[..]).unwrap();
            let what = match rec.result.and_then(|r| r.result) {
                Some(st::command_result::Result::Rejected(r)) => format!("refused {}", r.reason),
                Some(other) => format!("accepted {:?}", std::mem::discriminant(&other)),
                None => "empty".to_string(),
            };
            (k.clone(), what)
        })
        .collect()
}

fn open(dir: &std::path::Path) -> om_raft_store::OpenedStore {
    om_raft_store::open(
        dir,
        om::store::table_descriptors(),
        Arc::new(om::apply::OmApplier::default()),
    )
    .unwrap()
}

/// Every record of every state table and of the applied state, by table.
fn dump(db: &rocksdb::DB) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut tables: Vec<&str> = om::store::keys::TABLE_CFS.to_vec();
    tables.push("sm_meta");
    for t in tables {
        let mut it = db.raw_iterator_cf(db.cf_handle(t).unwrap());
        it.seek_to_first();
        while it.valid() {
            out.push((
                t.to_string(),
                it.key().unwrap().to_vec(),
                it.value().unwrap().to_vec(),
            ));
            it.next();
        }
        it.status().unwrap();
    }
    out
}

/// Applies `log` in the slices `cuts` marks (an apply call each), reopening
/// the store after the slices `restarts` marks; returns the state.
fn apply(
    rt: &tokio::runtime::Runtime,
    log: &[Entry],
    cuts: &[usize],
    restarts: &[usize],
) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let dir = tempfile::tempdir().unwrap();
    let mut store = open(dir.path());
    let mut bounds: Vec<usize> = cuts
        .iter()
        .copied()
        .filter(|&c| c > 0 && c < log.len())
        .collect();
    bounds.push(log.len());
    bounds.sort_unstable();
    bounds.dedup();
    let mut from = 0;
    let mut kept = 0;
    for to in bounds {
        let slice: Vec<_> = log[from..to]
            .iter()
            .cloned()
            .map(|e| Ok((e, None)))
            .collect();
        rt.block_on(store.state_machine.apply(stream::iter(slice)))
            .unwrap();
        // The cache of hot records holds exactly what the store holds.
        let hot = store.state_machine.hot_record_list();
        for (table, k, v) in &hot {
            let cf = store.db.cf_handle(table).unwrap();
            let stored = store.db.get_cf(cf, k).unwrap();
            assert_eq!(stored.as_deref(), Some(&v[..]), "hot record of {table}");
        }
        kept = kept.max(hot.len());
        if restarts.contains(&to) {
            drop(store);
            store = open(dir.path());
        }
        from = to;
    }
    assert!(kept > 0, "the cache of hot records kept nothing");
    dump(&store.db)
}

#[test]
fn runs_give_the_same_state_wherever_they_are_cut() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let tally = std::cell::Cell::new((0usize, 0usize));
    let batched_entries = std::cell::Cell::new(0usize);
    let result = runner.run(
        &(
            proptest::collection::vec(step(), 40..160),
            proptest::collection::vec(0usize..200, 0..12),
            proptest::collection::vec(0usize..200, 0..4),
            proptest::collection::vec(1u8..8, 1..6),
        ),
        |(steps, cuts, restarts, sizes)| {
            let log = log(&steps);
            let one_by_one: Vec<usize> = (1..log.len()).collect();
            let reference = apply(&rt, &log, &one_by_one, &[]);
            let whole = apply(&rt, &log, &[], &[]);
            prop_assert!(reference == whole, "one run differs from entry by entry");
            let sliced = apply(&rt, &log, &cuts, &restarts);
            prop_assert!(
                reference == sliced,
                "slices {cuts:?} with restarts {restarts:?} differ"
            );
            // The same writes with runs of them in batch entries: cut
            // anywhere, the state is the same, and every write has the
            // outcome it had in an entry of its own.
            let batched_log = batched(&log, &sizes);
            let batches = batched_log
                .iter()
                .filter(|e| matches!(&e.payload, EntryPayload::Normal(c) if !c.command().batch.is_empty()))
                .count();
            let batched_whole = apply(&rt, &batched_log, &[], &[]);
            let batched_sliced = apply(&rt, &batched_log, &cuts, &restarts);
            prop_assert!(
                batched_whole == batched_sliced,
                "batched: slices {cuts:?} with restarts {restarts:?} differ"
            );
            prop_assert_eq!(outcomes(&reference), outcomes(&batched_whole));
            batched_entries.set(batched_entries.get() + batches);
            // Not a vacuous log: results in the retry cache, accepted and refused.
            let (mut accepted, mut refused) = tally.get();
            for (t, k, v) in &reference {
                if t == om::store::keys::RETRY_CACHE_CF
                    && !k.starts_with(om::store::keys::RETRY_EXPIRY_PREFIX)
                {
                    let rec = <st::RetryCacheRecord as prost::Message>::decode(&v[..]).unwrap();
                    match rec.result.and_then(|r| r.result) {
                        Some(st::command_result::Result::Rejected(_)) => refused += 1,
                        _ => accepted += 1,
                    }
                }
            }
            tally.set((accepted, refused));
            Ok(())
        },
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    let (accepted, refused) = tally.get();
    eprintln!(
        "apply runs: {accepted} results accepted, {refused} refused in the retry caches; {} batch entries",
        batched_entries.get()
    );
    assert!(
        batched_entries.get() > cases as usize,
        "too few batch entries"
    );
    assert!(
        accepted > 10 * cases as usize && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}
