//! A leader deposed while its followers' answers could not reach it must not
//! confirm a linearizable or lease read with those answers when they arrive
//! late: a read never returns a state older than a write acknowledged before
//! it began, whoever answers it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::{
    ClusterOptions, Faults, TestCluster, TestNode, client_options, metrics_of, wait_for,
};

/// One read: under the lease or not, and what it returned.
type Read = (bool, Result<u64, String>);

fn only(n: &TestNode, opts: ClientOptions) -> OmClient {
    OmClient::new(&[n.endpoint()], opts).unwrap()
}

/// The shape of the fault run: one-way loss into the leader (its followers
/// receive and answer, the answers do not arrive), then its requests stop
/// too; the followers elect a new leader, which acknowledges a write; reads
/// are sent to the old leader; then the link heals, the old answers arrive
/// first, one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_does_not_confirm_reads_with_late_answers() {
    let faults = Arc::new(Faults::default());
    let cluster =
        TestCluster::start_with(3, ClusterOptions::default().faults(faults.clone())).await;
    let c = OmClient::new(&cluster.endpoints(), client_options()).unwrap();
    let l = cluster.leader().await;
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.put_key("vol1", "bkt1", "k", 1).await.unwrap();
    let fs: Vec<u64> = (1..=3).filter(|i| *i != l).collect();

    // One-way loss into the leader.
    for &f in &fs {
        faults.hold_answers(f, l);
        faults.cut(f, l);
    }
    // Two writes on the old leader, each its own request, which both
    // followers receive and answer; the answers are held.
    let short = ClientOptions {
        deadline: Duration::from_secs(1),
        attempt_timeout: Duration::from_secs(1),
        ..client_options()
    };
    let base = metrics_of(cluster.node(l)).last_log_index.unwrap_or(0);
    for (i, size) in [(1u64, 2u64), (2, 3)] {
        let lc = only(cluster.node(l), short.clone());
        tokio::spawn(async move {
            let _ = lc.put_key("vol1", "bkt1", "k", size).await;
        });
        wait_for(
            Duration::from_secs(10),
            "the followers to receive it",
            || {
                let ok = fs.iter().all(|f| {
                    metrics_of(cluster.node(*f))
                        .last_log_index
                        .is_some_and(|x| x >= base + i)
                });
                async move { ok.then_some(()) }
            },
        )
        .await;
    }
    // Then nothing the old leader sends arrives either: the followers elect
    // a new leader, which acknowledges a write.
    for &f in &fs {
        faults.stall(l, f);
    }
    let new = cluster.leader_among(&fs).await;
    let nc = only(cluster.node(new), client_options());
    nc.put_key("vol1", "bkt1", "k", 4).await.unwrap();
    let acknowledged = Instant::now();

    {
        let m = metrics_of(cluster.node(l));
        eprintln!(
            "old leader {l}: {:?} term {} leader {:?}; new leader {new}",
            m.state, m.current_term, m.current_leader
        );
    }
    // Linearizable and lease reads on the old leader across the heal.
    let seen: Arc<Mutex<Vec<Read>>> = Arc::default();
    let mut readers = Vec::new();
    for lease in [false, true] {
        for _ in 0..2 {
            let rc = only(
                cluster.node(l),
                ClientOptions {
                    lease_reads: lease,
                    deadline: Duration::from_millis(800),
                    attempt_timeout: Duration::from_millis(800),
                    ..client_options()
                },
            );
            let seen = seen.clone();
            readers.push(tokio::spawn(async move {
                let until = Instant::now() + Duration::from_secs(4);
                while Instant::now() < until {
                    let r = rc
                        .lookup_key("vol1", "bkt1", "k")
                        .await
                        .map(|k| k.size)
                        .map_err(|e| e.to_string());
                    seen.lock().unwrap().push((lease, r));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    eprintln!(
        "before the heal: {:?}",
        seen.lock().unwrap().iter().take(4).collect::<Vec<_>>()
    );
    // The heal: the old leader sends again, and the held answers arrive
    // first, one from each follower at a time, then the rest.
    for &f in &fs {
        faults.unstall(l, f);
    }
    for _ in 0..5 {
        for &f in &fs {
            faults.release_answers(f, l, 1);
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    faults.heal();
    for r in readers {
        r.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    let stale: Vec<_> = seen
        .iter()
        .filter(|(_, r)| matches!(r, Ok(size) if *size != 4))
        .collect();
    eprintln!(
        "{} reads on the old leader after a write acknowledged {:?} before the last of them: {} answered, {} stale",
        seen.len(),
        acknowledged.elapsed(),
        seen.iter().filter(|(_, r)| r.is_ok()).count(),
        stale.len()
    );
    assert!(stale.is_empty(), "stale reads: {stale:?}");
    // The old leader stepped down and caught up with the new one.
    let local = only(
        cluster.node(l),
        ClientOptions {
            stale_reads: true,
            deadline: Duration::from_secs(2),
            ..client_options()
        },
    );
    wait_for(
        Duration::from_secs(20),
        "the old leader to catch up",
        || {
            let local = &local;
            async move {
                local
                    .lookup_key("vol1", "bkt1", "k")
                    .await
                    .ok()
                    .filter(|k| k.size == 4)
            }
        },
    )
    .await;
    assert_ne!(
        metrics_of(cluster.node(l)).state,
        openraft::ServerState::Leader,
        "the old leader still leads after the heal"
    );
}

/// The sequence that made openraft confirm a stale read, step by step: one
/// write on the old leader L that both followers receive and answer (the
/// answers held), a new leader elected by them and a write acknowledged
/// there, a linearizable read on L, then A's held answer (L commits its
/// entry and sends both followers a commit-only request, stamped after the
/// read arrived), then B's held answer to the entry. openraft drains every
/// queued request that ends at or before the answered index, so B's answer
/// would also credit the later commit-only request's send time: a quorum
/// "after the read" that no follower gave. The read must not return the old
/// value (nor may a lease read right after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_answer_does_not_credit_a_later_unanswered_request() {
    let faults = Arc::new(Faults::default());
    let cluster =
        TestCluster::start_with(3, ClusterOptions::default().faults(faults.clone())).await;
    let c = OmClient::new(&cluster.endpoints(), client_options()).unwrap();
    let l = cluster.leader().await;
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    c.put_key("vol1", "bkt1", "k", 1).await.unwrap();
    // No answer still on its way.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (a, b) = {
        let fs: Vec<u64> = (1..=3).filter(|i| *i != l).collect();
        (fs[0], fs[1])
    };
    for f in [a, b] {
        faults.hold_answers(f, l);
        faults.cut(f, l);
    }
    // One write on L, which both followers receive and answer (held).
    let base = metrics_of(cluster.node(l)).last_log_index.unwrap_or(0);
    let e1 = base + 1;
    {
        let lc = only(
            cluster.node(l),
            ClientOptions {
                deadline: Duration::from_secs(1),
                attempt_timeout: Duration::from_secs(1),
                ..client_options()
            },
        );
        tokio::spawn(async move {
            let _ = lc.put_key("vol1", "bkt1", "k", 2).await;
        });
    }
    wait_for(
        Duration::from_secs(10),
        "the followers to receive it",
        || {
            let ok = [a, b].iter().all(|f| {
                metrics_of(cluster.node(*f))
                    .last_log_index
                    .is_some_and(|x| x >= e1)
            });
            async move { ok.then_some(()) }
        },
    )
    .await;
    // They hear no heartbeat answered and elect a new leader, which
    // acknowledges a write.
    let new = cluster.leader_among(&[a, b]).await;
    only(cluster.node(new), client_options())
        .put_key("vol1", "bkt1", "k", 4)
        .await
        .unwrap();
    assert_eq!(
        metrics_of(cluster.node(l)).state,
        openraft::ServerState::Leader,
        "L must still think it leads for the sequence to apply"
    );

    // A linearizable read on L, queued there waiting for a quorum.
    let read_on_l = |lease: bool| {
        only(
            cluster.node(l),
            ClientOptions {
                lease_reads: lease,
                deadline: Duration::from_secs(2),
                attempt_timeout: Duration::from_secs(2),
                ..client_options()
            },
        )
    };
    let rc = read_on_l(false);
    let read =
        tokio::spawn(async move { rc.lookup_key("vol1", "bkt1", "k").await.map(|k| k.size) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // A's answer: L commits its entry and sends commit-only requests.
    faults.release_answers(a, l, 1);
    wait_for(Duration::from_secs(2), "L to commit its entry", || {
        let ok = metrics_of(cluster.node(l))
            .local_committed
            .is_some_and(|c| c.index >= e1);
        async move { ok.then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    // B's answer to the entry, sent before the read arrived.
    faults.release_answers(b, l, 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let lease = read_on_l(true)
        .lookup_key("vol1", "bkt1", "k")
        .await
        .map(|k| k.size);
    let linearizable = read.await.unwrap();
    eprintln!("linearizable read on the old leader: {linearizable:?}; lease read: {lease:?}");
    for (what, r) in [("linearizable", &linearizable), ("lease", &lease)] {
        assert!(
            !matches!(r, Ok(size) if *size != 4),
            "a {what} read on the deposed leader returned a stale value: {r:?}"
        );
    }
    faults.heal();
}
