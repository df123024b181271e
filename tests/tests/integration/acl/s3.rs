//! S3 credentials: whose they are, and which gateways may read them.

use super::*;

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

/// A gateway holds IMPERSONATE and RECLAIM on the cluster and nothing else;
/// walking every right it holds reaches no admin's power: it may not act
/// for an admin or for another holder of IMPERSONATE, nor read either's S3
/// secret (a gateway would then act as them), nor anything an admin may
/// (ACLs of `/`, others' credentials, membership); it may act for plain
/// users, read their secrets and reclaim blocks. Each refusal changes
/// nothing and is audited; an admin may do what the gateway may not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateways_rights_reach_no_admin_power() {
    let c = cluster(3).await;
    let (ops, gw) = (c.client(OPS), c.client(GW));
    for (who, rights) in [
        ("gw", &[AclRight::Impersonate, AclRight::Reclaim][..]),
        ("bob", &[AclRight::Impersonate][..]),
    ] {
        set_acl(
            &ops,
            "",
            "",
            AclMode::Add,
            grant(GranteeKind::User, who, rights),
        )
        .await;
    }
    let shown = ops.get_acl(GetAclRequest::default()).await.unwrap();
    assert!(shown.grants.iter().any(|g| g.name == "gw"
        && g.rights == vec![AclRight::Impersonate as i32, AclRight::Reclaim as i32]));
    let admin_key = new_secret(&ops, "ops", &[]).await;
    let delegate_key = new_secret(&ops, "bob", &[]).await;
    let user_key = new_secret(&ops, "alice", &["eng"]).await;
    let key = |r: &CreateS3SecretResponse| r.credential.clone().unwrap().access_key;
    let before = c.settled().await;

    // Secrets: a plain user's, yes; an admin's or another delegate's, no.
    assert_eq!(
        secret_of(&gw, &key(&user_key)).await.unwrap().secret_key,
        user_key.secret_key
    );
    for k in [key(&admin_key), key(&delegate_key)] {
        assert_reason(
            secret_of(&gw, &k).await,
            tonic::Code::PermissionDenied,
            "ACCESS_DENIED",
        );
    }
    // Acting for: a plain user, yes; an admin or a delegate, no.
    let as_alice = c.acting_for(GW, "alice").who_am_i().await.unwrap();
    assert_eq!(
        (as_alice.user.as_str(), as_alice.impersonated_by.as_str()),
        ("alice", "gw")
    );
    for target in ["ops", "bob"] {
        assert_reason(
            c.acting_for(GW, target).who_am_i().await,
            tonic::Code::PermissionDenied,
            "ACCESS_DENIED",
        );
    }
    // Through a plain user it reaches no more: alice holds no IMPERSONATE.
    assert_reason(
        secret_of(&c.acting_for(GW, "alice"), &key(&admin_key)).await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    // An admin's own powers: ACLs of `/`, everyone's credentials, making
    // credentials for others, membership.
    let r = gw
        .set_acl(SetAclRequest {
            mode: AclMode::Add as i32,
            grants: vec![grant(GranteeKind::User, "gw", &[AclRight::All])],
            ..Default::default()
        })
        .await;
    assert_denied(r, "ALL", "/");
    assert_reason(
        list_secrets(&gw, "ops", "", 0).await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    assert_reason(
        gw.create_s3_secret(CreateS3SecretRequest {
            user: "ops".into(),
            ..Default::default()
        })
        .await,
        tonic::Code::PermissionDenied,
        "ACCESS_DENIED",
    );
    assert_denied(gw.transfer_leader(2).await, "ALL", "/");
    assert_eq!(c.settled().await, before, "a refusal changed state");

    // What RECLAIM is for: the deleted-blocks table, listed and acknowledged.
    gw.list_deleted_blocks(ListDeletedBlocksRequest::default())
        .await
        .unwrap();
    let acked = gw
        .ack_deleted_blocks(AckDeletedBlocksRequest {
            ids: vec![format!("{:016x}{:08x}", u64::MAX, 0)],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(acked.acknowledged, 0);
    // Without RECLAIM (bob) neither.
    let bob = c.client(BOB);
    assert_denied(
        bob.list_deleted_blocks(ListDeletedBlocksRequest::default())
            .await,
        "RECLAIM",
        "/",
    );

    // An admin may do what the gateway may not.
    assert_eq!(
        secret_of(&ops, &key(&delegate_key))
            .await
            .unwrap()
            .secret_key,
        delegate_key.secret_key
    );
    let as_bob = c.acting_for(OPS, "bob").who_am_i().await.unwrap();
    assert_eq!(as_bob.user, "bob");

    // The refusals are audited.
    let lines = c.audit_lines();
    let admin_resource = format!("\"resource\":\"/s3-secrets/{}\"", key(&admin_key));
    let delegate_resource = format!("\"resource\":\"/s3-secrets/{}\"", key(&delegate_key));
    for needles in [
        vec!["\"operation\":\"GetS3Secret\"", admin_resource.as_str()],
        vec!["\"operation\":\"GetS3Secret\"", delegate_resource.as_str()],
        vec!["\"operation\":\"WhoAmI\"", "\"impersonated_user\":\"ops\""],
        vec!["\"operation\":\"WhoAmI\"", "\"impersonated_user\":\"bob\""],
    ] {
        assert!(
            lines.iter().any(|l| l.contains("\"principal\":\"gw\"")
                && l.contains("\"result\":\"ACCESS_DENIED\"")
                && needles.iter().all(|n| l.contains(n))),
            "no refusal audited with {needles:?}: {lines:#?}"
        );
    }
    c.shutdown().await;
}
