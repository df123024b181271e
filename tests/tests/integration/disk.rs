//! A data volume short of space: om refuses writes that add data with a
//! clear, retryable error before RocksDB runs out, serves reads and
//! deletes meanwhile, and takes writes again once space is freed, without
//! a restart. The volume is a small tmpfs (mounting needs root: without it
//! the test says "skipped" and why).

use std::time::Duration;

use om_client::ClientError;
use om_client::v1::BucketLayout;
use om_tests::tmpfs::Tmpfs;
use om_tests::{TestNode, wait_for};

/// The key names of vol1/bkt1.
async fn names(c: &om_client::OmClient) -> Vec<String> {
    let page = c
        .list_keys(om_client::v1::ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            max_keys: 100,
            ..Default::default()
        })
        .await
        .unwrap();
    page.keys.into_iter().map(|k| k.name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_volume_refuses_writes_that_add_data_and_recovers() {
    let Some(mut fs) = Tmpfs::mounts(1, 160) else {
        return;
    };
    let fs = &mut fs[0];
    let data = tempfile::tempdir_in(fs.path()).unwrap();
    let n = TestNode::start_in(data, |a| a.min_free_bytes = Some(48 << 20)).await;
    let c = n.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..10 {
        c.put_key("vol1", "bkt1", &format!("k{i}"), 1)
            .await
            .unwrap();
    }
    // Something else fills the volume to 36 MiB free.
    fs.fill_to(36 << 20);
    let refused = wait_for(Duration::from_secs(10), "writes refused", || async {
        match c.put_key("vol1", "bkt1", "more", 1).await {
            Err(ClientError::Api {
                code,
                reason,
                message,
                ..
            }) => Some((code, reason, message)),
            Ok(_) => None,
            Err(e) => panic!("{e:?}"),
        }
    })
    .await;
    assert_eq!(
        (refused.0, refused.1.as_str()),
        (tonic::Code::ResourceExhausted, "DISK_FULL"),
        "{}",
        refused.2
    );
    assert!(refused.2.contains("--min-free-bytes"), "{}", refused.2);
    // A refused write changes nothing ("more" may have got in before the
    // volume was read short); reads and deletes go on.
    let before = names(&c).await;
    assert!(c.put_key("vol1", "bkt1", "again", 1).await.is_err());
    assert_eq!(names(&c).await, before);
    c.delete_key("vol1", "bkt1", "k0").await.unwrap();
    assert_eq!(names(&c).await.len(), before.len() - 1);
    let e = c
        .create_bucket("vol1", "bkt2", BucketLayout::ObjectStore)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ClientError::Api { reason, .. } if reason == "DISK_FULL"),
        "{e:?}"
    );
    // Space freed: writes go on, no restart.
    fs.unfill();
    wait_for(Duration::from_secs(10), "writes taken again", || async {
        c.put_key("vol1", "bkt1", "again", 1).await.ok()
    })
    .await;
    assert_eq!(names(&c).await.len(), before.len());
    n.stop().await;
}
