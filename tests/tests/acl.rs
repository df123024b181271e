//! Authorization end to end: ACLs replicated through Raft and enforced on
//! every replica (stale follower reads included), owners, groups, cluster
//! admins, impersonation, the audit log, and `omctl acl`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use om_client::v1::*;
use om_client::{ClientError, ClientOptions, OmClient};
use om_tests::{MemberAddrs, TestNode, cluster_addrs, wait_for};

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

struct Cluster {
    dir: tempfile::TempDir,
    addrs: Vec<MemberAddrs>,
    nodes: Vec<TestNode>,
}

async fn cluster(n: u64) -> Cluster {
    cluster_with(n, |_| {}).await
}

async fn cluster_with(n: u64, tweak: impl Fn(&mut om::config::Args)) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path());
    let addrs = cluster_addrs(n);
    let mut nodes = Vec::new();
    let tweak = &tweak;
    for a in &addrs {
        let (tokens, audit) = (
            tokens.clone(),
            dir.path().join(format!("audit-{}.log", a.id)),
        );
        nodes.push(
            TestNode::start_member_with(a, &addrs, None, move |args| {
                args.token_file = Some(tokens);
                // Tokens over plaintext on loopback: for tests only.
                args.insecure = true;
                args.admins = Some("ops".to_string());
                args.audit_log = Some(audit);
                tweak(args);
            })
            .await,
        );
    }
    let c = Cluster { dir, addrs, nodes };
    let ops = c.client(OPS);
    wait_for(Duration::from_secs(20), "a leader", || {
        let ops = &ops;
        async move {
            ops.cluster_status()
                .await
                .ok()
                .filter(|s| s.has_leader && !s.cluster_id.is_empty())
        }
    })
    .await;
    c
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
        self.nodes.iter().map(TestNode::dump).collect()
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
        for n in self.nodes {
            n.node.shutdown().await;
        }
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

/// A gateway acts for an end user only with the IMPERSONATE right, the
/// decision is made for that user, it may not act for an admin, and the
/// audit log names both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn impersonation_needs_the_right_and_is_audited() {
    let c = cluster(1).await;
    let (ops, alice) = (c.client(OPS), c.client(ALICE));
    ops.create_volume("vola", "alice").await.unwrap();
    ops.create_volume("volb", "bob").await.unwrap();
    alice
        .create_bucket("vola", "bka", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let gw_as_alice = c.acting_for(GW, "alice");
    let before = c.settled().await;
    assert_denied(
        gw_as_alice.put_key("vola", "bka", "k", 1).await,
        "IMPERSONATE",
        "/",
    );
    assert_denied(
        c.acting_for(ALICE, "bob").who_am_i().await,
        "IMPERSONATE",
        "/",
    );
    assert_eq!(c.dumps(), before);

    set_acl(
        &ops,
        "",
        "",
        AclMode::Add,
        grant(GranteeKind::User, "gw", &[AclRight::Impersonate]),
    )
    .await;
    let me = gw_as_alice.who_am_i().await.unwrap();
    assert_eq!(
        (me.user.as_str(), me.impersonated_by.as_str()),
        ("alice", "gw")
    );
    assert!(!me.admin);
    gw_as_alice.put_key("vola", "bka", "k", 1).await.unwrap();
    // The gateway's own identity has no rights on Alice's bucket...
    assert_denied(
        c.client(GW).put_key("vola", "bka", "k", 1).await,
        "WRITE",
        "/vola/bka",
    );
    // ...and acting for Alice gives none on Bob's volume.
    assert_denied(
        gw_as_alice
            .create_bucket("volb", "bkx", BucketLayout::ObjectStore)
            .await,
        "CREATE",
        "/volb",
    );
    // Acting for an admin would make the gateway one.
    let e = c
        .acting_for(GW, "ops")
        .create_volume("volc", "gw")
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    // Non-admins cannot read or change the cluster ACL.
    assert_denied(alice.get_acl(GetAclRequest::default()).await, "ALL", "/");
    let cluster_acl = ops.get_acl(GetAclRequest::default()).await.unwrap();
    assert_eq!(
        cluster_acl.grants,
        vec![grant(GranteeKind::User, "gw", &[AclRight::Impersonate])]
    );

    // Unauthenticated requests are audited too.
    let nobody = c.client("forged");
    assert_eq!(
        nobody.list_volumes("", "", 10).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    let lines = wait_for(Duration::from_secs(10), "audit lines", || async {
        let l = c.audit_lines();
        l.iter()
            .any(|l| l.contains("\"result\":\"INVALID_TOKEN\""))
            .then_some(l)
    })
    .await;
    let find = |needles: &[&str]| {
        lines
            .iter()
            .find(|l| needles.iter().all(|n| l.contains(n)))
            .unwrap_or_else(|| panic!("no audit line with {needles:?} in {lines:#?}"))
            .clone()
    };
    let put = find(&[
        "\"principal\":\"gw\"",
        "\"impersonated_user\":\"alice\"",
        "\"operation\":\"PutKey\"",
        "\"resource\":\"/vola/bka/k\"",
        "\"result\":\"OK\"",
    ]);
    assert!(put.contains("\"request_id\":\"") && put.contains("\"via\":\"token\""));
    find(&[
        "\"principal\":\"gw\"",
        "\"operation\":\"PutKey\"",
        "\"result\":\"ACCESS_DENIED\"",
        "\"right\":\"IMPERSONATE\"",
    ]);
    find(&[
        "\"principal\":\"gw\"",
        "\"impersonated_user\":\"alice\"",
        "\"operation\":\"CreateBucket\"",
        "\"resource\":\"/volb\"",
        "\"result\":\"ACCESS_DENIED\"",
        "\"right\":\"CREATE\"",
    ]);
    find(&[
        "\"principal\":\"alice\"",
        "\"operation\":\"GetAcl\"",
        "\"result\":\"ACCESS_DENIED\"",
    ]);
    find(&[
        "\"operation\":\"SetAcl\"",
        "\"principal\":\"ops\"",
        "\"resource\":\"/\"",
        "\"result\":\"OK\"",
    ]);
    c.shutdown().await;
}

/// `omctl acl add|get|remove` and `omctl whoami --as`, as an operator uses
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn omctl_manages_acls() {
    let c = cluster(1).await;
    let ops = c.client(OPS);
    ops.create_volume("volb", "bob").await.unwrap();
    c.client(BOB)
        .create_bucket("volb", "bkb", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let omctl = om_tests::binary("omctl");
    let run = |token: &str, args: &[&str]| {
        let out = std::process::Command::new(&omctl)
            .args(["--endpoint", &c.addrs[0].grpc, "--timeout", "10"])
            .args(args)
            .env("OM_TOKEN", token)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, out) = run(
        BOB,
        &["acl", "add", "volb/bkb", "user:alice:rl", "group:eng:WRITE"],
    );
    assert!(ok, "{out}");
    let (ok, out) = run(BOB, &["acl", "get", "/volb/bkb"]);
    assert!(ok, "{out}");
    assert!(out.contains("owner:  bob"), "{out}");
    assert!(out.contains("grant:  user:alice:READ,LIST"), "{out}");
    assert!(out.contains("grant:  group:eng:WRITE"), "{out}");
    let (ok, out) = run(BOB, &["acl", "remove", "volb/bkb", "user:alice:l"]);
    assert!(ok && out.contains("user:alice:READ\n"), "{out}");
    let (ok, out) = run(ALICE, &["acl", "set", "volb/bkb"]);
    assert!(!ok && out.contains("ACCESS_DENIED"), "{out}");
    assert!(out.contains("lacks WRITE_ACL on /volb/bkb"), "{out}");
    let (ok, out) = run(OPS, &["acl", "add", "/", "user:gw:IMPERSONATE"]);
    assert!(ok, "{out}");
    let (ok, out) = run(GW, &["--output", "json", "--as", "alice", "whoami"]);
    assert!(ok, "{out}");
    let who: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(who["user"], "alice");
    assert_eq!(who["impersonated_by"], "gw");
    let (ok, out) = run(OPS, &["acl", "add", "volb", "user:gw:IMPERSONATE"]);
    assert!(!ok && out.contains("INVALID_RIGHTS"), "{out}");
    c.shutdown().await;
}

fn expire_after(days: u32) -> LifecycleRule {
    LifecycleRule {
        id: "sweep".into(),
        enabled: true,
        filter: Some(LifecycleFilter::default()),
        expiration: Some(LifecycleExpiration {
            days: Some(days),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Configuring what lifecycle deletes needs DELETE: WRITE alone is refused
/// (and changes nothing on any replica). The rules delete with their
/// configurer's rights as they are now: after the configurer loses DELETE
/// nothing is expired, once it is granted again the keys go, and every page
/// that deleted is audited with the configurer, the rule and the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_deletes_only_with_its_configurers_right_to_delete() {
    const DAY_MS: u64 = 1000;
    let c = cluster_with(3, |a| {
        a.lifecycle_day_ms = Some(DAY_MS);
        a.lifecycle_interval_ms = Some(200);
    })
    .await;
    let (ops, alice, bob) = (c.client(OPS), c.client(ALICE), c.client(BOB));
    ops.create_volume("vol-l", "bob").await.unwrap();
    bob.create_bucket("vol-l", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for k in ["a", "b", "c"] {
        bob.put_key("vol-l", "bkt", k, 1).await.unwrap();
    }
    let alice_gets = |rights: &'static [AclRight], mode: AclMode| {
        let bob = &bob;
        async move {
            set_acl(
                bob,
                "vol-l",
                "bkt",
                mode,
                grant(GranteeKind::User, "alice", rights),
            )
            .await
        }
    };
    alice_gets(&[AclRight::Write], AclMode::Add).await;
    let put = |days| PutBucketLifecycleRequest {
        volume: "vol-l".into(),
        bucket: "bkt".into(),
        rules: vec![expire_after(days)],
        ..Default::default()
    };
    let before = c.settled().await;
    assert_denied(
        alice.put_bucket_lifecycle(put(3)).await,
        "WRITE+DELETE",
        "/vol-l/bkt",
    );
    assert_denied(
        alice
            .set_bucket_versioning("vol-l", "bkt", BucketVersioning::Enabled)
            .await,
        "WRITE+DELETE",
        "/vol-l/bkt",
    );
    assert_eq!(c.settled().await, before);

    // With DELETE she may; then she loses it before the keys are due.
    alice_gets(&[AclRight::Delete], AclMode::Add).await;
    alice.put_bucket_lifecycle(put(3)).await.unwrap();
    alice_gets(&[AclRight::Delete], AclMode::Remove).await;
    let cfg = bob
        .get_bucket_lifecycle(GetBucketLifecycleRequest {
            volume: "vol-l".into(),
            bucket: "bkt".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(cfg.configured_by, "alice");
    // Due after 3 to 4 days (of 1 s): wait 6 and the keys are all there.
    tokio::time::sleep(Duration::from_millis(6 * DAY_MS)).await;
    assert_eq!(
        list_keys(&bob, "vol-l", "bkt").await.unwrap(),
        ["a", "b", "c"]
    );
    assert!(
        !c.audit_lines()
            .iter()
            .any(|l| l.contains("LifecycleExpiration")),
        "nothing was expired"
    );

    alice_gets(&[AclRight::Delete], AclMode::Add).await;
    wait_for(
        Duration::from_secs(20),
        "the rules to expire the keys",
        || async {
            list_keys(&bob, "vol-l", "bkt")
                .await
                .ok()
                .filter(|k| k.is_empty())
        },
    )
    .await;
    let lines = wait_for(
        Duration::from_secs(5),
        "the expiration's audit line",
        || async {
            let l: Vec<String> = c
                .audit_lines()
                .into_iter()
                .filter(|l| l.contains("\"LifecycleExpiration\""))
                .collect();
            (!l.is_empty()).then_some(l)
        },
    )
    .await;
    assert!(
        lines.iter().all(|l| l.contains("\"principal\":\"alice\"")
            && l.contains("\"resource\":\"/vol-l/bkt\"")
            && l.contains("sweep:")),
        "{lines:?}"
    );
    c.shutdown().await;
}

/// A retry-cache entry belongs to the principal that made it: Bob writing
/// under Alice's client id and sequence number neither refuses Alice's write
/// (RETRY_MISMATCH) nor answers it with his result.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_principals_client_id_neither_poisons_nor_reads_the_retry_cache() {
    use om_client::v1::ozone_manager_client::OzoneManagerClient;
    let c = cluster(1).await;
    let (ops, alice, bob) = (c.client(OPS), c.client(ALICE), c.client(BOB));
    ops.create_volume("vol-a", "alice").await.unwrap();
    ops.create_volume("vol-b", "bob").await.unwrap();
    alice
        .create_bucket("vol-a", "bkt-a", BucketLayout::ObjectStore)
        .await
        .unwrap();
    bob.create_bucket("vol-b", "bkt-b", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let header = WriteHeader {
        client_id: alice.client_id().to_string(),
        seq: 1_000_000,
    };
    async fn put(
        who: &OmClient,
        header: &WriteHeader,
        v: &str,
        b: &str,
        size: u64,
    ) -> Result<PutKeyResponse, ClientError> {
        let req = PutKeyRequest {
            header: Some(header.clone()),
            volume: v.into(),
            bucket: b.into(),
            key: "k".into(),
            size,
            ..Default::default()
        };
        who.call(|ch| {
            let req = req.clone();
            async move { OzoneManagerClient::new(ch).put_key(req).await }
        })
        .await
    }
    put(&bob, &header, "vol-b", "bkt-b", 7).await.unwrap();
    put(&alice, &header, "vol-a", "bkt-a", 5).await.unwrap();
    assert_eq!(
        alice.lookup_key("vol-a", "bkt-a", "k").await.unwrap().size,
        5
    );
    assert_eq!(bob.lookup_key("vol-b", "bkt-b", "k").await.unwrap().size, 7);
    // A real retry of each is still answered from the cache.
    put(&alice, &header, "vol-a", "bkt-a", 5).await.unwrap();
    c.shutdown().await;
}

/// Listings show only what the caller may read, and their continuations
/// name nothing else; a lifecycle scan's cursor (a key name) is shown only
/// to a caller who may list the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listings_and_scan_status_name_nothing_the_caller_may_not_read() {
    let c = cluster(1).await;
    let (ops, alice, bob) = (c.client(OPS), c.client(ALICE), c.client(BOB));
    for v in ["vol1", "vol2-hidden", "vol3", "vol4-hidden", "vol5"] {
        let owner = if v.ends_with("hidden") {
            "bob"
        } else {
            "alice"
        };
        ops.create_volume(v, owner).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let page = alice.list_volumes("", &after, 1).await.unwrap();
        seen.extend(page.volumes.iter().map(|v| v.name.clone()));
        assert!(!page.next_start_after.contains("hidden"), "{page:?}");
        if page.next_start_after.is_empty() {
            break;
        }
        after = page.next_start_after;
    }
    assert_eq!(seen, ["vol1", "vol3", "vol5"]);

    // Alice may list Bob's volume, and read one of his buckets.
    set_acl(
        &bob,
        "vol2-hidden",
        "",
        AclMode::Add,
        grant(GranteeKind::User, "alice", &[AclRight::List]),
    )
    .await;
    for b in ["bk1", "bk2", "bk3"] {
        bob.create_bucket("vol2-hidden", b, BucketLayout::ObjectStore)
            .await
            .unwrap();
    }
    set_acl(
        &bob,
        "vol2-hidden",
        "bk2",
        AclMode::Add,
        grant(GranteeKind::User, "alice", &[AclRight::Read]),
    )
    .await;
    let r = alice.list_buckets("vol2-hidden", "", "", 1).await.unwrap();
    let names: Vec<_> = r.buckets.iter().map(|b| b.name.clone()).collect();
    assert_eq!(names, ["bk2"], "{r:?}");
    assert!(
        r.next_start_after.is_empty() || r.next_start_after == "bk2",
        "{r:?}"
    );
    assert_eq!(
        bob.list_buckets("vol2-hidden", "", "", 100)
            .await
            .unwrap()
            .buckets
            .len(),
        3
    );
    c.shutdown().await;
}

/// Refusals go to a file of their own: a flood of unauthenticated requests
/// cannot rotate a mutation's line out of the kept audit files. Membership
/// changes are audited. The data directory and the audit files are for
/// om's user only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refusals_cannot_evict_mutations_from_the_audit_log() {
    use std::os::unix::fs::PermissionsExt;
    let c = cluster_with(1, |a| {
        a.audit_log_max_bytes = Some(4096);
        a.audit_log_keep = Some(1);
    })
    .await;
    let ops = c.client(OPS);
    ops.create_volume("kept", "").await.unwrap();
    let stranger = c.client("omt_000000000000000a_forged-forged-forged-forged-forged");
    let mut reasons = std::collections::BTreeSet::new();
    for _ in 0..300 {
        reasons.insert(
            stranger
                .create_volume("x", "")
                .await
                .unwrap_err()
                .reason()
                .to_string(),
        );
    }
    // Past its burst of failures the source's failures are answered
    // TOO_MANY_AUTH_FAILURES (and only its first ones are audited).
    assert_eq!(
        reasons.into_iter().collect::<Vec<_>>(),
        ["INVALID_TOKEN", "TOO_MANY_AUTH_FAILURES"]
    );
    // A user refused what it may not do is audited every time: 300 of
    // those flood the refusals file.
    let bob = c.client(BOB);
    for _ in 0..300 {
        let e = bob.create_volume("bobs", "").await.unwrap_err();
        assert_eq!(e.reason(), "ACCESS_DENIED", "{e}");
    }
    // Leadership handed to the node that holds it: audited either way.
    // Valid tokens from the same address still work.
    let _ = ops.transfer_leader(1).await;
    let path = c.dir.path().join("audit-1.log");
    wait_for(Duration::from_secs(5), "the refusals file", || async {
        let r = std::fs::read_to_string(om::audit::refusals_path(&path)).unwrap_or_default();
        r.contains("ACCESS_DENIED").then_some(())
    })
    .await;
    // The refusals filled their file past its size: it rotated, and the
    // mutations' file did not.
    let mut rotated = om::audit::refusals_path(&path).into_os_string();
    rotated.push(".1");
    assert!(
        std::path::Path::new(&rotated).exists(),
        "the refusals rotated"
    );
    let main = std::fs::read_to_string(&path).unwrap();
    assert!(main.contains("\"resource\":\"/kept\""), "{main}");
    assert!(
        !main.contains("INVALID_TOKEN") && !main.contains("ACCESS_DENIED"),
        "{main}"
    );
    assert!(main.contains("\"operation\":\"TransferLeader\""), "{main}");
    for p in [path.clone(), om::audit::refusals_path(&path)] {
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
    }
    let data = c.nodes[0].dir.path();
    let mode = std::fs::metadata(data).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    c.shutdown().await;
}

/// A stale read is served by a current member within the read's bound: a
/// bound tighter than the heartbeat is refused as UNAVAILABLE (STALE_STATE),
/// and a removed node, whose grants froze at its removal, refuses stale
/// reads altogether.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_reads_come_from_members_within_their_bound() {
    let c = cluster(3).await;
    let ops = c.client(OPS);
    ops.create_volume("stale-vol", "alice").await.unwrap();
    let leader = ops.cluster_status().await.unwrap().leader_id;
    let follower = (1..=3u64).find(|id| *id != leader).unwrap() as usize - 1;
    let reader = c.stale(follower, ALICE);
    wait_for(
        Duration::from_secs(5),
        "the follower to serve a stale read",
        || async { reader.get_volume("stale-vol").await.ok() },
    )
    .await;
    let tight = OmClient::new(
        std::slice::from_ref(&c.addrs[follower].grpc),
        ClientOptions {
            stale_reads: true,
            max_staleness_ms: 1,
            deadline: Duration::from_millis(500),
            ..Cluster::opts(ALICE)
        },
    )
    .unwrap();
    // Heartbeats come every 50 ms: some attempt finds the state older than 1 ms.
    let refused = {
        let mut refused = None;
        for _ in 0..50 {
            if let Err(e) = tight.get_volume("stale-vol").await {
                refused = Some(e);
                break;
            }
        }
        refused.expect("a stale read older than its bound was served")
    };
    assert!(
        format!("{refused:?}").contains("STALE_STATE"),
        "{refused:?}"
    );

    ops.remove_node(follower as u64 + 1).await.unwrap();
    // It refuses as soon as it holds the membership without itself, or, if
    // that entry never reaches it, once its state is older than the default
    // bound (10 s).
    let removed = OmClient::new(
        std::slice::from_ref(&c.addrs[follower].grpc),
        ClientOptions {
            stale_reads: true,
            deadline: Duration::from_millis(500),
            ..Cluster::opts(ALICE)
        },
    )
    .unwrap();
    wait_for(
        Duration::from_secs(20),
        "the removed node to refuse",
        || async {
            match removed.get_volume("stale-vol").await {
                Err(e) => {
                    let e = format!("{e:?}");
                    (e.contains("NOT_A_MEMBER") || e.contains("STALE_STATE")).then_some(())
                }
                Ok(_) => None,
            }
        },
    )
    .await;
    c.shutdown().await;
}

fn assert_reason<T: std::fmt::Debug>(r: Result<T, ClientError>, code: tonic::Code, reason: &str) {
    match r {
        Err(ClientError::Api {
            code: got,
            reason: why,
            message,
            ..
        }) => assert_eq!((got, why.as_str()), (code, reason), "{message}"),
        other => panic!("expected {code:?} {reason}, got {other:?}"),
    }
}

async fn new_secret(c: &OmClient, user: &str, groups: &[&str]) -> CreateS3SecretResponse {
    c.create_s3_secret(CreateS3SecretRequest {
        user: user.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn secret_of(c: &OmClient, access_key: &str) -> Result<GetS3SecretResponse, ClientError> {
    c.get_s3_secret(GetS3SecretRequest {
        access_key: access_key.into(),
        ..Default::default()
    })
    .await
}

async fn list_secrets(
    c: &OmClient,
    user: &str,
    after: &str,
    max: u32,
) -> Result<ListS3SecretsResponse, ClientError> {
    c.list_s3_secrets(ListS3SecretsRequest {
        user: user.into(),
        start_after: after.into(),
        max_results: max,
        ..Default::default()
    })
    .await
}

/// S3 credentials are replicated state: a user makes and revokes their
/// own, only an admin makes anyone else's or gives groups, the secret key
/// is returned to its user and to holders of IMPERSONATE (gateways) only,
/// listings never carry it, every refusal changes nothing on any replica,
/// a retried create answers the first attempt's keys, and no secret reaches
/// the audit log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_credentials_belong_to_their_users_and_gateways_read_them() {
    let c = cluster(3).await;
    let (ops, alice, bob, gw) = (c.client(OPS), c.client(ALICE), c.client(BOB), c.client(GW));
    let mine = new_secret(&alice, "alice", &[]).await;
    let cred = mine.credential.clone().unwrap();
    assert_eq!(cred.user, "alice");
    assert!(cred.access_key.starts_with("OM") && cred.access_key.len() == 20);
    assert_eq!(mine.secret_key.len(), 40);
    assert!(cred.created_ms > 0);

    // Refusals, each changing nothing anywhere.
    let before = c.settled().await;
    let for_bob = CreateS3SecretRequest {
        user: "bob".into(),
        ..Default::default()
    };
    assert_reason(
        alice.create_s3_secret(for_bob.clone()).await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    assert_reason(
        alice
            .create_s3_secret(CreateS3SecretRequest {
                user: "alice".into(),
                groups: vec!["admins".into()],
                ..Default::default()
            })
            .await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    match ops
        .create_s3_secret(CreateS3SecretRequest {
            user: "a b".into(),
            ..Default::default()
        })
        .await
    {
        Err(ClientError::Api { reason, field, .. }) => {
            assert_eq!((reason.as_str(), field.as_str()), ("INVALID_USER", "user"))
        }
        other => panic!("expected INVALID_USER, got {other:?}"),
    }
    assert_reason(
        ops.create_s3_secret(CreateS3SecretRequest {
            user: "bob".into(),
            groups: vec!["eng".into(), "eng".into()],
            ..Default::default()
        })
        .await,
        tonic::Code::InvalidArgument,
        "INVALID_GROUPS",
    );
    assert_reason(
        bob.revoke_s3_secret(RevokeS3SecretRequest {
            access_key: cred.access_key.clone(),
            ..Default::default()
        })
        .await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    assert_reason(
        ops.revoke_s3_secret(RevokeS3SecretRequest {
            access_key: "not-a-key".into(),
            ..Default::default()
        })
        .await,
        tonic::Code::InvalidArgument,
        "INVALID_ACCESS_KEY",
    );
    assert_eq!(c.dumps(), before);

    // Who reads the secret.
    let got = secret_of(&alice, &cred.access_key).await.unwrap();
    assert_eq!(got.secret_key, mine.secret_key);
    assert_reason(
        secret_of(&bob, &cred.access_key).await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    assert_reason(
        secret_of(&gw, &cred.access_key).await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    set_acl(
        &ops,
        "",
        "",
        AclMode::Add,
        grant(GranteeKind::User, "gw", &[AclRight::Impersonate]),
    )
    .await;
    let seen = secret_of(&gw, &cred.access_key).await.unwrap();
    assert_eq!(
        (
            seen.secret_key.as_str(),
            seen.credential.unwrap().user.as_str()
        ),
        (mine.secret_key.as_str(), "alice")
    );
    // Any replica answers with the same bytes (stale reads).
    for node in 0..3 {
        wait_for(
            Duration::from_secs(10),
            "the credential on every replica",
            || {
                let s = c.stale(node, GW);
                let key = cred.access_key.clone();
                async move { secret_of(&s, &key).await.ok() }
            },
        )
        .await;
    }

    // An admin makes credentials for others, with groups; a retry of the
    // same write answers the same keys.
    let with_groups = new_secret(&ops, "bob", &["eng"]).await;
    assert_eq!(with_groups.credential.unwrap().groups, vec!["eng"]);
    let req = CreateS3SecretRequest {
        header: Some(ops.next_header()),
        ..for_bob
    };
    let call = || {
        ops.call(|ch| {
            let req = req.clone();
            async move {
                om_client::v1::ozone_manager_client::OzoneManagerClient::new(ch)
                    .create_s3_secret(req)
                    .await
            }
        })
    };
    let (first, again) = (call().await.unwrap(), call().await.unwrap());
    assert_eq!(first.secret_key, again.secret_key);
    assert_eq!(first.credential, again.credential);

    // Listings: one's own, everyone's for an admin, pages, no secrets.
    let own = list_secrets(&alice, "", "", 0).await.unwrap();
    assert_eq!(own.credentials, vec![cred.clone()]);
    assert_reason(
        list_secrets(&alice, "bob", "", 0).await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    let everyone = list_secrets(&ops, "", "", 0).await.unwrap();
    assert_eq!(everyone.credentials.len(), 3);
    let bobs = list_secrets(&ops, "bob", "", 1).await.unwrap();
    assert!(bobs.truncated && bobs.credentials.len() == 1);
    let rest = list_secrets(&ops, "bob", &bobs.credentials[0].access_key, 1)
        .await
        .unwrap();
    assert!(!rest.truncated && rest.credentials.len() == 1);
    assert_ne!(rest.credentials[0], bobs.credentials[0]);

    // A user holds at most 16; the 17th is refused and changes nothing.
    for _ in 2..16 {
        new_secret(&ops, "bob", &[]).await;
    }
    let before = c.settled().await;
    assert_reason(
        ops.create_s3_secret(CreateS3SecretRequest {
            user: "bob".into(),
            ..Default::default()
        })
        .await,
        tonic::Code::FailedPrecondition,
        "TOO_MANY_S3_SECRETS",
    );
    assert_eq!(c.dumps(), before);

    // Revoking: the user's own; afterwards the key is unknown everywhere.
    let gone = alice
        .revoke_s3_secret(RevokeS3SecretRequest {
            access_key: cred.access_key.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(gone.credential.unwrap().access_key, cred.access_key);
    assert_reason(
        secret_of(&gw, &cred.access_key).await,
        tonic::Code::NotFound,
        "S3_SECRET_NOT_FOUND",
    );
    assert_reason(
        alice
            .revoke_s3_secret(RevokeS3SecretRequest {
                access_key: cred.access_key.clone(),
                ..Default::default()
            })
            .await,
        tonic::Code::NotFound,
        "S3_SECRET_NOT_FOUND",
    );
    let dumps = c.settled().await;
    assert!(dumps.windows(2).all(|w| w[0] == w[1]));

    // omctl: create prints the pair as JSON; list shows no secret.
    let omctl = |token: &str, args: &[&str]| {
        let out = std::process::Command::new(om_tests::binary("omctl"))
            .args(["--endpoint", &c.addrs[0].grpc, "--timeout", "10"])
            .args(args)
            .env("OM_TOKEN", token)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let made: serde_json::Value = serde_json::from_str(
        omctl(
            ALICE,
            &["--output", "json", "s3", "secret", "create", "alice"],
        )
        .trim(),
    )
    .unwrap();
    let (key, secret) = (
        made["access_key"].as_str().unwrap().to_string(),
        made["secret_key"].as_str().unwrap().to_string(),
    );
    let shown = omctl(GW, &["s3", "secret", "show", &key]);
    assert!(
        shown.contains(&secret) && shown.contains("user:       alice"),
        "{shown}"
    );
    let listed = omctl(ALICE, &["s3", "secret", "list"]);
    assert!(
        listed.contains(&key) && !listed.contains(&secret),
        "{listed}"
    );
    omctl(ALICE, &["s3", "secret", "revoke", &key]);
    assert!(!omctl(OPS, &["s3", "secret", "list", "alice"]).contains(&key));

    // No secret key was ever written to an audit log.
    let lines = c.audit_lines();
    assert!(lines.iter().any(|l| l.contains("/s3-secrets/")));
    for s in [
        &mine.secret_key,
        &with_groups.secret_key,
        &first.secret_key,
        &secret,
    ] {
        assert!(!lines.iter().any(|l| l.contains(s.as_str())));
    }
    c.shutdown().await;
}
