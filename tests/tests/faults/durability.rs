//! Real `om` processes killed with SIGKILL: nothing acknowledged is lost.

use std::time::Duration;

use om_client::v1::BucketLayout;
use om_tests::OmProcess;
use om_tests::writes::{Acked, WriteStream, check_acked, single_node};

const READY: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_a_write_stream_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut om = single_node(dir.path()).await;
    // Writers record a key only after om acknowledged it; kill in the
    // middle of the stream, once plenty of writes are acknowledged.
    let acked = Acked::default();
    let stream = WriteStream::start(&om.grpc, "", 4, &acked);
    stream.wait_acked(200).await;
    om.kill9();
    stream.join().await;
    om.restart();
    om.wait_ready(READY).await;
    check_acked(&om.client(), &acked, "a kill -9").await;
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
