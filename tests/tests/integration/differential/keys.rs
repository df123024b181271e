//! Operations on object-store keys: put, deletes (of a key, of one version,
//! of many keys), rename, copy, lookup and the buckets' versioning.

use std::collections::HashMap;

use om_client::ClientError;
use om_client::v1::{BucketVersioning, CopyKeyRequest, MetadataDirective, PutKeyRequest};
use rand::Rng;
use rand::seq::IndexedRandom;

use crate::differential::model::{
    MALFORMED_IDS, MKey, MVersion, State, UNKNOWN_ID, got_view, view, well_formed,
};
use crate::differential::runner::Run;
use crate::differential::{BLOCK, BUCKETS, FS_BUCKET, KEYS, UNVERSIONED_UNTIL, md5_hex, reason};

fn is_plain(etag: &str) -> bool {
    etag.len() == 32 && !etag.contains('-')
}

impl Run {
    fn size(&mut self) -> u64 {
        *[0, 1, 10, BLOCK, BLOCK + 1, 2 * BLOCK]
            .choose(&mut self.rng)
            .unwrap()
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

    pub(crate) async fn put(&mut self) {
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

    pub(crate) async fn delete(&mut self) {
        let (b, k) = self.pick_key();
        let want = (self.m.state(b) != State::Unversioned || self.m.hist.contains_key(&(b, k)))
            .then_some(())
            .ok_or("KEY_NOT_FOUND");
        let r = self.c.delete_key_version("vol1", b, k, "").await;
        self.expect_same("delete", reason(&r), want);
        if let Ok(r) = r {
            self.learn_delete(b, k, (r.version_id, r.delete_marker));
        }
    }

    /// DeleteKey naming a version (any bucket state).
    pub(crate) async fn delete_version(&mut self) {
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
    pub(crate) async fn delete_many(&mut self) {
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
            let want = vids
                .iter()
                .all(|v| well_formed(v))
                .then_some(())
                .ok_or("INVALID_VERSION_ID");
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

    pub(crate) async fn rename(&mut self) {
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

    pub(crate) async fn copy(&mut self) {
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
    pub(crate) async fn set_versioning(&mut self) {
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
    pub(crate) async fn lookup(&mut self) {
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
}
