//! PutKeyTagging (rules 5): replaces the whole tag set of one version of a
//! key (S3's PutObjectTagging; DeleteObjectTagging is an empty set). The
//! tags were checked by `apply::limits` (they depend on no state); here the
//! version must exist and be an object, not a delete marker.
//!
//! A tag change is not a new version: the version id, ETag, size, blocks
//! and modification time stay, as in S3. The update id becomes this
//! entry's, so a conditional write (`expected_update_id`) or a lifecycle
//! scan that read the key before sees that it changed.

use om_proto::store::{CommandResult, KeyRecord, KeyResult, PutKeyTagging, command_result};
use om_raft_store::EntryWrites;

use super::limits;
use super::ops::Operation;
use super::versions::{self, Located, VersionRef};
use super::{Ctx, LAYOUT_FSO, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::fs;
use crate::store::keys;
use crate::store::table::{self, FileTable};

impl Operation for om_proto::store::PutKeyTagging {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        limits::version_id("version_id", &self.version_id)?;
        crate::validate::tags("tags", &self.tags)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.put_key_tagging(b, self)
    }
}

/// Whether `rec`, found for a request naming `version_id` ("" = the current
/// version) of the key at `path`, has tags to read or replace. A delete
/// marker has none: as the current version it is NOT_FOUND `KEY_NOT_FOUND`
/// (the key is deleted, as LookupKey says), named by its version id it is
/// FAILED_PRECONDITION `DELETE_MARKER` (S3's MethodNotAllowed). Shared by
/// apply and the read path.
pub fn taggable(rec: &KeyRecord, version_id: &str, path: &str) -> Result<(), OmError> {
    if !rec.delete_marker {
        return Ok(());
    }
    if version_id.is_empty() {
        return Err(OmError::not_found(
            "KEY_NOT_FOUND",
            "key",
            format!("the current version of {path} is a delete marker"),
        ));
    }
    Err(OmError::precondition(
        "DELETE_MARKER",
        "version_id",
        format!(
            "version {} of {path} is a delete marker, which has no tags",
            crate::validate::quote_prefix(version_id)
        ),
    ))
}

fn key_not_found(path: &str) -> OmError {
    OmError::not_found("KEY_NOT_FOUND", "key", format!("key {path} does not exist"))
}

impl Ctx<'_> {
    pub(super) fn put_key_tagging(
        &self,
        b: &mut EntryWrites<'_>,
        c: &PutKeyTagging,
    ) -> Result<CommandResult, OmError> {
        if !crate::rules::OBJECT_TAGS.holds(self.rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "object tags need apply rules 5",
            ));
        }
        let bucket = self.bucket(&c.volume, &c.bucket)?;
        let path = format!("{}/{}/{}", c.volume, c.bucket, c.key);
        let mut rec = if bucket.layout == LAYOUT_FSO {
            // A file is the "null" version of its path.
            if !c.version_id.is_empty()
                && versions::parse_version_id(&c.version_id, "version_id")? != VersionRef::Null
            {
                return Err(versions::version_not_found(
                    &c.volume,
                    &c.bucket,
                    &c.key,
                    &c.version_id,
                    "version_id",
                ));
            }
            let p = crate::validate::fs_path_not_root("key", &c.key)?;
            let comps = fs::components(&p);
            let Some(fs::Entry::File {
                parent,
                name,
                mut rec,
            }) = fs::stat(self.db, bucket.object_id, &comps, "key")?
            else {
                return Err(key_not_found(&path));
            };
            rec.tags = c.tags.clone();
            rec.update_id = self.index;
            table::put::<FileTable>(self.db, b, &keys::fs_key(parent, &name), &mut rec)?;
            rec
        } else {
            let current_key = keys::object_key(&c.volume, &c.bucket, &c.key);
            let (at, rec) = if c.version_id.is_empty() {
                let rec = self
                    .key_get(&current_key)?
                    .ok_or_else(|| key_not_found(&path))?;
                (current_key, rec)
            } else {
                match versions::read_version(
                    self.db,
                    &c.volume,
                    &c.bucket,
                    &c.key,
                    &c.version_id,
                    "version_id",
                )? {
                    Located::Current(r) => (current_key, r),
                    Located::Noncurrent(k, r) => (k, r),
                }
            };
            taggable(&rec, &c.version_id, &path)?;
            let mut rec = rec;
            rec.tags = c.tags.clone();
            rec.update_id = self.index;
            self.key_put(b, &bucket, &at, rec)?
        };
        // Blocks are not part of a tagging answer.
        rec.blocks = Vec::new();
        ok(command_result::Result::Key(KeyResult {
            volume: c.volume.clone(),
            bucket: c.bucket.clone(),
            name: c.key.clone(),
            key: Some(rec),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::apply::tests::{Sm, setup};
    use crate::apply::{LAYOUT_FSO, LAYOUT_OBJECT_STORE, into_outcome};
    use crate::store::keys;
    use crate::store::table::{self, KeyTable};
    use om_proto::store::{self as st, command::Op, command_result};

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn put(key: &str, t: BTreeMap<String, String>) -> Op {
        Op::PutKey(st::PutKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: key.into(),
            size: 10,
            etag: "0cc175b9c0f1b6a831c399e269772661".into(),
            tags: t,
            ..Default::default()
        })
    }

    fn tagging(key: &str, version_id: &str, t: BTreeMap<String, String>) -> Op {
        Op::PutKeyTagging(st::PutKeyTagging {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: key.into(),
            version_id: version_id.into(),
            tags: t,
        })
    }

    fn stored(sm: &Sm, key: &str) -> st::KeyRecord {
        table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", key))
            .unwrap()
            .unwrap()
    }

    /// Tags arrived with rules 5: an older command carrying them (or a
    /// PutKeyTagging) is refused and stages nothing, while the same writes
    /// without tags apply exactly as before.
    #[test]
    fn tags_need_rules_5_and_untagged_writes_apply_as_before() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        let t = || tags(&[("k", "v")]);
        assert_eq!(sm.rejected_rules(put("a", t()), 4), "UNSUPPORTED_COMMAND");
        let open = |t| {
            Op::OpenKey(st::OpenKey {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "o".into(),
                tags: t,
                ..Default::default()
            })
        };
        assert_eq!(sm.rejected_rules(open(t()), 4), "UNSUPPORTED_COMMAND");
        let initiate = Op::InitiateMultipart(st::InitiateMultipart {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "m".into(),
            tags: t(),
            ..Default::default()
        });
        assert_eq!(sm.rejected_rules(initiate, 4), "UNSUPPORTED_COMMAND");
        sm.ok_rules(put("a", BTreeMap::new()), 4);
        let copy = |directive, t| {
            Op::CopyKey(st::CopyKey {
                src_volume: "vol".into(),
                src_bucket: "bkt".into(),
                src_key: "a".into(),
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: "c".into(),
                tagging_directive: directive,
                tags: t,
                ..Default::default()
            })
        };
        assert_eq!(
            sm.rejected_rules(copy(1, BTreeMap::new()), 4),
            "UNSUPPORTED_COMMAND"
        );
        assert_eq!(sm.rejected_rules(copy(0, t()), 3), "UNSUPPORTED_COMMAND");
        assert_eq!(
            sm.rejected_rules(tagging("a", "", t()), 4),
            "UNSUPPORTED_COMMAND"
        );
        assert_eq!(
            sm.rejected_rules(tagging("a", "", BTreeMap::new()), 4),
            "UNSUPPORTED_COMMAND"
        );
        // Untagged writes of older rules: the same record as always.
        sm.ok_rules(open(BTreeMap::new()), 4);
        sm.ok_rules(copy(0, BTreeMap::new()), 4);
        let a = stored(&sm, "a");
        assert!(a.tags.is_empty());
        assert_eq!(stored(&sm, "c").tags, a.tags);
        // Rules 5 take them.
        sm.ok(put("t", t()));
        assert_eq!(stored(&sm, "t").tags, t());
    }

    /// A tag change keeps the version, ETag, size, blocks and modification
    /// time and moves the update id (and the written index, which snapshots
    /// read); apply checks the tags again on its own.
    #[test]
    fn tagging_replaces_the_set_and_keeps_the_version() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        sm.ok(put("a", tags(&[("old", "1")])));
        let before = stored(&sm, "a");
        let command_result::Result::Key(k) = sm.ok(tagging("a", "", tags(&[("new", "2")]))) else {
            panic!("no key result")
        };
        let after = stored(&sm, "a");
        assert_eq!(after.tags, tags(&[("new", "2")]));
        assert_eq!(k.key.unwrap().tags, after.tags);
        assert!(after.update_id > before.update_id);
        assert!(after.written_index > before.written_index);
        let same = st::KeyRecord {
            tags: before.tags.clone(),
            update_id: before.update_id,
            written_index: before.written_index,
            ..after.clone()
        };
        assert_eq!(same, before);
        // An empty set removes every tag.
        sm.ok(tagging("a", "null", BTreeMap::new()));
        assert!(stored(&sm, "a").tags.is_empty());
        // Refusals stage nothing (`rejected` checks it).
        let eleven: BTreeMap<_, _> = (0..11).map(|i| (format!("t{i}"), String::new())).collect();
        assert_eq!(sm.rejected(tagging("a", "", eleven)), "TOO_MANY_TAGS");
        assert_eq!(
            sm.rejected(tagging("a", "", tags(&[("aws:x", "v")]))),
            "INVALID_TAG"
        );
        assert_eq!(
            sm.rejected(put("b", tags(&[("k", "tab\there")]))),
            "INVALID_TAG"
        );
        assert_eq!(
            sm.rejected(tagging("missing", "", tags(&[("k", "v")]))),
            "KEY_NOT_FOUND"
        );
        assert_eq!(
            sm.rejected(tagging("a", "00000000000000ff", tags(&[("k", "v")]))),
            "VERSION_NOT_FOUND"
        );
    }

    /// In a versioned bucket any version can be tagged, never a delete
    /// marker; an FSO file is tagged in the files table.
    #[test]
    fn versions_and_files_are_tagged_in_place() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        sm.ok(Op::SetBucketVersioning(st::SetBucketVersioning {
            volume: "vol".into(),
            bucket: "bkt".into(),
            versioning: crate::apply::versions::ENABLED,
        }));
        let version = |r| match r {
            command_result::Result::Key(k) => crate::apply::versions::version_id(&k.key.unwrap()),
            other => panic!("{other:?}"),
        };
        let v1 = version(sm.ok(put("a", tags(&[("v", "1")]))));
        sm.ok(put("a", tags(&[("v", "2")])));
        version(sm.ok(tagging("a", &v1, tags(&[("v", "one")]))));
        let command_result::Result::Key(old) =
            into_outcome(sm.apply(tagging("a", &v1, tags(&[("v", "uno")]))).0).unwrap()
        else {
            panic!()
        };
        assert_eq!(old.key.unwrap().tags, tags(&[("v", "uno")]));
        assert_eq!(stored(&sm, "a").tags, tags(&[("v", "2")]));
        let command_result::Result::Deleted(marker) = sm.ok(Op::DeleteKey(st::DeleteKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "a".into(),
            ..Default::default()
        })) else {
            panic!()
        };
        assert_eq!(
            sm.rejected(tagging("a", &marker.version_id, BTreeMap::new())),
            "DELETE_MARKER"
        );
        assert_eq!(
            sm.rejected(tagging("a", "", BTreeMap::new())),
            "KEY_NOT_FOUND"
        );

        let mut fso = Sm::new();
        setup(&mut fso, LAYOUT_FSO);
        let command_result::Result::OpenKey(s) = fso.ok(Op::CreateFile(st::CreateFile {
            volume: "vol".into(),
            bucket: "bkt".into(),
            path: "d/f".into(),
            recursive: true,
            ..Default::default()
        })) else {
            panic!()
        };
        fso.ok(Op::CommitKey(st::CommitKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "d/f".into(),
            session_id: s.session_id,
            ..Default::default()
        }));
        fso.ok(tagging("d/f", "", tags(&[("k", "v")])));
        let bucket = table::get::<table::BucketTable>(&fso.db, &keys::bucket_key("vol", "bkt"))
            .unwrap()
            .unwrap();
        let comps = ["d", "f"];
        let Some(crate::fs::Entry::File { rec, .. }) =
            crate::fs::stat(&fso.db, bucket.object_id, &comps, "key").unwrap()
        else {
            panic!("no file")
        };
        assert_eq!(rec.tags, tags(&[("k", "v")]));
        assert_eq!(
            fso.rejected(tagging("d", "", BTreeMap::new())),
            "KEY_NOT_FOUND"
        );
    }

    /// Bucket tags (rules 15): replaced whole, at most 50, removed by an
    /// empty set; an older entry may not carry them.
    #[test]
    fn buckets_keep_a_tag_set() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        let set = |t: BTreeMap<String, String>| {
            Op::SetBucketTags(st::SetBucketTags {
                volume: "vol".into(),
                bucket: "bkt".into(),
                tags: t,
            })
        };
        let bucket = |sm: &Sm| {
            table::get::<table::BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
                .unwrap()
                .unwrap()
        };
        let command_result::Result::Bucket(b) = sm.ok(set(tags(&[("team", "storage")]))) else {
            panic!()
        };
        assert_eq!(b.tags, tags(&[("team", "storage")]));
        assert_eq!(bucket(&sm).tags, b.tags);
        let many: BTreeMap<String, String> =
            (0..51).map(|i| (format!("k{i}"), String::new())).collect();
        assert_eq!(sm.rejected(set(many)), "TOO_MANY_TAGS");
        assert_eq!(sm.rejected(set(tags(&[("aws:x", "v")]))), "INVALID_TAG");
        assert_eq!(
            sm.rejected_rules(set(tags(&[("a", "b")])), 14),
            "UNSUPPORTED_COMMAND"
        );
        assert_eq!(bucket(&sm).tags, tags(&[("team", "storage")]));
        sm.ok(set(BTreeMap::new()));
        assert!(bucket(&sm).tags.is_empty());
        let missing = Op::SetBucketTags(st::SetBucketTags {
            volume: "vol".into(),
            bucket: "nope".into(),
            tags: BTreeMap::new(),
        });
        assert_eq!(sm.rejected(missing), "BUCKET_NOT_FOUND");
    }
}
