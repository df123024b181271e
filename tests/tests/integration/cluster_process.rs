//! Real `om` processes in a 3-node cluster: SIGKILL the leader in the middle
//! of a write stream, restart nodes, and check that every acknowledged write
//! is on every node.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::{ProcessCluster, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_leader_loses_no_acknowledged_write_on_any_node() {
    let mut cluster = ProcessCluster::spawn(3);
    let first = cluster.leader().await;
    let eps = cluster.endpoints();
    let c = OmClient::new(&eps, ClientOptions::default()).unwrap();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    // Writers retry across the failover (same client id and seq) and record
    // each key once acknowledged, with the update id om returned.
    let acked: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (acked, stop, eps) = (acked.clone(), stop.clone(), eps.clone());
        writers.push(tokio::spawn(async move {
            let c = OmClient::new(&eps, ClientOptions::default()).unwrap();
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("w{w}/k{i:06}");
                let k = c
                    .put_key("vol1", "bkt1", &key, i)
                    .await
                    .expect("write across failover");
                acked.lock().unwrap().insert(key, k.update_id);
                i += 1;
            }
        }));
    }
    wait_for(Duration::from_secs(60), "writes before the kill", || {
        let n = acked.lock().unwrap().len();
        async move { (n >= 200).then_some(()) }
    })
    .await;

    let killed_at = Instant::now();
    cluster.kill9(first);
    let second = cluster.leader_other_than(first).await;
    let failover = killed_at.elapsed();
    // New writes are acknowledged again.
    let before = acked.lock().unwrap().len();
    wait_for(Duration::from_secs(30), "writes after the failover", || {
        let n = acked.lock().unwrap().len();
        async move { (n >= before + 100).then_some(()) }
    })
    .await;
    let serving = killed_at.elapsed();
    // Bring the killed node back: it catches up from the log.
    cluster.restart(first);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "failover: leader {first} killed, leader {second} elected after {failover:?}, writes acknowledged again after {serving:?}; {} writes acknowledged",
        acked.len()
    );
    assert!(
        failover < Duration::from_secs(5),
        "election took {failover:?}"
    );

    // Every node, including the restarted one, holds every acknowledged write.
    let final_index = c.cluster_status().await.unwrap().committed_index;
    for a in cluster.addrs() {
        let local = OmClient::new(
            std::slice::from_ref(&a.grpc),
            ClientOptions {
                stale_reads: true,
                deadline: Duration::from_secs(5),
                ..Default::default()
            },
        )
        .unwrap();
        wait_for(
            Duration::from_secs(30),
            "every node to apply everything",
            || {
                let addr = a.grpc.clone();
                async move {
                    OmClient::node_status(&addr)
                        .await
                        .ok()
                        .filter(|s| s.applied_index >= final_index)
                        .map(|_| ())
                }
            },
        )
        .await;
        for (key, update_id) in &acked {
            let k = local
                .lookup_key("vol1", "bkt1", key)
                .await
                .unwrap_or_else(|e| panic!("node {}: acknowledged key {key} missing: {e}", a.id));
            assert_eq!(
                k.update_id, *update_id,
                "node {}: {key} applied more than once",
                a.id
            );
        }
    }
}
