//! What rights allow beyond a single request: lifecycle deletions, listings
//! and scan status, the audit log under refusals, and stale reads.

use super::*;

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
    // The log is written in order by its own thread: once the transfer's
    // line is in, every refusal before it is too.
    wait_for(
        Duration::from_secs(10),
        "the transfer's audit line",
        || async {
            let r = std::fs::read_to_string(&path).unwrap_or_default();
            r.contains("\"operation\":\"TransferLeader\"").then_some(())
        },
    )
    .await;
    let refusals = std::fs::read_to_string(om::audit::refusals_path(&path)).unwrap();
    assert!(refusals.contains("ACCESS_DENIED"), "{refusals}");
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
    let data = c.members.node(1).dir.path();
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

/// A lookup answers a caller who may not see a name the same way whether
/// or not it exists (no NOT_FOUND oracle), and NOT_FOUND to one who could
/// see it missing: an admin for volumes, a holder of READ, LIST or CREATE
/// on the volume for buckets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lookups_do_not_tell_strangers_which_names_exist() {
    let c = cluster(1).await;
    let (ops, alice, bob) = (c.client(OPS), c.client(ALICE), c.client(BOB));
    ops.create_volume("hidden", "bob").await.unwrap();
    bob.create_bucket("hidden", "secret-plans", BucketLayout::ObjectStore)
        .await
        .unwrap();
    ops.create_volume("mine", "alice").await.unwrap();
    let denied = |r: Result<_, ClientError>| match r {
        Err(ClientError::Api { code, reason, .. }) => {
            assert_eq!(
                (code, reason.as_str()),
                (tonic::Code::PermissionDenied, "ACCESS_DENIED")
            )
        }
        other => panic!("expected ACCESS_DENIED, got {other:?}"),
    };
    let missing = |r: Result<_, ClientError>, want: &str| match r {
        Err(ClientError::Api { code, reason, .. }) => {
            assert_eq!((code, reason.as_str()), (tonic::Code::NotFound, want))
        }
        other => panic!("expected {want}, got {other:?}"),
    };
    // Alice, a stranger to "hidden": existing and missing names alike.
    denied(alice.get_volume("hidden").await.map(|_| ()));
    denied(alice.get_volume("no-such-volume").await.map(|_| ()));
    denied(alice.get_bucket("hidden", "secret-plans").await.map(|_| ()));
    denied(
        alice
            .get_bucket("hidden", "no-such-bucket")
            .await
            .map(|_| ()),
    );
    denied(alice.get_bucket("no-such-volume", "bkt").await.map(|_| ()));
    denied(
        list_keys(&alice, "hidden", "secret-plans")
            .await
            .map(|_| ()),
    );
    denied(
        list_keys(&alice, "hidden", "no-such-bucket")
            .await
            .map(|_| ()),
    );
    // Who could see a name missing is told so.
    missing(
        alice.get_bucket("mine", "none").await.map(|_| ()),
        "BUCKET_NOT_FOUND",
    );
    missing(
        bob.get_bucket("hidden", "none").await.map(|_| ()),
        "BUCKET_NOT_FOUND",
    );
    missing(
        ops.get_volume("no-such-volume").await.map(|_| ()),
        "VOLUME_NOT_FOUND",
    );
    missing(
        ops.get_bucket("hidden", "none").await.map(|_| ()),
        "BUCKET_NOT_FOUND",
    );
    c.shutdown().await;
}
