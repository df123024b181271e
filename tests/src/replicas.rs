//! After a fault run: wait until every replica applied everything committed,
//! then compare them online (state digests) and offline (tables, record by
//! record).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use om_client::OmClient;

use crate::{OmProcess, dump_data_dir, first_difference, wait_for};

/// A patient client of `eps` and the bucket `history::Recorder` works in.
pub async fn register_bucket(eps: &[String]) -> OmClient {
    let c = OmClient::new(
        eps,
        om_client::ClientOptions {
            deadline: Duration::from_secs(30),
            ..Default::default()
        },
    )
    .unwrap();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", om_client::v1::BucketLayout::ObjectStore)
        .await
        .unwrap();
    c
}

/// Waits until the committed index holds still and every running process
/// applied it (an entry proposed during a fault may commit after the
/// clients stopped).
pub async fn wait_settled(c: &OmClient, procs: &[OmProcess]) {
    let mut last = 0;
    for _ in 0..30 {
        let now = c.cluster_status().await.unwrap().committed_index;
        for p in procs {
            let addr = p.grpc.clone();
            wait_for(Duration::from_secs(60), "every node to apply", || {
                let addr = addr.clone();
                async move {
                    OmClient::node_status(&addr)
                        .await
                        .ok()
                        .filter(|s| s.applied_index >= now)
                }
            })
            .await;
        }
        if now == last {
            return;
        }
        last = now;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("the committed index kept moving after the clients stopped");
}

/// Every voter's state digest agrees at one index, so do its tables record
/// by record at another (a verification entry), and no node found itself
/// diverged; then every process is stopped (SIGTERM, which must succeed) and
/// the tables in `dirs` must be identical record by record. `what` names the
/// run in failure messages.
pub async fn assert_identical(c: &OmClient, procs: &mut [OmProcess], dirs: &[PathBuf], what: &str) {
    let verified = wait_for(
        Duration::from_secs(30),
        "the replicas' digests to agree",
        || async move {
            c.verify_replicas(true)
                .await
                .ok()
                .filter(|r| r.all_agree && r.tables.as_ref().is_some_and(|t| t.all_agree))
        },
    )
    .await;
    assert!(
        verified.members.iter().all(|m| !m.diverged),
        "{what}: {verified:?}"
    );
    for d in dirs {
        assert!(
            !d.join("DIVERGED").exists(),
            "{what}: {} diverged",
            d.display()
        );
    }
    for (i, p) in procs.iter_mut().enumerate() {
        let t = Instant::now();
        let clean = p.terminate(Duration::from_secs(60));
        eprintln!("{what}: node {} stopped in {:?}", i + 1, t.elapsed());
        assert!(clean, "{what}: node {} did not stop on SIGTERM", i + 1);
    }
    let dumps: Vec<_> = dirs.iter().map(|d| dump_data_dir(d)).collect();
    for i in 1..dumps.len() {
        let diff = first_difference(&dumps[0], &dumps[i]);
        assert!(
            diff.is_none(),
            "{what}: node {} differs from node 1 at {diff:?}",
            i + 1
        );
    }
}
