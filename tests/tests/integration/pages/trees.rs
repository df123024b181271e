//! The deepest, longest tree the path limits allow: every recursive
//! ListStatus token is accepted, and a tree nested past the limits is
//! refused with a clear reason.

use om::listing::MAX_TOKEN_CHARS;
use om_client::v1::*;
use om_tests::assert_err;
use tonic::Code;

use super::{mkdir, node_with, statuses, write_file};

/// `0001/0002/…/0200…`: 200 levels, the deepest path exactly 1024 bytes.
fn chain() -> Vec<String> {
    let mut comps: Vec<String> = (1..=200).map(|i| format!("{i:04}")).collect();
    let len = comps.iter().map(String::len).sum::<usize>() + comps.len() - 1;
    comps[199].push_str(&"c".repeat(1024 - len));
    comps
}

fn join(comps: &[String]) -> String {
    comps.join("/")
}

/// The longest name a directory at `path` can hold: its child's path is
/// exactly 1024 bytes.
fn longest_name(path: &str) -> String {
    let used = if path.is_empty() { 0 } else { path.len() + 1 };
    "z".repeat(1024 - used)
}

/// Item 6: a recursive ListStatus token grows linearly with depth, so every
/// token of the deepest tree with the longest names the path limits allow is
/// within the limit the edge accepts, and the listing, in any page size,
/// equals the naive depth-first walk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recursive_tokens_of_the_deepest_longest_tree_are_accepted() {
    let (node, c) = node_with(None).await;
    c.create_bucket("vol-00", "deep", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    let comps = chain();
    assert_eq!(join(&comps).len(), 1024);
    mkdir(&c, "deep", &join(&comps)).await;
    // At every level but the last, a directory with the longest name that
    // level can hold; files at a few levels.
    let files = [0usize, 100, 199];
    for d in 0..200 {
        let at = join(&comps[..d]);
        let name = longest_name(&at);
        let path = if at.is_empty() {
            name
        } else {
            format!("{at}/{name}")
        };
        assert_eq!(path.len(), 1024);
        mkdir(&c, "deep", &path).await;
        if files.contains(&d) {
            let f = if at.is_empty() {
                "f".to_string()
            } else {
                format!("{at}/f")
            };
            write_file(&c, "deep", &f, 2).await;
        }
    }
    // The naive walk: at each level the chain's next directory and its
    // subtree, then the file, then the long-named directory.
    let mut want: Vec<(String, bool)> = Vec::new();
    for d in 1..=200 {
        want.push((join(&comps[..d]), true));
    }
    for d in (0..200).rev() {
        let at = join(&comps[..d]);
        let prefix = if at.is_empty() {
            String::new()
        } else {
            format!("{at}/")
        };
        if files.contains(&d) {
            want.push((format!("{prefix}f"), false));
        }
        want.push((format!("{prefix}{}", longest_name(&at)), true));
    }
    let mut longest = 0;
    for max in [1, 2, 3, 7] {
        let (_, got, token) = statuses(&c, "deep", true, false, max).await;
        let got: Vec<(String, bool)> = got.into_iter().map(|s| (s.path, s.is_directory)).collect();
        assert_eq!(got, want, "page size {max}");
        longest = longest.max(token);
    }
    println!("longest token: {longest} characters; the edge accepts {MAX_TOKEN_CHARS}");
    assert!(longest <= MAX_TOKEN_CHARS);
    // Pages ended at the bottom, with a frame per level in their tokens.
    assert!(longest > 2 * 201 * 8, "{longest}");
    node.node.shutdown().await;
}

/// Renaming deep directories under each other could nest a tree deeper than
/// the path limits allow. Today's renames refuse that (PATH_TOO_LONG or PATH_TOO_DEEP), but
/// renames applied under the rules of older log entries did not check; a page
/// that would end inside such a tree is refused with LISTING_TOO_DEEP rather
/// than issuing a token the next page refuses, and the tree still lists in
/// larger pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_nested_past_the_limits_is_refused_with_a_clear_reason() {
    let (node, c) = node_with(None).await;
    c.create_bucket("vol-00", "nest", BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    // Six chains of 100 levels and ~1000 bytes, each renamed into the
    // bottom of the next: 600 levels, ~6000 bytes of names.
    let chain = |k: usize| -> Vec<String> { (0..100).map(|i| format!("c{k}-{i:05}")).collect() };
    for k in 0..6 {
        mkdir(&c, "nest", &join(&chain(k))).await;
    }
    let rename = |k: usize| om_proto::store::RenamePath {
        volume: "vol-00".into(),
        bucket: "nest".into(),
        from: chain(k)[0].clone(),
        to: format!("{}/{}", join(&chain(k + 1)), chain(k)[0]),
        ..Default::default()
    };
    let before = node.dump();
    let r = c
        .rename_path(RenamePathRequest {
            volume: "vol-00".into(),
            bucket: "nest".into(),
            from: rename(0).from,
            to: rename(0).to,
            ..Default::default()
        })
        .await;
    assert_err(r, Code::FailedPrecondition, "PATH_TOO_LONG", "to");
    assert_eq!(before, node.dump());
    // The same renames as entries of rules 0 (before renames checked depth).
    for k in 0..5 {
        let cmd = om_proto::store::Command {
            now_ms: om::service::now_ms(),
            rules: 0,
            op: Some(om_proto::store::command::Op::RenamePath(rename(k))),
            ..Default::default()
        };
        let r = node.node.raft.client_write(cmd.into()).await.unwrap();
        om::apply::into_outcome(r.data).unwrap();
    }
    let mut token = String::new();
    let mut pages = 0;
    let refused = loop {
        let r = c
            .list_status(ListStatusRequest {
                volume: "vol-00".into(),
                bucket: "nest".into(),
                recursive: true,
                max_entries: 1,
                continuation_token: token.clone(),
                ..Default::default()
            })
            .await;
        match r {
            Ok(r) => {
                assert!(r.truncated, "the tree ended without a refusal");
                assert!(r.next_continuation_token.len() <= MAX_TOKEN_CHARS);
                token = r.next_continuation_token;
                pages += 1;
            }
            Err(e) => break e,
        }
    };
    assert!(pages > 100, "refused after {pages} pages");
    assert_err(
        Err::<(), _>(refused),
        Code::FailedPrecondition,
        "LISTING_TOO_DEEP",
        "path",
    );
    let (cuts, all, _) = statuses(&c, "nest", true, false, 0).await;
    assert_eq!(cuts.len(), 1);
    assert_eq!(all.len(), 600);
    node.node.shutdown().await;
}
