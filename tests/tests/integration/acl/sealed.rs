//! S3 secrets at rest: sealed under `--secrets-key-file` in the table, the
//! log, the retry cache, the log archive and backups; refused without a key
//! unless `--insecure`; a store holding plain secrets sealed at start-up
//! once a key is given; keys rotated online.

use super::*;
use om_tests::http_get;

/// Every file under `roots` that holds `needle`.
fn files_holding(roots: &[&Path], needle: &[u8]) -> Vec<PathBuf> {
    fn walk(p: &Path, needle: &[u8], out: &mut Vec<PathBuf>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                walk(&e.path(), needle, out);
            }
        } else if let Ok(bytes) = std::fs::read(p)
            && bytes.windows(needle.len()).any(|w| w == needle)
        {
            out.push(p.to_path_buf());
        }
    }
    let mut out = Vec::new();
    for r in roots {
        walk(r, needle, &mut out);
    }
    out
}

fn reason<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (tonic::Code, String) {
    match r {
        Err(ClientError::Api { code, reason, .. }) => (code, reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A secret made and read through a 3-member cluster with a log archive,
/// retried from the retry cache, and backed up, appears in no file of any
/// member's store, archive, audit log or the backup; its access key does
/// (the search reads what it should). Rotation is for admins only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_file_at_rest_holds_a_secret() {
    let archives = tempfile::tempdir().unwrap();
    let root = archives.path().to_path_buf();
    let c = cluster_with(3, move |a| {
        a.archive_log = Some(root.join(format!("archive-{}", a.node_id.unwrap())));
    })
    .await;
    let (ops, alice) = (c.client(OPS), c.client(ALICE));
    let req = CreateS3SecretRequest {
        header: Some(alice.next_header()),
        user: "alice".into(),
        ..Default::default()
    };
    let call = || {
        alice.call(|ch| {
            let req = req.clone();
            async move {
                om_client::v1::ozone_manager_client::OzoneManagerClient::new(ch)
                    .create_s3_secret(req)
                    .await
            }
        })
    };
    let (made, again) = (call().await.unwrap(), call().await.unwrap());
    assert_eq!(made.secret_key, again.secret_key);
    let access_key = made.credential.unwrap().access_key;
    let read = alice
        .get_s3_secret(GetS3SecretRequest {
            access_key: access_key.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(read.secret_key, made.secret_key);

    // Only an admin rotates; an admin's rotation finds everything sealed
    // under the one key.
    let (code, why) = reason(alice.rotate_s3_secret_key(Default::default()).await);
    assert_eq!(code, tonic::Code::PermissionDenied, "{why}");
    let r = ops.rotate_s3_secret_key(Default::default()).await.unwrap();
    assert_eq!(
        (r.key_id.as_str(), r.resealed, r.unchanged),
        ("test-key", 0, 1)
    );

    let backups = tempfile::tempdir().unwrap();
    let backup = std::process::Command::new(om_tests::binary("omctl"))
        .env("OM_TOKEN", OPS)
        .args([
            "--endpoint",
            &c.addrs[0].grpc,
            "backup",
            "create",
            "--quiet",
        ])
        .arg(backups.path())
        .output()
        .unwrap();
    assert!(backup.status.success(), "{backup:?}");
    // The archives' writers sync what was applied.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let data: Vec<PathBuf> = c
        .members
        .running()
        .map(|n| n.dir.path().to_path_buf())
        .collect();
    let mut roots: Vec<&Path> = data.iter().map(|p| p.as_path()).collect();
    roots.extend([archives.path(), backups.path(), c.dir.path()]);
    assert_eq!(
        files_holding(&roots, made.secret_key.as_bytes()),
        Vec::<PathBuf>::new()
    );
    // The search does read the store, the archive and the backup.
    let found = files_holding(&roots, access_key.as_bytes());
    for place in [data[0].as_path(), archives.path(), backups.path()] {
        assert!(
            found.iter().any(|f| f.starts_with(place)),
            "{place:?}: {found:?}"
        );
    }
    c.shutdown().await;
}

/// The `om_s3_secrets` gauge of `sealing` on `n`, once reported.
async fn secrets_gauge(n: &TestNode, sealing: &str) -> Option<u64> {
    let m = http_get(n.node.http_addr, "/metrics").await;
    let line = format!("om_s3_secrets{{sealing=\"{sealing}\"}} ");
    m.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|v| v.trim().parse().ok())
}

async fn get(c: &OmClient, access_key: &str) -> Result<GetS3SecretResponse, ClientError> {
    c.get_s3_secret(GetS3SecretRequest {
        access_key: access_key.into(),
        ..Default::default()
    })
    .await
}

/// Without a key creating a secret is refused, nothing stored; under
/// `--insecure` it is stored in plain text (the search finds it); given a
/// key, the leader seals it at start-up; a new key rotates online, and a
/// secret under a key the file lost is refused by name until the key comes
/// back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plain_secrets_are_sealed_once_a_key_is_given_and_keys_rotate() {
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("secrets.key");
    let opts = || om::server::NodeOptions {
        tls_reload_interval: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let start = |dir: tempfile::TempDir, key: Option<PathBuf>, insecure: bool| {
        TestNode::start_in_opts(dir, opts(), move |a| {
            a.secrets_key_file = key;
            a.insecure = insecure;
        })
    };
    let n = start(tempfile::tempdir().unwrap(), None, false).await;
    let c = n.client();
    let (code, why) = reason(
        c.create_s3_secret(CreateS3SecretRequest {
            user: "alice".into(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(
        (code, why.as_str()),
        (tonic::Code::FailedPrecondition, "SECRETS_KEY_REQUIRED")
    );
    let none = c.list_s3_secrets(Default::default()).await.unwrap();
    assert!(none.credentials.is_empty());

    let n = start(n.stop().await, None, true).await;
    let made = n
        .client()
        .create_s3_secret(CreateS3SecretRequest {
            user: "alice".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let access_key = made.credential.unwrap().access_key;
    let secret = made.secret_key.as_bytes().to_vec();
    assert!(!files_holding(&[n.dir.path()], &secret).is_empty());

    // A key given: the plain secret is sealed by the start-up task.
    std::fs::write(&key_file, "k1 ".to_string() + &"01".repeat(32) + "\n").unwrap();
    let n = start(n.stop().await, Some(key_file.clone()), false).await;
    wait_for(
        Duration::from_secs(20),
        "the plain secret sealed",
        || async {
            (secrets_gauge(&n, "plaintext").await == Some(0)
                && secrets_gauge(&n, "current_key").await == Some(1))
            .then_some(())
        },
    )
    .await;
    let c = n.client();
    assert_eq!(
        get(&c, &access_key).await.unwrap().secret_key,
        made.secret_key
    );

    // A new key first, the old one after: rotation seals under the new one.
    std::fs::write(
        &key_file,
        format!("k2 {}\nk1 {}\n", "02".repeat(32), "01".repeat(32)),
    )
    .unwrap();
    // Rotations under k1 (before the file is reread) change nothing.
    let r = wait_for(Duration::from_secs(10), "the key file reread", || async {
        let r = c.rotate_s3_secret_key(Default::default()).await.unwrap();
        (r.key_id == "k2").then_some(r)
    })
    .await;
    assert_eq!((r.resealed, r.unchanged), (1, 0));
    let r = c.rotate_s3_secret_key(Default::default()).await.unwrap();
    assert_eq!((r.resealed, r.unchanged), (0, 1));

    // Only k1 left in the file: the secret is under k2, which it lacks.
    std::fs::write(&key_file, format!("k1 {}\n", "01".repeat(32))).unwrap();
    wait_for(Duration::from_secs(10), "the key file reread", || async {
        get(&c, &access_key).await.is_err().then_some(())
    })
    .await;
    let (code, why) = reason(get(&c, &access_key).await);
    assert_eq!(
        (code, why.as_str()),
        (tonic::Code::FailedPrecondition, "SECRETS_KEY_UNKNOWN")
    );
    let r = c.rotate_s3_secret_key(Default::default()).await.unwrap();
    assert_eq!(r.unreadable, vec![access_key.clone()]);
    std::fs::write(&key_file, format!("k2 {}\n", "02".repeat(32))).unwrap();
    wait_for(Duration::from_secs(10), "k2 back", || async {
        get(&c, &access_key).await.is_ok().then_some(())
    })
    .await;
    assert_eq!(
        get(&c, &access_key).await.unwrap().secret_key,
        made.secret_key
    );
    n.stop().await;
}
