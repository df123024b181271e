//! Object tags end to end: tags given at every write path (PutKey,
//! OpenKey + CommitKey, a multipart upload, CopyKey COPY and REPLACE),
//! PutKeyTagging / GetKeyTagging / DeleteKeyTagging on current and older
//! versions and on FSO files, `tag_count` in LookupKey, S3's rules each
//! refused with the tables unchanged, a restart, and `omctl key tag`.

use std::collections::BTreeMap;
use std::process::Command;

use om_client::v1::*;
use om_client::{ClientError, OmClient};
use om_tests::{TestNode, assert_err, binary, rejected};
use tonic::Code;

const ETAG: &str = "0cc175b9c0f1b6a831c399e269772661";

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn setup(c: &OmClient) {
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", BucketLayout::ObjectStore)
        .await
        .unwrap();
}

fn put_req(key: &str, t: BTreeMap<String, String>) -> PutKeyRequest {
    PutKeyRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        size: 10,
        etag: ETAG.into(),
        tags: t,
        ..Default::default()
    }
}

async fn get_tags(
    c: &OmClient,
    key: &str,
    version_id: &str,
) -> Result<GetKeyTaggingResponse, ClientError> {
    c.get_key_tagging(GetKeyTaggingRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: version_id.into(),
        ..Default::default()
    })
    .await
}

async fn set_tags(
    c: &OmClient,
    key: &str,
    version_id: &str,
    t: BTreeMap<String, String>,
) -> Result<PutKeyTaggingResponse, ClientError> {
    c.put_key_tagging(PutKeyTaggingRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: key.into(),
        version_id: version_id.into(),
        tags: t,
        ..Default::default()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_path_takes_tags() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    let t1 = tags(&[("project", "blue"), ("tier", "")]);

    // PutKey (x-amz-tagging on PutObject).
    let k = c.put_key_with(put_req("put", t1.clone())).await.unwrap();
    assert_eq!(k.tag_count, 2);
    assert_eq!(
        c.lookup_key("vol", "bkt", "put").await.unwrap().tag_count,
        2
    );
    let got = get_tags(&c, "put", "").await.unwrap();
    assert_eq!((got.tags, got.version_id.as_str()), (t1.clone(), "null"));

    // OpenKey + CommitKey.
    let s = c
        .open_key(OpenKeyRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "session".into(),
            blocks: 1,
            tags: tags(&[("via", "session")]),
            ..Default::default()
        })
        .await
        .unwrap();
    let k = c
        .commit_key(CommitKeyRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "session".into(),
            session_id: s.session_id,
            size: 10,
            blocks: vec![BlockInfo {
                block_id: s.blocks[0].block_id,
                offset: 0,
                length: 10,
            }],
            etag: ETAG.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(k.tag_count, 1);
    assert_eq!(
        get_tags(&c, "session", "").await.unwrap().tags,
        tags(&[("via", "session")])
    );

    // A multipart upload: tags given at initiation reach the key.
    let up = c
        .initiate_multipart_upload(InitiateMultipartUploadRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "mp".into(),
            tags: tags(&[("via", "multipart")]),
            ..Default::default()
        })
        .await
        .unwrap()
        .upload
        .unwrap();
    c.commit_part(CommitPartRequest {
        volume: "vol".into(),
        bucket: "bkt".into(),
        key: "mp".into(),
        upload_id: up.upload_id.clone(),
        part_number: 1,
        size: 10,
        etag: ETAG.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let k = c
        .complete_multipart_upload(CompleteMultipartUploadRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "mp".into(),
            upload_id: up.upload_id,
            parts: vec![CompletedPart {
                part_number: 1,
                etag: ETAG.into(),
            }],
            ..Default::default()
        })
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(k.tag_count, 1);
    assert_eq!(
        get_tags(&c, "mp", "").await.unwrap().tags,
        tags(&[("via", "multipart")])
    );

    // CopyKey: COPY (the default) keeps the source's tags, REPLACE takes
    // the request's, and REPLACE with none gives a copy without tags.
    let copy = |key: &str, directive: TaggingDirective, t: BTreeMap<String, String>| {
        c.copy_key(CopyKeyRequest {
            src_volume: "vol".into(),
            src_bucket: "bkt".into(),
            src_key: "put".into(),
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: key.into(),
            tagging_directive: directive as i32,
            tags: t,
            ..Default::default()
        })
    };
    let k = copy("copied", TaggingDirective::Copy, tags(&[("ignored", "x")]))
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(k.tag_count, 2);
    assert_eq!(get_tags(&c, "copied", "").await.unwrap().tags, t1);
    copy("replaced", TaggingDirective::Replace, tags(&[("new", "1")]))
        .await
        .unwrap();
    assert_eq!(
        get_tags(&c, "replaced", "").await.unwrap().tags,
        tags(&[("new", "1")])
    );
    let k = copy("bare", TaggingDirective::Replace, BTreeMap::new())
        .await
        .unwrap()
        .key
        .unwrap();
    assert_eq!(k.tag_count, 0);
    assert!(get_tags(&c, "bare", "").await.unwrap().tags.is_empty());
    // A write without tags replaces the key and its tags (S3's PutObject).
    c.put_key_with(put_req("put", BTreeMap::new()))
        .await
        .unwrap();
    assert_eq!(
        c.lookup_key("vol", "bkt", "put").await.unwrap().tag_count,
        0
    );
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagging_replaces_the_set_and_keeps_the_version() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    c.put_key_with(put_req("k", tags(&[("a", "1"), ("b", "2")])))
        .await
        .unwrap();
    let before = c.lookup_key("vol", "bkt", "k").await.unwrap();
    // Replaced as a whole, not merged.
    let r = set_tags(&c, "k", "", tags(&[("c", "3")])).await.unwrap();
    assert_eq!(r.version_id, "null");
    assert_eq!(
        get_tags(&c, "k", "").await.unwrap().tags,
        tags(&[("c", "3")])
    );
    let after = c.lookup_key("vol", "bkt", "k").await.unwrap();
    assert_eq!(after.tag_count, 1);
    assert!(after.update_id > before.update_id);
    // Not a new version: the same ETag, size, blocks and times.
    assert_eq!(
        KeyInfo {
            update_id: before.update_id,
            tag_count: before.tag_count,
            ..after
        },
        before
    );
    // A conditional write that read the key before the tags changed fails.
    assert_err(
        c.put_key_with(PutKeyRequest {
            conditions: Some(KeyConditions {
                expected_update_id: before.update_id,
                ..Default::default()
            }),
            ..put_req("k", BTreeMap::new())
        })
        .await,
        Code::FailedPrecondition,
        "UPDATE_ID_MISMATCH",
        "conditions.expected_update_id",
    );
    // An empty set, or DeleteKeyTagging, removes every tag.
    set_tags(&c, "k", "null", BTreeMap::new()).await.unwrap();
    assert!(get_tags(&c, "k", "").await.unwrap().tags.is_empty());
    set_tags(&c, "k", "", tags(&[("d", "4")])).await.unwrap();
    let r = c
        .delete_key_tagging(DeleteKeyTaggingRequest {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "k".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.version_id, "null");
    assert_eq!(c.lookup_key("vol", "bkt", "k").await.unwrap().tag_count, 0);
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_version_has_its_own_tags_and_delete_markers_none() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    c.set_bucket_versioning("vol", "bkt", BucketVersioning::Enabled)
        .await
        .unwrap();
    let v1 = c
        .put_key_with(put_req("k", tags(&[("v", "1")])))
        .await
        .unwrap()
        .version_id;
    let v2 = c
        .put_key_with(put_req("k", tags(&[("v", "2")])))
        .await
        .unwrap()
        .version_id;
    let cur = get_tags(&c, "k", "").await.unwrap();
    assert_eq!(
        (cur.tags, cur.version_id),
        (tags(&[("v", "2")]), v2.clone())
    );
    let old = get_tags(&c, "k", &v1).await.unwrap();
    assert_eq!(
        (old.tags, old.version_id),
        (tags(&[("v", "1")]), v1.clone())
    );
    // Tagging the older version touches it alone.
    let r = set_tags(&c, "k", &v1, tags(&[("v", "one")])).await.unwrap();
    assert_eq!(r.version_id, v1);
    assert_eq!(
        get_tags(&c, "k", &v1).await.unwrap().tags,
        tags(&[("v", "one")])
    );
    assert_eq!(
        get_tags(&c, "k", "").await.unwrap().tags,
        tags(&[("v", "2")])
    );
    let info = c.lookup_key_version("vol", "bkt", "k", &v1).await.unwrap();
    assert_eq!((info.tag_count, info.is_latest), (1, false));
    // A delete marker has no tags: as the current version the key is not
    // found (with the marker's detail, as LookupKey says), named by its
    // version id it is refused (S3's MethodNotAllowed).
    let marker = c
        .delete_key_version("vol", "bkt", "k", "")
        .await
        .unwrap()
        .version_id;
    match get_tags(&c, "k", "").await {
        Err(ClientError::Api {
            code,
            reason,
            delete_marker,
            ..
        }) => {
            assert_eq!((code, reason.as_str()), (Code::NotFound, "KEY_NOT_FOUND"));
            assert_eq!(delete_marker, Some(marker.clone()));
        }
        other => panic!("{other:?}"),
    }
    assert_err(
        get_tags(&c, "k", &marker).await,
        Code::FailedPrecondition,
        "DELETE_MARKER",
        "version_id",
    );
    rejected(
        &node,
        set_tags(&c, "k", &marker, tags(&[("a", "b")])),
        Code::FailedPrecondition,
        "DELETE_MARKER",
        "version_id",
    )
    .await;
    rejected(
        &node,
        set_tags(&c, "k", "", tags(&[("a", "b")])),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "key",
    )
    .await;
    rejected(
        &node,
        set_tags(&c, "k", "00000000000000ff", tags(&[("a", "b")])),
        Code::NotFound,
        "VERSION_NOT_FOUND",
        "version_id",
    )
    .await;
    // The older versions keep theirs.
    assert_eq!(
        get_tags(&c, "k", &v2).await.unwrap().tags,
        tags(&[("v", "2")])
    );
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tags_are_refused_and_change_nothing() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    c.put_key_with(put_req("k", tags(&[("kept", "yes")])))
        .await
        .unwrap();
    let eleven: BTreeMap<String, String> = (0..11)
        .map(|i| (format!("t{i}"), "v".to_string()))
        .collect();
    let long_key = "k".repeat(129);
    let long_field = format!("tags[\"{}\"…(129 bytes)]", "k".repeat(64));
    let cases: Vec<(BTreeMap<String, String>, &str, String)> = vec![
        (eleven, "TOO_MANY_TAGS", "tags".into()),
        (tags(&[(long_key.as_str(), "v")]), "INVALID_TAG", long_field),
        (
            tags(&[("k", "v".repeat(257).as_str())]),
            "INVALID_TAG",
            "tags[\"k\"]".into(),
        ),
        (
            tags(&[("aws:createdBy", "me")]),
            "INVALID_TAG",
            "tags[\"aws:createdBy\"]".into(),
        ),
        (tags(&[("", "v")]), "INVALID_TAG", "tags[\"\"]".into()),
        (tags(&[("a*b", "v")]), "INVALID_TAG", "tags[\"a*b\"]".into()),
        (
            tags(&[("k", "line\nbreak")]),
            "INVALID_TAG",
            "tags[\"k\"]".into(),
        ),
        (tags(&[("k", "a,b")]), "INVALID_TAG", "tags[\"k\"]".into()),
    ];
    for (t, reason, field) in cases {
        let bad = Code::InvalidArgument;
        rejected(&node, set_tags(&c, "k", "", t.clone()), bad, reason, &field).await;
        rejected(
            &node,
            c.put_key_with(put_req("new", t.clone())),
            bad,
            reason,
            &field,
        )
        .await;
        rejected(
            &node,
            c.open_key(OpenKeyRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "new".into(),
                tags: t.clone(),
                ..Default::default()
            }),
            bad,
            reason,
            &field,
        )
        .await;
        rejected(
            &node,
            c.initiate_multipart_upload(InitiateMultipartUploadRequest {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "new".into(),
                tags: t.clone(),
                ..Default::default()
            }),
            bad,
            reason,
            &field,
        )
        .await;
        rejected(
            &node,
            c.copy_key(CopyKeyRequest {
                src_volume: "vol".into(),
                src_bucket: "bkt".into(),
                src_key: "k".into(),
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "new".into(),
                tagging_directive: TaggingDirective::Replace as i32,
                tags: t,
                ..Default::default()
            }),
            bad,
            reason,
            &field,
        )
        .await;
    }
    // Ten tags of the longest keys and values are fine.
    let most: BTreeMap<String, String> = (0..10)
        .map(|i| (format!("{i}{}", "é".repeat(127)), "ü".repeat(256)))
        .collect();
    set_tags(&c, "k", "", most.clone()).await.unwrap();
    assert_eq!(get_tags(&c, "k", "").await.unwrap().tags, most);
    set_tags(&c, "k", "", tags(&[("kept", "yes")]))
        .await
        .unwrap();
    // Missing keys, buckets and malformed version ids.
    rejected(
        &node,
        set_tags(&c, "nope", "", tags(&[("a", "b")])),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "key",
    )
    .await;
    rejected(
        &node,
        c.put_key_tagging(PutKeyTaggingRequest {
            volume: "vol".into(),
            bucket: "nope".into(),
            key: "k".into(),
            ..Default::default()
        }),
        Code::NotFound,
        "BUCKET_NOT_FOUND",
        "bucket",
    )
    .await;
    rejected(
        &node,
        set_tags(&c, "k", "v1", BTreeMap::new()),
        Code::InvalidArgument,
        "INVALID_VERSION_ID",
        "version_id",
    )
    .await;
    assert_err(
        get_tags(&c, "nope", "").await,
        Code::NotFound,
        "KEY_NOT_FOUND",
        "key",
    );
    assert_eq!(
        get_tags(&c, "k", "").await.unwrap().tags,
        tags(&[("kept", "yes")])
    );
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fso_files_are_tagged_and_tags_survive_a_restart() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    c.create_bucket("vol", "fso", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    let f = c
        .create_file(CreateFileRequest {
            volume: "vol".into(),
            bucket: "fso".into(),
            path: "dir/file".into(),
            recursive: true,
            ..Default::default()
        })
        .await
        .unwrap();
    c.commit_key(CommitKeyRequest {
        volume: "vol".into(),
        bucket: "fso".into(),
        key: f.path.clone(),
        session_id: f.session_id,
        ..Default::default()
    })
    .await
    .unwrap();
    let fs_req = |t| PutKeyTaggingRequest {
        volume: "vol".into(),
        bucket: "fso".into(),
        key: "dir/file".into(),
        tags: t,
        ..Default::default()
    };
    c.put_key_tagging(fs_req(tags(&[("fso", "yes")])))
        .await
        .unwrap();
    let got = c
        .get_key_tagging(GetKeyTaggingRequest {
            volume: "vol".into(),
            bucket: "fso".into(),
            key: "/dir/file".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(got.tags, tags(&[("fso", "yes")]));
    assert_eq!(
        c.lookup_key("vol", "fso", "dir/file")
            .await
            .unwrap()
            .tag_count,
        1
    );
    // A directory is not an object.
    rejected(
        &node,
        c.put_key_tagging(PutKeyTaggingRequest {
            key: "dir".into(),
            ..fs_req(BTreeMap::new())
        }),
        Code::NotFound,
        "KEY_NOT_FOUND",
        "key",
    )
    .await;
    c.put_key_with(put_req("k", tags(&[("survives", "restart")])))
        .await
        .unwrap();
    let node = node.restart(|_| {}).await;
    let c = node.client();
    assert_eq!(
        get_tags(&c, "k", "").await.unwrap().tags,
        tags(&[("survives", "restart")])
    );
    assert_eq!(
        c.lookup_key("vol", "fso", "dir/file")
            .await
            .unwrap()
            .tag_count,
        1
    );
    node.node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_sets_reads_and_removes_tags() {
    let node = TestNode::start().await;
    let c = node.client();
    setup(&c).await;
    let ep = node.endpoint();
    let omctl = |args: &[&str]| {
        Command::new(binary("omctl"))
            .args(["--endpoint", &ep, "--timeout", "20", "--output", "json"])
            .args(args)
            .output()
            .unwrap()
    };
    let json = |o: std::process::Output| {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let k = json(omctl(&[
        "key",
        "put",
        "vol/bkt/k",
        "--size",
        "5",
        "--tag",
        "a=1",
        "--tag",
        "b=x=y",
    ]));
    assert_eq!(k["tag_count"], 2);
    let got = json(omctl(&["key", "tag", "vol/bkt/k", "get"]));
    assert_eq!(got["tags"], serde_json::json!({"a": "1", "b": "x=y"}));
    assert_eq!(got["version_id"], "null");
    json(omctl(&["key", "tag", "vol/bkt/k", "set", "c=3,d=4"]));
    assert_eq!(
        get_tags(&c, "k", "").await.unwrap().tags,
        tags(&[("c", "3"), ("d", "4")])
    );
    json(omctl(&[
        "key",
        "tag",
        "vol/bkt/k",
        "--version",
        "null",
        "set",
        "e=5",
    ]));
    assert_eq!(
        get_tags(&c, "k", "").await.unwrap().tags,
        tags(&[("e", "5")])
    );
    // S3's rules are the server's; the refusal names the reason.
    let o = omctl(&["key", "tag", "vol/bkt/k", "set", "aws:x=1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("INVALID_TAG"));
    json(omctl(&["key", "tag", "vol/bkt/k", "delete"]));
    let got = json(omctl(&["key", "tag", "vol/bkt/k", "get"]));
    assert_eq!(got["tags"], serde_json::json!({}));
    let info = json(omctl(&["key", "info", "vol/bkt/k"]));
    assert_eq!(info["tag_count"], 0);
    node.node.shutdown().await;
}
