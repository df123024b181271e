//! Concurrent clients put, get and delete a handful of keys while nodes are
//! partitioned, stopped and restarted; the recorded history must be
//! linearizable (checked with `om_tests::linearizability`, whose own tests
//! show it rejects non-linearizable histories).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_client::v1::BucketLayout;
use om_client::{ClientError, ClientOptions, OmClient};
use om_tests::linearizability::{self, Input, Op, Output};
use om_tests::{Faults, TestNode, cluster_addrs, wait_for};
use rand::Rng;

const KEYS: [&str; 3] = ["x", "y", "z"];

fn outcome(r: &Result<(), ClientError>, not_found: Output) -> Option<Output> {
    match r {
        Ok(()) => Some(Output::Ok),
        Err(e) if e.reason() == "KEY_NOT_FOUND" => Some(not_found),
        Err(_) => None,
    }
}

async fn current_leader(nodes: &[Option<TestNode>]) -> Option<u64> {
    for n in nodes.iter().flatten() {
        let m = n.node.raft.metrics();
        let m = openraft::async_runtime::WatchReceiver::borrow_watched(&m).clone();
        if m.state == openraft::ServerState::Leader {
            return Some(m.id);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_under_partitions_and_restarts_are_linearizable() {
    let addrs = cluster_addrs(3);
    let faults = Arc::new(Faults::default());
    let mut nodes: Vec<Option<TestNode>> = Vec::new();
    for a in &addrs {
        nodes.push(Some(
            TestNode::start_member_with(a, &addrs, Some(faults.clone()), |_| {}).await,
        ));
    }
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    let setup = OmClient::new(&eps, om_tests::client_options()).unwrap();
    setup.create_volume("vol1", "").await.unwrap();
    setup
        .create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    let t0 = Instant::now();
    let now = move || t0.elapsed().as_micros() as u64;
    let history: Arc<Mutex<Vec<Op>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4u64 {
        let (history, stop, eps) = (history.clone(), stop.clone(), eps.clone());
        workers.push(tokio::spawn(async move {
            let c = OmClient::new(
                &eps,
                ClientOptions {
                    deadline: Duration::from_secs(2),
                    attempt_timeout: Duration::from_millis(700),
                    ..om_tests::client_options()
                },
            )
            .unwrap();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (key, roll) = {
                    let mut rng = rand::rng();
                    (
                        KEYS[rng.random_range(0..KEYS.len())],
                        rng.random_range(0..10),
                    )
                };
                let call = now();
                let (input, output) = if roll < 4 {
                    n += 1;
                    let v = w * 1_000_000 + n;
                    let r = c.put_key("vol1", "bkt1", key, v).await.map(|_| ());
                    (Input::Put(v), outcome(&r, Output::NotFound))
                } else if roll < 8 {
                    let out = match c.lookup_key("vol1", "bkt1", key).await {
                        Ok(k) => Some(Output::Value(Some(k.size))),
                        Err(e) if e.reason() == "KEY_NOT_FOUND" => Some(Output::Value(None)),
                        Err(_) => None,
                    };
                    (Input::Get, out)
                } else {
                    let r = c.delete_key("vol1", "bkt1", key).await;
                    (Input::Delete, outcome(&r, Output::NotFound))
                };
                history.lock().unwrap().push(Op {
                    key: key.to_string(),
                    input,
                    output,
                    call,
                    ret: now(),
                });
            }
        }));
    }

    let pause = |ms| tokio::time::sleep(Duration::from_millis(ms));
    let all: Vec<u64> = addrs.iter().map(|a| a.id).collect();
    // Nemesis: partition the leader, heal, stop and restart a follower, then the leader.
    pause(800).await;
    let l = wait_for(Duration::from_secs(10), "a leader", || async {
        current_leader(&nodes).await
    })
    .await;
    faults.isolate(l, &all);
    pause(1500).await;
    faults.heal();
    pause(800).await;
    let l = wait_for(Duration::from_secs(10), "a leader", || async {
        current_leader(&nodes).await
    })
    .await;
    let f = all.iter().copied().find(|id| *id != l).unwrap() as usize - 1;
    let dir = nodes[f].take().unwrap().stop().await;
    pause(1000).await;
    nodes[f] =
        Some(TestNode::start_member_in(dir, &addrs[f], &addrs, Some(faults.clone()), |_| {}).await);
    pause(800).await;
    let l = wait_for(Duration::from_secs(10), "a leader", || async {
        current_leader(&nodes).await
    })
    .await as usize
        - 1;
    let dir = nodes[l].take().unwrap().stop().await;
    pause(1200).await;
    nodes[l] =
        Some(TestNode::start_member_in(dir, &addrs[l], &addrs, Some(faults.clone()), |_| {}).await);
    pause(1000).await;

    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let history = history.lock().unwrap().clone();
    let known = history.iter().filter(|o| o.output.is_some()).count();
    eprintln!(
        "history: {} operations, {known} with known outcomes",
        history.len()
    );
    assert!(
        known >= 100,
        "too few completed operations ({known}) for a meaningful check"
    );
    linearizability::check(&history).unwrap();
    // The same history with one impossible read appended must be rejected:
    // the check above could have failed.
    let mut tampered = history.clone();
    tampered.push(Op {
        key: "x".into(),
        input: Input::Get,
        output: Some(Output::Value(Some(u64::MAX))),
        call: now(),
        ret: now(),
    });
    assert!(linearizability::check(&tampered).is_err());
    for n in nodes.into_iter().flatten() {
        n.node.shutdown().await;
    }
}
