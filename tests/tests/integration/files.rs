//! FILE_SYSTEM_OPTIMIZED buckets end to end through gRPC: directories, file
//! sessions, status, ListStatus (merged, paginated, recursive), delete with
//! background purge, and O(1) rename; every refusal leaves the tables as they
//! were.

use std::collections::BTreeSet;
use std::time::Duration;

use om_client::v1::*;
use om_client::{ClientError, OmClient};
use om_tests::{TestNode, assert_err, deleted_block_ids, rejected, wait_for};
use tonic::Code;

async fn setup(node: &TestNode) -> OmClient {
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "fs1", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    c
}

async fn mkdir(c: &OmClient, path: &str) -> Result<FileStatus, ClientError> {
    c.create_directory(CreateDirectoryRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: path.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.status.unwrap())
}

fn create(path: &str, recursive: bool, overwrite: bool) -> CreateFileRequest {
    CreateFileRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: path.into(),
        recursive,
        overwrite,
        blocks: 1,
        ..Default::default()
    }
}

/// Creates and commits a file of `size` bytes (at most one block).
async fn write_file(c: &OmClient, path: &str, size: u64) -> KeyInfo {
    let s = c.create_file(create(path, true, true)).await.unwrap();
    let blocks = if size == 0 {
        vec![]
    } else {
        vec![BlockInfo {
            block_id: s.blocks[0].block_id,
            offset: 0,
            length: size,
        }]
    };
    c.commit_key(CommitKeyRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        key: s.path,
        session_id: s.session_id,
        size,
        blocks,
        ..Default::default()
    })
    .await
    .unwrap()
    .key
    .unwrap()
}

async fn stat(c: &OmClient, path: &str) -> Result<FileStatus, ClientError> {
    c.get_file_status(GetFileStatusRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: path.into(),
        ..Default::default()
    })
    .await
    .map(|r| r.status.unwrap())
}

async fn ls(c: &OmClient, path: &str, recursive: bool, max: u32) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let r = c
            .list_status(ListStatusRequest {
                volume: "vol1".into(),
                bucket: "fs1".into(),
                path: path.into(),
                max_entries: max,
                recursive,
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        out.extend(r.entries.iter().map(|e| (e.path.clone(), e.is_directory)));
        if !r.truncated {
            return out;
        }
        token = r.next_continuation_token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_and_files() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    // mkdir -p, idempotent.
    let d = mkdir(&c, "/a/b/c/").await.unwrap();
    assert!(d.is_directory);
    assert_eq!(d.path, "a/b/c");
    assert!(stat(&c, "a/b").await.unwrap().is_directory);
    let again = mkdir(&c, "a/b/c").await.unwrap();
    assert_eq!(again.object_id, d.object_id);

    // Files: parents must exist unless recursive.
    rejected(
        &node,
        c.create_file(create("x/y/f", false, false)),
        Code::NotFound,
        "DIRECTORY_NOT_FOUND",
        "path",
    )
    .await;
    let k = write_file(&c, "a/b/f1", 10).await;
    assert_eq!(k.size, 10);
    let st = stat(&c, "/a/b/f1").await.unwrap();
    assert!(!st.is_directory);
    assert_eq!((st.size, st.object_id), (10, k.object_id));
    // LookupKey reads an FSO file by path too.
    assert_eq!(
        c.lookup_key("vol1", "fs1", "a/b/f1").await.unwrap().size,
        10
    );
    rejected(
        &node,
        c.create_file(create("a/b/f1", false, false)),
        Code::AlreadyExists,
        "FILE_ALREADY_EXISTS",
        "path",
    )
    .await;
    rejected(
        &node,
        c.create_file(create("a/b", false, true)),
        Code::FailedPrecondition,
        "IS_A_DIRECTORY",
        "path",
    )
    .await;
    rejected(
        &node,
        mkdir(&c, "a/b/f1"),
        Code::AlreadyExists,
        "FILE_ALREADY_EXISTS",
        "path",
    )
    .await;
    rejected(
        &node,
        mkdir(&c, "a/b/f1/g"),
        Code::FailedPrecondition,
        "NOT_A_DIRECTORY",
        "path",
    )
    .await;
    for bad in ["a//b", "a/./b", "a/../b", "/"] {
        rejected(
            &node,
            mkdir(&c, bad),
            Code::InvalidArgument,
            "INVALID_PATH",
            "path",
        )
        .await;
    }
    assert_err(
        stat(&c, "a/nope").await,
        Code::NotFound,
        "PATH_NOT_FOUND",
        "path",
    );

    // Overwrite replaces the file and frees its blocks; a session opened
    // without overwrite fails at commit if the file appeared meanwhile.
    let s1 = c.create_file(create("a/g", false, false)).await.unwrap();
    write_file(&c, "a/g", 3).await;
    rejected(
        &node,
        c.commit_key(CommitKeyRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            key: "a/g".into(),
            session_id: s1.session_id,
            ..Default::default()
        }),
        Code::AlreadyExists,
        "FILE_ALREADY_EXISTS",
        "key",
    )
    .await;
    let b = c.get_bucket("vol1", "fs1").await.unwrap();
    assert_eq!((b.key_count, b.used_bytes, b.open_key_count), (2, 13, 1));
    // Object-store calls on an FSO bucket are refused.
    rejected(
        &node,
        c.put_key("vol1", "fs1", "k", 1),
        Code::FailedPrecondition,
        "UNSUPPORTED_BUCKET_LAYOUT",
        "bucket",
    )
    .await;
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_status_merges_pages_and_recurses() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    for d in ["d/b", "d/d", "d/d/x", "d/f"] {
        mkdir(&c, d).await.unwrap();
    }
    for f in ["d/a", "d/c", "d/e", "d/d/y", "d/d/x/z", "top"] {
        write_file(&c, f, 1).await;
    }
    let want: Vec<(String, bool)> = [
        ("d/a", false),
        ("d/b", true),
        ("d/c", false),
        ("d/d", true),
        ("d/e", false),
        ("d/f", true),
    ]
    .iter()
    .map(|(p, d)| (p.to_string(), *d))
    .collect();
    for max in [1, 2, 4, 100] {
        assert_eq!(ls(&c, "d", false, max).await, want, "page size {max}");
    }
    // A continuation page seeks each table once.
    let p1 = c
        .list_status(ListStatusRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            path: "d".into(),
            max_entries: 2,
            ..Default::default()
        })
        .await
        .unwrap();
    let p2 = c
        .list_status(ListStatusRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            path: "d".into(),
            max_entries: 2,
            continuation_token: p1.next_continuation_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(p2.entries[0].path, "d/c");
    assert_eq!(p2.scan.unwrap().seeks, 2, "one seek per table");
    // start_after is a name in the directory.
    let r = c
        .list_status(ListStatusRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            path: "d".into(),
            start_after: "c".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.entries[0].path, "d/d");
    // A token is bound to its listing.
    assert_err(
        c.list_status(ListStatusRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            path: "d/d".into(),
            continuation_token: p1.next_continuation_token.clone(),
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "INVALID_CONTINUATION_TOKEN",
        "continuation_token",
    );
    // Recursive: depth first, each directory before its contents, the same
    // whatever the page size.
    let deep: Vec<(String, bool)> = [
        ("d", true),
        ("d/a", false),
        ("d/b", true),
        ("d/c", false),
        ("d/d", true),
        ("d/d/x", true),
        ("d/d/x/z", false),
        ("d/d/y", false),
        ("d/e", false),
        ("d/f", true),
        ("top", false),
    ]
    .iter()
    .map(|(p, d)| (p.to_string(), *d))
    .collect();
    for max in [1, 3, 100] {
        assert_eq!(ls(&c, "", true, max).await, deep, "page size {max}");
    }
    // Listing a file lists the file.
    assert_eq!(ls(&c, "top", false, 0).await, [("top".to_string(), false)]);
    // A token whose directories moved since it was issued is refused rather
    // than resumed elsewhere.
    let page = c
        .list_status(ListStatusRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            recursive: true,
            max_entries: 6,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.entries.last().unwrap().path, "d/d/x");
    c.rename_path(RenamePathRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        from: "d/d".into(),
        to: "d/q".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_err(
        c.list_status(ListStatusRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            recursive: true,
            max_entries: 6,
            continuation_token: page.next_continuation_token,
            ..Default::default()
        })
        .await,
        Code::InvalidArgument,
        "INVALID_CONTINUATION_TOKEN",
        "continuation_token",
    );
    node.node.shutdown().await;
}

async fn deleted_blocks(c: &OmClient) -> BTreeSet<u64> {
    deleted_block_ids(c).await.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_delete_is_immediate_and_purged_across_restarts() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    let mut blocks = BTreeSet::new();
    for f in ["t/a", "t/b/c", "t/b/d/e", "t/b/d/f", "keep"] {
        let k = write_file(&c, f, 5).await;
        if f != "keep" {
            blocks.extend(k.blocks.iter().map(|b| b.block_id));
        }
    }
    mkdir(&c, "t/empty").await.unwrap();
    let del = |path: &str, recursive: bool| {
        c.delete_path(DeletePathRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            path: path.into(),
            recursive,
            ..Default::default()
        })
    };
    rejected(
        &node,
        del("t/b", false),
        Code::FailedPrecondition,
        "DIRECTORY_NOT_EMPTY",
        "path",
    )
    .await;
    rejected(
        &node,
        del("t/zz", false),
        Code::NotFound,
        "PATH_NOT_FOUND",
        "path",
    )
    .await;
    del("t/empty", false).await.unwrap();
    del("t/a", false).await.unwrap();
    del("t", true).await.unwrap();
    // Gone at once for readers.
    assert_err(
        stat(&c, "t/b/c").await,
        Code::NotFound,
        "PATH_NOT_FOUND",
        "path",
    );
    assert_eq!(ls(&c, "", true, 0).await, [("keep".to_string(), false)]);
    // Restart before the purge can finish; it resumes from replicated state.
    let node = node.restart(|_| {}).await;
    let c = node.client();
    let freed = wait_for(Duration::from_secs(20), "purge", || async {
        let d = deleted_blocks(&c).await;
        (d == blocks).then_some(d)
    })
    .await;
    assert_eq!(freed.len(), 4);
    wait_for(Duration::from_secs(10), "purge bookkeeping", || async {
        let dump = node.dump();
        (!dump.keys().any(|(t, _)| *t == "deleted_dirs")).then_some(())
    })
    .await;
    let dump = node.dump();
    // Only "keep" is left in the directory and file tables.
    assert_eq!(dump.keys().filter(|(t, _)| *t == "files").count(), 1);
    assert_eq!(dump.keys().filter(|(t, _)| *t == "directories").count(), 0);
    let b = c.get_bucket("vol1", "fs1").await.unwrap();
    assert_eq!((b.key_count, b.used_bytes), (1, 5));
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_rewrites_one_entry() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    for f in ["src/a", "src/b/c", "src/b/d", "other/x"] {
        write_file(&c, f, 1).await;
    }
    // A file being written under the directory follows it.
    let open = c
        .create_file(create("src/b/new", false, false))
        .await
        .unwrap();
    let mv = |from: &str, to: &str| {
        c.rename_path(RenamePathRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            from: from.into(),
            to: to.into(),
            ..Default::default()
        })
    };
    rejected(
        &node,
        mv("src", "src/b/x"),
        Code::InvalidArgument,
        "RENAME_INTO_ITSELF",
        "to",
    )
    .await;
    rejected(
        &node,
        mv("src", "other"),
        Code::AlreadyExists,
        "PATH_ALREADY_EXISTS",
        "to",
    )
    .await;
    rejected(
        &node,
        mv("nope", "n2"),
        Code::NotFound,
        "PATH_NOT_FOUND",
        "from",
    )
    .await;
    rejected(
        &node,
        mv("src", "no/where"),
        Code::NotFound,
        "DIRECTORY_NOT_FOUND",
        "to",
    )
    .await;
    rejected(
        &node,
        mv("src", "other/x/y"),
        Code::FailedPrecondition,
        "NOT_A_DIRECTORY",
        "to",
    )
    .await;

    let before = node.dump();
    let st = mv("src", "other/moved").await.unwrap().status.unwrap();
    assert!(st.is_directory);
    let after = node.dump();
    // O(1) in what lies under it: one directory entry removed, one added,
    // the new parent's subtree bounds raised, plus the bucket record.
    let changed: Vec<_> = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|((t, _), _)| *t)
        .chain(
            after
                .keys()
                .filter(|k| !before.contains_key(*k))
                .map(|(t, _)| *t),
        )
        .collect();
    assert_eq!(
        changed.iter().filter(|t| **t == "directories").count(),
        3,
        "{changed:?}"
    );
    assert!(
        changed
            .iter()
            .all(|t| *t == "directories" || *t == "buckets"),
        "{changed:?}"
    );
    assert_eq!(
        ls(&c, "other", true, 0).await,
        [
            ("other/moved", true),
            ("other/moved/a", false),
            ("other/moved/b", true),
            ("other/moved/b/c", false),
            ("other/moved/b/d", false),
            ("other/x", false),
        ]
        .map(|(p, d)| (p.to_string(), d))
    );
    // The open file commits under the new path.
    c.commit_key(CommitKeyRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        key: "other/moved/b/new".into(),
        session_id: open.session_id,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(!stat(&c, "other/moved/b/new").await.unwrap().is_directory);
    // Files rename too.
    mv("other/x", "x2").await.unwrap();
    assert_eq!(stat(&c, "x2").await.unwrap().size, 1);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_list_by_directory_and_prefix() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    let mut sessions = Vec::new();
    for p in ["d/a1", "d/a2", "d/b1", "d/sub/a3", "e/a4"] {
        let s = c.create_file(create(p, true, false)).await.unwrap();
        sessions.push((p, s.session_id));
    }
    let list = |prefix: &str, max: u32, token: String| {
        c.list_open_keys(ListOpenKeysRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            prefix: prefix.into(),
            max_keys: max,
            continuation_token: token,
            ..Default::default()
        })
    };
    let r = list("d/a", 1, String::new()).await.unwrap();
    assert_eq!(r.total, 5);
    assert_eq!(r.keys[0].name, "d/a1");
    assert!(r.truncated);
    let r2 = list("d/a", 1, r.next_continuation_token).await.unwrap();
    assert_eq!(r2.keys[0].name, "d/a2");
    assert_eq!(r2.keys[0].session_id, sessions[1].1);
    assert_eq!(r2.scan.unwrap().seeks, 1);
    // The listing stops at the end of the prefix: d/b1 is not read.
    assert!(!r2.truncated);
    let all = list("d/", 0, String::new()).await.unwrap();
    let names: Vec<&str> = all.keys.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(names, ["d/a1", "d/a2", "d/b1"]);
    assert!(list("zz/", 0, String::new()).await.unwrap().keys.is_empty());
    node.node.shutdown().await;
}

/// Deleting a directory ends the sessions of files being written under it:
/// they could never commit, so the purge frees their blocks at once instead of
/// leaving them to the session TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_directory_ends_the_sessions_under_it() {
    let node = TestNode::start().await;
    let c = setup(&node).await;
    // A directory holding only a file being written lists as empty, so a
    // non-recursive delete succeeds.
    let s1 = c
        .create_file(CreateFileRequest {
            blocks: 2,
            ..create("d/f", true, false)
        })
        .await
        .unwrap();
    // A tree with a committed file and a session further down.
    write_file(&c, "t/x/g", 5).await;
    let s2 = c.create_file(create("t/x/h", true, false)).await.unwrap();
    assert_eq!(c.get_bucket("vol1", "fs1").await.unwrap().open_key_count, 2);
    c.delete_path(DeletePathRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: "d".into(),
        recursive: false,
        ..Default::default()
    })
    .await
    .unwrap();
    c.delete_path(DeletePathRequest {
        volume: "vol1".into(),
        bucket: "fs1".into(),
        path: "t".into(),
        recursive: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let held: BTreeSet<u64> = s1
        .blocks
        .iter()
        .chain(s2.blocks.iter())
        .map(|b| b.block_id)
        .collect();
    wait_for(Duration::from_secs(20), "session blocks freed", || {
        let (c, held) = (&c, &held);
        async move { held.is_subset(&deleted_blocks(c).await).then_some(()) }
    })
    .await;
    let b = c.get_bucket("vol1", "fs1").await.unwrap();
    assert_eq!((b.open_key_count, b.key_count, b.used_bytes), (0, 0, 0));
    let open = c
        .list_open_keys(ListOpenKeysRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(open.keys.is_empty() && open.total == 0, "{open:?}");
    assert!(!node.dump().keys().any(|(t, _)| *t == "open_files"));
    // The ended session cannot commit, even once its directory is back.
    mkdir(&c, "d").await.unwrap();
    let r = c
        .commit_key(CommitKeyRequest {
            volume: "vol1".into(),
            bucket: "fs1".into(),
            key: "d/f".into(),
            session_id: s1.session_id,
            size: 1,
            blocks: vec![BlockInfo {
                block_id: s1.blocks[0].block_id,
                offset: 0,
                length: 1,
            }],
            ..Default::default()
        })
        .await;
    assert!(r.is_err(), "{r:?}");
    node.node.shutdown().await;
}
