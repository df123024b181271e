//! The replicated retry cache: a retried (client id, seq) is answered once,
//! a different request reusing one is refused, expiry keeps up with any write
//! rate, and a leader whose clock runs ahead does not expire entries early.

use std::time::Duration;

use om::server::NodeOptions;
use om::store::keys;
use om_client::v1::ozone_manager_client::OzoneManagerClient;
use om_client::v1::{BucketLayout, PutKeyRequest};
use om_client::{ClientError, ClientOptions, OmClient};
use om_tests::{ClusterOptions, TestCluster, TestNode, wait_for};
use tonic::transport::Channel;

async fn raw(endpoint: &str) -> OzoneManagerClient<Channel> {
    OzoneManagerClient::connect(format!("http://{endpoint}"))
        .await
        .unwrap()
}

fn put(header: om_client::v1::WriteHeader, key: &str) -> PutKeyRequest {
    PutKeyRequest {
        header: Some(header),
        volume: "vol1".into(),
        bucket: "bkt1".into(),
        key: key.into(),
        size: 1,
        ..Default::default()
    }
}

/// Creation times (ms) of the retry-cache entries of `node`, wherever they
/// are stored.
fn cache_entry_times(node: &TestNode) -> Vec<u64> {
    let dump = om::store::dump_table(node.node.service.db(), keys::RETRY_CACHE_CF).unwrap();
    dump.iter()
        .filter(|((_, k), _)| !k.starts_with(keys::RETRY_EXPIRY_PREFIX))
        .map(|(_, v)| {
            <om_proto::store::RetryCacheRecord as prost::Message>::decode(&v[..])
                .unwrap()
                .created_ms
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_sequence_number_with_another_request_is_refused() {
    let node = TestNode::start().await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let mut raw = raw(&node.endpoint()).await;
    let header = c.next_header();
    let first = raw
        .put_key(put(header.clone(), "a"))
        .await
        .unwrap()
        .into_inner();
    let before = node.dump();
    let cache_before = cache_entry_times(&node);
    // Same client id and seq, another key: refused, nothing applied.
    let err = raw.put_key(put(header.clone(), "b")).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        err.metadata().get("om-reason").unwrap().to_str().unwrap(),
        "RETRY_MISMATCH"
    );
    assert_eq!(
        err.metadata().get("om-field").unwrap().to_str().unwrap(),
        "header.seq"
    );
    assert_eq!(before, node.dump(), "a refused retry changes nothing");
    assert_eq!(cache_before, cache_entry_times(&node));
    match c.lookup_key("vol1", "bkt1", "b").await {
        Err(ClientError::Api { reason, .. }) => assert_eq!(reason, "KEY_NOT_FOUND"),
        other => panic!("b must not exist: {other:?}"),
    }
    // The genuine retry is still answered with the original result.
    let again = raw.put_key(put(header, "a")).await.unwrap().into_inner();
    assert_eq!(again, first);
    node.node.shutdown().await;
}

/// A burst of writes far larger than one expiry batch is expired promptly
/// once due: the leader proposes batch after batch while they come back full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_keeps_up_with_a_burst_of_writes() {
    let opts = NodeOptions {
        retry_expiry_batch: Some(10),
        ..NodeOptions::default()
    };
    let node = TestNode::start_in_opts(tempfile::tempdir().unwrap(), opts, |a| {
        a.retry_cache_ttl_s = Some(1)
    })
    .await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let c = node.client();
            tokio::spawn(async move {
                for i in 0..200 {
                    c.put_key("vol1", "bkt1", &format!("w{w}-{i}"), 1)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let written = cache_entry_times(&node);
    assert!(written.len() >= 1000, "{} entries", written.len());
    let newest = *written.iter().max().unwrap();
    // 1,600 entries in batches of 10 are 160 commands: one per expiry tick
    // (125 ms) would take 20 s; batch after batch takes a fraction of one.
    let ttl_ms = 1000;
    wait_for(Duration::from_secs(8), "every due entry expired", || {
        let due = cache_entry_times(&node)
            .into_iter()
            .filter(|t| *t <= newest)
            .count();
        let now = om::service::now_ms();
        async move { (now > newest + ttl_ms && due == 0).then_some(()) }
    })
    .await;
    node.node.shutdown().await;
}

/// A leader whose wall clock runs an hour ahead of the one that stamped the
/// entries keeps them until it has itself led for the whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_with_a_clock_ahead_does_not_expire_entries_early() {
    let options = ClusterOptions::default()
        .hooks(|id| NodeOptions {
            clock_offset_ms: if id == 1 { 0 } else { 3_600_000 },
            ..NodeOptions::default()
        })
        .tweak(|_, a| a.retry_cache_ttl_s = Some(3));
    let cluster = TestCluster::start_with(3, options).await;
    let addrs = cluster.addrs();
    let c = OmClient::new(&cluster.endpoints(), ClientOptions::default()).unwrap();
    c.transfer_leader(1).await.unwrap();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    // Stamped by node 1's clock.
    let mut n1 = raw(&addrs[0].grpc).await;
    let req = put(c.next_header(), "k");
    let first = n1.put_key(req.clone()).await.unwrap().into_inner();
    // Node 2 (an hour ahead) takes over: to its clock the entry is an hour old.
    // The window starts before the transfer, so it only shrinks the time
    // node 2 has led; until node 2 knows it leads, it answers NOT_LEADER.
    let took_over = std::time::Instant::now();
    c.transfer_leader(2).await.unwrap();
    let mut n2 = raw(&addrs[1].grpc).await;
    let mut answered = 0;
    while took_over.elapsed() < Duration::from_millis(2500) {
        let r = match n2.put_key(req.clone()).await {
            Ok(r) => r.into_inner(),
            Err(s) if s.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            Err(s) => panic!("{s:?}"),
        };
        answered += 1;
        assert_eq!(
            r,
            first,
            "expired {:?} into the new leadership",
            took_over.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        answered >= 5,
        "node 2 led for most of the window: {answered}"
    );
    // Once node 2 has led for the TTL, the entry goes (a retry is a new write).
    let again = wait_for(Duration::from_secs(15), "expiry on the new leader", || {
        let (mut n2, req, first) = (n2.clone(), req.clone(), first.clone());
        async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let r = n2.put_key(req).await.ok()?.into_inner();
            (r != first).then_some(r)
        }
    })
    .await;
    assert!(again.key.unwrap().update_id > first.key.unwrap().update_id);
    cluster.shutdown().await;
}
