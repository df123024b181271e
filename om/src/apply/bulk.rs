//! `PutKeys` (rules 6): up to `MAX_PUT_KEYS` new keys in one command, all or none
//! (bulk loading a benchmark or migrated state through Raft). One log entry
//! and one write batch carry them all: the bucket, the volume and the block
//! counter are read and written once.

use om_proto::store::{self as st, CommandResult, CountResult, KeyRecord, command_result};
use om_raft_store::EntryWrites;

use super::limits;
use super::ops::Operation;
use super::quota::Usage;
use super::{Ctx, block_size_or_legacy, lay_out, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
pub use crate::limits::MAX_PUT_KEYS;
use crate::store::keys;
use crate::store::table::{self, KeyTable};

impl Operation for om_proto::store::PutKeys {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        limits::put_keys_count(self.keys.len())?;
        limits::block_size(self.block_size)?;
        for (i, k) in self.keys.iter().enumerate() {
            limits::new_key(k, self.block_size).map_err(|e| e.within(&format!("keys[{i}]")))?;
        }
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.put_keys(b, self)
    }
}

impl Ctx<'_> {
    pub(super) fn put_keys(
        &self,
        b: &mut EntryWrites<'_>,
        c: &st::PutKeys,
    ) -> Result<CommandResult, OmError> {
        if !crate::rules::PUT_KEYS.holds(self.rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "op",
                "PutKeys needs apply rules 6",
            ));
        }
        let mut bucket = self.unversioned_object_store_bucket(
            &c.volume,
            &c.bucket,
            "PutKeys creates keys in unversioned buckets only (use PutKey)",
        )?;
        // Everything is checked before the first write is staged.
        let block_size = block_size_or_legacy(c.block_size);
        let mut seen = std::collections::HashSet::with_capacity(c.keys.len());
        let mut usage = Usage::default();
        let mut blocks = 0u64;
        for (i, k) in c.keys.iter().enumerate() {
            if !seen.insert(k.key.as_str()) {
                return Err(OmError::invalid(
                    "DUPLICATE_KEY",
                    format!("keys[{i}].key"),
                    format!("key {:?} is listed more than once", k.key),
                ));
            }
            let name = keys::object_key(&c.volume, &c.bucket, &k.key);
            if self.key_get(&name)?.is_some() {
                return Err(OmError::exists(
                    "KEY_ALREADY_EXISTS",
                    format!("keys[{i}].key"),
                    format!("key {}/{}/{} already exists", c.volume, c.bucket, k.key),
                ));
            }
            usage.add_bytes = usage.add_bytes.saturating_add(k.size);
            usage.add_keys += 1;
            blocks += k.size.div_ceil(block_size);
        }
        let vol = self.charge(&mut bucket, usage)?;
        let mut ids = self.allocate(b, blocks)?.into_iter();
        for (i, k) in c.keys.iter().enumerate() {
            let n = k.size.div_ceil(block_size) as usize;
            let mut rec = KeyRecord {
                size: k.size,
                blocks: lay_out(ids.by_ref().take(n).collect(), k.size, block_size),
                etag: k.etag.clone(),
                metadata: k.metadata.clone(),
                content_type: k.content_type.clone(),
                tags: k.tags.clone(),
                creation_time_ms: self.now,
                modification_time_ms: self.now,
                object_id: self.object_id(i as u8),
                update_id: self.index,
                written_index: self.written_index(),
                ..Default::default()
            };
            let name = keys::object_key(&c.volume, &c.bucket, &k.key);
            self.log_change(b, &bucket, &name)?;
            table::put::<KeyTable>(self.db, b, &name, &mut rec)?;
        }
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        self.put_volume(b, vol)?;
        ok(command_result::Result::Count(CountResult {
            count: c.keys.len() as u64,
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::apply::tests::{Sm, setup};
    use crate::apply::{LAYOUT_FSO, LAYOUT_OBJECT_STORE, MAX_PUT_KEYS, into_outcome, versions};
    use crate::error::OmError;
    use crate::store::keys;
    use crate::store::table::{self, BucketTable, KeyTable};
    use om_proto::store::{self as st, command::Op, command_result};

    fn new_key(name: &str, size: u64) -> st::NewKey {
        st::NewKey {
            key: name.into(),
            size,
            etag: "d41d8cd98f00b204e9800998ecf8427e".into(),
            ..Default::default()
        }
    }

    fn put_keys(keys: Vec<st::NewKey>) -> Op {
        Op::PutKeys(st::PutKeys {
            volume: "vol".into(),
            bucket: "bkt".into(),
            keys,
            block_size: 1 << 20,
        })
    }

    fn key(sm: &Sm, name: &str) -> Option<st::KeyRecord> {
        table::get::<KeyTable>(&sm.db, &keys::object_key("vol", "bkt", name)).unwrap()
    }

    fn bucket(sm: &Sm) -> st::BucketRecord {
        table::get::<BucketTable>(&sm.db, &keys::bucket_key("vol", "bkt"))
            .unwrap()
            .unwrap()
    }

    /// One PutKeys leaves the keys, the bucket's counters and the block ids
    /// that the same keys put one by one would (ids and times aside).
    #[test]
    fn put_keys_creates_what_put_key_would_in_one_entry() {
        let sizes = [0u64, 1, (1 << 20) + 1, 3 << 20];
        let mut one = Sm::new();
        setup(&mut one, LAYOUT_OBJECT_STORE);
        for (i, s) in sizes.iter().enumerate() {
            one.ok(Op::PutKey(st::PutKey {
                volume: "vol".into(),
                bucket: "bkt".into(),
                key: format!("k{i}"),
                size: *s,
                etag: "d41d8cd98f00b204e9800998ecf8427e".into(),
                block_size: 1 << 20,
                ..Default::default()
            }));
        }
        let mut bulk = Sm::new();
        setup(&mut bulk, LAYOUT_OBJECT_STORE);
        let r = bulk.ok(put_keys(
            sizes
                .iter()
                .enumerate()
                .map(|(i, s)| new_key(&format!("k{i}"), *s))
                .collect(),
        ));
        assert!(matches!(r, command_result::Result::Count(c) if c.count == 4));
        let mut ids = std::collections::BTreeSet::new();
        let mut object_ids = std::collections::BTreeSet::new();
        for i in 0..sizes.len() {
            let (a, b) = (
                key(&one, &format!("k{i}")).unwrap(),
                key(&bulk, &format!("k{i}")).unwrap(),
            );
            assert_eq!((a.size, &a.etag), (b.size, &b.etag));
            let lens = |r: &st::KeyRecord| r.blocks.iter().map(|x| x.length).collect::<Vec<_>>();
            assert_eq!(lens(&a), lens(&b));
            assert_eq!(
                a.blocks.iter().map(|x| x.block_id).collect::<Vec<_>>(),
                b.blocks.iter().map(|x| x.block_id).collect::<Vec<_>>(),
                "the same ids, in order"
            );
            ids.extend(b.blocks.iter().map(|x| x.block_id));
            assert!(object_ids.insert(b.object_id), "object ids are unique");
            assert_eq!(b.update_id, 3);
        }
        assert_eq!(ids.len(), 1 + 2 + 3);
        let (a, b) = (bucket(&one), bucket(&bulk));
        assert_eq!((a.key_count, a.used_bytes), (b.key_count, b.used_bytes));
        assert_eq!(b.key_count, 4);
        // The next key gets the next block id in both.
        let next = |sm: &mut Sm| match sm.ok(Op::PutKey(st::PutKey {
            volume: "vol".into(),
            bucket: "bkt".into(),
            key: "next".into(),
            size: 1,
            block_size: 1 << 20,
            ..Default::default()
        })) {
            command_result::Result::Key(k) => k.key.unwrap().blocks[0].block_id,
            other => panic!("{other:?}"),
        };
        assert_eq!(next(&mut one), next(&mut bulk));
    }

    fn refusal(sm: &mut Sm, op: Op) -> (String, String) {
        let before = crate::store::dump_tables(&sm.db).unwrap();
        let (r, staged) = sm.apply(op);
        assert_eq!(staged, 0, "a refused PutKeys staged writes");
        assert_eq!(before, crate::store::dump_tables(&sm.db).unwrap());
        match into_outcome(r) {
            Err(OmError::Request { reason, field, .. }) => (reason, field),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// Every refusal names its reason and field and changes nothing: one bad
    /// key refuses the whole command.
    #[test]
    fn a_bad_put_keys_is_refused_whole_and_changes_nothing() {
        let mut sm = Sm::new();
        setup(&mut sm, LAYOUT_OBJECT_STORE);
        sm.ok(put_keys(vec![new_key("exists", 5)]));
        let cases: Vec<(Vec<st::NewKey>, &str, &str)> = vec![
            (
                vec![new_key("a", 1), new_key("exists", 1)],
                "KEY_ALREADY_EXISTS",
                "keys[1].key",
            ),
            (
                vec![new_key("a", 1), new_key("b", 1), new_key("a", 2)],
                "DUPLICATE_KEY",
                "keys[2].key",
            ),
            (
                vec![new_key("a", 1), new_key("", 1)],
                "INVALID_KEY",
                "keys[1].key",
            ),
            (vec![new_key("a", 6 << 40)], "KEY_TOO_LARGE", "keys[0].size"),
            (vec![], "INVALID_KEY_COUNT", "keys"),
            (
                (0..=MAX_PUT_KEYS)
                    .map(|i| new_key(&format!("n{i}"), 0))
                    .collect(),
                "INVALID_KEY_COUNT",
                "keys",
            ),
        ];
        for (keys, reason, field) in cases {
            let (r, f) = refusal(&mut sm, put_keys(keys));
            assert_eq!((r.as_str(), f.as_str()), (reason, field));
        }
        // Over the bucket's namespace quota as a whole, though each key fits.
        sm.ok(Op::SetBucketQuota(st::SetBucketQuota {
            volume: "vol".into(),
            name: "bkt".into(),
            quota_namespace: Some(3),
            ..Default::default()
        }));
        let (r, _) = refusal(
            &mut sm,
            put_keys(vec![new_key("a", 1), new_key("b", 1), new_key("c", 1)]),
        );
        assert!(r.contains("QUOTA"), "{r}");
        sm.ok(put_keys(vec![new_key("a", 1), new_key("b", 1)]));
        // Versioned and FSO buckets, and commands of older rules.
        sm.ok(Op::SetBucketVersioning(st::SetBucketVersioning {
            volume: "vol".into(),
            bucket: "bkt".into(),
            versioning: versions::ENABLED,
        }));
        assert_eq!(
            refusal(&mut sm, put_keys(vec![new_key("v", 1)])).0,
            "BUCKET_VERSIONED"
        );
        let mut fso = Sm::new();
        setup(&mut fso, LAYOUT_FSO);
        assert_eq!(
            refusal(&mut fso, put_keys(vec![new_key("f", 1)])).1,
            "bucket"
        );
        let mut old = Sm::new();
        setup(&mut old, LAYOUT_OBJECT_STORE);
        assert_eq!(
            old.rejected_rules(put_keys(vec![new_key("o", 1)]), 5),
            "UNSUPPORTED_COMMAND"
        );
    }
}
