//! Real `om` processes killed with SIGKILL: nothing acknowledged is lost.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::{OmProcess, wait_for};

const READY: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_write_stream_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut om = OmProcess::spawn(dir.path());
    om.wait_ready(READY).await;
    let c = om.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    // Writers record a key only after om acknowledged it.
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
    // Kill in the middle of the stream, once plenty of writes are acknowledged.
    wait_for(Duration::from_secs(60), "200 acknowledged writes", || {
        let n = acked.lock().unwrap().len();
        async move { (n >= 200).then_some(()) }
    })
    .await;
    om.kill9();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 200);

    om.restart();
    om.wait_ready(READY).await;
    let c = om.client();
    for (key, update_id) in &acked {
        let k = c
            .lookup_key("vol1", "bkt1", key)
            .await
            .unwrap_or_else(|e| panic!("acknowledged key {key} lost: {e}"));
        assert!(k.update_id >= *update_id, "{key} went back in time");
    }
    // And the listing agrees with the lookups.
    let mut listed = 0;
    let mut marker = String::new();
    loop {
        let r = c
            .list_keys(om_client::v1::ListKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                start_after: marker.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        listed += r.keys.len();
        if !r.truncated {
            break;
        }
        marker = r.next_start_after;
    }
    assert!(listed >= acked.len());
    let b = c.get_bucket("vol1", "bkt1").await.unwrap();
    assert_eq!(
        b.key_count as usize, listed,
        "bucket counters agree with the table"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_resumes_on_the_same_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut om = OmProcess::spawn(dir.path());
    om.wait_ready(READY).await;
    let c = om.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let k = c.put_key("vol1", "bkt1", "a", 10).await.unwrap();
    let term_before = c.cluster_status().await.unwrap().term;
    for _ in 0..2 {
        om.kill9();
        om.restart();
        om.wait_ready(READY).await;
        let c = om.client();
        assert_eq!(c.lookup_key("vol1", "bkt1", "a").await.unwrap(), k);
        // The node resumed its cluster rather than initializing a new one.
        let s = c.cluster_status().await.unwrap();
        assert!(s.term >= term_before);
        assert!(s.applied_index >= k.update_id);
        assert_eq!(s.members.len(), 1);
    }
    // New writes after restarts get fresh, larger ids.
    let c = om.client();
    let k2 = c.put_key("vol1", "bkt1", "b", 10).await.unwrap();
    assert!(k2.update_id > k.update_id);
    assert!(k2.blocks[0].block_id > k.blocks[0].block_id);
}
