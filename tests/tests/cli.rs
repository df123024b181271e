//! `omctl` against a real `om` process, as a user would run it.

use std::process::{Command, Output};
use std::time::Duration;

use om_tests::{OmProcess, binary};

fn omctl(endpoint: &str, args: &[&str]) -> Output {
    Command::new(binary("omctl"))
        .arg("--endpoint")
        .arg(endpoint)
        .arg("--timeout")
        .arg("20")
        .args(args)
        .output()
        .expect("run omctl")
}

fn ok(endpoint: &str, args: &[&str]) -> String {
    let o = omctl(endpoint, args);
    assert!(
        o.status.success(),
        "omctl {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_walkthrough_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut om = OmProcess::spawn(dir.path());
    om.wait_ready(Duration::from_secs(60)).await;
    let ep = om.grpc.clone();

    ok(&ep, &["volume", "create", "vol1"]);
    ok(&ep, &["bucket", "create", "vol1/bkt1"]);
    let put = ok(&ep, &["key", "put", "vol1/bkt1/a", "--size", "10"]);
    assert!(put.contains("size"), "{put}");
    ok(&ep, &["key", "put", "vol1/bkt1/b", "--size", "20"]);
    let list = ok(&ep, &["key", "list", "vol1/bkt1"]);
    assert!(list.lines().any(|l| l.starts_with("a ")), "{list}");

    // JSON output is machine-readable.
    let json: serde_json::Value = serde_json::from_str(&ok(
        &ep,
        &["--output", "json", "key", "list", "vol1/bkt1", "--max", "1"],
    ))
    .unwrap();
    assert_eq!(json["items"][0]["name"], "a");
    assert_eq!(json["truncated"], true);
    assert_eq!(json["next_start_after"], "a");
    let all: serde_json::Value = serde_json::from_str(&ok(
        &ep,
        &[
            "--output",
            "json",
            "key",
            "list",
            "vol1/bkt1",
            "--max",
            "1",
            "--all",
        ],
    ))
    .unwrap();
    assert_eq!(all["items"].as_array().unwrap().len(), 2);

    // Delimiter roll-up and continuation tokens from the command line.
    ok(&ep, &["key", "put", "vol1/bkt1/docs/x", "--size", "1"]);
    ok(&ep, &["key", "put", "vol1/bkt1/docs/y", "--size", "1"]);
    let rolled = ok(&ep, &["key", "list", "vol1/bkt1", "--delimiter", "/"]);
    assert!(
        rolled
            .lines()
            .any(|l| l.starts_with("docs/") && l.contains("PRE")),
        "{rolled}"
    );
    assert!(!rolled.contains("docs/x"), "{rolled}");
    let page: serde_json::Value = serde_json::from_str(&ok(
        &ep,
        &["--output", "json", "key", "list", "vol1/bkt1", "--max", "2"],
    ))
    .unwrap();
    let token = page["next_token"].as_str().unwrap().to_string();
    let rest: serde_json::Value = serde_json::from_str(&ok(
        &ep,
        &[
            "--output",
            "json",
            "key",
            "list",
            "vol1/bkt1",
            "--max",
            "10",
            "--token",
            &token,
        ],
    ))
    .unwrap();
    assert_eq!(rest["items"][0]["name"], "docs/x");
    let renamed = ok(
        &ep,
        &[
            "--output",
            "json",
            "key",
            "rename",
            "vol1/bkt1/docs/x",
            "docs/z",
        ],
    );
    assert!(renamed.contains("\"docs/z\""), "{renamed}");
    let many = omctl(
        &ep,
        &[
            "key",
            "delete-many",
            "vol1/bkt1",
            "docs/y",
            "docs/z",
            "docs/missing",
        ],
    );
    assert!(
        !many.status.success(),
        "a missing key makes delete-many fail"
    );
    let table = String::from_utf8_lossy(&many.stdout);
    assert!(
        table.contains("docs/z") && table.contains("deleted"),
        "{table}"
    );
    assert!(table.contains("KEY_NOT_FOUND"), "{table}");

    // Errors exit non-zero with the stable reason.
    let bad = omctl(&ep, &["volume", "create", "BAD"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("INVALID_NAME") && err.contains("name"),
        "{err}"
    );

    om.kill9();
    om.restart();
    om.wait_ready(Duration::from_secs(60)).await;

    let info = ok(&ep, &["--output", "json", "key", "info", "vol1/bkt1/a"]);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["size"], 10);
    let list = ok(&ep, &["key", "list", "vol1/bkt1"]);
    assert!(list.lines().any(|l| l.starts_with("b ")), "{list}");
    let status = ok(&ep, &["cluster", "status"]);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("1 ") && l.contains("voter") && l.contains("leader")),
        "{status}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&ok(&ep, &["--output", "json", "cluster", "status"])).unwrap();
    assert_eq!(json["members"][0]["role"], "leader");
    // Membership commands refuse clearly.
    let bad = omctl(&ep, &["cluster", "remove-node", "7"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("NODE_NOT_FOUND"));
    let vols = ok(&ep, &["volume", "list"]);
    assert!(vols.contains("vol1"), "{vols}");
}
