//! Snapshot hardening on the real store: a corrupt current snapshot is never
//! handed out (nor stops start-up), a crash between publishing a snapshot and
//! committing its state is completed at start-up, so is a crash in the middle
//! of ingesting it, and transient storage errors are retried instead of
//! failing the operation.

use crate::common;

use std::time::Duration;

use common::{apply, build, dump, files_in, kv, log_id, open_store, put, start_up};
use om_raft_store::snapshot::verify_file;
use openraft::RaftSnapshotBuilder;
use openraft::storage::{RaftStateMachine, StorageHelper};

fn stat(
    sm: &om_raft_store::StateMachine,
    f: impl Fn(&om_raft_store::snapshot_store::SnapshotStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    f(&sm.snapshot_stats()).load(std::sync::atomic::Ordering::Relaxed)
}

fn flip_middle_byte(path: &std::path::Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(path, &bytes).unwrap();
}

#[tokio::test]
async fn a_corrupt_current_snapshot_is_quarantined_and_rebuilt_before_it_is_handed_out() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut sm, _) = open_store(dir.path()).unwrap();
    apply(&mut sm, vec![put(1, "a", "1"), put(2, "b", "2")])
        .await
        .unwrap();
    build(&mut sm).await;
    apply(&mut sm, vec![put(3, "c", "3")]).await.unwrap();
    let snaps = dir.path().join("snapshots");
    flip_middle_byte(&snaps.join("current.snap"));

    let cur = sm.get_current_snapshot().await.unwrap().unwrap();
    // A new snapshot of the state as of now, not the damaged file.
    assert_eq!(cur.meta.last_log_id, Some(log_id(1, 3)));
    let tables = vec![common::KV.to_string()];
    let v = verify_file(&snaps.join("current.snap"), &tables, Some(&cur.meta)).unwrap();
    assert_eq!(v.records, 3);
    assert_eq!(stat(&sm, |s| &s.quarantined), 1);
    assert_eq!(files_in(&snaps), ["current.snap", "quarantined.snap"]);
    // The handle handed out reads the new file.
    let len = cur.snapshot.metadata().unwrap().len();
    om_raft_store::snapshot::verify(&cur.snapshot, len, &tables, Some(&cur.meta)).unwrap();
}

#[tokio::test]
async fn a_corrupt_current_snapshot_does_not_prevent_start_up() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_, mut sm, _) = open_store(dir.path()).unwrap();
        apply(&mut sm, vec![put(1, "a", "1")]).await.unwrap();
        build(&mut sm).await;
    }
    // Even the header is gone.
    let path = dir.path().join("snapshots/current.snap");
    std::fs::write(&path, b"garbage").unwrap();
    let (mut ls, mut sm, db) = open_store(dir.path()).unwrap();
    let state = start_up(&mut ls, &mut sm, 1).await;
    assert_eq!(state.snapshot_meta.last_log_id, Some(log_id(1, 1)));
    assert_eq!(kv(&db, "a").as_deref(), Some("1"));
    assert_eq!(stat(&sm, |s| &s.quarantined), 1);
}

/// At start-up openraft reads the current snapshot only for its meta: a file
/// that matches what was recorded when it was published is trusted without
/// reading it whole (start-up does not grow with the state). Damage the
/// record cannot see (inside the records) is found when the file is first
/// handed out, which verifies it end to end.
#[tokio::test]
async fn start_up_trusts_the_published_snapshot_by_its_record_and_hand_outs_verify() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_, mut sm, _) = open_store(dir.path()).unwrap();
        // Values long enough that the file's middle byte lies in a record,
        // past the header (meta, membership, state digest).
        let (one, two) = ("1".repeat(256), "2".repeat(256));
        apply(&mut sm, vec![put(1, "a", &one), put(2, "b", &two)])
            .await
            .unwrap();
        build(&mut sm).await;
        apply(&mut sm, vec![put(3, "c", "3")]).await.unwrap();
    }
    let path = dir.path().join("snapshots/current.snap");
    flip_middle_byte(&path);
    let (mut ls, mut sm, _db) = open_store(dir.path()).unwrap();
    let state = start_up(&mut ls, &mut sm, 1).await;
    assert_eq!(state.snapshot_meta.last_log_id, Some(log_id(1, 2)));
    assert!(stat(&sm, |s| &s.trusted_reads) >= 1);
    assert_eq!(stat(&sm, |s| &s.verified_reads), 0);
    assert_eq!(stat(&sm, |s| &s.quarantined), 0);

    // Handing it out (to send it) verifies it: quarantined and rebuilt.
    let cur = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(cur.meta.last_log_id, Some(log_id(1, 3)));
    assert_eq!(stat(&sm, |s| &s.verified_reads), 1);
    assert_eq!(stat(&sm, |s| &s.quarantined), 1);
    let tables = vec![common::KV.to_string()];
    verify_file(&path, &tables, Some(&cur.meta)).unwrap();

    // The rebuilt file was recorded in turn: the next start trusts it.
    drop((ls, sm, _db));
    let (mut ls, mut sm, _db) = open_store(dir.path()).unwrap();
    let state = start_up(&mut ls, &mut sm, 1).await;
    assert_eq!(state.snapshot_meta.last_log_id, Some(log_id(1, 3)));
    assert!(stat(&sm, |s| &s.trusted_reads) >= 1);
    assert_eq!(stat(&sm, |s| &s.verified_reads), 0);
}

/// Node `a` snapshots `x` and `y`; node `b`, holding only `only-b`, installs
/// that snapshot and fails after publishing it, before committing its state:
/// what a crash there leaves.
async fn interrupted_install(a: &std::path::Path, b: &std::path::Path) {
    let (_, mut sm_a, _) = open_store(a).unwrap();
    apply(
        &mut sm_a,
        vec![put(1, "x", "from-a"), put(2, "y", "from-a")],
    )
    .await
    .unwrap();
    let snap = build(&mut sm_a).await;
    let (_, mut sm_b, db_b) = open_store(b).unwrap();
    apply(&mut sm_b, vec![put(1, "only-b", "b")]).await.unwrap();
    let before = dump(&db_b);
    sm_b.snapshot_faults().fail_next_install_commit();
    let path = a.join("snapshots/current.snap");
    let r = sm_b
        .install_snapshot(&snap.meta, std::fs::File::open(&path).unwrap())
        .await;
    assert!(r.is_err(), "the injected failure must surface");
    // The state is the old one, the published snapshot the new one: the
    // order that lets start-up finish the install.
    assert_eq!(dump(&db_b), before);
    let cur = sm_b.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(cur.meta.last_log_id, Some(log_id(1, 2)));
}

/// A published snapshot ahead of the applied state (a crash cut its install
/// short) is about to be installed at start-up: it is verified even when it
/// matches its record, so a corrupt one is quarantined and the node starts on
/// its old state (the leader sends the snapshot again) instead of failing.
#[tokio::test]
async fn start_up_verifies_a_matching_snapshot_it_is_about_to_install() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    interrupted_install(a.path(), b.path()).await;
    // The published file matches its record, and is damaged inside.
    flip_middle_byte(&b.path().join("snapshots/current.snap"));
    let (mut ls, mut sm_b, db_b) = open_store(b.path()).unwrap();
    let state = start_up(&mut ls, &mut sm_b, 2).await;
    assert_eq!(stat(&sm_b, |s| &s.quarantined), 1);
    assert!(stat(&sm_b, |s| &s.verified_reads) >= 1);
    // The old state, and a snapshot of it.
    assert_eq!(state.snapshot_meta.last_log_id, Some(log_id(1, 1)));
    assert_eq!(kv(&db_b, "only-b").as_deref(), Some("b"));
    assert_eq!(kv(&db_b, "x"), None);
}

/// A file that is not the one recorded (its meta, length or trailing CRC
/// differ, or there is no record) is verified whole at start-up, and a
/// corrupt one is quarantined there.
#[tokio::test]
async fn start_up_verifies_a_snapshot_that_does_not_match_its_record() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_, mut sm, _) = open_store(dir.path()).unwrap();
        apply(&mut sm, vec![put(1, "a", "1"), put(2, "b", "2")])
            .await
            .unwrap();
        build(&mut sm).await;
    }
    let path = dir.path().join("snapshots/current.snap");
    let good = std::fs::read(&path).unwrap();
    // Each damage changes what the record describes: the trailing CRC, the
    // length, the meta (which starts after the magic and its length).
    let damages: [fn(&mut Vec<u8>); 3] = [
        |b| *b.last_mut().unwrap() ^= 1,
        |b| b.push(0),
        |b| b[14] ^= 1,
    ];
    for (i, damage) in damages.iter().enumerate() {
        let mut bytes = good.clone();
        damage(&mut bytes);
        assert_ne!(bytes, good);
        std::fs::write(&path, &bytes).unwrap();
        let (mut ls, mut sm, _db) = open_store(dir.path()).unwrap();
        start_up(&mut ls, &mut sm, 1).await;
        // Verified, found corrupt, quarantined (the rebuilt file may then
        // be trusted by its new record).
        assert_eq!(stat(&sm, |s| &s.verified_reads), 1, "damage {i}");
        assert_eq!(stat(&sm, |s| &s.quarantined), 1, "damage {i}");
        // The rebuilt snapshot describes the state.
        let tables = vec![common::KV.to_string()];
        let v = verify_file(&path, &tables, None).unwrap();
        assert_eq!(v.records, 2, "damage {i}");
        std::fs::write(&path, &good).unwrap();
        std::fs::remove_file(path.with_file_name("quarantined.snap")).unwrap();
    }
}

#[tokio::test]
async fn a_crash_between_publishing_a_snapshot_and_committing_its_state_is_completed_at_start_up() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    interrupted_install(a.path(), b.path()).await;
    let (mut ls, mut sm_b, db_b) = open_store(b.path()).unwrap();
    let state = StorageHelper::new(&mut ls, &mut sm_b)
        .with_id(2)
        .get_initial_state()
        .await
        .unwrap();
    assert_eq!(state.snapshot_meta.last_log_id, Some(log_id(1, 2)));
    assert_eq!(sm_b.applied_state().await.unwrap().0, Some(log_id(1, 2)));
    assert_eq!(kv(&db_b, "x").as_deref(), Some("from-a"));
    assert_eq!(kv(&db_b, "only-b"), None);
    assert_eq!(files_in(&b.path().join("snapshots")), ["current.snap"]);
}

/// Installing writes the state into SST files (several here, as a large
/// column family would) and ingests them. Stopped right after the ingestion,
/// before the applied state is written, the node has no applied state, so
/// start-up installs the published snapshot again: the result is exactly the
/// snapshot's state, with nothing of the old state left.
#[tokio::test]
async fn a_crash_in_the_middle_of_ingesting_a_snapshot_is_completed_at_start_up() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (_, mut sm_a, db_a) = open_store(a.path()).unwrap();
    let puts: Vec<_> = (1..=300)
        .map(|i| put(i, &format!("k{i:04}"), &"v".repeat(100)))
        .collect();
    apply(&mut sm_a, puts).await.unwrap();
    let snap = build(&mut sm_a).await;
    let path = a.path().join("snapshots/current.snap");
    {
        let (_, mut sm_b, db_b) = open_store(b.path()).unwrap();
        apply(
            &mut sm_b,
            vec![put(1, "only-b", "b"), put(2, "k0001", "old")],
        )
        .await
        .unwrap();
        sm_b.limit_ingest_file_bytes(4096);
        sm_b.snapshot_faults().fail_next_install_after_ingesting(1);
        let r = sm_b
            .install_snapshot(&snap.meta, std::fs::File::open(&path).unwrap())
            .await;
        assert!(r.is_err(), "the injected failure must surface");
        assert!(stat(&sm_b, |s| &s.ingested_files) >= 5);
        // The new rows are in, the applied state is not.
        assert_eq!(sm_b.applied_state().await.unwrap().0, None);
        assert_eq!(kv(&db_b, "only-b"), None);
        assert_eq!(stat(&sm_b, |s| &s.installed), 0);
    }
    let (mut ls, mut sm_b, db_b) = open_store(b.path()).unwrap();
    StorageHelper::new(&mut ls, &mut sm_b)
        .with_id(2)
        .get_initial_state()
        .await
        .unwrap();
    assert_eq!(sm_b.applied_state().await.unwrap().0, Some(log_id(1, 300)));
    assert_eq!(stat(&sm_b, |s| &s.installed), 1);
    // The replicated state (not the log store's own records) is the snapshot's.
    let state = |db| {
        dump(db)
            .into_iter()
            .filter(|(cf, _, _)| !cf.starts_with("raft_"))
            .collect::<Vec<_>>()
    };
    assert_eq!(state(&db_b), state(&db_a));
    assert_eq!(files_in(&b.path().join("snapshots")), ["current.snap"]);
}

#[tokio::test]
async fn transient_errors_while_building_or_installing_are_retried() {
    let a = tempfile::tempdir().unwrap();
    let (_, mut sm, _) = open_store(a.path()).unwrap();
    apply(&mut sm, vec![put(1, "k", "v")]).await.unwrap();
    sm.snapshot_faults().fail_next_creates(3, libc::EMFILE);
    let snap = build(&mut sm).await;
    assert_eq!(snap.meta.last_log_id, Some(log_id(1, 1)));
    assert_eq!(stat(&sm, |s| &s.retries), 3);
    assert_eq!(stat(&sm, |s| &s.built), 1);
    // The failed attempts left no staging files behind.
    assert_eq!(files_in(&a.path().join("snapshots")), ["current.snap"]);

    let b = tempfile::tempdir().unwrap();
    let (_, mut sm_b, db_b) = open_store(b.path()).unwrap();
    sm_b.snapshot_faults().fail_next_creates(2, libc::ENOSPC);
    sm_b.install_snapshot(&snap.meta, snap.snapshot)
        .await
        .unwrap();
    assert_eq!(kv(&db_b, "k").as_deref(), Some("v"));
    assert_eq!(stat(&sm_b, |s| &s.retries), 2);
}

#[tokio::test]
async fn other_errors_are_returned_and_a_retrying_build_ends_with_its_state_machine() {
    let dir = tempfile::tempdir().unwrap();
    let (_, mut sm, _) = open_store(dir.path()).unwrap();
    apply(&mut sm, vec![put(1, "k", "v")]).await.unwrap();
    sm.snapshot_faults().fail_next_creates(1, libc::EIO);
    let r = sm.get_snapshot_builder().await.build_snapshot().await;
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));
    assert_eq!(stat(&sm, |s| &s.retries), 0);

    sm.snapshot_faults()
        .fail_next_creates(u32::MAX, libc::EMFILE);
    let mut builder = sm.get_snapshot_builder().await;
    let build = tokio::spawn(async move { builder.build_snapshot().await });
    // Wait until it is retrying, then let the state machine go.
    let stats = sm.snapshot_stats();
    while stats.retries.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(sm);
    let r = tokio::time::timeout(Duration::from_secs(20), build)
        .await
        .expect("the build stops retrying")
        .unwrap();
    assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EMFILE));
}
