//! Raft transport and snapshot hardening on real nodes: a down follower is
//! reconnected on a backoff schedule (counted, not timed), a corrupt snapshot
//! on the leader is rebuilt before a follower gets it, bad incoming snapshots
//! are refused before openraft sees them, a snapshot transfer cut short
//! continues where it stopped, a crash in the middle of installing a snapshot
//! is completed at restart, transient storage errors while building a
//! snapshot are retried without stopping Raft, and a stream a peer keeps open
//! does not keep a stopped node's database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use om_client::v1::BucketLayout;
use om_proto::raft as pb;
use om_proto::raft::raft_service_client::RaftServiceClient;
use om_raft_store::StateMachine;
use om_raft_store::snapshot_store::{MAX_SNAPSHOT_BYTES, SnapshotFaults, SnapshotStats};
use om_tests::{
    ClusterOptions, TestCluster, TestNode, http_get, local_client, metrics_of, wait_for,
};
use tonic::codegen::tokio_stream;

async fn hooks(n: &TestNode) -> (Arc<SnapshotFaults>, Arc<SnapshotStats>) {
    n.node
        .raft
        .with_state_machine(|sm: &mut StateMachine| {
            let r = (sm.snapshot_faults(), sm.snapshot_stats());
            Box::pin(async move { r })
        })
        .await
        .unwrap()
}

async fn limit_incoming(n: &TestNode, bytes: u64) {
    n.node
        .raft
        .with_state_machine(move |sm: &mut StateMachine| {
            sm.limit_incoming_snapshots(bytes);
            Box::pin(async {})
        })
        .await
        .unwrap()
}

fn stat(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sum of `om_raft_peer_connect_attempts_total` towards `addr`.
fn connect_attempts(metrics: &str, addr: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("om_raft_peer_connect_attempts_total{")
                && l.contains(&format!("addr=\"{addr}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// With one follower stopped, the leader's connection attempts to it follow
/// the backoff schedule (100 ms doubling to 1 s: about 8 in 5 s) instead of
/// one per heartbeat plus a tight replication loop, and the follower catches
/// up once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_follower_is_reconnected_on_a_backoff_schedule_and_catches_up() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.leader().await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let victim = (1..=3).find(|id| *id != leader).unwrap();
    let victim_addrs = cluster.addrs()[(victim - 1) as usize].clone();
    let victim_raft = victim_addrs.raft.clone();
    cluster.stop(victim).await;
    let leader_http = cluster.node(leader).node.http_addr;

    let before = connect_attempts(&http_get(leader_http, "/metrics").await, &victim_raft);
    // Five seconds of writes: replication always has something to send.
    let started = Instant::now();
    let mut written = 0;
    while started.elapsed() < Duration::from_secs(5) {
        c.put_key("vol1", "bkt1", &format!("k{written:03}"), 1)
            .await
            .unwrap();
        written += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let during = connect_attempts(&http_get(leader_http, "/metrics").await, &victim_raft) - before;
    assert!(
        during <= 20,
        "{during} connection attempts to a down peer in 5 s"
    );
    assert!(
        during >= 3,
        "only {during} connection attempts: the down peer is not being probed"
    );
    // The leader stays leader and keeps committing with the other follower.
    let lm = metrics_of(cluster.node(leader));
    assert_eq!(lm.current_leader, Some(leader));

    // Come back right after a failed probe, so the next one is a full backoff
    // step (1 s) away: longer than the returning node's election timeout.
    let seen = connect_attempts(&http_get(leader_http, "/metrics").await, &victim_raft);
    wait_for(Duration::from_secs(5), "the next probe", || async {
        let now = connect_attempts(&http_get(leader_http, "/metrics").await, &victim_raft);
        (now > seen).then_some(())
    })
    .await;
    cluster.restart(victim).await;
    let lc = local_client(&victim_addrs, Duration::from_secs(2));
    let last = format!("k{:03}", written - 1);
    wait_for(Duration::from_secs(20), "the follower to catch up", || {
        let (lc, last) = (&lc, &last);
        async move { lc.lookup_key("vol1", "bkt1", last).await.ok() }
    })
    .await;
    // Coming back while the leader still backs off did not depose it: the
    // returning node asked (pre-vote) before raising its term.
    for n in cluster.running() {
        let m = metrics_of(n);
        assert_eq!(m.current_leader, Some(leader), "node {}", m.id);
        assert_eq!(m.current_term, lm.current_term, "node {}", m.id);
    }
    cluster.shutdown().await;
}

/// A `current.snap` damaged on disk is never sent: the sender quarantines
/// it, builds a new one, and the wiped follower installs that.
///
/// The file is damaged on both remaining members: when the wiped node comes
/// back, the leader may hand leadership to the other member (a member that
/// lost acknowledged entries is caught up from scratch after a transfer; see
/// `om::tasks::rejoin`), and whichever of them sends must find the damage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_snapshot_on_the_leader_is_rebuilt_before_a_follower_gets_it() {
    let options = ClusterOptions::default().tweak(|_, a| {
        a.snapshot_every = Some(20);
        a.snapshot_keep_logs = Some(5);
    });
    let mut cluster = TestCluster::start_with(3, options).await;
    let leader = cluster.leader().await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..30 {
        c.put_key("vol1", "bkt1", &format!("k{i:03}"), i)
            .await
            .unwrap();
    }
    let victim = (1..=3).find(|id| *id != leader).unwrap();
    cluster.stop(victim).await;
    for i in 30..60 {
        c.put_key("vol1", "bkt1", &format!("k{i:03}"), i)
            .await
            .unwrap();
    }
    let survivors: Vec<u64> = (1..=3).filter(|id| *id != victim).collect();
    // The snapshot policy builds in the background every 20 entries: a build
    // after the damage below would replace the damaged file before anything
    // read it. Write until both remaining members have purged the log a
    // wiped node would need and are at least 4 entries short of their next
    // build, so the entries still to come (a follower a write behind, a
    // leadership change appending one) cannot make another due.
    let mut keys = 60;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let settled = survivors.iter().all(|&id| {
            let m = metrics_of(cluster.node(id));
            let applied = m.last_applied.as_ref().map_or(0, |l| l.index);
            let snapshot = m.snapshot.as_ref().map_or(0, |l| l.index);
            m.purged.is_some_and(|p| p.index > 10) && applied + 4 <= snapshot + 20
        });
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the remaining members to build a snapshot"
        );
        c.put_key("vol1", "bkt1", &format!("k{keys:03}"), keys)
            .await
            .unwrap();
        keys += 1;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let mut damaged = Vec::new();
    // A build triggered just before the checks may still be publishing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for &id in &survivors {
        let current = cluster.node(id).dir.path().join("snapshots/current.snap");
        let mut bytes = std::fs::read(&current).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&current, &bytes).unwrap();
        damaged.push((id, current));
    }

    // Same id and addresses, empty data directory: it needs a snapshot.
    cluster.restart_wiped(victim).await;
    let lc = local_client(
        &cluster.addrs()[(victim - 1) as usize],
        Duration::from_secs(2),
    );
    wait_for(
        Duration::from_secs(30),
        "the wiped node to catch up",
        || {
            let lc = &lc;
            let last = format!("k{:03}", keys - 1);
            async move { lc.lookup_key("vol1", "bkt1", &last).await.ok() }
        },
    )
    .await;
    assert_eq!(lc.get_bucket("vol1", "bkt1").await.unwrap().key_count, keys);
    // The data is readable as soon as the state machine holds it; Raft's
    // metrics report the installed snapshot a moment later.
    wait_for(
        Duration::from_secs(10),
        "the wiped node's metrics to show the installed snapshot",
        || {
            let m = metrics_of(cluster.node(victim));
            async move { m.snapshot.is_some().then_some(()) }
        },
    )
    .await;
    // The wiped node verifies what it receives before installing it (see
    // `bad_incoming_snapshots_are_refused_before_raft_sees_them`).
    let (_, vstats) = hooks(cluster.node(victim)).await;
    assert!(stat(&vstats.installed) >= 1);
    let mut quarantined = 0;
    for (id, current) in &damaged {
        let (_, stats) = hooks(cluster.node(*id)).await;
        let q = stat(&stats.quarantined);
        assert!(q <= 1, "node {id} quarantined {q} files");
        if q == 1 {
            assert!(
                current.with_file_name("quarantined.snap").exists(),
                "node {id}: the damaged file is kept aside"
            );
        }
        quarantined += q;
    }
    assert!(quarantined >= 1, "the sender found the damaged file");
    // The cluster keeps serving writes, on every member.
    c.put_key("vol1", "bkt1", "after", 1).await.unwrap();
    wait_for(
        Duration::from_secs(10),
        "the wiped node to apply a later write",
        || {
            let lc = &lc;
            async move { lc.lookup_key("vol1", "bkt1", "after").await.ok() }
        },
    )
    .await;
    cluster.shutdown().await;
}

/// Chunks of `bytes` as the leader sends them: offsets, and the meta and the
/// CRC of all data on the last chunk.
fn chunks(
    bytes: &[u8],
    size: usize,
    vote: pb::Vote,
    meta: &pb::SnapshotMeta,
) -> Vec<pb::SnapshotChunk> {
    let mut out = Vec::new();
    let mut offset = 0u64;
    for part in bytes.chunks(size) {
        out.push(pb::SnapshotChunk {
            vote: Some(vote),
            offset,
            data: part.to_vec(),
            ..Default::default()
        });
        offset += part.len() as u64;
    }
    out.push(pb::SnapshotChunk {
        vote: Some(vote),
        offset,
        done: true,
        meta: Some(meta.clone()),
        crc32c: crc32fast::hash(bytes),
        ..Default::default()
    });
    out
}

async fn send(
    raft: &str,
    chunks: Vec<pb::SnapshotChunk>,
) -> Result<pb::SnapshotResponse, tonic::Status> {
    let mut c = RaftServiceClient::connect(format!("http://{raft}"))
        .await
        .unwrap();
    c.install_snapshot(tokio_stream::iter(chunks))
        .await
        .map(|r| r.into_inner())
}

type Transfer =
    tokio::task::JoinHandle<Result<tonic::Response<pb::SnapshotResponse>, tonic::Status>>;

/// A snapshot transfer to `raft` that has sent `first` and stays open (until
/// the returned sender is dropped), once the receiver has staged it in
/// `snaps`.
async fn open_transfer(
    raft: &str,
    first: pb::SnapshotChunk,
    snaps: &std::path::Path,
) -> (tokio::sync::mpsc::Sender<pb::SnapshotChunk>, Transfer) {
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::SnapshotChunk>(4);
    tx.send(first).await.unwrap();
    let raft = raft.to_string();
    let transfer = tokio::spawn(async move {
        let mut c = RaftServiceClient::connect(format!("http://{raft}"))
            .await
            .unwrap();
        c.install_snapshot(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    wait_for(Duration::from_secs(10), "a staged transfer", || {
        let staged = !staged_files(snaps).is_empty();
        async move { staged.then_some(()) }
    })
    .await;
    (tx, transfer)
}

fn staged_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("tmp-"))
        .collect()
}

/// Damaged, mismatched, oversized and concurrent incoming snapshots are
/// refused by the receiver before openraft sees them (so its vote is not
/// even looked at), a transient error while staging fails only that
/// transfer, and a dropped stream leaves no staging file behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_incoming_snapshots_are_refused_before_raft_sees_them() {
    let n = TestNode::start().await;
    let c = n.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..5 {
        c.put_key("vol1", "bkt1", &format!("k{i}"), i)
            .await
            .unwrap();
    }
    n.node.raft.trigger().snapshot().await.unwrap();
    wait_for(Duration::from_secs(10), "a snapshot", || {
        let s = metrics_of(&n).snapshot;
        async move { s }
    })
    .await;
    let snaps = n.dir.path().join("snapshots");
    let valid = std::fs::read(snaps.join("current.snap")).unwrap();
    let file_meta = om_raft_store::snapshot::SnapshotReader::open_file(&snaps.join("current.snap"))
        .unwrap()
        .meta;
    let m0 = metrics_of(&n);
    let before = n.dump();
    let raft = n.node.raft_addr.to_string();
    // A vote that would make the node step down, and a snapshot ahead of it:
    // had any of these reached openraft, it would have acted on them.
    let vote = pb::Vote {
        leader_id: Some(pb::LeaderId {
            term: m0.current_term + 5,
            node_id: 9,
        }),
        committed: true,
    };
    let mut ahead = file_meta.clone();
    if let Some(l) = ahead.last_log_id.as_mut() {
        l.index += 1000;
        l.leader_id = vote.leader_id;
    }

    let expect =
        |r: Result<pb::SnapshotResponse, tonic::Status>, code: tonic::Code, what: &str| match r {
            Err(s) => assert_eq!(s.code(), code, "{what}: {s:?}"),
            Ok(r) => panic!("{what}: accepted ({r:?})"),
        };
    let garbage = vec![0xab; 4096];
    expect(
        send(&raft, chunks(&garbage, 1024, vote, &ahead)).await,
        tonic::Code::DataLoss,
        "random bytes",
    );
    let mut flipped = valid.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x01;
    expect(
        send(&raft, chunks(&flipped, 1024, vote, &file_meta)).await,
        tonic::Code::DataLoss,
        "a flipped byte",
    );
    expect(
        send(&raft, chunks(&valid, 1024, vote, &ahead)).await,
        tonic::Code::DataLoss,
        "a meta other than the file's",
    );
    let mut bad_crc = chunks(&valid, 1024, vote, &file_meta);
    bad_crc.last_mut().unwrap().crc32c ^= 1;
    expect(
        send(&raft, bad_crc).await,
        tonic::Code::DataLoss,
        "a wrong stream CRC",
    );
    let mut gap = chunks(&valid, 256, vote, &file_meta);
    gap.remove(1);
    expect(
        send(&raft, gap).await,
        tonic::Code::InvalidArgument,
        "a missing chunk",
    );

    let (faults, _) = hooks(&n).await;
    faults.fail_next_creates(1, libc::ENOSPC);
    expect(
        send(&raft, chunks(&valid, 1024, vote, &file_meta)).await,
        tonic::Code::ResourceExhausted,
        "no space to stage",
    );

    limit_incoming(&n, valid.len() as u64 - 1).await;
    expect(
        send(&raft, chunks(&valid, 256, vote, &file_meta)).await,
        tonic::Code::ResourceExhausted,
        "past the size limit",
    );
    limit_incoming(&n, MAX_SNAPSHOT_BYTES).await;

    // One transfer at a time; a transfer whose client goes away mid-stream
    // leaves nothing behind.
    let first = chunks(&valid, 256, vote, &file_meta).remove(0);
    let (tx, pending) = open_transfer(&raft, first, &snaps).await;
    expect(
        send(&raft, chunks(&valid, 1024, vote, &file_meta)).await,
        tonic::Code::ResourceExhausted,
        "a second concurrent transfer",
    );
    pending.abort();
    let _ = pending.await;
    drop(tx);
    wait_for(Duration::from_secs(10), "the staging file to go", || {
        let left = staged_files(&snaps);
        async move { left.is_empty().then_some(()) }
    })
    .await;

    let m1 = metrics_of(&n);
    assert_eq!(m1.state, openraft::ServerState::Leader);
    assert_eq!(
        m1.current_term, m0.current_term,
        "a refused vote reached Raft"
    );
    assert_eq!(before, n.dump(), "a refused snapshot changed the tables");
    assert_eq!(std::fs::read(snaps.join("current.snap")).unwrap(), valid);
    c.put_key("vol1", "bkt1", "after", 1).await.unwrap();
    n.node.shutdown().await;
}

/// A node stops without waiting for its peers to hang up. A snapshot
/// transfer that sent one chunk and went silent holds the receiving side's
/// staging (and so the database) for as long as its connection lives; the
/// stopping node closes the connection, so the same process can open the
/// data directory again at once (RocksDB's lock would refuse it otherwise),
/// and the node starts with its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_a_peer_keeps_open_does_not_hold_a_stopped_node() {
    let n = TestNode::start().await;
    let c = n.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.put_key("vol1", "bkt1", "before", 3).await.unwrap();
    let snaps = n.dir.path().join("snapshots");
    let term = metrics_of(&n).current_term;
    let vote = pb::Vote {
        leader_id: Some(pb::LeaderId {
            term: term + 5,
            node_id: 9,
        }),
        committed: true,
    };
    let meta = pb::SnapshotMeta::default();
    let first = chunks(&[7u8; 4096], 1024, vote, &meta).remove(0);
    let raft = n.node.raft_addr.to_string();
    let (tx, transfer) = open_transfer(&raft, first, &snaps).await;

    // The peer never hangs up: `tx` lives to the end of the test.
    let dir = n.stop().await;
    let n = TestNode::start_in(dir, |_| {}).await;
    let c = n.client();
    assert!(c.lookup_key("vol1", "bkt1", "before").await.is_ok());
    c.put_key("vol1", "bkt1", "after", 3).await.unwrap();
    // The transfer failed with its connection; the peer would send again.
    let status = transfer.await.unwrap().expect_err("the transfer was cut");
    assert_ne!(status.code(), tonic::Code::Ok);
    drop(tx);
    n.node.shutdown().await;
}

/// `EMFILE` while building a snapshot is retried with backoff: Raft keeps
/// running (it stopped before) and the snapshot is built.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_error_while_building_a_snapshot_is_retried_and_raft_keeps_running() {
    let n = TestNode::start().await;
    let c = n.client();
    c.create_volume("vol1", "").await.unwrap();
    let (faults, stats) = hooks(&n).await;
    faults.fail_next_creates(4, libc::EMFILE);
    n.node.raft.trigger().snapshot().await.unwrap();
    let applied = metrics_of(&n).last_applied;
    wait_for(Duration::from_secs(20), "the snapshot to be built", || {
        let s = metrics_of(&n).snapshot;
        async move { (s.is_some() && s >= applied).then_some(()) }
    })
    .await;
    assert_eq!(stat(&stats.retries), 4);
    assert_eq!(stat(&stats.built), 1);
    let m = metrics_of(&n);
    assert_eq!(m.state, openraft::ServerState::Leader);
    let health = http_get(n.node.http_addr, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let metrics = http_get(n.node.http_addr, "/metrics").await;
    assert!(
        metrics.contains("om_raft_snapshot_retries_total{op=\"build\"}"),
        "retries are exported"
    );
    c.create_volume("vol2", "").await.unwrap();
    n.node.shutdown().await;
}

/// A wiped follower needs a snapshot of several chunks. Its first transfer
/// is cut after the first chunk (as a dropped connection would): the leader's
/// next attempt sends only the rest. Its install then fails after three
/// column families were ingested (as a crash would): restarted on the same
/// data directory, the node installs the published snapshot again, catches
/// up, and holds exactly the leader's tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_snapshot_transfer_resumes_and_a_crash_mid_install_is_completed_at_restart() {
    let faults = Arc::new(om_tests::Faults::default());
    let options = ClusterOptions::default()
        .faults(faults.clone())
        .tweak(|_, a| {
            a.snapshot_every = Some(50);
            a.snapshot_keep_logs = Some(5);
        });
    let mut cluster = TestCluster::start_with(3, options).await;
    let leader = cluster.leader().await;
    let c = cluster.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let victim = (1..=3).find(|id| *id != leader).unwrap();
    cluster.stop(victim).await;
    // Long names: about 2 MiB of state, three chunks.
    let pad = "p".repeat(900);
    futures::stream::iter(0..2000)
        .for_each_concurrent(32, |i| {
            let (c, pad) = (&c, &pad);
            async move {
                c.put_key("vol1", "bkt1", &format!("k{i:05}-{pad}"), i)
                    .await
                    .unwrap();
            }
        })
        .await;
    wait_for(
        Duration::from_secs(20),
        "the leader to purge the log a wiped node would need",
        || {
            let m = metrics_of(cluster.node(leader));
            async move { m.purged.is_some_and(|p| p.index > 100).then_some(()) }
        },
    )
    .await;

    // Same id and addresses, empty data directory; unreachable until armed.
    faults.isolate(victim, &[1, 2, 3]);
    cluster.restart_wiped(victim).await;
    let n = cluster.node(victim);
    let (vf, vs) = hooks(n).await;
    vf.cut_next_incoming_after(1);
    vf.fail_next_install_after_ingesting(3);
    let dir = n.dir.path().to_path_buf();
    faults.heal();
    wait_for(Duration::from_secs(30), "the install to fail", || {
        let failed = metrics_of(cluster.node(victim)).running_state.is_err();
        async move { failed.then_some(()) }
    })
    .await;
    assert_eq!(stat(&vs.resumed), 1, "the cut transfer was continued");
    assert_eq!(
        stat(&vs.resumed_bytes),
        om_raft_store::network::SNAPSHOT_CHUNK_BYTES as u64,
        "the second attempt started after the first chunk"
    );
    assert_eq!(stat(&vs.installed), 0);
    assert!(dir.join("snapshots/current.snap").exists());

    // Restarted on the same data directory (the faults are healed).
    cluster.restart(victim).await;
    let lc = local_client(
        &cluster.addrs()[(victim - 1) as usize],
        Duration::from_secs(2),
    );
    wait_for(
        Duration::from_secs(30),
        "the restarted node to catch up",
        || {
            let lc = &lc;
            async move {
                let b = lc.get_bucket("vol1", "bkt1").await.ok()?;
                (b.key_count == 2000).then_some(())
            }
        },
    )
    .await;
    let (_, vs) = hooks(cluster.node(victim)).await;
    assert_eq!(
        stat(&vs.installed),
        1,
        "start-up installed the published snapshot"
    );
    c.put_key("vol1", "bkt1", "after", 1).await.unwrap();
    wait_for(Duration::from_secs(20), "equal tables", || {
        let a = cluster.node(leader).dump();
        let b = cluster.node(victim).dump();
        async move { (a == b).then_some(()) }
    })
    .await;
    cluster.shutdown().await;
}
