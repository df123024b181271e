//! Differential test: random sequences of key, session, copy and multipart
//! operations run against om and against an in-memory model of the same
//! semantics, with restarts of om in between. Every response (result or error
//! reason, block ids, ETags, version ids) and, at checkpoints, every table as
//! seen through the listing APIs must agree.
//!
//! The object-store buckets move between S3's versioning states (unversioned,
//! then enabled and suspended in any order) while the operations run: the
//! model keeps each key's history of versions and delete markers, newest
//! first, and predicts which version every write, delete and copy adds,
//! replaces or removes, which version ids come back, and what
//! ListObjectVersions, LookupKey with a version id and the bucket counters
//! show.
//!
//! The model predicts block ids itself (om allocates them from one replicated
//! counter in command order), tracks how many versions hold each block, and so
//! knows exactly which blocks must be in the deleted-blocks table.

mod checks;
mod fs;
mod keys;
mod model;
mod runner;
mod uploads;

use std::collections::BTreeMap;

use md5::{Digest, Md5};
use om_client::ClientError;
use om_client::v1::BlockInfo;

use crate::differential::runner::run_seed;

const BLOCK: u64 = 256 * 1024 * 1024;
const MIN_PART: u64 = 100;
const BUCKETS: [&str; 2] = ["bkt1", "bkt2"];
/// Steps of each run before the first bucket may be versioned.
const UNVERSIONED_UNTIL: usize = 200;
const KEYS: [&str; 5] = ["a", "b", "c/d", "c/e", "z"];
const FS_BUCKET: &str = "fs1";
const FS_NAMES: [&str; 3] = ["a", "b", "c"];

fn md5_hex(s: &str) -> String {
    Md5::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn reason(r: &Result<impl std::fmt::Debug, ClientError>) -> Result<(), String> {
    match r {
        Ok(_) => Ok(()),
        Err(ClientError::Api { reason, .. }) => Err(reason.clone()),
        Err(e) => panic!("transport error: {e}"),
    }
}

fn ids(b: &[BlockInfo]) -> Vec<u64> {
    b.iter().map(|b| b.block_id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn om_matches_the_model_across_restarts() {
    let mut tally: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut events: BTreeMap<String, usize> = BTreeMap::new();
    for seed in 1..=6 {
        let (t, e) = run_seed(seed, 500, 130).await;
        for (op, (ok, refused)) in t {
            let t = tally.entry(op).or_default();
            t.0 += ok;
            t.1 += refused;
        }
        for (event, n) in e {
            *events.entry(event).or_default() += n;
        }
    }
    eprintln!("events: {events:#?}");
    // The sequences reach both outcomes of every operation.
    assert_eq!(tally.len(), 18, "{tally:?}");
    for (op, (ok, refused)) in &tally {
        assert!(*ok > 0, "{op} never succeeded");
        if *op != "put" {
            assert!(*refused > 0, "{op} was never refused");
        }
    }
    // And every rule of versioned buckets.
    let mut missing = Vec::new();
    for state in ["Enabled", "Suspended"] {
        for op in ["put", "commit", "copy", "complete"] {
            missing.push(format!("{op} ({state})"));
        }
        for e in [
            "delete marker of an object",
            "delete marker of a missing key",
            "delete marker over a delete marker",
            "removed a current version, an older one promoted",
            "removed a current delete marker",
            "removed a noncurrent version",
            "copy of a named version",
            "put over a delete marker",
        ] {
            missing.push(format!("{e} ({state})"));
        }
    }
    missing.extend(
        [
            "copy of the version it replaces (Unversioned)",
            "copy of the version it replaces (Suspended)",
            "copy of a version onto its key (Enabled)",
            "copy of a version onto its key (Suspended)",
            "a write replaces a noncurrent null version",
            "a page by markers ends at a noncurrent delete marker",
            "a page by markers ends at a noncurrent null version",
            "a page by markers ends at a noncurrent version",
            "versioning Unversioned -> Suspended",
            "removed a noncurrent delete marker (Enabled)",
            "removed the only version (Unversioned)",
            "versioning Unversioned -> Enabled",
            "versioning Enabled -> Suspended",
            "versioning Suspended -> Enabled",
            "lookup of a delete marker",
            "lookup of a noncurrent version",
            "lookup behind a delete marker",
            "lookup: VERSION_NOT_FOUND",
            "lookup: INVALID_VERSION_ID",
            "delete version: VERSION_NOT_FOUND",
            "delete version: INVALID_VERSION_ID",
            "delete versions: INVALID_VERSION_ID",
            "delete many (Enabled)",
            "delete many (Suspended)",
            "copy: VERSION_NOT_FOUND",
            "copy: SOURCE_IS_DELETE_MARKER",
            "copy: INVALID_VERSION_ID",
            "copy: COPY_TO_ITSELF",
            "copy: KEY_NOT_FOUND",
            "rename: BUCKET_VERSIONED",
            "put: IF_MATCH_FAILED",
            "commit: KEY_NOT_FOUND",
        ]
        .map(String::from),
    );
    missing.retain(|e| !events.contains_key(e));
    assert!(missing.is_empty(), "never came up: {missing:?}");
}
