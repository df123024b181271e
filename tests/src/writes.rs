//! A stream of writes to one node whose acknowledgements are recorded, and
//! the check that every acknowledged write is still there after a fault
//! (kill -9, a power cut, a failed fsync).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use om_client::v1::{BucketLayout, ListKeysRequest};
use om_client::{ClientOptions, OmClient};

use crate::{OmProcess, wait_for};

/// Keys om acknowledged, with the update id it gave each.
pub type Acked = Arc<Mutex<Vec<(String, u64)>>>;

/// A single `om` on `dir`, ready, with the bucket `vol1/bkt1` the writers
/// write to.
pub async fn single_node(dir: &Path) -> OmProcess {
    let om = OmProcess::spawn(dir);
    om.wait_ready(Duration::from_secs(60)).await;
    let c = om.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    om
}

/// Writers putting keys `PREFIX/wW/kI` into `vol1/bkt1` at `endpoint`,
/// each recording a key in `acked` only once om acknowledged it, and
/// stopping at its first error (the node went away).
pub struct WriteStream {
    acked: Acked,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl WriteStream {
    pub fn start(endpoint: &str, prefix: &str, writers: u64, acked: &Acked) -> WriteStream {
        let writers = (0..writers)
            .map(|w| {
                let (acked, endpoint, prefix) =
                    (acked.clone(), endpoint.to_string(), prefix.to_string());
                tokio::spawn(async move {
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
                        let key = format!("{prefix}w{w}/k{i:06}");
                        match c.put_key("vol1", "bkt1", &key, i).await {
                            Ok(k) => acked.lock().unwrap().push((key, k.update_id)),
                            Err(_) => return,
                        }
                    }
                })
            })
            .collect();
        WriteStream {
            acked: acked.clone(),
            writers,
        }
    }

    /// Waits (up to 60 s) until `n` writes in all are acknowledged.
    pub async fn wait_acked(&self, n: usize) {
        wait_for(
            Duration::from_secs(60),
            &format!("{n} acknowledged writes"),
            || {
                let have = self.acked.lock().unwrap().len();
                async move { (have >= n).then_some(()) }
            },
        )
        .await;
    }

    /// Stops the writers (a write in flight may or may not have been
    /// taken; it was not acknowledged).
    pub async fn stop(self) {
        for w in self.writers {
            w.abort();
            let _ = w.await;
        }
    }

    /// Waits for the writers to stop (stop the node first).
    pub async fn join(self) {
        for w in self.writers {
            w.await.unwrap();
        }
    }
}

/// Every key of `acked` is there at an update id at least the one
/// acknowledged (`after` names the fault in the message), the listing of
/// `vol1/bkt1` holds at least as many keys, and the bucket's counter agrees
/// with the listing.
pub async fn check_acked(c: &OmClient, acked: &Acked, after: &str) {
    let acked = acked.lock().unwrap().clone();
    for (key, update_id) in &acked {
        let k = c
            .lookup_key("vol1", "bkt1", key)
            .await
            .unwrap_or_else(|e| panic!("acknowledged key {key} lost after {after}: {e}"));
        assert!(k.update_id >= *update_id, "{key} went back in time");
    }
    let mut listed = 0;
    let mut marker = String::new();
    loop {
        let r = c
            .list_keys(ListKeysRequest {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                start_after: marker.clone(),
                max_keys: 1000,
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
    assert!(
        listed >= acked.len(),
        "{listed} keys listed, {} acknowledged",
        acked.len()
    );
    let b = c.get_bucket("vol1", "bkt1").await.unwrap();
    assert_eq!(
        b.key_count as usize, listed,
        "bucket counters agree with the table"
    );
}
