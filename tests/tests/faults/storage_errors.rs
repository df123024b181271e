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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::history::{Recorder, check_linearizable};
use om_tests::lazyfs::{Cut, LazyFs};
use om_tests::{OmProcess, claimed_leader, cluster_addrs, wait_for};

const READY: Duration = Duration::from_secs(60);

fn mounts(n: usize) -> Option<Vec<LazyFs>> {
    let mut all = Vec::new();
    for _ in 0..n {
        match LazyFs::mount() {
            Ok(fs) => all.push(fs),
            Err(why) => {
                eprintln!("skipped: {why}");
                return None;
            }
        }
    }
    Some(all)
}

/// Waits (up to 30 s) until `p` exits by itself; its status.
async fn exits(p: &mut OmProcess) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = p.exited() {
            return s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "a member whose fsync failed went on running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_stops_the_node_and_loses_nothing_it_acknowledged() {
    let Some(fs) = mounts(1) else { return };
    let dir = fs[0].path().join("om");
    std::fs::create_dir(&dir).unwrap();
    let mut om = OmProcess::spawn(&dir);
    om.wait_ready(READY).await;
    let c = om.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..4 {
        let acked = acked.clone();
        let endpoint = om.grpc.clone();
        writers.push(tokio::spawn(async move {
            let c = OmClient::new(
                &[endpoint],
                ClientOptions {
                    deadline: Duration::from_millis(500),
                    attempt_timeout: Duration::from_millis(500),
                    ..Default::default()
                },
            )
            .unwrap();
            for i in 0..100_000u64 {
                let key = format!("w{w}/k{i:06}");
                match c.put_key("vol1", "bkt1", &key, i).await {
                    Ok(k) => acked.lock().unwrap().push((key, k.update_id)),
                    Err(_) => return,
                }
            }
        }));
    }
    wait_for(Duration::from_secs(60), "200 acknowledged writes", || {
        let n = acked.lock().unwrap().len();
        async move { (n >= 200).then_some(()) }
    })
    .await;
    fs[0].fail_fsyncs(1);
    let status = exits(&mut om).await;
    assert!(!status.success(), "{status}");
    for w in writers {
        w.await.unwrap();
    }
    let stats = fs[0].cut(Cut::Lose);
    eprintln!("exited {status} after a failed fsync; then a cut: {stats:?}");
    assert_eq!(stats.failed_syncs, 1, "{stats:?}");

    om.restart();
    om.wait_ready(READY).await;
    let c = om.client();
    let acked = acked.lock().unwrap().clone();
    for (key, update_id) in &acked {
        let k = c
            .lookup_key("vol1", "bkt1", key)
            .await
            .unwrap_or_else(|e| panic!("acknowledged key {key} lost after a failed fsync: {e}"));
        assert!(k.update_id >= *update_id, "{key} went back in time");
    }
    c.put_key("vol1", "bkt1", "after", 1).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_fsync_fails_stops_and_the_others_go_on() {
    let Some(fs) = mounts(3) else { return };
    let dirs: Vec<_> = fs.iter().map(|f| f.path().join("om")).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let addrs = cluster_addrs(3);
    let mut procs: Vec<OmProcess> = addrs
        .iter()
        .zip(&dirs)
        .map(|(a, d)| OmProcess::spawn_member(d, a, &addrs))
        .collect();
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    let c = om_tests::replicas::register_bucket(&eps).await;

    let rec = Recorder::start(&eps, 6, true);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = (claimed_leader(&eps).await.expect("a leader") - 1) as usize;
    fs[leader].fail_fsyncs(1);
    let status = exits(&mut procs[leader]).await;
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
