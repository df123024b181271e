//! `omctl` against a real `om` process, as a user would run it.

use std::process::Output;
use std::time::Duration;

use om_tests::OmProcess;

fn omctl(endpoint: &str, args: &[&str]) -> Output {
    om_tests::omctl(endpoint, 20, args)
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

fn json_ok(endpoint: &str, args: &[&str]) -> serde_json::Value {
    let mut full = vec!["--output", "json"];
    full.extend_from_slice(args);
    serde_json::from_str(&ok(endpoint, &full)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_writes_in_steps_copies_uploads_and_reclaims() {
    let dir = tempfile::tempdir().unwrap();
    let om = OmProcess::spawn_args(dir.path(), &["--min-part-size", "1"]);
    om.wait_ready(Duration::from_secs(60)).await;
    let ep = om.grpc.clone();
    ok(&ep, &["volume", "create", "vol1"]);
    ok(&ep, &["bucket", "create", "vol1/bkt1"]);

    // open → allocate → list-open → commit
    let s = json_ok(&ep, &["key", "open", "vol1/bkt1/obj", "--blocks", "1"]);
    let session = s["session"].as_u64().unwrap().to_string();
    let first = s["blocks"][0].as_u64().unwrap();
    let more = json_ok(
        &ep,
        &["key", "allocate", "vol1/bkt1/obj", "--session", &session],
    );
    let second = more["blocks"][0].as_u64().unwrap();
    let open = json_ok(&ep, &["key", "list-open", "vol1/bkt1"]);
    assert_eq!(open["total"], 1);
    assert_eq!(open["items"][0]["name"], "obj");
    let etag = "0cc175b9c0f1b6a831c399e269772661";
    let k = json_ok(
        &ep,
        &[
            "key",
            "commit",
            "vol1/bkt1/obj",
            "--session",
            &session,
            "--size",
            "100",
            "--blocks",
            &first.to_string(),
            "--etag",
            etag,
            "--if-none-match",
        ],
    );
    assert_eq!(k["size"], 100);
    assert_eq!(k["etag"], etag);
    // The unused second block went to reclamation.
    let blocks = json_ok(&ep, &["blocks", "list"]);
    assert_eq!(blocks["items"][0]["blocks"][0], second);
    // A failed condition is refused with its reason.
    let bad = omctl(
        &ep,
        &[
            "key",
            "put",
            "vol1/bkt1/obj",
            "--size",
            "1",
            "--if-none-match",
        ],
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("IF_NONE_MATCH_FAILED"));

    // copy reuses the plain MD5 ETag and shares the blocks.
    let cp = json_ok(&ep, &["copy", "vol1/bkt1/obj", "vol1/bkt1/obj2"]);
    assert_eq!(cp["etag"], etag);
    assert_eq!(cp["blocks"][0]["id"], first);

    // multipart: init → part ×2 → parts → list → complete
    let up = json_ok(&ep, &["mpu", "init", "vol1/bkt1/big"]);
    let id = up["upload_id"].as_str().unwrap().to_string();
    let e1 = "92eb5ffee6ae2fec3ad71c777531578f";
    let e2 = "4a8a08f09d37b73795649038408b5f33";
    ok(
        &ep,
        &[
            "mpu",
            "part",
            "vol1/bkt1/big",
            "--upload",
            &id,
            "--part",
            "1",
            "--size",
            "10",
            "--etag",
            e1,
        ],
    );
    ok(
        &ep,
        &[
            "mpu",
            "part",
            "vol1/bkt1/big",
            "--upload",
            &id,
            "--part",
            "2",
            "--size",
            "5",
            "--etag",
            e2,
        ],
    );
    let parts = json_ok(&ep, &["mpu", "parts", "vol1/bkt1/big", "--upload", &id]);
    assert_eq!(parts["items"].as_array().unwrap().len(), 2);
    let ups = json_ok(&ep, &["mpu", "list", "vol1/bkt1"]);
    assert_eq!(ups["items"][0]["upload_id"], id.as_str());
    let done = json_ok(
        &ep,
        &[
            "mpu",
            "complete",
            "vol1/bkt1/big",
            "--upload",
            &id,
            &format!("1={e1}"),
            &format!("2={e2}"),
        ],
    );
    assert_eq!(done["size"], 15);
    assert!(done["etag"].as_str().unwrap().ends_with("-2"), "{done}");
    // Copying a multipart key needs a digest.
    let bad = omctl(&ep, &["copy", "vol1/bkt1/big", "vol1/bkt1/big2"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("CONTENT_DIGEST_REQUIRED"));
    ok(
        &ep,
        &[
            "copy",
            "vol1/bkt1/big",
            "vol1/bkt1/big2",
            "--content-md5",
            e1,
        ],
    );

    // Acknowledge the released entry; the list is then empty.
    let blk_id = blocks["items"][0]["id"].as_str().unwrap().to_string();
    let acked = json_ok(&ep, &["blocks", "ack", &blk_id]);
    assert_eq!(acked["acknowledged"], 1);
    let blocks = json_ok(&ep, &["blocks", "list"]);
    assert!(blocks["items"].as_array().unwrap().is_empty(), "{blocks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_fs_commands() {
    let dir = tempfile::tempdir().unwrap();
    let om = OmProcess::spawn(dir.path());
    om.wait_ready(Duration::from_secs(60)).await;
    let ep = om.grpc.clone();
    ok(&ep, &["volume", "create", "vol1"]);
    ok(&ep, &["bucket", "create", "vol1/fs1", "--layout", "fso"]);
    ok(&ep, &["fs", "mkdir", "vol1/fs1/a/b"]);
    let w = json_ok(&ep, &["fs", "write", "vol1/fs1/a/b/f", "--size", "7"]);
    assert_eq!(w["size"], 7);
    // A size no key may have is refused before any session holds blocks.
    let too_big = (5u64 << 40) + 1;
    let bad = omctl(
        &ep,
        &[
            "fs",
            "write",
            "vol1/fs1/a/big",
            "--size",
            &too_big.to_string(),
        ],
    );
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("5 TiB"));
    let open = json_ok(&ep, &["key", "list-open", "vol1/fs1"]);
    assert_eq!(open["total"], 0, "{open}");
    // A file of more blocks than one call allocates (20 GiB: 80 blocks).
    let w = json_ok(
        &ep,
        &[
            "fs",
            "write",
            "vol1/fs1/a/large",
            "--size",
            &(20u64 << 30).to_string(),
        ],
    );
    assert_eq!(w["blocks"].as_array().unwrap().len(), 80, "{w}");
    let open = json_ok(&ep, &["key", "list-open", "vol1/fs1"]);
    assert_eq!(open["total"], 0, "{open}");
    ok(&ep, &["fs", "rm", "vol1/fs1/a/large"]);
    let st = json_ok(&ep, &["fs", "stat", "vol1/fs1/a/b/f"]);
    assert_eq!(st["type"], "file");
    // An open session committed with `key commit` on the path.
    let s = json_ok(&ep, &["fs", "create", "vol1/fs1/a/g"]);
    let session = s["session"].as_u64().unwrap().to_string();
    let blk = s["blocks"][0].as_u64().unwrap().to_string();
    ok(
        &ep,
        &[
            "key",
            "commit",
            "vol1/fs1/a/g",
            "--session",
            &session,
            "--size",
            "3",
            "--blocks",
            &blk,
        ],
    );
    let ls = json_ok(
        &ep,
        &["fs", "ls", "vol1/fs1", "--recursive", "--max", "2", "--all"],
    );
    let paths: Vec<&str> = ls["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["a", "a/b", "a/b/f", "a/g"]);
    ok(&ep, &["fs", "mv", "vol1/fs1/a", "z"]);
    let table = ok(&ep, &["fs", "ls", "vol1/fs1/z"]);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("dir") && l.ends_with("z/b")),
        "{table}"
    );
    let bad = omctl(&ep, &["fs", "rm", "vol1/fs1/z"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("DIRECTORY_NOT_EMPTY"));
    ok(&ep, &["fs", "rm", "vol1/fs1/z", "--recursive"]);
    let ls = json_ok(&ep, &["fs", "ls", "vol1/fs1"]);
    assert!(ls["items"].as_array().unwrap().is_empty(), "{ls}");
}
