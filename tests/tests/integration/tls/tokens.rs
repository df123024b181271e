//! Bearer tokens on the public port: tokens or certificates authenticate,
//! and `omctl token` makes tokens the server rereads.

use std::time::Duration;

use om_tests::certs::TestCa;
use om_tests::wait_for;

use super::{identity, single, single_rereading, token_client};

const ALICE_TOKEN: &str = "omt_00000000000000a1_alice-s3cret-alice-s3cret-alice-s3cret";

/// With a token file, the public port takes a client certificate or a
/// bearer token; an absent or forged token is UNAUTHENTICATED with a stable
/// reason, and changes nothing. Without TLS (loopback) tokens work alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_or_certificates_authenticate_the_public_port() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "# operators\n{}\n",
            om::grpc::auth::token_line("alice", ALICE_TOKEN, b"0123456789abcdef")
        ),
    )
    .unwrap();
    let ca = TestCa::new("om test CA");
    let ca_path = ca.write(dir.path(), "ca");
    let node = ca.issue_member(dir.path(), "node", &["127.0.0.1"]);
    let admin = ca.issue(dir.path(), "admin", &["admin.example"]);
    let (tls_node, ta) = {
        let (tokens, ca_path) = (tokens.clone(), ca_path.clone());
        single(move |a| {
            a.tls_cert = Some(node.cert);
            a.tls_key = Some(node.key);
            a.tls_ca = Some(ca_path);
            a.token_file = Some(tokens);
            a.admins = Some("alice,admin.example".to_string());
        })
        .await
    };
    let (plain_node, pa) = {
        let tokens = tokens.clone();
        single(move |a| {
            a.token_file = Some(tokens);
            a.insecure = true;
            a.admins = Some("alice".to_string());
        })
        .await
    };
    let ca_only = identity(&ca_path, None);
    for (a, tls, with_cert) in [
        (
            &ta,
            Some(ca_only.clone()),
            Some(identity(&ca_path, Some(&admin))),
        ),
        (&pa, None, None),
    ] {
        if let Some(cert) = with_cert {
            token_client(a, Some(cert), None)
                .create_volume("by-cert", "")
                .await
                .unwrap();
        }
        let alice = token_client(a, tls.clone(), Some(ALICE_TOKEN));
        alice.create_volume("by-token", "").await.unwrap();
        let before = alice.list_volumes("", "", 100).await.unwrap();
        // Trailing space; the id right but not the secret; the secret but
        // another id.
        let spaced = format!("{ALICE_TOKEN} ");
        let wrong_secret = ALICE_TOKEN.replace("_al", "_xl");
        let wrong_id = ALICE_TOKEN.replace("0a1_", "0a2_");
        for (token, reason) in [
            (None, "CREDENTIALS_REQUIRED"),
            (Some("forged"), "INVALID_TOKEN"),
            (Some(spaced.as_str()), "INVALID_TOKEN"),
            (Some(wrong_secret.as_str()), "INVALID_TOKEN"),
            (Some(wrong_id.as_str()), "INVALID_TOKEN"),
        ] {
            let e = token_client(a, tls.clone(), token)
                .create_volume("intruder", "")
                .await
                .unwrap_err();
            assert_eq!(e.reason(), reason, "{e}");
            assert!(
                matches!(&e, om_client::ClientError::Api { code, .. } if *code == tonic::Code::Unauthenticated),
                "{e}"
            );
        }
        assert_eq!(alice.list_volumes("", "", 100).await.unwrap(), before);
        // The cluster's membership and addresses are not for strangers either.
        let e = token_client(a, tls.clone(), None)
            .cluster_status()
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "CREDENTIALS_REQUIRED", "{e}");
        assert!(alice.cluster_status().await.is_ok());
    }
    tls_node.node.shutdown().await;
    plain_node.node.shutdown().await;
}

/// `omctl token new` makes a token and appends its line to the token file;
/// `omctl token hash` makes the line of a token it is given; the server
/// accepts both through `OM_TOKEN`, rereads the file while serving (a new
/// token works, a removed line is refused) and refuses tokens of another
/// form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_makes_tokens_the_server_rereads() {
    use std::io::Write;
    let omctl = om_tests::binary("omctl");
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let new_token = |who: &str| {
        let out = std::process::Command::new(&omctl)
            .args(["token", "new", who, "--groups", "ops"])
            .arg("--append-to")
            .arg(&tokens)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let gw = new_token("gateway");
    assert!(gw.starts_with("omt_") && gw.len() == 85, "{gw}");
    let file = std::fs::read_to_string(&tokens).unwrap();
    assert!(
        file.starts_with("gateway omt_") && !file.contains(&gw[21..]),
        "{file}"
    );
    // A token made elsewhere, in the same form.
    let own = "omt_1234567890abcdef_0123456789abcdef0123456789abcdef";
    let mut child = std::process::Command::new(&omctl)
        .args(["token", "hash", "ci"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{own}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let ci_line = String::from_utf8(out.stdout).unwrap();
    assert!(ci_line.starts_with("ci omt_1234567890abcdef "), "{ci_line}");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&tokens)
        .unwrap()
        .write_all(ci_line.as_bytes())
        .unwrap();
    let bad = std::process::Command::new(&omctl)
        .args(["token", "hash", "ci"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    bad.stdin
        .as_ref()
        .unwrap()
        .write_all(b"gw-t0ken\n")
        .unwrap();
    let bad = bad.wait_with_output().unwrap();
    assert!(!bad.status.success(), "a token without an id is refused");
    let (n, a) = {
        let tokens = tokens.clone();
        single_rereading(move |args| {
            args.token_file = Some(tokens);
            args.insecure = true;
            args.admins = Some("gateway,ci,late".to_string());
        })
        .await
    };
    let run = |token: &str, volume: &str| {
        std::process::Command::new(&omctl)
            .args([
                "--endpoint",
                &a.grpc,
                "--timeout",
                "5",
                "volume",
                "create",
                volume,
            ])
            .env("OM_TOKEN", token)
            .output()
            .unwrap()
    };
    let denied = run(
        "omt_1234567890abcdef_wrongwrongwrongwrongwrongwrongwrong",
        "v-denied",
    );
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("INVALID_TOKEN"));
    assert!(run(&gw, "v-gateway").status.success());
    assert!(run(own, "v-ci").status.success());
    // Added while serving: accepted within the reload interval.
    let late = new_token("late");
    wait_for(Duration::from_secs(10), "the new token", || async {
        run(&late, "v-late").status.success().then_some(())
    })
    .await;
    // The gateway's line removed: its token is refused from then on.
    let kept: String = std::fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("gateway "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&tokens, kept).unwrap();
    wait_for(Duration::from_secs(10), "the revocation", || async {
        let out = run(&gw, "v-revoked");
        (!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("INVALID_TOKEN"))
            .then_some(())
    })
    .await;
    n.node.shutdown().await;
}
