//! Data volumes filling up in a cluster of three, each member on a tmpfs
//! of its own with `--min-free-bytes` 64 MiB (short below it, full below
//! 32 MiB), filled by something else on the volume:
//!
//! - a follower's volume full: it takes no more entries, yet stays up and
//!   answers; the others go on taking writes; once space is freed it
//!   catches up without a restart;
//! - the leader's volume short: it hands leadership to a member with room
//!   and writes go on there;
//! - a majority of the volumes short (both followers', then all three):
//!   writes that add data are refused at once (RESOURCE_EXHAUSTED,
//!   DISK_FULL), not left to time out; reads and deletes go on; once space
//!   is freed writes are taken again.
//!
//! Nothing acknowledged is lost and the replicas end identical, record by
//! record. Mounting needs root: without it the test says "skipped".

use std::time::{Duration, Instant};

use om_client::{ClientError, OmClient};
use om_tests::replicas::{assert_identical, register_bucket, wait_settled};
use om_tests::tmpfs::Tmpfs;
use om_tests::writes::{Acked, check_acked};
use om_tests::{OmProcess, claimed_leader, cluster_addrs, wait_for};

const MIN_FREE: u64 = 64 << 20;
/// What a short volume (below the minimum, not full) is filled to.
const SHORT: u64 = 48 << 20;
/// What a full volume (below half the minimum) is filled to.
const FULL: u64 = 16 << 20;

/// Puts `n` keys `PREFIX/kI` through `c`, each acknowledged within the
/// client's deadline, into `acked`.
async fn put(c: &OmClient, prefix: &str, n: u64, acked: &Acked) {
    for i in 0..n {
        let key = format!("{prefix}/k{i:04}");
        let k = c
            .put_key("vol1", "bkt1", &key, 1)
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        acked.lock().unwrap().push((key, k.update_id));
    }
}

/// Waits for writes that add data to be refused as DISK_FULL, each within
/// 5 s rather than at the client's 30 s deadline; the refusal's message.
async fn refused_at_once(c: &OmClient) -> String {
    let (code, reason, message, took) =
        wait_for(Duration::from_secs(15), "writes refused", || async {
            let t = Instant::now();
            match c.put_key("vol1", "bkt1", "refused", 1).await {
                Err(ClientError::Api {
                    code,
                    reason,
                    message,
                    ..
                }) => Some((code, reason, message, t.elapsed())),
                Ok(_) => None,
                Err(e) => panic!("{e:?}"),
            }
        })
        .await;
    assert_eq!(
        (code, reason.as_str()),
        (tonic::Code::ResourceExhausted, "DISK_FULL"),
        "{message}"
    );
    assert!(
        took < Duration::from_secs(5),
        "a write the cluster has no room for took {took:?} to be refused"
    );
    message
}

async fn applied(p: &OmProcess) -> u64 {
    OmClient::node_status(&p.grpc).await.unwrap().applied_index
}

/// The value the leader at `http` publishes for `om_raft_peer_disk_space`
/// of `peer` (0 room, 1 short, 2 full), if it does.
async fn peer_space_metric(http: &str, peer: u64) -> Option<u8> {
    let text = om_tests::try_http_get(http.parse().unwrap(), "/metrics").await?;
    let prefix = format!("om_raft_peer_disk_space{{peer=\"{peer}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u8)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_volumes_refuse_writes_in_time_move_leadership_and_lose_nothing() {
    let Some(mut fs) = Tmpfs::mounts(3, 256) else {
        return;
    };
    let dirs: Vec<_> = fs.iter().map(|f| f.path().join("om")).collect();
    let addrs = cluster_addrs(3);
    let min_free = MIN_FREE.to_string();
    let mut procs: Vec<OmProcess> = addrs
        .iter()
        .zip(&dirs)
        .map(|(a, d)| {
            std::fs::create_dir(d).unwrap();
            OmProcess::spawn_member_args(d, a, &addrs, &["--min-free-bytes", &min_free])
        })
        .collect();
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    let c = register_bucket(&eps).await;
    let acked = Acked::default();
    put(&c, "start", 50, &acked).await;

    // A follower's volume fills: the others take writes, it takes no
    // entries but stays up, and catches up once space is freed.
    let leader = claimed_leader(&eps).await.unwrap();
    let f = (1..=3).find(|i| *i != leader).unwrap();
    let fi = (f - 1) as usize;
    fs[fi].fill_to(FULL);
    let leader_http = procs[(leader - 1) as usize].http.clone();
    wait_for(
        Duration::from_secs(15),
        "the leader to hear the follower is full",
        || async {
            // Entries keep coming, so the follower keeps refusing them.
            c.put_key("vol1", "bkt1", "probe", 1).await.unwrap();
            (peer_space_metric(&leader_http, f).await == Some(2)).then_some(())
        },
    )
    .await;
    put(&c, "follower-full", 100, &acked).await;
    assert!(procs[fi].is_running(), "a full follower exited");
    let committed = c.cluster_status().await.unwrap().committed_index;
    let held = applied(&procs[fi]).await;
    assert!(
        held + 100 <= committed,
        "a full follower took entries: it applied {held} of {committed}"
    );
    fs[fi].unfill();
    wait_for(
        Duration::from_secs(30),
        "the follower to catch up",
        || async { (applied(&procs[fi]).await >= committed).then_some(()) },
    )
    .await;

    // The leader's volume runs short: it hands leadership over.
    let leader = claimed_leader(&eps).await.unwrap();
    let li = (leader - 1) as usize;
    fs[li].fill_to(SHORT);
    let moved = wait_for(
        Duration::from_secs(30),
        "leadership to leave the short member",
        || async { claimed_leader(&eps).await.filter(|l| *l != leader) },
    )
    .await;
    put(&c, "leader-short", 100, &acked).await;
    assert!(procs[li].is_running(), "the short former leader exited");
    eprintln!("leadership moved from {leader} to {moved}");
    fs[li].unfill();

    // Both followers short, the leader with room: a majority lacks room,
    // so writes that add data are refused, naming the short members.
    let leader = claimed_leader(&eps).await.unwrap();
    for i in (1..=3u64).filter(|i| *i != leader) {
        fs[(i - 1) as usize].fill_to(SHORT);
    }
    let message = refused_at_once(&c).await;
    for i in (1..=3u64).filter(|i| *i != leader) {
        assert!(message.contains(&format!("node {i} (low)")), "{message}");
    }

    // Every volume short: the leader's own refuses them too.
    fs[(leader - 1) as usize].fill_to(SHORT);
    wait_for(
        Duration::from_secs(10),
        "the leader to refuse for its own volume",
        || async {
            let message = refused_at_once(&c).await;
            message.contains("--min-free-bytes").then_some(())
        },
    )
    .await;
    // Reads and deletes go on.
    let (gone, _) = acked.lock().unwrap().remove(0);
    c.delete_key("vol1", "bkt1", &gone).await.unwrap();
    assert!(c.lookup_key("vol1", "bkt1", &gone).await.is_err());
    let (kept, _) = acked.lock().unwrap()[0].clone();
    c.lookup_key("vol1", "bkt1", &kept).await.unwrap();
    for f in fs.iter_mut() {
        f.unfill();
    }
    wait_for(Duration::from_secs(15), "writes taken again", || async {
        c.put_key("vol1", "bkt1", "again", 1).await.ok()
    })
    .await;

    wait_settled(&c, &procs).await;
    check_acked(&c, &acked, "full volumes").await;
    assert_identical(&c, &mut procs, &dirs, "full volumes").await;
}
