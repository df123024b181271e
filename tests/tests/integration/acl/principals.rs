//! Who acts: impersonation, `omctl acl`, and whose retry-cache entry is whose.

use super::*;

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
