//! Keys written whole: put, delete (one, many, or named versions) and
//! rename, over `Ctx`'s staged view.

use om_proto::store::{
    BucketRecord, CommandResult, DeleteConditions, DeleteKeysResult, DeletedVersion, Empty,
    KeyConditions, KeyOutcome, KeyRecord, KeyResult, VolumeRecord, command_result,
};
use om_raft_store::EntryWrites;

use super::conditions::check_delete_conditions;
use super::limits;
use super::ops::Operation;
use super::{Ctx, Usage, block_size_or_legacy, check_conditions, lay_out, ok, versions};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, KeyTable};
use crate::validate::MAX_DELETE_KEYS;

impl Operation for om_proto::store::PutKey {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        limits::key_size("size", self.size)?;
        limits::layout(self.size, self.block_size)?;
        limits::etag("etag", &self.etag)?;
        crate::validate::content_type("content_type", &self.content_type)?;
        limits::metadata(&self.metadata)?;
        limits::conditions(self.conditions.as_ref())?;
        limits::tags(rules, &self.tags)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.put_key(b, self)
    }
}

impl Operation for om_proto::store::DeleteKey {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::DELETE)]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.key)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "key", &self.key)?;
        limits::version_id("version_id", &self.version_id)?;
        limits::delete_conditions(self.conditions.iter())?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.delete_key(b, self)
    }
}

impl Operation for om_proto::store::DeleteKeys {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::DELETE)]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::bucket(&self.volume, &self.bucket)?;
        if self.keys.len() > MAX_DELETE_KEYS {
            return Err(OmError::invalid(
                "INVALID_KEY_COUNT",
                "keys",
                format!(
                    "at most {MAX_DELETE_KEYS} keys per request, got {}",
                    self.keys.len()
                ),
            ));
        }
        for k in &self.keys {
            crate::validate::key_name("keys", k)?;
        }
        super::versions::check_version_id_count(self.keys.len(), self.version_ids.len())?;
        for v in &self.version_ids {
            limits::version_id("version_ids", v)?;
        }
        limits::condition_count(self.keys.len(), self.conditions.len())?;
        limits::delete_conditions(self.conditions.iter())?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.delete_keys(b, self)
    }
}

impl Operation for om_proto::store::RenameKey {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(
            Resource::Bucket(&self.volume, &self.bucket),
            authz::WRITE | authz::DELETE,
        )]
    }

    fn target(&self) -> String {
        authz::object_target(&self.volume, &self.bucket, &self.from)
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::object(&self.volume, &self.bucket, "from", &self.from)?;
        crate::validate::key_name("to", &self.to)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.rename_key(b, self)
    }
}

impl Ctx<'_> {
    pub(super) fn put_key(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::PutKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        let old = self.replaced_key(&bucket, &c.key, c.conditions.as_ref())?;
        let vol = self.charge(&mut bucket, old.usage(c.size, true))?;
        // `limits` bounded the block count before anything is allocated.
        let block_size = block_size_or_legacy(c.block_size);
        let blocks = self.allocate(b, c.size.div_ceil(block_size))?;
        let blocks = lay_out(blocks, c.size, block_size);
        let rec = KeyRecord {
            size: c.size,
            blocks,
            etag: c.etag.clone(),
            metadata: c.metadata.clone(),
            content_type: c.content_type.clone(),
            tags: c.tags.clone(),
            ..Default::default()
        };
        self.write_key(b, &mut bucket, &c.key, old, rec, vol)
    }

    /// Reads the versions a write of `name` would affect and checks the
    /// write's conditions against the current one (a delete marker counts as
    /// no key). Stages nothing.
    pub(super) fn replaced_key(
        &self,
        bucket: &BucketRecord,
        name: &str,
        cond: Option<&KeyConditions>,
    ) -> Result<versions::Supersede, OmError> {
        let sup = self.supersede(bucket, name)?;
        if let Some(cond) = cond {
            check_conditions(
                cond,
                sup.live(),
                &format!("{}/{}/{name}", bucket.volume, bucket.name),
                self.rules,
            )?;
        }
        Ok(sup)
    }

    /// Stages `rec` as the new version of `name`: stamps times and ids, frees
    /// the replaced version's blocks (seq 0) or, in a versioned bucket, keeps
    /// the previous version as noncurrent, and stages `bucket` and `vol`,
    /// whose counters `charge` already moved.
    pub(super) fn write_key(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &mut BucketRecord,
        name: &str,
        sup: versions::Supersede,
        rec: KeyRecord,
        vol: Option<VolumeRecord>,
    ) -> Result<CommandResult, OmError> {
        if sup.versioning() == versions::UNVERSIONED {
            let key = keys::object_key(&bucket.volume, &bucket.name, name);
            return self.write_entry::<KeyTable>(
                b,
                bucket,
                name,
                &key,
                (sup.into_current(), vol),
                rec,
            );
        }
        let rec = self.put_version(b, bucket, name, sup, rec, 0)?;
        bucket.update_id = self.index;
        self.put_bucket(b, bucket)?;
        self.put_volume(b, vol)?;
        ok(command_result::Result::Key(KeyResult {
            volume: bucket.volume.clone(),
            bucket: bucket.name.clone(),
            name: name.to_string(),
            key: Some(rec),
        }))
    }

    /// `write_key` for any table of `KeyRecord`s (keys, or files of FSO
    /// buckets), at table key `key`; `name` is what the result reports.
    pub(super) fn write_entry<T: table::TableSchema<Value = KeyRecord>>(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &mut BucketRecord,
        name: &str,
        key: &[u8],
        (old, vol): (Option<KeyRecord>, Option<VolumeRecord>),
        mut rec: KeyRecord,
    ) -> Result<CommandResult, OmError> {
        rec.creation_time_ms = old.as_ref().map_or(self.now, |o| o.creation_time_ms);
        rec.modification_time_ms = self.now;
        rec.object_id = self.object_id(0);
        rec.update_id = self.index;
        rec.written_index = self.written_index();
        if let Some(o) = old {
            if T::CF == keys::KEYS_CF {
                self.retire(b, bucket, key, &o)?;
            }
            let origin = format!("overwrite {}/{}/{name}", bucket.volume, bucket.name);
            self.release_blocks(b, 0, o.blocks, origin)?;
        }
        bucket.update_id = self.index;
        if T::CF == keys::KEYS_CF {
            self.log_change(b, bucket, key)?;
        }
        table::put::<T>(self.db, b, key, &mut rec)?;
        self.put_bucket(b, bucket)?;
        self.put_volume(b, vol)?;
        ok(command_result::Result::Key(KeyResult {
            volume: bucket.volume.clone(),
            bucket: bucket.name.clone(),
            name: name.to_string(),
            key: Some(rec),
        }))
    }

    /// Stages the deletion of `name` if it exists: the key goes, its blocks go
    /// to the deleted-blocks table under sequence `seq`, and what it held is
    /// added to `freed`. Returns whether the key existed; stages nothing when
    /// it did not.
    pub(super) fn remove_key(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        name: &str,
        seq: u32,
        freed: &mut Usage,
    ) -> Result<bool, OmError> {
        let key = keys::object_key(&bucket.volume, &bucket.name, name);
        let Some(old) = table::get::<KeyTable>(self.db, &key)? else {
            return Ok(false);
        };
        freed.free(Usage::removal(old.size));
        self.retire(b, bucket, &key, &old)?;
        let origin = format!("delete {}/{}/{name}", bucket.volume, bucket.name);
        self.release_blocks(b, seq, old.blocks, origin)?;
        self.log_change(b, bucket, &key)?;
        table::delete::<KeyTable>(self.db, b, &key)?;
        Ok(true)
    }

    pub(super) fn delete_key(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::DeleteKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        self.check_delete(&bucket, &c.key, &c.version_id, c.conditions.as_ref(), "key")?;
        let mut freed = Usage::default();
        let deleted = if !c.version_id.is_empty() {
            let old = self.remove_version(b, &bucket, &c.key, &c.version_id, 0, &mut freed)?;
            Some(DeletedVersion {
                version_id: versions::version_id(&old),
                delete_marker: old.delete_marker,
            })
        } else if bucket.versioning != versions::UNVERSIONED {
            let marker = self.add_delete_marker(b, &bucket, &c.key, 0, &mut freed)?;
            Some(DeletedVersion {
                version_id: versions::version_id(&marker),
                delete_marker: true,
            })
        } else if self.remove_key(b, &bucket, &c.key, 0, &mut freed)? {
            None
        } else {
            return Err(OmError::not_found(
                "KEY_NOT_FOUND",
                "key",
                format!("key {}/{}/{} does not exist", c.volume, c.bucket, c.key),
            ));
        };
        // Frees only: never refused, so it may follow the staged removal.
        let vol = self.charge(&mut bucket, freed)?;
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        self.put_volume(b, vol)?;
        ok(match deleted {
            Some(d) => command_result::Result::Deleted(d),
            None => command_result::Result::Empty(Empty {}),
        })
    }

    /// Checks a delete's conditions against what it would remove: version
    /// `version_id` of `name`, or without one its current entry.
    fn check_delete(
        &self,
        bucket: &BucketRecord,
        name: &str,
        version_id: &str,
        cond: Option<&DeleteConditions>,
        field: &str,
    ) -> Result<(), OmError> {
        // DeleteKeys gives every key conditions when one has them: those
        // that ask nothing are no conditions.
        let Some(cond) = cond.filter(|c| **c != DeleteConditions::default()) else {
            return Ok(());
        };
        let cond = Some(cond);
        let (volume, bname) = (&bucket.volume, &bucket.name);
        let path = format!("key {volume}/{bname}/{name}");
        let current = self.key_get(&keys::object_key(volume, bname, name))?;
        if version_id.is_empty() {
            let missing =
                || OmError::not_found("KEY_NOT_FOUND", field, format!("{path} does not exist"));
            return check_delete_conditions(cond, current.as_ref(), missing, &path, self.rules);
        }
        let v = versions::parse_version_id(version_id, field)?;
        let target = versions::locate(volume, bname, name, current, v, |k| self.key_get(k))?
            .map(versions::Located::into_record);
        let missing = || versions::version_not_found(volume, bname, name, version_id, field);
        check_delete_conditions(cond, target.as_ref(), missing, &path, self.rules)
    }

    /// DeleteKeys in a versioned bucket or with version ids: each key in
    /// turn, every one seeing what the ones before it did (several versions
    /// of one key may go at once), each with its own outcome.
    pub(super) fn delete_versions(
        &self,
        b: &mut EntryWrites<'_>,
        bucket: &BucketRecord,
        c: &om_proto::store::DeleteKeys,
        freed: &mut Usage,
    ) -> Result<Vec<KeyOutcome>, OmError> {
        let mut outcomes = Vec::with_capacity(c.keys.len());
        for (i, name) in c.keys.iter().enumerate() {
            let vid = c.version_ids.get(i).map_or("", String::as_str);
            let seq = u32::try_from(i).unwrap_or(u32::MAX);
            let checked = self.check_delete(bucket, name, vid, c.conditions.get(i), "keys");
            let done = if let Err(e) = checked {
                Err(e)
            } else if !vid.is_empty() {
                self.remove_version(b, bucket, name, vid, seq, freed)
                    .map(|old| (versions::version_id(&old), old.delete_marker))
            } else if bucket.versioning != versions::UNVERSIONED {
                self.add_delete_marker(b, bucket, name, seq, freed)
                    .map(|m| (versions::version_id(&m), true))
            } else if self
                .key_get(&keys::object_key(&bucket.volume, &bucket.name, name))?
                .is_some()
            {
                self.remove_version(b, bucket, name, versions::NULL_VERSION_ID, seq, freed)
                    .map(|_| (String::new(), false))
            } else {
                Err(OmError::not_found(
                    "KEY_NOT_FOUND",
                    "keys",
                    format!("key {}/{}/{name} does not exist", c.volume, c.bucket),
                ))
            };
            outcomes.push(match done {
                Ok((version_id, delete_marker)) => KeyOutcome {
                    key: name.clone(),
                    version_id,
                    delete_marker,
                    ..Default::default()
                },
                Err(e @ OmError::Request { .. }) => KeyOutcome {
                    key: name.clone(),
                    reason: e.reason().to_string(),
                    message: e.to_string(),
                    version_id: vid.to_string(),
                    ..Default::default()
                },
                Err(e) => return Err(e),
            });
        }
        Ok(outcomes)
    }

    /// Deletes each listed key that exists; the others get their own outcome.
    /// A key listed twice is deleted once and reported the same way both times.
    pub(super) fn delete_keys(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::DeleteKeys,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.object_store_bucket(&c.volume, &c.bucket)?;
        // Conditions are per key, so a key listed twice is checked twice:
        // each key in turn, as in a versioned bucket.
        if bucket.versioning != versions::UNVERSIONED
            || !c.version_ids.is_empty()
            || !c.conditions.is_empty()
        {
            let mut freed = Usage::default();
            let outcomes = self.delete_versions(b, &bucket, c, &mut freed)?;
            // Frees only: never refused, so it may follow the staged removals.
            let vol = self.charge(&mut bucket, freed)?;
            bucket.update_id = self.index;
            self.put_bucket(b, &mut bucket)?;
            self.put_volume(b, vol)?;
            return ok(command_result::Result::DeleteKeys(DeleteKeysResult {
                outcomes,
            }));
        }
        // A key listed twice gets the outcome of its first occurrence.
        let mut seen: std::collections::HashMap<&str, bool> = std::collections::HashMap::new();
        let mut outcomes = Vec::with_capacity(c.keys.len());
        let mut seq = 0u32;
        let mut freed = Usage::default();
        for name in &c.keys {
            let deleted = match seen.get(name.as_str()) {
                Some(d) => *d,
                None => {
                    let removed = self.remove_key(b, &bucket, name, seq, &mut freed)?;
                    seq += u32::from(removed);
                    seen.insert(name, removed);
                    removed
                }
            };
            outcomes.push(if deleted {
                KeyOutcome {
                    key: name.clone(),
                    ..Default::default()
                }
            } else {
                KeyOutcome {
                    key: name.clone(),
                    reason: "KEY_NOT_FOUND".to_string(),
                    message: format!("key {}/{}/{name} does not exist", c.volume, c.bucket),
                    ..Default::default()
                }
            });
        }
        if seq > 0 {
            // Frees only: never refused, so it may follow the staged removals.
            let vol = self.charge(&mut bucket, freed)?;
            bucket.update_id = self.index;
            self.put_bucket(b, &mut bucket)?;
            self.put_volume(b, vol)?;
        }
        ok(command_result::Result::DeleteKeys(DeleteKeysResult {
            outcomes,
        }))
    }

    /// Moves a key to a new name in the same bucket, keeping its object id and blocks.
    pub(super) fn rename_key(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::RenameKey,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.unversioned_object_store_bucket(
            &c.volume,
            &c.bucket,
            "a rename would rewrite history (copy, then delete)",
        )?;
        let from = keys::object_key(&c.volume, &c.bucket, &c.from);
        let to = keys::object_key(&c.volume, &c.bucket, &c.to);
        let mut rec = table::get::<KeyTable>(self.db, &from)?.ok_or_else(|| {
            OmError::not_found(
                "KEY_NOT_FOUND",
                "from",
                format!("key {}/{}/{} does not exist", c.volume, c.bucket, c.from),
            )
        })?;
        if table::get::<KeyTable>(self.db, &to)?.is_some() {
            return Err(OmError::exists(
                "KEY_ALREADY_EXISTS",
                "to",
                format!("key {}/{}/{} already exists", c.volume, c.bucket, c.to),
            ));
        }
        self.retire(b, &bucket, &from, &rec)?;
        rec.modification_time_ms = self.now;
        rec.update_id = self.index;
        rec.written_index = self.written_index();
        bucket.update_id = self.index;
        self.log_change(b, &bucket, &from)?;
        self.log_change(b, &bucket, &to)?;
        table::delete::<KeyTable>(self.db, b, &from)?;
        table::put::<KeyTable>(self.db, b, &to, &mut rec)?;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Key(KeyResult {
            volume: c.volume.clone(),
            bucket: c.bucket.clone(),
            name: c.to.clone(),
            key: Some(rec),
        }))
    }
}
