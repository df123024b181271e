//! Authorization end to end: ACLs replicated through Raft and enforced on
//! every replica (stale follower reads included), owners, groups, cluster
//! admins, impersonation, the audit log, and `omctl acl`. This file holds
//! the helpers and the replicated grants; `principals` impersonation, `omctl
//! acl` and the retry cache's owners; `effects` what lifecycle, listings, the
//! audit log and stale reads may do; `s3` S3 credentials; `sealed` their secrets at rest.

use std::path::{Path, PathBuf};
use std::time::Duration;

use om_client::v1::*;
use om_client::{ClientError, ClientOptions, OmClient};
use om_tests::{ClusterOptions, MemberAddrs, TestCluster, TestNode, wait_for};

mod effects;
mod principals;
mod s3;
mod sealed;

const OPS: &str = "omt_000000000000000a_ops-secret-ops-secret-ops-secret-ops";
const ALICE: &str = "omt_000000000000000b_alice-secret-alice-secret-alice-secret";
const BOB: &str = "omt_000000000000000c_bob-secret-bob-secret-bob-secret-bob";
const GW: &str = "omt_000000000000000d_gw-secret-gw-secret-gw-secret-gw-secret";

/// A token file: ops (admin), alice (group eng), bob, gw (a gateway).
fn token_file(dir: &Path) -> PathBuf {
    om_tests::token_file(
        dir,
        &[
            ("ops", OPS, ""),
            ("alice", ALICE, "eng"),
            ("bob", BOB, ""),
            ("gw", GW, ""),
        ],
    )
}

/// A cluster with authentication on, and its token and audit files in
/// `dir`. Started, it has a leader and its cluster id.
struct Cluster {
    /// Before `dir`: the members stop before their files go.
    members: TestCluster,
    dir: tempfile::TempDir,
    addrs: Vec<MemberAddrs>,
}

async fn cluster(n: u64) -> Cluster {
    cluster_with(n, |_| {}).await
}

async fn cluster_with(
    n: u64,
    tweak: impl Fn(&mut om::config::Args) + Send + Sync + 'static,
) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path());
    let audit_dir = dir.path().to_path_buf();
    let options = ClusterOptions::default().tweak(move |id, args| {
        args.token_file = Some(tokens.clone());
        // Tokens over plaintext on loopback: for tests only.
        args.insecure = true;
        args.admins = Some("ops".to_string());
        args.audit_log = Some(audit_dir.join(format!("audit-{id}.log")));
        tweak(args);
    });
    let members = TestCluster::start_with(n, options).await;
    let addrs = members.addrs().to_vec();
    Cluster {
        members,
        dir,
        addrs,
    }
}

impl Cluster {
    fn opts(token: &str) -> ClientOptions {
        ClientOptions {
            deadline: Duration::from_secs(15),
            token: Some(token.to_string()),
            ..Default::default()
        }
    }

    fn client(&self, token: &str) -> OmClient {
        let eps: Vec<String> = self.addrs.iter().map(|a| a.grpc.clone()).collect();
        OmClient::new(&eps, Self::opts(token)).unwrap()
    }

    /// A client reading only `node`'s local state (stale reads).
    fn stale(&self, node: usize, token: &str) -> OmClient {
        OmClient::new(
            std::slice::from_ref(&self.addrs[node].grpc),
            ClientOptions {
                stale_reads: true,
                ..Self::opts(token)
            },
        )
        .unwrap()
    }

    fn acting_for(&self, token: &str, user: &str) -> OmClient {
        let eps: Vec<String> = self.addrs.iter().map(|a| a.grpc.clone()).collect();
        OmClient::new(
            &eps,
            ClientOptions {
                impersonate: Some(user.to_string()),
                ..Self::opts(token)
            },
        )
        .unwrap()
    }

    fn dumps(&self) -> Vec<om::store::TableDump> {
        self.members.running().map(TestNode::dump).collect()
    }

    /// Waits until every replica holds the same tables (so a later
    /// comparison sees every write applied everywhere).
    async fn settled(&self) -> Vec<om::store::TableDump> {
        wait_for(Duration::from_secs(10), "replicas to converge", || async {
            let d = self.dumps();
            d.windows(2).all(|w| w[0] == w[1]).then_some(d)
        })
        .await
    }

    /// Every node's audit lines, refusals included.
    fn audit_lines(&self) -> Vec<String> {
        (1..=self.addrs.len())
            .flat_map(|id| {
                let path = self.dir.path().join(format!("audit-{id}.log"));
                [om::audit::refusals_path(&path), path]
            })
            .flat_map(|p| {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    async fn shutdown(self) {
        self.members.shutdown().await;
    }
}

fn grant(kind: GranteeKind, name: &str, rights: &[AclRight]) -> AclGrant {
    AclGrant {
        kind: kind as i32,
        name: name.to_string(),
        rights: rights.iter().map(|r| *r as i32).collect(),
    }
}

async fn set_acl(c: &OmClient, vol: &str, bucket: &str, mode: AclMode, g: AclGrant) {
    c.set_acl(SetAclRequest {
        volume: vol.into(),
        bucket: bucket.into(),
        mode: mode as i32,
        grants: vec![g],
        ..Default::default()
    })
    .await
    .unwrap();
}

/// Asserts `r` is PERMISSION_DENIED ACCESS_DENIED naming `right` on `resource`.
fn assert_denied<T: std::fmt::Debug>(r: Result<T, ClientError>, right: &str, resource: &str) {
    match r {
        Err(ClientError::Api {
            code,
            reason,
            message,
            ..
        }) => {
            assert_eq!(code, tonic::Code::PermissionDenied, "{message}");
            assert_eq!(reason, "ACCESS_DENIED");
            assert!(
                message.contains(&format!("lacks {right} on {resource}")),
                "{message}"
            );
        }
        other => panic!("expected ACCESS_DENIED ({right} on {resource}), got {other:?}"),
    }
}

async fn list_keys(c: &OmClient, vol: &str, bucket: &str) -> Result<Vec<String>, ClientError> {
    let r = c
        .list_keys(ListKeysRequest {
            volume: vol.into(),
            bucket: bucket.into(),
            ..Default::default()
        })
        .await?;
    Ok(r.keys.into_iter().map(|k| k.name).collect())
}

/// Alice cannot list, read, write, delete or re-grant Bob's bucket, and
/// each refusal changes nothing on any replica; Bob's grant lets her read
/// (on the leader and in stale reads of every follower), a group grant lets
/// her write, and revoking stops her everywhere. Cluster operations need an
/// admin.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_and_revokes_take_effect_on_every_replica() {
    let c = cluster(3).await;
    let (ops, alice, bob) = (c.client(OPS), c.client(ALICE), c.client(BOB));
    ops.create_volume("vola", "alice").await.unwrap();
    ops.create_volume("volb", "bob").await.unwrap();
    alice
        .create_bucket("vola", "bka", BucketLayout::ObjectStore)
        .await
        .unwrap();
    bob.create_bucket("volb", "bkb", BucketLayout::ObjectStore)
        .await
        .unwrap();
    bob.put_key("volb", "bkb", "k", 10).await.unwrap();
    // Alice owns va, not vb: only her volume is listed to her.
    let names = |v: Vec<VolumeInfo>| v.into_iter().map(|v| v.name).collect::<Vec<_>>();
    let vols = alice.list_volumes("", "", 100).await.unwrap().volumes;
    assert_eq!(names(vols), vec!["vola"]);
    let vols = ops.list_volumes("", "", 100).await.unwrap().volumes;
    assert_eq!(names(vols), vec!["vola", "volb"]);

    let before = c.settled().await;
    assert_denied(list_keys(&alice, "volb", "bkb").await, "LIST", "/volb/bkb");
    assert_denied(
        alice.lookup_key("volb", "bkb", "k").await,
        "READ",
        "/volb/bkb",
    );
    assert_denied(alice.get_bucket("volb", "bkb").await, "READ", "/volb/bkb");
    assert_denied(
        alice.lookup_key_version("volb", "bkb", "k", "null").await,
        "READ",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .list_object_versions(ListObjectVersionsRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                ..Default::default()
            })
            .await,
        "LIST",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .set_bucket_versioning("volb", "bkb", BucketVersioning::Enabled)
            .await,
        "WRITE+DELETE",
        "/volb/bkb",
    );
    assert_denied(
        alice.delete_key_version("volb", "bkb", "k", "null").await,
        "DELETE",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .put_key_tagging(PutKeyTaggingRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                key: "k".into(),
                tags: [("t".to_string(), "v".to_string())].into(),
                ..Default::default()
            })
            .await,
        "WRITE",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .delete_key_tagging(DeleteKeyTaggingRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                key: "k".into(),
                ..Default::default()
            })
            .await,
        "WRITE",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .get_key_tagging(GetKeyTaggingRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                key: "k".into(),
                ..Default::default()
            })
            .await,
        "READ",
        "/volb/bkb",
    );
    // Lifecycle configurations and their scan's status.
    assert_denied(
        alice
            .put_bucket_lifecycle(PutBucketLifecycleRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                rules: vec![LifecycleRule {
                    id: "r".into(),
                    enabled: true,
                    filter: Some(LifecycleFilter::default()),
                    abort_incomplete_multipart_upload: Some(LifecycleAbortUpload {
                        days_after_initiation: 1,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await,
        "WRITE+DELETE",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .delete_bucket_lifecycle(DeleteBucketLifecycleRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                ..Default::default()
            })
            .await,
        "WRITE+DELETE",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .get_bucket_lifecycle(GetBucketLifecycleRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                ..Default::default()
            })
            .await,
        "READ",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .get_lifecycle_status(GetLifecycleStatusRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                ..Default::default()
            })
            .await,
        "READ",
        "/volb/bkb",
    );
    assert_denied(
        alice.put_key("volb", "bkb", "k", 1).await,
        "WRITE",
        "/volb/bkb",
    );
    assert_denied(
        alice.delete_key("volb", "bkb", "k").await,
        "DELETE",
        "/volb/bkb",
    );
    assert_denied(
        alice.delete_bucket("volb", "bkb").await,
        "DELETE",
        "/volb/bkb",
    );
    assert_denied(
        alice
            .create_bucket("volb", "mine", BucketLayout::ObjectStore)
            .await,
        "CREATE",
        "/volb",
    );
    assert_denied(alice.get_volume("volb").await, "READ", "/volb");
    assert_denied(
        alice
            .set_acl(SetAclRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                mode: AclMode::Add as i32,
                grants: vec![grant(GranteeKind::User, "alice", &[AclRight::All])],
                ..Default::default()
            })
            .await,
        "WRITE_ACL",
        "/volb/bkb",
    );
    assert_denied(alice.create_volume("volc", "alice").await, "ALL", "/");
    assert_denied(alice.delete_volume("vola").await, "ALL", "/");
    assert_denied(alice.transfer_leader(2).await, "ALL", "/");
    assert_denied(alice.remove_node(3).await, "ALL", "/");
    assert_eq!(c.dumps(), before, "a refused request changed a replica");

    // Bob lets Alice read and list his bucket.
    set_acl(
        &bob,
        "volb",
        "bkb",
        AclMode::Add,
        grant(
            GranteeKind::User,
            "alice",
            &[AclRight::Read, AclRight::List],
        ),
    )
    .await;
    assert_eq!(list_keys(&alice, "volb", "bkb").await.unwrap(), vec!["k"]);
    for node in 0..3 {
        let stale = c.stale(node, ALICE);
        wait_for(
            Duration::from_secs(10),
            "the grant on every replica",
            || {
                let stale = &stale;
                async move { stale.lookup_key("volb", "bkb", "k").await.ok() }
            },
        )
        .await;
    }
    assert_denied(
        alice.put_key("volb", "bkb", "k2", 1).await,
        "WRITE",
        "/volb/bkb",
    );
    // A grant to her group lets her write; one to a group she is not in
    // does nothing.
    set_acl(
        &bob,
        "volb",
        "bkb",
        AclMode::Add,
        grant(GranteeKind::Group, "finance", &[AclRight::Write]),
    )
    .await;
    assert_denied(
        alice.put_key("volb", "bkb", "k2", 1).await,
        "WRITE",
        "/volb/bkb",
    );
    set_acl(
        &bob,
        "volb",
        "bkb",
        AclMode::Add,
        grant(GranteeKind::Group, "eng", &[AclRight::Write]),
    )
    .await;
    alice.put_key("volb", "bkb", "k2", 1).await.unwrap();
    let acl = bob
        .get_acl(GetAclRequest {
            volume: "volb".into(),
            bucket: "bkb".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(acl.owner, "bob");
    assert_eq!(acl.grants.len(), 3);
    assert_denied(
        alice
            .get_acl(GetAclRequest {
                volume: "volb".into(),
                bucket: "bkb".into(),
                ..Default::default()
            })
            .await,
        "READ_ACL",
        "/volb/bkb",
    );

    // Revoking stops her on the leader and on every follower.
    set_acl(
        &bob,
        "volb",
        "bkb",
        AclMode::Remove,
        grant(
            GranteeKind::User,
            "alice",
            &[AclRight::Read, AclRight::List],
        ),
    )
    .await;
    assert_denied(list_keys(&alice, "volb", "bkb").await, "LIST", "/volb/bkb");
    for node in 0..3 {
        let stale = c.stale(node, ALICE);
        wait_for(
            Duration::from_secs(10),
            "the revoke on every replica",
            || {
                let stale = &stale;
                async move {
                    match stale.lookup_key("volb", "bkb", "k").await {
                        Err(e) if e.code() == tonic::Code::PermissionDenied => Some(()),
                        _ => None,
                    }
                }
            },
        )
        .await;
        assert_denied(list_keys(&stale, "volb", "bkb").await, "LIST", "/volb/bkb");
    }
    // A world grant reaches every authenticated principal.
    set_acl(
        &bob,
        "volb",
        "bkb",
        AclMode::Add,
        grant(GranteeKind::World, "", &[AclRight::List]),
    )
    .await;
    assert_eq!(
        list_keys(&alice, "volb", "bkb").await.unwrap(),
        vec!["k", "k2"]
    );
    c.shutdown().await;
}
