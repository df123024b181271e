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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use md5::{Digest, Md5};
use om_client::v1::*;
use om_client::{ClientError, OmClient};
use om_tests::TestNode;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

const BLOCK: u64 = 256 * 1024 * 1024;
const MIN_PART: u64 = 100;
const BUCKETS: [&str; 2] = ["bkt1", "bkt2"];
/// Steps of each run before the first bucket may be versioned.
const UNVERSIONED_UNTIL: usize = 200;
const KEYS: [&str; 5] = ["a", "b", "c/d", "c/e", "z"];
const FS_BUCKET: &str = "fs1";
const FS_NAMES: [&str; 3] = ["a", "b", "c"];

/// Proper ancestors of a path, outermost first.
fn ancestors(path: &str) -> Vec<String> {
    let comps: Vec<&str> = path.split('/').collect();
    (1..comps.len()).map(|n| comps[..n].join("/")).collect()
}

fn under(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

fn md5_hex(s: &str) -> String {
    Md5::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn is_plain(etag: &str) -> bool {
    etag.len() == 32 && !etag.contains('-')
}

#[derive(Debug, Clone, PartialEq)]
struct MKey {
    size: u64,
    etag: String,
    blocks: Vec<u64>,
    update_id: u64,
}

#[derive(Debug, Clone, PartialEq)]
struct MPart {
    size: u64,
    etag: String,
    blocks: Vec<u64>,
}

#[derive(Debug, Clone)]
struct MUpload {
    bucket: &'static str,
    key: &'static str,
    parts: BTreeMap<u32, MPart>,
}

#[derive(Debug, Clone)]
struct MSession {
    bucket: &'static str,
    key: &'static str,
    allocated: Vec<u64>,
}

/// A bucket's versioning state (S3's; never back to unversioned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Unversioned,
    Enabled,
    Suspended,
}

/// One version of a key: an object or a delete marker (no data).
#[derive(Debug, Clone, PartialEq)]
struct MVersion {
    id: String,
    marker: bool,
    /// A marker's is empty; its update id is not tracked (0).
    k: MKey,
}

/// What a response shows of one version: (version id, delete marker, is
/// latest, size, ETag, blocks, update id (0 for markers)).
type View = (String, bool, bool, u64, String, Vec<u64>, u64);

fn view(v: &MVersion, latest: bool) -> View {
    (
        v.id.clone(),
        v.marker,
        latest,
        v.k.size,
        v.k.etag.clone(),
        v.k.blocks.clone(),
        if v.marker { 0 } else { v.k.update_id },
    )
}

fn got_view(k: &KeyInfo) -> View {
    (
        k.version_id.clone(),
        k.delete_marker,
        k.is_latest,
        k.size,
        k.etag.clone(),
        ids(&k.blocks),
        if k.delete_marker { 0 } else { k.update_id },
    )
}

/// Version ids om refuses to parse (INVALID_VERSION_ID).
const MALFORMED_IDS: [&str; 4] = ["xyz", "NULL", "0000000000000000", "00000000000000FF"];
/// A well-formed version id no version ever gets (stamp of log index 0).
const UNKNOWN_ID: &str = "00000000000000ff";

/// Whether om parses `id` (the test names no other malformed ids).
fn well_formed(id: &str) -> bool {
    !MALFORMED_IDS.contains(&id)
}

#[derive(Default)]
struct Model {
    /// Object-store keys: each key's versions, newest (the current one)
    /// first; a key without versions has no entry.
    hist: BTreeMap<(&'static str, &'static str), Vec<MVersion>>,
    versioning: HashMap<&'static str, State>,
    /// Every version id (other than "null") om returned, in order.
    version_ids: Vec<String>,
    sessions: BTreeMap<u64, MSession>,
    uploads: BTreeMap<u64, MUpload>,
    holders: HashMap<u64, u32>,
    /// Blocks in the deleted-blocks table (a block appears once).
    freed: Vec<u64>,
    next_block: u64,
    /// The FILE_SYSTEM_OPTIMIZED bucket `FS_BUCKET`.
    dirs: BTreeSet<String>,
    files: BTreeMap<String, MKey>,
    fs_sessions: BTreeMap<u64, MFsSession>,
}

#[derive(Debug, Clone)]
struct MFsSession {
    /// Where the file will land; `None` once its directory was deleted (the
    /// session can then only expire).
    path: Option<String>,
    allocated: Vec<u64>,
    no_overwrite: bool,
}

/// What a request should do, per the model.
type Expect = Result<(), &'static str>;

impl Model {
    fn new() -> Model {
        Model {
            next_block: 1,
            ..Default::default()
        }
    }

    fn alloc(&mut self, n: u64) -> Vec<u64> {
        let ids = (self.next_block..self.next_block + n).collect();
        self.next_block += n;
        ids
    }

    fn release(&mut self, blocks: &[u64]) {
        for b in blocks {
            let h = self.holders.get(b).copied().unwrap_or(1);
            if h > 1 {
                if h == 2 {
                    self.holders.remove(b);
                } else {
                    self.holders.insert(*b, h - 1);
                }
            } else {
                self.freed.push(*b);
            }
        }
    }

    fn share(&mut self, blocks: &[u64]) {
        for b in blocks {
            *self.holders.entry(*b).or_insert(1) += 1;
        }
    }

    fn check_cond(&self, cur: Option<&MKey>, c: &Option<KeyConditions>) -> Expect {
        let Some(c) = c else { return Ok(()) };
        if c.if_none_match_any && cur.is_some() {
            return Err("IF_NONE_MATCH_FAILED");
        }
        if !c.if_match.is_empty() {
            match cur {
                None => return Err("KEY_NOT_FOUND"),
                Some(k) if k.etag != c.if_match => return Err("IF_MATCH_FAILED"),
                _ => {}
            }
        }
        if c.expected_update_id != 0 {
            match cur {
                None => return Err("KEY_NOT_FOUND"),
                Some(k) if k.update_id != c.expected_update_id => {
                    return Err("UPDATE_ID_MISMATCH");
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The first ancestor of `path` that is not a directory: `Err` when it
    /// is a file (NOT_A_DIRECTORY), `Ok(false)` when missing, `Ok(true)` when
    /// every ancestor is a directory.
    fn parents_exist(&self, path: &str) -> Result<bool, &'static str> {
        for a in ancestors(path) {
            if self.files.contains_key(&a) {
                return Err("NOT_A_DIRECTORY");
            }
            if !self.dirs.contains(&a) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn mkdirs(&mut self, path: &str) {
        for a in ancestors(path) {
            self.dirs.insert(a);
        }
        self.dirs.insert(path.to_string());
    }

    /// Removes a directory and everything under it: files free their blocks,
    /// and so do sessions of files being written below it (the purge ends them).
    fn remove_tree(&mut self, dir: &str) {
        self.dirs.retain(|d| d != dir && !under(d, dir));
        let gone: Vec<String> = self
            .files
            .keys()
            .filter(|f| under(f, dir))
            .cloned()
            .collect();
        for f in gone {
            let k = self.files.remove(&f).unwrap();
            self.release(&k.blocks);
        }
        let ended: Vec<u64> = self
            .fs_sessions
            .iter()
            .filter(|(_, s)| s.path.as_deref().is_some_and(|p| under(p, dir)))
            .map(|(id, _)| *id)
            .collect();
        for id in ended {
            let s = self.fs_sessions.remove(&id).unwrap();
            self.release(&s.allocated);
        }
    }

    fn state(&self, bucket: &str) -> State {
        self.versioning.get(bucket).copied().unwrap_or_default()
    }

    fn history(&self, bucket: &'static str, key: &'static str) -> &[MVersion] {
        self.hist.get(&(bucket, key)).map_or(&[], Vec::as_slice)
    }

    /// The current version when it is an object (not a delete marker): what
    /// reads, ListKeys and a write's conditions see.
    fn current(&self, bucket: &'static str, key: &'static str) -> Option<&MKey> {
        self.history(bucket, key)
            .first()
            .filter(|v| !v.marker)
            .map(|v| &v.k)
    }

    fn version(&self, bucket: &'static str, key: &'static str, id: &str) -> Option<&MVersion> {
        self.history(bucket, key).iter().find(|v| v.id == id)
    }

    /// The position of the version a new current version of the key removes:
    /// unversioned, the current one; suspended, the "null" one wherever it
    /// is; enabled, none.
    fn replaced(&self, bucket: &'static str, key: &'static str) -> Option<usize> {
        let h = self.history(bucket, key);
        match self.state(bucket) {
            State::Unversioned => (!h.is_empty()).then_some(0),
            State::Suspended => h.iter().position(|v| v.id == "null"),
            State::Enabled => None,
        }
    }

    /// Makes `new` the current version of (bucket, key): the version it
    /// replaces goes (its blocks released unless `keep`: a copy of that
    /// very version took them over), the previous current one, if it stays,
    /// becomes noncurrent with its blocks.
    fn write(&mut self, bucket: &'static str, key: &'static str, new: MVersion, keep: bool) {
        let replaced = self.replaced(bucket, key);
        let h = self.hist.entry((bucket, key)).or_default();
        let old = replaced.map(|i| h.remove(i));
        h.insert(0, new);
        assert!(
            self.state(bucket) != State::Unversioned || self.history(bucket, key).len() == 1,
            "an unversioned key has one version"
        );
        if let Some(old) = old
            && !keep
        {
            self.release(&old.k.blocks);
        }
    }

    /// Removes version `id` of the key permanently, releasing its blocks;
    /// the next newest, if any, becomes current.
    fn remove_version(
        &mut self,
        bucket: &'static str,
        key: &'static str,
        id: &str,
    ) -> Option<MVersion> {
        let h = self.hist.get_mut(&(bucket, key))?;
        let old = h.remove(h.iter().position(|v| v.id == id)?);
        if h.is_empty() {
            self.hist.remove(&(bucket, key));
        }
        self.release(&old.k.blocks);
        Some(old)
    }
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

struct Run {
    /// Successful and refused requests per operation, to prove the random
    /// sequences reach both paths of every operation.
    tally: BTreeMap<&'static str, (usize, usize)>,
    /// How often each outcome (operation and reason) and each notable case
    /// of the versioning rules came up, to prove the sequences reach them.
    events: BTreeMap<String, usize>,
    rng: StdRng,
    m: Model,
    c: OmClient,
    step: usize,
    seed: u64,
}

impl Run {
    fn ctx(&self) -> String {
        format!("seed {} step {}", self.seed, self.step)
    }

    fn note(&mut self, event: String) {
        *self.events.entry(event).or_default() += 1;
    }

    fn expect_same(&mut self, what: &'static str, got: Result<(), String>, want: Expect) {
        let t = self.tally.entry(what).or_default();
        if got.is_ok() {
            t.0 += 1;
        } else {
            t.1 += 1;
        }
        self.note(format!(
            "{what}: {}",
            got.as_ref().err().map_or("ok", String::as_str)
        ));
        assert_eq!(
            got,
            want.map_err(str::to_string),
            "{}: {what}: om and the model disagree",
            self.ctx()
        );
    }

    fn conditions(&mut self, cur: Option<&MKey>) -> Option<KeyConditions> {
        match self.rng.random_range(0..8) {
            0 => Some(KeyConditions {
                if_none_match_any: true,
                ..Default::default()
            }),
            1 => Some(KeyConditions {
                if_match: cur.map_or_else(|| md5_hex("nothing"), |k| k.etag.clone()),
                ..Default::default()
            }),
            2 => Some(KeyConditions {
                if_match: md5_hex("x"),
                ..Default::default()
            }),
            3 => Some(KeyConditions {
                expected_update_id: cur.map_or(1, |k| {
                    if self.rng.random_bool(0.7) {
                        k.update_id
                    } else {
                        k.update_id + 1
                    }
                }),
                ..Default::default()
            }),
            _ => None,
        }
    }

    fn size(&mut self) -> u64 {
        *[0, 1, 10, BLOCK, BLOCK + 1, 2 * BLOCK]
            .choose(&mut self.rng)
            .unwrap()
    }

    fn etag(&mut self) -> String {
        match self.rng.random_range(0..4) {
            0 => String::new(),
            1 => format!("{}-3", md5_hex("mp")),
            n => md5_hex(&format!("e{n}")),
        }
    }

    fn pick_key(&mut self) -> (&'static str, &'static str) {
        (
            *BUCKETS.choose(&mut self.rng).unwrap(),
            *KEYS.choose(&mut self.rng).unwrap(),
        )
    }

    /// Checks the version id om gave a new version (object or delete
    /// marker) of a key in `bucket`: "null" unless versioning is enabled,
    /// else a fresh id, newer than every one before.
    fn check_new_id(&mut self, bucket: &'static str, id: &str) {
        let ctx = self.ctx();
        if self.m.state(bucket) != State::Enabled {
            assert_eq!(id, "null", "{ctx}: version id in {bucket}");
            return;
        }
        let stamp = (id.len() == 16 && id.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
            .then(|| u64::from_str_radix(id, 16).unwrap());
        let newest = self
            .m
            .version_ids
            .last()
            .map(|l| u64::from_str_radix(l, 16).unwrap());
        assert!(
            stamp.is_some_and(|s| Some(s) > newest),
            "{ctx}: version id {id:?} in {bucket} (the newest before: {newest:?})"
        );
        self.m.version_ids.push(id.to_string());
    }

    /// A write of (bucket, key) succeeded with `got`: checks it against
    /// `want` and makes it the key's current version in the model.
    fn learn_write(
        &mut self,
        op: &str,
        bucket: &'static str,
        key: &'static str,
        got: &KeyInfo,
        mut want: MKey,
        keep: bool,
    ) {
        let ctx = self.ctx();
        assert_eq!(
            (got.size, &got.etag, ids(&got.blocks)),
            (want.size, &want.etag, want.blocks.clone()),
            "{ctx}: key {bucket}/{key}"
        );
        assert!(
            got.is_latest && !got.delete_marker,
            "{ctx}: key {bucket}/{key}: {got:?}"
        );
        self.check_new_id(bucket, &got.version_id);
        let state = self.m.state(bucket);
        self.note(format!("{op} ({state:?})"));
        if let Some(i) = self.m.replaced(bucket, key)
            && i > 0
        {
            self.note("a write replaces a noncurrent null version".into());
        }
        if state != State::Unversioned && self.m.current(bucket, key).is_none() {
            if self.m.history(bucket, key).is_empty() {
                self.note(format!("{op} of a new key ({state:?})"));
            } else {
                self.note(format!("{op} over a delete marker ({state:?})"));
            }
        }
        want.update_id = got.update_id;
        let new = MVersion {
            id: got.version_id.clone(),
            marker: false,
            k: want,
        };
        self.m.write(bucket, key, new, keep);
    }

    /// A version id to name for (bucket, key): usually one of its versions,
    /// else "null", one of any key (maybe since removed), an unknown one or,
    /// when `malformed`, sometimes one om refuses to parse.
    fn pick_version(&mut self, bucket: &'static str, key: &'static str, malformed: bool) -> String {
        let own: Vec<String> = self
            .m
            .history(bucket, key)
            .iter()
            .map(|v| v.id.clone())
            .collect();
        match self.rng.random_range(0..20) {
            0..12 if !own.is_empty() => own.choose(&mut self.rng).unwrap().clone(),
            12..14 if !self.m.version_ids.is_empty() => {
                self.m.version_ids.choose(&mut self.rng).unwrap().clone()
            }
            14 => UNKNOWN_ID.to_string(),
            15 | 16 if malformed => MALFORMED_IDS.choose(&mut self.rng).unwrap().to_string(),
            _ => "null".to_string(),
        }
    }

    async fn put(&mut self) {
        let (b, k) = self.pick_key();
        let size = self.size();
        let etag = self.etag();
        let cur = self.m.current(b, k).cloned();
        let cond = self.conditions(cur.as_ref());
        let want = self.m.check_cond(cur.as_ref(), &cond);
        let r = self
            .c
            .put_key_with(PutKeyRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                size,
                etag: etag.clone(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("put", reason(&r), want);
        if let Ok(got) = r {
            let blocks = self.m.alloc(size.div_ceil(BLOCK));
            let new = MKey {
                size,
                etag,
                blocks,
                update_id: 0,
            };
            self.learn_write("put", b, k, &got, new, false);
        }
    }

    /// The effect of deleting (bucket, key) without a version id: removes
    /// the key (unversioned) or adds a delete marker. `got` is om's answer:
    /// (version id, delete marker).
    fn learn_delete(&mut self, b: &'static str, k: &'static str, got: (String, bool)) {
        let ctx = self.ctx();
        let state = self.m.state(b);
        if state == State::Unversioned {
            assert_eq!(got, (String::new(), false), "{ctx}: delete {b}/{k}");
            self.m.remove_version(b, k, "null").unwrap();
            return;
        }
        assert!(got.1, "{ctx}: delete {b}/{k} adds a delete marker");
        self.check_new_id(b, &got.0);
        let what = match self.m.history(b, k).first() {
            None => "of a missing key",
            Some(v) if v.marker => "over a delete marker",
            Some(_) => "of an object",
        };
        self.note(format!("delete marker {what} ({state:?})"));
        let marker = MVersion {
            id: got.0,
            marker: true,
            k: MKey {
                size: 0,
                etag: String::new(),
                blocks: Vec::new(),
                update_id: 0,
            },
        };
        self.m.write(b, k, marker, false);
    }

    /// The effect of deleting version `id` of (bucket, key) with om's answer
    /// `got`; the expected refusal when there is no such version.
    fn learn_delete_version(
        &mut self,
        b: &'static str,
        k: &'static str,
        id: &str,
        got: Result<(String, bool), String>,
    ) {
        let ctx = self.ctx();
        let was_current = self.m.history(b, k).first().is_some_and(|v| v.id == id);
        let want = match self.m.remove_version(b, k, id) {
            Some(old) => {
                let what = match (old.marker, was_current) {
                    (true, true) => "a current delete marker".to_string(),
                    (true, false) => "a noncurrent delete marker".to_string(),
                    (false, true) if self.m.hist.contains_key(&(b, k)) => {
                        "a current version, an older one promoted".to_string()
                    }
                    (false, true) => "the only version".to_string(),
                    (false, false) => "a noncurrent version".to_string(),
                };
                let state = self.m.state(b);
                self.note(format!("removed {what} ({state:?})"));
                Ok((old.id, old.marker))
            }
            None => Err("VERSION_NOT_FOUND".to_string()),
        };
        assert_eq!(got, want, "{ctx}: delete {b}/{k} version {id:?}");
    }

    async fn delete(&mut self) {
        let (b, k) = self.pick_key();
        let want = if self.m.state(b) != State::Unversioned || self.m.hist.contains_key(&(b, k)) {
            Ok(())
        } else {
            Err("KEY_NOT_FOUND")
        };
        let r = self.c.delete_key_version("vol1", b, k, "").await;
        self.expect_same("delete", reason(&r), want);
        if let Ok(r) = r {
            self.learn_delete(b, k, (r.version_id, r.delete_marker));
        }
    }

    /// DeleteKey naming a version (any bucket state).
    async fn delete_version(&mut self) {
        let (b, k) = self.pick_key();
        let id = self.pick_version(b, k, true);
        let want = if !well_formed(&id) {
            Err("INVALID_VERSION_ID")
        } else if self.m.version(b, k, &id).is_none() {
            Err("VERSION_NOT_FOUND")
        } else {
            Ok(())
        };
        let r = self.c.delete_key_version("vol1", b, k, &id).await;
        self.expect_same("delete version", reason(&r), want);
        match r {
            Ok(r) => self.learn_delete_version(b, k, &id, Ok((r.version_id, r.delete_marker))),
            Err(ClientError::Api { reason, .. }) if reason == "VERSION_NOT_FOUND" => {
                self.learn_delete_version(b, k, &id, Err(reason))
            }
            Err(_) => {}
        }
    }

    /// DeleteKeys, without version ids or with one per key (empty, or naming
    /// a version; several of one key now and then).
    async fn delete_many(&mut self) {
        let b = *BUCKETS.choose(&mut self.rng).unwrap();
        let n = self.rng.random_range(1..5);
        let with_ids = self.rng.random_bool(0.6);
        let mut names: Vec<&'static str> = Vec::new();
        let mut vids: Vec<String> = Vec::new();
        for _ in 0..n {
            let name = match names.last() {
                Some(last) if with_ids && self.rng.random_bool(0.6) => *last,
                _ => *KEYS.choose(&mut self.rng).unwrap(),
            };
            names.push(name);
            if with_ids {
                vids.push(if self.rng.random_bool(0.25) {
                    String::new()
                } else {
                    self.pick_version(b, name, false)
                });
            }
        }
        if with_ids && self.rng.random_bool(0.08) {
            let i = self.rng.random_range(0..vids.len());
            vids[i] = MALFORMED_IDS.choose(&mut self.rng).unwrap().to_string();
        }
        let keys: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        let r = if with_ids {
            let r = self.c.delete_key_versions("vol1", b, &keys, &vids).await;
            let want = if vids.iter().all(|v| well_formed(v)) {
                Ok(())
            } else {
                Err("INVALID_VERSION_ID")
            };
            self.expect_same("delete versions", reason(&r), want);
            match r {
                Ok(r) => r,
                Err(_) => return,
            }
        } else {
            self.c.delete_keys("vol1", b, &keys).await.unwrap()
        };
        let ctx = self.ctx();
        assert_eq!(r.len(), names.len(), "{ctx}: delete-many outcomes");
        if !with_ids && self.m.state(b) == State::Unversioned {
            // The old semantics: a key listed twice is deleted once and
            // reported the same way both times.
            let mut first: HashMap<&str, bool> = HashMap::new();
            for (name, outcome) in names.iter().zip(&r) {
                let deleted = *first
                    .entry(name)
                    .or_insert_with(|| self.m.remove_version(b, name, "null").is_some());
                assert_eq!(
                    outcome.reason.is_empty(),
                    deleted,
                    "{ctx}: delete-many {name}"
                );
            }
            return;
        }
        // Each key in turn, seeing what the ones before it did.
        for (i, (name, outcome)) in names.iter().zip(&r).enumerate() {
            let vid = vids.get(i).cloned().unwrap_or_default();
            let got = if outcome.reason.is_empty() {
                Ok((outcome.version_id.clone(), outcome.delete_marker))
            } else {
                assert_eq!(
                    (&outcome.version_id, outcome.delete_marker),
                    (&vid, false),
                    "{ctx}: a refused outcome echoes its version id"
                );
                Err(outcome.reason.clone())
            };
            assert_eq!(&outcome.key, name, "{ctx}: delete-many outcome {i}");
            if !vid.is_empty() {
                self.learn_delete_version(b, name, &vid, got);
            } else if self.m.state(b) != State::Unversioned || self.m.hist.contains_key(&(b, *name))
            {
                let got = got.unwrap_or_else(|e| panic!("{ctx}: delete-many {name}: {e}"));
                self.learn_delete(b, name, got);
            } else {
                assert_eq!(
                    got,
                    Err("KEY_NOT_FOUND".into()),
                    "{ctx}: delete-many {name}"
                );
            }
        }
        self.note(format!("delete many ({:?})", self.m.state(b)));
    }

    async fn rename(&mut self) {
        let b = *BUCKETS.choose(&mut self.rng).unwrap();
        let present: Vec<&'static str> = KEYS
            .iter()
            .copied()
            .filter(|k| self.m.current(b, k).is_some())
            .collect();
        let absent: Vec<&'static str> = KEYS
            .iter()
            .copied()
            .filter(|k| !present.contains(k))
            .collect();
        let mut from = *KEYS.choose(&mut self.rng).unwrap();
        if !present.is_empty() && self.rng.random_bool(0.8) {
            from = *present.choose(&mut self.rng).unwrap();
        }
        let mut to = *KEYS.choose(&mut self.rng).unwrap();
        if !absent.is_empty() && self.rng.random_bool(0.7) {
            to = *absent.choose(&mut self.rng).unwrap();
        }
        let want = if from == to {
            Err("SAME_NAME")
        } else if self.m.state(b) != State::Unversioned {
            Err("BUCKET_VERSIONED")
        } else if self.m.current(b, from).is_none() {
            Err("KEY_NOT_FOUND")
        } else if self.m.current(b, to).is_some() {
            Err("KEY_ALREADY_EXISTS")
        } else {
            Ok(())
        };
        let r = self.c.rename_key("vol1", b, from, to).await;
        self.expect_same("rename", reason(&r), want);
        if let Ok(got) = r {
            let mut h = self.m.hist.remove(&(b, from)).unwrap();
            h[0].k.update_id = got.update_id;
            let ctx = self.ctx();
            assert_eq!(
                got_view(&got),
                view(&h[0], true),
                "{ctx}: renamed {b}/{from} to {to}"
            );
            self.m.hist.insert((b, to), h);
        }
    }

    async fn open(&mut self) {
        let (b, k) = self.pick_key();
        let n = self.rng.random_range(0..3);
        let r = self
            .c
            .open_key(OpenKeyRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                blocks: n,
                ..Default::default()
            })
            .await
            .unwrap();
        let allocated = self.m.alloc(u64::from(n));
        assert_eq!(ids(&r.blocks), allocated, "{}: open", self.ctx());
        self.m.sessions.insert(
            r.session_id,
            MSession {
                bucket: b,
                key: k,
                allocated,
            },
        );
    }

    /// An existing session (usually) or a made-up one.
    fn pick_session(&mut self) -> (u64, &'static str, &'static str) {
        let live: Vec<(u64, MSession)> = self
            .m
            .sessions
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        if live.is_empty() || self.rng.random_bool(0.1) {
            let (b, k) = self.pick_key();
            return (self.rng.random_range(1..1000), b, k);
        }
        let (id, s) = live.choose(&mut self.rng).unwrap().clone();
        (id, s.bucket, s.key)
    }

    async fn allocate(&mut self) {
        let (id, b, k) = self.pick_session();
        let n = self.rng.random_range(1..3);
        let r = self
            .c
            .allocate_block(AllocateBlockRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                session_id: id,
                count: n,
                ..Default::default()
            })
            .await;
        let want = if self.m.sessions.contains_key(&id) {
            Ok(())
        } else {
            Err("SESSION_NOT_FOUND")
        };
        self.expect_same("allocate", reason(&r), want);
        if let Ok(r) = r {
            let more = self.m.alloc(u64::from(n));
            assert_eq!(ids(&r.blocks), more, "{}: allocate", self.ctx());
            self.m.sessions.get_mut(&id).unwrap().allocated.extend(more);
        }
    }

    async fn commit(&mut self) {
        let (id, b, k) = self.pick_session();
        let allocated = self
            .m
            .sessions
            .get(&id)
            .map(|s| s.allocated.clone())
            .unwrap_or_default();
        let used = self.rng.random_range(0..=allocated.len());
        let mut size = match used {
            0 => 0,
            n => (n as u64 - 1) * BLOCK + self.rng.random_range(1..=BLOCK),
        };
        let bad_size = self.rng.random_bool(0.1);
        if bad_size {
            size += 1;
        }
        let mut blocks = Vec::new();
        let mut off = 0;
        for &bid in &allocated[..used] {
            let len = BLOCK.min(size - off);
            blocks.push(BlockInfo {
                block_id: bid,
                offset: off,
                length: len,
            });
            off += len;
        }
        let etag = self.etag();
        let cur = self.m.current(b, k).cloned();
        let cond = self.conditions(cur.as_ref());
        let want = if !self.m.sessions.contains_key(&id) {
            Err("SESSION_NOT_FOUND")
        } else if off != size {
            // The extra byte did not fit: the last block was full.
            Err("SIZE_MISMATCH")
        } else {
            self.m.check_cond(cur.as_ref(), &cond)
        };
        let r = self
            .c
            .commit_key(CommitKeyRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                session_id: id,
                size,
                blocks: blocks.clone(),
                etag: etag.clone(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("commit", reason(&r), want);
        if let Ok(r) = r {
            let s = self.m.sessions.remove(&id).unwrap();
            self.m.release(&s.allocated[used..]);
            let new = MKey {
                size,
                etag,
                blocks: ids(&blocks),
                update_id: 0,
            };
            self.learn_write("commit", b, k, &r.key.unwrap(), new, false);
        }
    }

    async fn copy(&mut self) {
        // Mostly a key whose current version is an object.
        let live: Vec<(&'static str, &'static str)> = self
            .m
            .hist
            .keys()
            .copied()
            .filter(|(b, k)| self.m.current(b, k).is_some())
            .collect();
        let (sb, sk) = if !live.is_empty() && self.rng.random_bool(0.7) {
            *live.choose(&mut self.rng).unwrap()
        } else {
            self.pick_key()
        };
        let same = self.rng.random_bool(0.2);
        let (db, dk) = if same { (sb, sk) } else { self.pick_key() };
        let replace = self.rng.random_bool(if same { 0.6 } else { 0.3 });
        let md5 = if self.rng.random_bool(0.5) {
            md5_hex("content")
        } else {
            String::new()
        };
        // A copy onto its own key mostly names one of its objects: S3's way
        // of restoring an older version.
        let objects: Vec<String> = self
            .m
            .history(sb, sk)
            .iter()
            .filter(|v| !v.marker)
            .map(|v| v.id.clone())
            .collect();
        let src_version = if same && !objects.is_empty() && self.rng.random_bool(0.5) {
            objects.choose(&mut self.rng).unwrap().clone()
        } else if self.rng.random_bool(0.35) {
            let malformed = self.rng.random_bool(0.2);
            self.pick_version(sb, sk, malformed)
        } else {
            String::new()
        };
        let src: Result<MVersion, &'static str> = if src_version.is_empty() {
            self.m
                .history(sb, sk)
                .first()
                .filter(|v| !v.marker)
                .cloned()
                .ok_or("KEY_NOT_FOUND")
        } else {
            match self.m.version(sb, sk, &src_version) {
                None => Err("VERSION_NOT_FOUND"),
                Some(v) if v.marker => Err("SOURCE_IS_DELETE_MARKER"),
                Some(v) => Ok(v.clone()),
            }
        };
        let cur = self.m.current(db, dk).cloned();
        let cond = self.conditions(cur.as_ref());
        let same = sb == db && sk == dk;
        let want = if !well_formed(&src_version) {
            Err("INVALID_VERSION_ID")
        } else if same && !replace && src_version.is_empty() {
            Err("COPY_TO_ITSELF")
        } else {
            match &src {
                Err(e) => Err(*e),
                Ok(s) if !is_plain(&s.k.etag) && md5.is_empty() => Err("CONTENT_DIGEST_REQUIRED"),
                Ok(_) => self.m.check_cond(cur.as_ref(), &cond),
            }
        };
        let r = self
            .c
            .copy_key(CopyKeyRequest {
                src_volume: "vol1".into(),
                src_bucket: sb.into(),
                src_key: sk.into(),
                src_version_id: src_version.clone(),
                volume: "vol1".into(),
                bucket: db.into(),
                key: dk.into(),
                metadata_directive: if replace {
                    MetadataDirective::Replace as i32
                } else {
                    MetadataDirective::Copy as i32
                },
                content_md5: md5.clone(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("copy", reason(&r), want);
        if let Ok(r) = r {
            let src = src.unwrap();
            let etag = if is_plain(&src.k.etag) {
                src.k.etag.clone()
            } else {
                md5
            };
            let new = MKey {
                size: src.k.size,
                etag,
                blocks: src.k.blocks.clone(),
                update_id: 0,
            };
            // The write removes the very version it copies: the blocks move
            // to the new version, with the same holders.
            let keep = same
                && self
                    .m
                    .replaced(db, dk)
                    .is_some_and(|i| self.m.history(db, dk)[i].id == src.id);
            let state = self.m.state(db);
            if keep {
                self.note(format!("copy of the version it replaces ({state:?})"));
            } else {
                if same {
                    self.note(format!("copy of a version onto its key ({state:?})"));
                }
                self.m.share(&src.k.blocks);
            }
            if !src_version.is_empty() {
                self.note(format!("copy of a named version ({state:?})"));
            }
            self.learn_write("copy", db, dk, &r.key.unwrap(), new, keep);
        }
    }

    /// SetBucketVersioning: an object-store bucket to ENABLED or SUSPENDED,
    /// now and then a refused request.
    async fn set_versioning(&mut self) {
        // The first bucket stays unversioned for a while.
        let buckets = if self.step < UNVERSIONED_UNTIL {
            &BUCKETS[1..]
        } else {
            &BUCKETS[..]
        };
        let (bucket, to, want) = match self.rng.random_range(0..14) {
            0 => (
                *BUCKETS.choose(&mut self.rng).unwrap(),
                BucketVersioning::Unversioned,
                Err("INVALID_VERSIONING"),
            ),
            1 => (
                FS_BUCKET,
                BucketVersioning::Enabled,
                Err("VERSIONING_NOT_SUPPORTED"),
            ),
            _ => {
                let b = *buckets.choose(&mut self.rng).unwrap();
                let to = match self.m.state(b) {
                    State::Enabled => BucketVersioning::Suspended,
                    State::Suspended => BucketVersioning::Enabled,
                    State::Unversioned if self.rng.random_bool(0.8) => BucketVersioning::Enabled,
                    State::Unversioned => BucketVersioning::Suspended,
                };
                (b, to, Ok(()))
            }
        };
        let r = self.c.set_bucket_versioning("vol1", bucket, to).await;
        self.expect_same("versioning", reason(&r), want);
        if let Ok(info) = r {
            let ctx = self.ctx();
            assert_eq!(info.versioning(), to, "{ctx}: versioning of {bucket}");
            let b = *BUCKETS.iter().find(|b| **b == bucket).unwrap();
            let state = if to == BucketVersioning::Enabled {
                State::Enabled
            } else {
                State::Suspended
            };
            self.note(format!("versioning {:?} -> {state:?}", self.m.state(b)));
            self.m.versioning.insert(b, state);
        }
    }

    /// LookupKey, of the current version or of a named one.
    async fn lookup(&mut self) {
        let (b, k) = self.pick_key();
        let id = if self.rng.random_bool(0.4) {
            String::new()
        } else {
            self.pick_version(b, k, true)
        };
        let h = self.m.history(b, k).to_vec();
        // (the version and whether it is current) or the refusal, and for a
        // current delete marker its id.
        let (want, marker): (Result<(&MVersion, bool), &str>, Option<String>) = if id.is_empty() {
            match h.first() {
                Some(v) if v.marker => (Err("KEY_NOT_FOUND"), Some(v.id.clone())),
                Some(v) => (Ok((v, true)), None),
                None => (Err("KEY_NOT_FOUND"), None),
            }
        } else if !well_formed(&id) {
            (Err("INVALID_VERSION_ID"), None)
        } else {
            match h.iter().position(|v| v.id == id) {
                Some(i) => (Ok((&h[i], i == 0)), None),
                None => (Err("VERSION_NOT_FOUND"), None),
            }
        };
        let r = self.c.lookup_key_version("vol1", b, k, &id).await;
        self.expect_same("lookup", reason(&r), want.map(|_| ()));
        let ctx = self.ctx();
        match (r, want) {
            (Ok(got), Ok((v, latest))) => {
                assert_eq!(
                    got_view(&got),
                    view(v, latest),
                    "{ctx}: lookup {b}/{k} version {id:?}"
                );
                assert_eq!(
                    got.noncurrent_since_ms != 0,
                    !latest,
                    "{ctx}: lookup {b}/{k} version {id:?}: noncurrent since"
                );
                let what = match (v.marker, latest) {
                    (true, _) => "a delete marker",
                    (false, true) => "a current version",
                    (false, false) => "a noncurrent version",
                };
                self.note(format!("lookup of {what}"));
            }
            (Err(ClientError::Api { delete_marker, .. }), _) => {
                if marker.is_some() {
                    self.note("lookup behind a delete marker".into());
                }
                assert_eq!(
                    delete_marker, marker,
                    "{ctx}: lookup {b}/{k}: delete marker"
                );
            }
            (r, _) => panic!("{ctx}: lookup {b}/{k}: {r:?}"),
        }
    }

    async fn initiate(&mut self) {
        let (b, k) = self.pick_key();
        let r = self
            .c
            .initiate_multipart_upload(InitiateMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let id = u64::from_str_radix(&r.upload.unwrap().upload_id, 16).unwrap();
        self.m.uploads.insert(
            id,
            MUpload {
                bucket: b,
                key: k,
                parts: BTreeMap::new(),
            },
        );
    }

    fn pick_upload(&mut self) -> (u64, &'static str, &'static str) {
        let live: Vec<(u64, &'static str, &'static str)> = self
            .m
            .uploads
            .iter()
            .map(|(id, u)| (*id, u.bucket, u.key))
            .collect();
        if live.is_empty() || self.rng.random_bool(0.1) {
            let (b, k) = self.pick_key();
            return (self.rng.random_range(1..1000), b, k);
        }
        *live.choose(&mut self.rng).unwrap()
    }

    async fn part(&mut self) {
        let (id, b, k) = self.pick_upload();
        let n = self.rng.random_range(1..5);
        let size = *[1, MIN_PART, 2 * MIN_PART, BLOCK + 1]
            .choose(&mut self.rng)
            .unwrap();
        let etag = md5_hex(&format!("part{}", self.rng.random_range(0..3)));
        let r = self
            .c
            .commit_part(CommitPartRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                upload_id: format!("{id:016x}"),
                part_number: n,
                size,
                etag: etag.clone(),
                ..Default::default()
            })
            .await;
        let want = if self.m.uploads.contains_key(&id) {
            Ok(())
        } else {
            Err("UPLOAD_NOT_FOUND")
        };
        self.expect_same("commit part", reason(&r), want);
        if let Ok(r) = r {
            let blocks = self.m.alloc(size.div_ceil(BLOCK));
            assert_eq!(ids(&r.part.unwrap().blocks), blocks, "{}", self.ctx());
            let old = self
                .m
                .uploads
                .get_mut(&id)
                .unwrap()
                .parts
                .insert(n, MPart { size, etag, blocks });
            if let Some(old) = old {
                self.m.release(&old.blocks);
            }
        }
    }

    async fn complete(&mut self) {
        let (id, b, k) = self.pick_upload();
        let stored = self
            .m
            .uploads
            .get(&id)
            .map(|u| u.parts.clone())
            .unwrap_or_default();
        // An ascending selection of part numbers, sometimes with a wrong ETag
        // or a part that was never uploaded.
        let mut listed: Vec<(u32, String)> = Vec::new();
        for n in 1..=5u32 {
            let take = match stored.get(&n) {
                Some(_) => self.rng.random_bool(0.8),
                None => self.rng.random_bool(0.05),
            };
            if take {
                let etag = match stored.get(&n) {
                    Some(p) if self.rng.random_bool(0.95) => p.etag.clone(),
                    _ => md5_hex("wrong"),
                };
                listed.push((n, etag));
            }
        }
        if listed.is_empty() {
            return;
        }
        let cur = self.m.current(b, k).cloned();
        let cond = self.conditions(cur.as_ref());
        let want = if !self.m.uploads.contains_key(&id) {
            Err("UPLOAD_NOT_FOUND")
        } else {
            let mut w = Ok(());
            for (i, (n, etag)) in listed.iter().enumerate() {
                match stored.get(n) {
                    Some(p) if &p.etag == etag => {
                        if i + 1 < listed.len() && p.size < MIN_PART {
                            w = Err("ENTITY_TOO_SMALL");
                            break;
                        }
                    }
                    _ => {
                        w = Err("INVALID_PART");
                        break;
                    }
                }
            }
            w.and_then(|_| self.m.check_cond(cur.as_ref(), &cond))
        };
        let r = self
            .c
            .complete_multipart_upload(CompleteMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                upload_id: format!("{id:016x}"),
                parts: listed
                    .iter()
                    .map(|(n, e)| CompletedPart {
                        part_number: *n,
                        etag: e.clone(),
                    })
                    .collect(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("complete", reason(&r), want);
        if let Ok(r) = r {
            let u = self.m.uploads.remove(&id).unwrap();
            let numbers: HashSet<u32> = listed.iter().map(|(n, _)| *n).collect();
            let mut h = Md5::new();
            let mut blocks = Vec::new();
            let mut size = 0;
            for (n, p) in &u.parts {
                if numbers.contains(n) {
                    h.update(hex_decode(&p.etag));
                    blocks.extend(p.blocks.clone());
                    size += p.size;
                } else {
                    self.m.release(&p.blocks);
                }
            }
            let etag = format!(
                "{}-{}",
                h.finalize()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
                listed.len()
            );
            let new = MKey {
                size,
                etag,
                blocks,
                update_id: 0,
            };
            self.learn_write("complete", b, k, &r.key.unwrap(), new, false);
        }
    }

    async fn abort(&mut self) {
        let (id, b, k) = self.pick_upload();
        let r = self
            .c
            .abort_multipart_upload(AbortMultipartUploadRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                key: k.into(),
                upload_id: format!("{id:016x}"),
                ..Default::default()
            })
            .await;
        let want = if self.m.uploads.contains_key(&id) {
            Ok(())
        } else {
            Err("UPLOAD_NOT_FOUND")
        };
        self.expect_same("abort", reason(&r), want);
        if let Some(u) = self.m.uploads.remove(&id) {
            for p in u.parts.values() {
                self.m.release(&p.blocks);
            }
        }
    }

    fn fs_path(&mut self) -> String {
        let depth = self.rng.random_range(1..=3);
        (0..depth)
            .map(|_| *FS_NAMES.choose(&mut self.rng).unwrap())
            .collect::<Vec<_>>()
            .join("/")
    }

    async fn fs_mkdir(&mut self) {
        let p = self.fs_path();
        let want = self.m.parents_exist(&p).and_then(|_| {
            if self.m.files.contains_key(&p) {
                Err("FILE_ALREADY_EXISTS")
            } else {
                Ok(())
            }
        });
        // A file above the path is found first.
        let want = match (self.m.parents_exist(&p), want) {
            (Err(e), _) => Err(e),
            (_, w) => w,
        };
        let r = self
            .c
            .create_directory(CreateDirectoryRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                path: p.clone(),
                ..Default::default()
            })
            .await;
        self.expect_same("mkdir", reason(&r), want);
        if r.is_ok() {
            self.m.mkdirs(&p);
        }
    }

    async fn fs_create(&mut self) {
        let p = self.fs_path();
        let recursive = self.rng.random_bool(0.7);
        let overwrite = self.rng.random_bool(0.5);
        let blocks = self.rng.random_range(0..2);
        let want = match self.m.parents_exist(&p) {
            Err(e) => Err(e),
            Ok(false) if !recursive => Err("DIRECTORY_NOT_FOUND"),
            Ok(false) => Ok(()),
            Ok(true) if self.m.dirs.contains(&p) => Err("IS_A_DIRECTORY"),
            Ok(true) if self.m.files.contains_key(&p) && !overwrite => Err("FILE_ALREADY_EXISTS"),
            Ok(true) => Ok(()),
        };
        let r = self
            .c
            .create_file(CreateFileRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                path: p.clone(),
                recursive,
                overwrite,
                blocks,
                ..Default::default()
            })
            .await;
        self.expect_same("create file", reason(&r), want);
        if let Ok(r) = r {
            for a in ancestors(&p) {
                self.m.dirs.insert(a);
            }
            let allocated = self.m.alloc(u64::from(blocks));
            assert_eq!(ids(&r.blocks), allocated, "{}", self.ctx());
            self.m.fs_sessions.insert(
                r.session_id,
                MFsSession {
                    path: Some(p),
                    allocated,
                    no_overwrite: !overwrite,
                },
            );
        }
    }

    async fn fs_commit(&mut self) {
        let live: Vec<(u64, MFsSession)> = self
            .m
            .fs_sessions
            .iter()
            .filter(|(_, s)| s.path.is_some())
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let Some((id, s)) = live.choose(&mut self.rng).cloned() else {
            return;
        };
        let path = s.path.clone().unwrap();
        let used = self.rng.random_range(0..=s.allocated.len());
        let size = if used == 0 {
            0
        } else {
            self.rng.random_range(1..=100)
        };
        let blocks: Vec<BlockInfo> = s.allocated[..used]
            .iter()
            .map(|b| BlockInfo {
                block_id: *b,
                offset: 0,
                length: size,
            })
            .collect();
        let cur = self.m.files.get(&path).cloned();
        let cond = self.conditions(cur.as_ref());
        let want = if self.m.dirs.contains(&path) {
            Err("IS_A_DIRECTORY")
        } else {
            self.m.check_cond(cur.as_ref(), &cond).and_then(|_| {
                if s.no_overwrite && cur.is_some() {
                    Err("FILE_ALREADY_EXISTS")
                } else {
                    Ok(())
                }
            })
        };
        let etag = self.etag();
        let r = self
            .c
            .commit_key(CommitKeyRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                key: path.clone(),
                session_id: id,
                size,
                blocks: blocks.clone(),
                etag: etag.clone(),
                conditions: cond,
                ..Default::default()
            })
            .await;
        self.expect_same("commit file", reason(&r), want);
        if let Ok(r) = r {
            let s = self.m.fs_sessions.remove(&id).unwrap();
            self.m.release(&s.allocated[used..]);
            let got = r.key.unwrap();
            let new = MKey {
                size,
                etag,
                blocks: ids(&blocks),
                update_id: got.update_id,
            };
            assert_eq!(
                (got.size, &got.etag, ids(&got.blocks)),
                (new.size, &new.etag, new.blocks.clone()),
                "{}: file {path}",
                self.ctx()
            );
            if let Some(old) = self.m.files.insert(path, new) {
                self.m.release(&old.blocks);
            }
        }
    }

    async fn fs_delete(&mut self) {
        let p = self.fs_path();
        let recursive = self.rng.random_bool(0.5);
        let non_empty =
            |m: &Model| m.dirs.iter().any(|d| under(d, &p)) || m.files.keys().any(|f| under(f, &p));
        let want = match self.m.parents_exist(&p) {
            Err(e) => Err(e),
            Ok(false) => Err("PATH_NOT_FOUND"),
            Ok(true) if self.m.files.contains_key(&p) => Ok(()),
            Ok(true) if self.m.dirs.contains(&p) => {
                if non_empty(&self.m) && !recursive {
                    Err("DIRECTORY_NOT_EMPTY")
                } else {
                    Ok(())
                }
            }
            Ok(true) => Err("PATH_NOT_FOUND"),
        };
        let r = self
            .c
            .delete_path(DeletePathRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                path: p.clone(),
                recursive,
                ..Default::default()
            })
            .await;
        self.expect_same("delete path", reason(&r), want);
        if r.is_ok() {
            if let Some(k) = self.m.files.remove(&p) {
                self.m.release(&k.blocks);
            } else {
                self.m.remove_tree(&p);
            }
        }
    }

    async fn fs_rename(&mut self) {
        let from = self.fs_path();
        let to = self.fs_path();
        let exists = |m: &Model, p: &str| m.dirs.contains(p) || m.files.contains_key(p);
        let want = if from == to {
            Err("SAME_NAME")
        } else if under(&to, &from) {
            Err("RENAME_INTO_ITSELF")
        } else {
            match self.m.parents_exist(&from) {
                Err(e) => Err(e),
                Ok(false) => Err("PATH_NOT_FOUND"),
                Ok(true) if !exists(&self.m, &from) => Err("PATH_NOT_FOUND"),
                Ok(true) => match self.m.parents_exist(&to) {
                    Err(e) => Err(e),
                    Ok(false) => Err("DIRECTORY_NOT_FOUND"),
                    Ok(true) if exists(&self.m, &to) => Err("PATH_ALREADY_EXISTS"),
                    Ok(true) => Ok(()),
                },
            }
        };
        let r = self
            .c
            .rename_path(RenamePathRequest {
                volume: "vol1".into(),
                bucket: FS_BUCKET.into(),
                from: from.clone(),
                to: to.clone(),
                ..Default::default()
            })
            .await;
        self.expect_same("rename path", reason(&r), want);
        let Ok(r) = r else { return };
        let st = r.status.unwrap();
        let moved = |p: &str| format!("{to}{}", &p[from.len()..]);
        if let Some(mut k) = self.m.files.remove(&from) {
            k.update_id = st.update_id;
            self.m.files.insert(to.clone(), k);
        } else {
            let dirs: Vec<String> = self
                .m
                .dirs
                .iter()
                .filter(|d| **d == from || under(d, &from))
                .cloned()
                .collect();
            for d in dirs {
                self.m.dirs.remove(&d);
                self.m.dirs.insert(moved(&d));
            }
            let files: Vec<String> = self
                .m
                .files
                .keys()
                .filter(|f| under(f, &from))
                .cloned()
                .collect();
            for f in files {
                let k = self.m.files.remove(&f).unwrap();
                self.m.files.insert(moved(&f), k);
            }
            for s in self.m.fs_sessions.values_mut() {
                if let Some(p) = &s.path
                    && under(p, &from)
                {
                    s.path = Some(moved(p));
                }
            }
        }
    }

    /// The FSO bucket through ListStatus (recursive, small pages) and its
    /// counters, against the model.
    async fn check_fs(&self) {
        let ctx = self.ctx();
        let mut got = Vec::new();
        let mut token = String::new();
        loop {
            let r = self
                .c
                .list_status(ListStatusRequest {
                    volume: "vol1".into(),
                    bucket: FS_BUCKET.into(),
                    recursive: true,
                    max_entries: 3,
                    continuation_token: token.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
            got.extend(r.entries.iter().map(|e| {
                (
                    e.path.clone(),
                    e.is_directory,
                    e.size,
                    e.etag.clone(),
                    ids(&e.blocks),
                    if e.is_directory { 0 } else { e.update_id },
                )
            }));
            if !r.truncated {
                break;
            }
            token = r.next_continuation_token;
        }
        // Depth first, each directory before its contents, names in byte order:
        // sorting paths by their components gives exactly that order.
        let mut want: Vec<_> = self
            .m
            .dirs
            .iter()
            .map(|d| (d.clone(), true, 0, String::new(), Vec::new(), 0))
            .chain(self.m.files.iter().map(|(p, k)| {
                (
                    p.clone(),
                    false,
                    k.size,
                    k.etag.clone(),
                    k.blocks.clone(),
                    k.update_id,
                )
            }))
            .collect();
        want.sort_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
        assert_eq!(got, want, "{ctx}: the FSO bucket");
        let info = self.c.get_bucket("vol1", FS_BUCKET).await.unwrap();
        let used: u64 = self.m.files.values().map(|k| k.size).sum();
        assert_eq!(
            (info.key_count, info.used_bytes, info.open_key_count),
            (
                self.m.files.len() as u64,
                used,
                self.m.fs_sessions.len() as u64
            ),
            "{ctx}: counters of {FS_BUCKET}"
        );
    }

    async fn deleted(&self) -> Vec<DeletedBlocksEntry> {
        let mut out = Vec::new();
        let mut after = String::new();
        loop {
            let p = self
                .c
                .list_deleted_blocks(ListDeletedBlocksRequest {
                    after: after.clone(),
                    max_entries: 7,
                    ..Default::default()
                })
                .await
                .unwrap();
            out.extend(p.entries);
            if !p.truncated {
                return out;
            }
            after = p.next_after;
        }
    }

    async fn ack(&mut self) {
        let entries = self.deleted().await;
        let chosen: Vec<&DeletedBlocksEntry> = entries
            .iter()
            .filter(|_| self.rng.random_bool(0.5))
            .collect();
        if chosen.is_empty() {
            return;
        }
        let r = self
            .c
            .ack_deleted_blocks(AckDeletedBlocksRequest {
                ids: chosen.iter().map(|e| e.id.clone()).collect(),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(r.acknowledged as usize, chosen.len(), "{}", self.ctx());
        for e in chosen {
            for b in &e.blocks {
                let pos = self.m.freed.iter().position(|x| *x == b.block_id);
                let pos = pos.unwrap_or_else(|| {
                    panic!(
                        "{}: om freed block {} the model holds",
                        self.ctx(),
                        b.block_id
                    )
                });
                self.m.freed.swap_remove(pos);
            }
        }
    }

    /// ListObjectVersions of `b`, in small pages followed by continuation
    /// token and by S3's markers, against the model's histories.
    async fn check_versions(&mut self, b: &'static str) {
        let ctx = self.ctx();
        let want: Vec<(String, View)> = KEYS
            .iter()
            .flat_map(|k| {
                self.m
                    .history(b, k)
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (k.to_string(), view(v, i == 0)))
            })
            .collect();
        for (by_token, max_keys) in [(true, 3), (false, 2)] {
            let mut got = Vec::new();
            let mut req = ListObjectVersionsRequest {
                volume: "vol1".into(),
                bucket: b.into(),
                max_keys,
                ..Default::default()
            };
            loop {
                let r = self.c.list_object_versions(req.clone()).await.unwrap();
                assert!(r.common_prefixes.is_empty(), "{ctx}");
                for v in &r.versions {
                    assert_eq!(
                        v.noncurrent_since_ms != 0,
                        !v.is_latest,
                        "{ctx}: {b}/{} version {}: noncurrent since",
                        v.name,
                        v.version_id
                    );
                    got.push((v.name.clone(), got_view(v)));
                }
                if !r.truncated {
                    break;
                }
                let last = r.versions.last().unwrap();
                assert_eq!(
                    (&r.next_key_marker, &r.next_version_id_marker),
                    (&last.name, &last.version_id),
                    "{ctx}: next markers of a page of {b}"
                );
                if !by_token && !last.is_latest {
                    self.note(format!(
                        "a page by markers ends at a noncurrent {}",
                        match (last.delete_marker, last.version_id == "null") {
                            (true, _) => "delete marker",
                            (false, true) => "null version",
                            (false, false) => "version",
                        }
                    ));
                }
                if by_token {
                    req.continuation_token = r.next_continuation_token;
                } else {
                    req.key_marker = r.next_key_marker;
                    req.version_id_marker = r.next_version_id_marker;
                }
            }
            assert_eq!(got, want, "{ctx}: versions of {b} (by token: {by_token})");
        }
    }

    /// Compares every table, through the listing APIs, with the model.
    async fn check_all(&mut self) {
        self.check_fs().await;
        let ctx = self.ctx();
        for b in BUCKETS {
            let mut got = Vec::new();
            let mut token = String::new();
            loop {
                let r = self
                    .c
                    .list_keys(ListKeysRequest {
                        volume: "vol1".into(),
                        bucket: b.into(),
                        max_keys: 2,
                        continuation_token: token.clone(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                got.extend(r.keys.iter().map(|k| {
                    (
                        k.name.clone(),
                        k.size,
                        k.etag.clone(),
                        ids(&k.blocks),
                        k.update_id,
                    )
                }));
                if !r.truncated {
                    break;
                }
                token = r.next_continuation_token;
            }
            let want: Vec<_> = KEYS
                .iter()
                .filter_map(|k| {
                    self.m.current(b, k).map(|v| {
                        (
                            k.to_string(),
                            v.size,
                            v.etag.clone(),
                            v.blocks.clone(),
                            v.update_id,
                        )
                    })
                })
                .collect();
            assert_eq!(got, want, "{ctx}: keys of {b}");
            self.check_versions(b).await;
            // Every version holding data counts; delete markers do not.
            let objects = || {
                KEYS.iter()
                    .flat_map(|k| self.m.history(b, k))
                    .filter(|v| !v.marker)
            };
            let info = self.c.get_bucket("vol1", b).await.unwrap();
            let open = self.m.sessions.values().filter(|s| s.bucket == b).count() as u64;
            assert_eq!(
                (
                    info.versioning(),
                    info.key_count,
                    info.used_bytes,
                    info.open_key_count
                ),
                (
                    match self.m.state(b) {
                        State::Unversioned => BucketVersioning::Unversioned,
                        State::Enabled => BucketVersioning::Enabled,
                        State::Suspended => BucketVersioning::Suspended,
                    },
                    objects().count() as u64,
                    objects().map(|v| v.k.size).sum::<u64>(),
                    open
                ),
                "{ctx}: versioning and counters of {b}"
            );
            let sessions = self
                .c
                .list_open_keys(ListOpenKeysRequest {
                    volume: "vol1".into(),
                    bucket: b.into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut got: Vec<_> = sessions
                .keys
                .iter()
                .map(|s| (s.name.clone(), s.session_id, s.allocated_blocks.clone()))
                .collect();
            got.sort();
            let mut want: Vec<_> = self
                .m
                .sessions
                .iter()
                .filter(|(_, s)| s.bucket == b)
                .map(|(id, s)| (s.key.to_string(), *id, s.allocated.clone()))
                .collect();
            want.sort();
            assert_eq!(got, want, "{ctx}: open keys of {b}");
            let ups = self
                .c
                .list_multipart_uploads(ListMultipartUploadsRequest {
                    volume: "vol1".into(),
                    bucket: b.into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let mut got: Vec<_> = ups
                .uploads
                .iter()
                .map(|u| {
                    (
                        u.key.clone(),
                        u64::from_str_radix(&u.upload_id, 16).unwrap(),
                    )
                })
                .collect();
            got.sort();
            let mut want: Vec<_> = self
                .m
                .uploads
                .iter()
                .filter(|(_, u)| u.bucket == b)
                .map(|(id, u)| (u.key.to_string(), *id))
                .collect();
            want.sort();
            assert_eq!(got, want, "{ctx}: uploads of {b}");
            for (key, id) in want {
                let parts = self
                    .c
                    .list_parts(ListPartsRequest {
                        volume: "vol1".into(),
                        bucket: b.into(),
                        key,
                        upload_id: format!("{id:016x}"),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                let got: Vec<_> = parts
                    .parts
                    .iter()
                    .map(|p| (p.part_number, p.size, p.etag.clone(), ids(&p.blocks)))
                    .collect();
                let want: Vec<_> = self.m.uploads[&id]
                    .parts
                    .iter()
                    .map(|(n, p)| (*n, p.size, p.etag.clone(), p.blocks.clone()))
                    .collect();
                assert_eq!(got, want, "{ctx}: parts of upload {id:016x}");
            }
        }
        let mut got: Vec<u64> = self
            .deleted()
            .await
            .iter()
            .flat_map(|e| e.blocks.iter().map(|b| b.block_id))
            .collect();
        got.sort();
        let mut want = self.m.freed.clone();
        want.sort();
        assert_eq!(got, want, "{ctx}: blocks awaiting reclamation");
    }
}

/// Waits until the leader's background task purged every deleted directory.
async fn wait_purged(node: &TestNode) {
    om_tests::wait_for(std::time::Duration::from_secs(20), "purge", || async {
        (!node.dump().keys().any(|(t, _)| *t == "deleted_dirs")).then_some(())
    })
    .await;
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// (ok, refused) per operation, and how often each event came up.
type Tallies = (
    BTreeMap<&'static str, (usize, usize)>,
    BTreeMap<String, usize>,
);

async fn run_seed(seed: u64, steps: usize, restart_every: usize) -> Tallies {
    let tweak = |a: &mut om::config::Args| {
        a.min_part_size = Some(MIN_PART);
        a.snapshot_every = Some(100);
    };
    let mut node = TestNode::start_with(tweak).await;
    let c = node.client();
    c.create_volume("vol1", "").await.unwrap();
    for b in BUCKETS {
        c.create_bucket("vol1", b, BucketLayout::ObjectStore)
            .await
            .unwrap();
    }
    c.create_bucket("vol1", FS_BUCKET, BucketLayout::FileSystemOptimized)
        .await
        .unwrap();
    let mut run = Run {
        tally: BTreeMap::new(),
        events: BTreeMap::new(),
        rng: StdRng::seed_from_u64(seed),
        m: Model::new(),
        c,
        step: 0,
        seed,
    };
    for step in 0..steps {
        run.step = step;
        match run.rng.random_range(0..163) {
            0..16 => run.put().await,
            16..22 => run.delete().await,
            22..28 => run.delete_many().await,
            28..32 => run.rename().await,
            32..42 => run.open().await,
            42..47 => run.allocate().await,
            47..59 => run.commit().await,
            59..71 => run.copy().await,
            71..77 => run.initiate().await,
            77..87 => run.part().await,
            87..95 => run.complete().await,
            95..99 => run.abort().await,
            99..104 => run.ack().await,
            104..112 => run.fs_mkdir().await,
            112..122 => run.fs_create().await,
            122..130 => run.fs_commit().await,
            130..137 => run.fs_delete().await,
            137..144 => run.fs_rename().await,
            144..147 => run.set_versioning().await,
            147..154 => run.delete_version().await,
            _ => run.lookup().await,
        }
        if step % 25 == 24 {
            wait_purged(&node).await;
            run.check_all().await;
        }
        if step % restart_every == restart_every - 1 {
            // Drop the old connection first, as a client of a restarted
            // server would find it closed.
            run.c = OmClient::connect("127.0.0.1:1").unwrap();
            node = node.restart(tweak).await;
            run.c = node.client();
            wait_purged(&node).await;
            run.check_all().await;
        }
    }
    wait_purged(&node).await;
    run.check_all().await;
    node.node.shutdown().await;
    eprintln!("seed {seed}: (ok, refused) per operation: {:?}", run.tally);
    (run.tally, run.events)
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
