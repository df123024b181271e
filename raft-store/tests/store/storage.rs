//! The Raft storage contract, tested on the real RocksDB store: openraft's
//! conformance suite plus om's durability points.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;

use om_raft_store::{Entry, LogStore, OmNode, StateMachine, TypeConfig, Vote, open};
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage, RaftStateMachine};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::vote::leader_id_adv::LeaderId;
use openraft::{EntryPayload, Membership, RaftSnapshotBuilder, StorageError, StoredMembership};
use rocksdb::{ColumnFamilyDescriptor, Options};

use common::{KV, KvApplier, apply, kv, log_id, open_store, put};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let td = tempfile::TempDir::new()
            .map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let (ls, sm, _) = open_store(td.path())
            .map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((td, ls, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_conformance_suite() {
    Suite::test_all(Builder).await.unwrap();
}

fn blank(index: u64) -> Entry {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Blank,
    }
}

async fn append_and_wait(ls: &mut LogStore, entries: Vec<Entry>) {
    let (tx, rx) = TypeConfig::oneshot();
    ls.append(entries, IOFlushed::signal(tx)).await.unwrap();
    rx.await.unwrap().unwrap();
}

#[tokio::test]
async fn vote_is_durable_when_save_vote_returns() {
    let dir = tempfile::tempdir().unwrap();
    let vote = Vote {
        leader_id: LeaderId {
            term: 7,
            node_id: 3,
        },
        committed: true,
    };
    {
        let (mut ls, _, _) = open_store(dir.path()).unwrap();
        ls.save_vote(&vote).await.unwrap();
    }
    let (mut ls, _, _) = open_store(dir.path()).unwrap();
    assert_eq!(ls.read_vote().await.unwrap(), Some(vote));
}

#[tokio::test]
async fn append_is_acknowledged_only_after_the_wal_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ls, _, db) = open_store(dir.path()).unwrap();
    let fsyncs_before = ls.fsync_count();
    let (tx, rx) = TypeConfig::oneshot();
    ls.append(vec![blank(1), blank(2)], IOFlushed::signal(tx))
        .await
        .unwrap();
    // Readable as soon as append returns, before the flush.
    assert_eq!(ls.try_get_log_entries(1..3).await.unwrap().len(), 2);
    let written = db.latest_sequence_number();
    rx.await.unwrap().unwrap();
    // The callback fired only once the WAL was synced past this append.
    assert!(
        ls.durable_sequence() >= written,
        "acknowledged before the fsync"
    );
    assert!(ls.fsync_count() > fsyncs_before);
    drop((ls, db));
    let (mut ls, _, _) = open_store(dir.path()).unwrap();
    assert_eq!(ls.try_get_log_entries(0..10).await.unwrap().len(), 2);
}

#[tokio::test]
async fn apply_writes_data_and_applied_index_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_, mut sm, db) = open_store(dir.path()).unwrap();
        apply(&mut sm, vec![put(1, "a", "1"), put(2, "b", "2")])
            .await
            .unwrap();
        assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 2)));
        assert_eq!(kv(&db, "b").as_deref(), Some("2"));
        // A storage failure in apply stages nothing: neither data nor index move.
        assert!(apply(&mut sm, vec![put(3, "fail", "x")]).await.is_err());
        assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 2)));
        assert_eq!(kv(&db, "fail"), None);
    }
    let (_, mut sm, db) = open_store(dir.path()).unwrap();
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 2)));
    assert_eq!(kv(&db, "a").as_deref(), Some("1"));
}

fn membership_of(ids: &[u64]) -> Membership<u64, OmNode> {
    let nodes: BTreeMap<u64, OmNode> = ids
        .iter()
        .map(|&id| {
            (
                id,
                OmNode {
                    raft_addr: format!("r:{id}"),
                    grpc_addr: format!("g:{id}"),
                },
            )
        })
        .collect();
    Membership::new(vec![ids.iter().copied().collect()], nodes).unwrap()
}

fn membership_entry(index: u64, m: &Membership<u64, OmNode>) -> Entry {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Membership(m.clone()),
    }
}

/// Every entry stores the membership with its applied index: the membership
/// the state machine keeps between entries and apply calls follows a
/// membership entry, and an installed snapshot replaces it (entries applied
/// after the install store the snapshot's, not the one before).
#[tokio::test]
async fn membership_is_stored_with_the_applied_index() {
    let dir = tempfile::tempdir().unwrap();
    let one = membership_of(&[1]);
    let three = membership_of(&[1, 2, 3]);
    {
        let (_, mut sm, _) = open_store(dir.path()).unwrap();
        apply(&mut sm, vec![membership_entry(1, &one)])
            .await
            .unwrap();
        apply(&mut sm, vec![put(2, "a", "1")]).await.unwrap();
        assert_eq!(
            sm.applied_state().await.unwrap(),
            (
                Some(log_id(1, 2)),
                StoredMembership::new(Some(log_id(1, 1)), one.clone())
            )
        );
        apply(
            &mut sm,
            vec![
                put(3, "b", "2"),
                membership_entry(4, &three),
                put(5, "c", "3"),
            ],
        )
        .await
        .unwrap();
        apply(&mut sm, vec![put(6, "d", "4")]).await.unwrap();
    }
    let (_, mut sm, _) = open_store(dir.path()).unwrap();
    let (applied, stored) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 6)));
    assert_eq!(stored, StoredMembership::new(Some(log_id(1, 4)), three));

    // A snapshot from a node that never saw the change to three voters.
    let other = tempfile::tempdir().unwrap();
    let (_, mut sm_other, _) = open_store(other.path()).unwrap();
    apply(
        &mut sm_other,
        (1..=9)
            .map(|i| match i {
                1 => membership_entry(1, &one),
                i => put(i, "x", "y"),
            })
            .collect(),
    )
    .await
    .unwrap();
    let snap = sm_other
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    sm.install_snapshot(&snap.meta, snap.snapshot)
        .await
        .unwrap();
    apply(&mut sm, vec![put(10, "e", "5")]).await.unwrap();
    let expected = (
        Some(log_id(1, 10)),
        StoredMembership::new(Some(log_id(1, 1)), one),
    );
    assert_eq!(sm.applied_state().await.unwrap(), expected);
    drop(sm);
    let (_, mut sm, _) = open_store(dir.path()).unwrap();
    assert_eq!(sm.applied_state().await.unwrap(), expected);
}

/// The database counts tickers (what /metrics reads) but does not time
/// reads and writes: a timed Get or write costs two clock reads and a
/// histogram update, and nothing reads those histograms.
#[tokio::test]
async fn statistics_count_tickers_without_timing_operations() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(
        dir.path(),
        vec![ColumnFamilyDescriptor::new(KV, Options::default())],
        Arc::new(KvApplier),
    )
    .unwrap();
    let mut sm = s.state_machine;
    apply(&mut sm, vec![put(1, "a", "1")]).await.unwrap();
    for _ in 0..10 {
        assert_eq!(kv(&s.db, "a").as_deref(), Some("1"));
    }
    let dump = s.options.get_statistics().expect("statistics enabled");
    let count = |name: &str| -> u64 {
        let line = dump
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from the statistics dump"));
        let (_, rest) = line.split_once("COUNT : ").expect("a count");
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(count("rocksdb.number.keys.read") >= 10, "tickers count");
    assert!(count("rocksdb.number.keys.written") >= 1, "tickers count");
    assert_eq!(count("rocksdb.db.get.micros"), 0, "gets are not timed");
    assert_eq!(count("rocksdb.db.write.micros"), 0, "writes are not timed");
}

#[tokio::test]
async fn purge_persists_last_purged_and_leaves_no_gap() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut ls, _, _) = open_store(dir.path()).unwrap();
        append_and_wait(&mut ls, (1..=10).map(blank).collect()).await;
        ls.purge(log_id(1, 5)).await.unwrap();
        ls.truncate_after(Some(log_id(1, 8))).await.unwrap();
    }
    let (mut ls, _, _) = open_store(dir.path()).unwrap();
    let st = ls.get_log_state().await.unwrap();
    assert_eq!(st.last_purged_log_id, Some(log_id(1, 5)));
    assert_eq!(st.last_log_id, Some(log_id(1, 8)));
    let got: Vec<u64> = ls
        .try_get_log_entries(0..100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.log_id.index)
        .collect();
    assert_eq!(got, vec![6, 7, 8]);
    // Purging everything keeps reporting the purged id as the last log id.
    ls.purge(log_id(1, 8)).await.unwrap();
    let st = ls.get_log_state().await.unwrap();
    assert_eq!(st.last_log_id, Some(log_id(1, 8)));
    assert!(ls.try_get_log_entries(0..100).await.unwrap().is_empty());
}

fn entry(term: u64, index: u64) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Blank,
    }
}

async fn ids(ls: &mut LogStore, range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    ls.try_get_log_entries(range)
        .await
        .unwrap()
        .iter()
        .map(|e| (e.log_id.leader_id.term, e.log_id.index))
        .collect()
}

/// Reads served from the in-memory tail of the log agree with the log on
/// disk through appends, a truncation that replaces entries with another
/// term's, a purge, and a restart (which starts with an empty tail).
#[tokio::test]
async fn the_in_memory_tail_agrees_with_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected: Vec<(u64, u64)> = (1..=10).map(|i| (1, i)).collect();
    {
        let (mut ls, _, _) = open_store(dir.path()).unwrap();
        append_and_wait(&mut ls, (1..=10).map(|i| entry(1, i)).collect()).await;
        let (hits, _) = ls.cache_reads();
        assert_eq!(ids(&mut ls, 1..11).await, expected);
        assert_eq!(ids(&mut ls, 4..7).await, expected[3..6]);
        assert_eq!(ids(&mut ls, 9..20).await, expected[8..]);
        assert_eq!(ls.cache_reads().0, hits + 2, "served from memory");

        // A new leader's entries replace 7..: nothing of term 1 past 6 is read back.
        ls.truncate_after(Some(log_id(1, 6))).await.unwrap();
        assert_eq!(ids(&mut ls, 1..20).await, expected[..6]);
        append_and_wait(&mut ls, (7..=9).map(|i| entry(2, i)).collect()).await;
        expected.truncate(6);
        expected.extend((7..=9).map(|i| (2, i)));
        assert_eq!(ids(&mut ls, 1..20).await, expected);
        assert_eq!(ids(&mut ls, 7..10).await, expected[6..]);

        // Purged entries are gone from memory too.
        ls.purge(log_id(1, 4)).await.unwrap();
        expected.drain(..4);
        assert_eq!(ids(&mut ls, 0..20).await, expected);
        assert_eq!(ids(&mut ls, 5..8).await, expected[..3]);

        // A gap (as after a snapshot) starts a new run.
        ls.purge(log_id(2, 9)).await.unwrap();
        append_and_wait(&mut ls, (20..=22).map(|i| entry(3, i)).collect()).await;
        expected = (20..=22).map(|i| (3, i)).collect();
        assert_eq!(ids(&mut ls, 0..100).await, expected);
        assert_eq!(ids(&mut ls, 21..22).await, expected[1..2]);
    }
    let (mut ls, _, _) = open_store(dir.path()).unwrap();
    let (_, misses) = ls.cache_reads();
    assert_eq!(ids(&mut ls, 0..100).await, expected);
    assert_eq!(
        ls.cache_reads().1,
        misses + 1,
        "read from RocksDB after a restart"
    );
}

/// A command is encoded once and its bytes shared; the entry a log or a peer
/// carries is the same protobuf as before sharing (a `bytes` field), and one
/// received from a peer is copied out of the message it came in.
#[tokio::test]
async fn entries_store_and_send_the_commands_own_encoding() {
    use om_proto::raft as pb;
    use om_raft_store::codec;
    use prost::Message;
    let dir = tempfile::tempdir().unwrap();
    let (mut ls, _sm, db) = open_store(dir.path()).unwrap();
    let e = put(1, "key", "value");
    let EntryPayload::Normal(cmd) = &e.payload else {
        unreachable!()
    };
    let plain = pb::Entry {
        log_id: Some(codec::log_id_to_pb(&e.log_id)),
        payload: Some(pb::entry::Payload::Normal(
            cmd.command().encode_to_vec().into(),
        )),
    }
    .encode_to_vec();
    assert_eq!(codec::encode_entry(&e), plain);
    append_and_wait(&mut ls, vec![e.clone()]).await;
    let stored = db
        .get_cf(
            db.cf_handle(om_raft_store::keys::LOG_CF).unwrap(),
            om_raft_store::keys::log_key(1),
        )
        .unwrap()
        .unwrap();
    assert_eq!(stored, plain);

    let message = pb::Entry::decode(plain.as_slice()).unwrap();
    let Some(pb::entry::Payload::Normal(sent)) = &message.payload else {
        unreachable!()
    };
    let shares = |e: &Entry| match &e.payload {
        EntryPayload::Normal(c) => {
            assert_eq!(c.command(), cmd.command());
            c.encoded().as_ptr() == sent.as_ptr()
        }
        _ => unreachable!(),
    };
    assert!(shares(&codec::entry_from_pb(&message).unwrap()));
    assert!(!shares(&codec::entry_from_peer_pb(&message).unwrap()));
}

#[tokio::test]
async fn snapshot_install_is_all_or_nothing() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (_, mut sm_a, _) = open_store(a.path()).unwrap();
    apply(
        &mut sm_a,
        vec![put(1, "x", "from-a"), put(2, "y", "from-a")],
    )
    .await
    .unwrap();
    let snap = sm_a
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 2)));

    let (_, mut sm_b, db_b) = open_store(b.path()).unwrap();
    apply(&mut sm_b, vec![put(1, "only-b", "b")]).await.unwrap();

    // A damaged transfer: verification fails and B keeps its previous state.
    let path = a.path().join("snapshots/current.snap");
    let mut bytes = std::fs::read(&path).unwrap();
    let damaged = b.path().join("damaged.snap");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&damaged, &bytes).unwrap();
    let r = sm_b
        .install_snapshot(&snap.meta, std::fs::File::open(&damaged).unwrap())
        .await;
    assert!(r.is_err(), "a corrupt snapshot must be refused");
    assert_eq!(kv(&db_b, "only-b").as_deref(), Some("b"));
    assert_eq!(kv(&db_b, "x"), None);
    assert_eq!(sm_b.applied_state().await.unwrap().0, Some(log_id(1, 1)));

    // The intact snapshot replaces B's state exactly.
    sm_b.install_snapshot(&snap.meta, std::fs::File::open(&path).unwrap())
        .await
        .unwrap();
    assert_eq!(kv(&db_b, "only-b"), None);
    assert_eq!(kv(&db_b, "x").as_deref(), Some("from-a"));
    assert_eq!(sm_b.applied_state().await.unwrap().0, Some(log_id(1, 2)));
    let cur = sm_b.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(cur.meta.last_log_id, Some(log_id(1, 2)));
}

#[tokio::test]
async fn snapshot_is_a_consistent_point_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut sm, _) = open_store(dir.path()).unwrap();
    apply(&mut sm, vec![put(1, "k", "v1")]).await.unwrap();
    let mut builder = sm.get_snapshot_builder().await;
    let snap = builder.build_snapshot().await.unwrap();
    // Later writes do not leak into the snapshot already built.
    apply(&mut sm, vec![put(2, "k", "v2")]).await.unwrap();
    let other = tempfile::tempdir().unwrap();
    let (_, mut sm2, db2) = open_store(other.path()).unwrap();
    sm2.install_snapshot(&snap.meta, snap.snapshot)
        .await
        .unwrap();
    assert_eq!(kv(&db2, "k").as_deref(), Some("v1"));
    assert_eq!(sm2.applied_state().await.unwrap().0, Some(log_id(1, 1)));
}

/// A restarted node tells itself apart from a wiped one by what its store
/// holds (a vote, a log entry, applied state, a snapshot), read before Raft
/// starts.
#[tokio::test]
async fn holds_nothing_is_true_only_for_an_empty_store() {
    let kv = || vec![ColumnFamilyDescriptor::new(KV, Options::default())];
    let fresh = tempfile::tempdir().unwrap();
    assert!(
        open(fresh.path(), kv(), Arc::new(KvApplier))
            .unwrap()
            .holds_nothing()
            .unwrap()
    );

    let voted = tempfile::tempdir().unwrap();
    {
        let (mut ls, _, _) = open_store(voted.path()).unwrap();
        ls.save_vote(&Vote {
            leader_id: LeaderId {
                term: 1,
                node_id: 1,
            },
            committed: false,
        })
        .await
        .unwrap();
    }
    let s = open(voted.path(), kv(), Arc::new(KvApplier)).unwrap();
    assert!(!s.holds_nothing().unwrap());

    let logged = tempfile::tempdir().unwrap();
    {
        let (mut ls, _, _) = open_store(logged.path()).unwrap();
        let (tx, rx) = TypeConfig::oneshot();
        ls.append(vec![blank(1)], IOFlushed::signal(tx))
            .await
            .unwrap();
        rx.await.unwrap().unwrap();
    }
    let s = open(logged.path(), kv(), Arc::new(KvApplier)).unwrap();
    assert!(!s.holds_nothing().unwrap());
}
