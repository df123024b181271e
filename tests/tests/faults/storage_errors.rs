//! A failing disk: an fsync that returns EIO (and, as Linux does, drops
//! the pages it covered) on `lazyfs`. The member must never acknowledge
//! what that fsync covered, and must stop rather than go on serving from
//! memory: it exits with a clear message. Started again, it recovers from
//! what its disk holds (after a power cut, too) and catches up.
//!
//! - One node under a write stream: it exits by itself, non-zero; every
//!   write it acknowledged is there after a cut and a restart.
//! - Three members under the register load: the leader's fsync fails; it
//!   exits, the others elect a leader and go on; restarted, it catches up.
//!   The history is linearizable and the replicas identical.
//!
//! Mounting needs `/dev/fuse` and root; without them each test says
//! "skipped" and why.

use std::time::Duration;

use om_tests::history::{Recorder, check_linearizable};
use om_tests::lazyfs::{Cut, mounts};
use om_tests::writes::{Acked, WriteStream, check_acked, single_node};
use om_tests::{claimed_leader, wait_for};

const READY: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_node_and_loses_nothing_it_acknowledged() {
    let Some(fs) = mounts(1) else { return };
    let dir = fs[0].path().join("om");
    std::fs::create_dir(&dir).unwrap();
    let mut om = single_node(&dir).await;
    let acked = Acked::default();
    let stream = WriteStream::start(&om.grpc, "", 4, &acked);
    stream.wait_acked(200).await;
    fs[0].fail_fsyncs(1);
    let status = om.exits("a node whose fsync failed").await;
    assert!(!status.success(), "{status}");
    stream.join().await;
    let stats = fs[0].cut(Cut::Lose);
    eprintln!("exited {status} after a failed fsync; then a cut: {stats:?}");
    assert_eq!(stats.failed_syncs, 1, "{stats:?}");

    om.restart();
    om.wait_ready(READY).await;
    let c = om.client();
    check_acked(&c, &acked, "a failed fsync").await;
    c.put_key("vol1", "bkt1", "after", 1).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_fsync_fails_stops_and_the_others_go_on() {
    let Some(fs) = mounts(3) else { return };
    let (dirs, mut procs, eps) = super::power_cut::members_on(&fs);
    let c = om_tests::replicas::register_bucket(&eps).await;

    let rec = Recorder::start(&eps, 6, true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = (claimed_leader(&eps).await.expect("a leader") - 1) as usize;
    fs[leader].fail_fsyncs(1);
    let status = procs[leader].exits("a leader whose fsync failed").await;
    assert!(!status.success(), "{status}");
    eprintln!("member {} exited {status} after a failed fsync", leader + 1);
    // The others elect a leader and go on taking writes.
    let known = rec.known();
    let others: Vec<String> = (0..3)
        .filter(|i| *i != leader)
        .map(|i| eps[i].clone())
        .collect();
    wait_for(Duration::from_secs(30), "a new leader", || {
        let others = others.clone();
        async move { claimed_leader(&others).await }
    })
    .await;
    wait_for(Duration::from_secs(30), "writes to go on", || {
        let n = rec.known();
        async move { (n > known + 100).then_some(()) }
    })
    .await;
    fs[leader].cut(Cut::Lose);
    procs[leader].restart();
    tokio::time::sleep(Duration::from_secs(3)).await;

    let end = rec.now();
    let history = rec.finish().await;
    om_tests::replicas::wait_settled(&c, &procs).await;
    check_linearizable(&history, end);
    om_tests::replicas::assert_identical(&c, &mut procs, &dirs, "a failed fsync").await;
}
