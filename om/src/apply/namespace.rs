//! Volumes and buckets: creating and deleting them, and a bucket's versioning.

use om_proto::store::{BucketRecord, CommandResult, Empty, VolumeRecord, command_result};
use om_raft_store::EntryWrites;

use super::limits;
use super::ops::Operation;
use super::{Ctx, LAYOUT_FSO, LAYOUT_OBJECT_STORE, ok, versions};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, BucketTable, VolumeTable};
use crate::store::view::StateRead;

impl Operation for om_proto::store::CreateVolume {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Volume(&self.name).to_string()
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::name("name", &self.name)?;
        limits::metadata(&self.metadata)?;
        if crate::rules::OWNER_BOUND.holds(rules) {
            crate::validate::owner("owner", &self.owner)?;
        }
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.create_volume(b, self)
    }
}

impl Operation for om_proto::store::DeleteVolume {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
    }

    fn target(&self) -> String {
        Resource::Volume(&self.name).to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::name("name", &self.name)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.delete_volume(b, self)
    }
}

impl Operation for om_proto::store::CreateBucket {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Volume(&self.volume), authz::CREATE)]
    }

    fn target(&self) -> String {
        Resource::Volume(&self.volume).to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::name("volume", &self.volume)?;
        limits::name("name", &self.name)?;
        limits::metadata(&self.metadata)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.create_bucket(b, self)
    }
}

impl Operation for om_proto::store::DeleteBucket {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.name), authz::DELETE)]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.name).to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::name("volume", &self.volume)?;
        limits::name("name", &self.name)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.delete_bucket(b, self)
    }
}

impl Operation for om_proto::store::SetBucketVersioning {
    fn rights(&self, rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(
            Resource::Bucket(&self.volume, &self.bucket),
            authz::configure_rights(rules),
        )]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, _rules: u32) -> Result<(), OmError> {
        limits::name("volume", &self.volume)?;
        limits::name("bucket", &self.bucket)?;
        Ok(())
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.set_bucket_versioning(b, self)
    }
}

impl Operation for om_proto::store::SetBucketTags {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Bucket(&self.volume, &self.bucket), authz::WRITE)]
    }

    fn target(&self) -> String {
        Resource::Bucket(&self.volume, &self.bucket).to_string()
    }

    fn limits(&self, rules: u32) -> Result<(), OmError> {
        limits::name("volume", &self.volume)?;
        limits::name("bucket", &self.bucket)?;
        if !crate::rules::BUCKET_TAGS.holds(rules) {
            return Err(OmError::invalid(
                "UNSUPPORTED_COMMAND",
                "tags",
                "bucket tags need apply rules 15",
            ));
        }
        crate::validate::bucket_tags("tags", &self.tags)
    }

    fn apply(&self, ctx: &Ctx<'_>, b: &mut EntryWrites<'_>) -> Result<CommandResult, OmError> {
        ctx.set_bucket_tags(b, self)
    }
}

impl Ctx<'_> {
    /// Replaces a bucket's tags.
    pub(super) fn set_bucket_tags(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::SetBucketTags,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        bucket.tags = c.tags.clone();
        bucket.modification_time_ms = self.now;
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Bucket(bucket))
    }

    pub(super) fn create_volume(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::CreateVolume,
    ) -> Result<CommandResult, OmError> {
        let key = keys::volume_key(&c.name);
        if table::get::<VolumeTable>(self.db, &key)?.is_some() {
            return Err(OmError::exists(
                "VOLUME_ALREADY_EXISTS",
                "name",
                format!("volume {:?} already exists", c.name),
            ));
        }
        let mut v = VolumeRecord {
            format: 0,
            name: c.name.clone(),
            owner: c.owner.clone(),
            quota_bytes: c.quota_bytes,
            quota_namespace: c.quota_namespace,
            creation_time_ms: self.now,
            modification_time_ms: self.now,
            object_id: self.object_id(0),
            update_id: self.index,
            metadata: c.metadata.clone(),
            bucket_count: 0,
            used_bytes: crate::rules::USAGE_COUNTERS.holds(self.rules).then_some(0),
            acl: Vec::new(),
        };
        table::put::<VolumeTable>(self.db, b, &key, &mut v)?;
        ok(command_result::Result::Volume(v))
    }

    pub(super) fn delete_volume(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::DeleteVolume,
    ) -> Result<CommandResult, OmError> {
        let v = self.volume(&c.name, "name")?;
        // The count is maintained by bucket create/delete; the scan below is one
        // bounded seek and guards against a count that disagrees with the table.
        let mut it = self
            .db
            .iter_prefix(keys::BUCKETS_CF, &keys::bucket_prefix(&c.name))?;
        if v.bucket_count > 0 || it.has_current() {
            return Err(OmError::precondition(
                "VOLUME_NOT_EMPTY",
                "name",
                format!("volume {:?} still has buckets", c.name),
            ));
        }
        it.status()?;
        table::delete::<VolumeTable>(self.db, b, &keys::volume_key(&c.name))?;
        ok(command_result::Result::Empty(Empty {}))
    }

    pub(super) fn create_bucket(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::CreateBucket,
    ) -> Result<CommandResult, OmError> {
        let mut vol = self.volume(&c.volume, "volume")?;
        let key = keys::bucket_key(&c.volume, &c.name);
        if table::get::<BucketTable>(self.db, &key)?.is_some() {
            return Err(OmError::exists(
                "BUCKET_ALREADY_EXISTS",
                "name",
                format!("bucket {}/{} already exists", c.volume, c.name),
            ));
        }
        if vol.quota_namespace > 0 && vol.bucket_count >= vol.quota_namespace {
            return Err(OmError::precondition(
                "QUOTA_EXCEEDED",
                "volume",
                format!(
                    "volume {:?} holds its quota of {} buckets",
                    c.volume, vol.quota_namespace
                ),
            ));
        }
        let layout = match c.layout {
            0 | LAYOUT_OBJECT_STORE => LAYOUT_OBJECT_STORE,
            LAYOUT_FSO => LAYOUT_FSO,
            other => {
                return Err(OmError::invalid(
                    "INVALID_LAYOUT",
                    "layout",
                    format!("unknown bucket layout {other}"),
                ));
            }
        };
        let mut bucket = BucketRecord {
            format: 0,
            volume: c.volume.clone(),
            name: c.name.clone(),
            layout,
            creation_time_ms: self.now,
            modification_time_ms: self.now,
            object_id: self.object_id(0),
            update_id: self.index,
            metadata: c.metadata.clone(),
            key_count: 0,
            used_bytes: 0,
            open_key_count: 0,
            quota_bytes: c.quota_bytes,
            quota_namespace: c.quota_namespace,
            dir_count: crate::rules::USAGE_COUNTERS.holds(self.rules).then_some(0),
            acl: Vec::new(),
            owner: self.caller.map(|c| c.user.clone()).unwrap_or_default(),
            versioning: versions::UNVERSIONED,
            tags: Default::default(),
            latest_snapshot: 0,
            snapshot_count: 0,
        };
        vol.bucket_count = self.grow(vol.bucket_count, 1, "name", "the volume's bucket count")?;
        vol.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        table::put::<VolumeTable>(self.db, b, &keys::volume_key(&c.volume), &mut vol)?;
        ok(command_result::Result::Bucket(bucket))
    }

    pub(super) fn delete_bucket(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::DeleteBucket,
    ) -> Result<CommandResult, OmError> {
        let bucket = self.bucket(&c.volume, &c.name)?;
        // Snapshots hold retained versions (and their blocks) under the
        // bucket's name: the bucket goes once none is left.
        if bucket.snapshot_count > 0 {
            return Err(OmError::precondition(
                "BUCKET_HAS_SNAPSHOTS",
                "name",
                format!(
                    "bucket {}/{} holds {} snapshots (deleted ones count until reclaimed)",
                    c.volume, c.name, bucket.snapshot_count
                ),
            ));
        }
        let mut it = self
            .db
            .iter_prefix(keys::KEYS_CF, &keys::object_prefix(&c.volume, &c.name))?;
        if bucket.key_count > 0 || it.has_current() {
            return Err(OmError::precondition(
                "BUCKET_NOT_EMPTY",
                "name",
                format!("bucket {}/{} still has keys", c.volume, c.name),
            ));
        }
        it.status()?;
        // Keys being written and uploads in progress hold blocks; the bucket
        // goes only once they are committed, aborted or expired.
        if bucket.open_key_count > 0 {
            return Err(OmError::precondition(
                "BUCKET_NOT_EMPTY",
                "name",
                format!(
                    "bucket {}/{} still has keys being written",
                    c.volume, c.name
                ),
            ));
        }
        let mut dirs = self.db.iter_prefix(
            keys::DIRECTORIES_CF,
            &keys::children_prefix(bucket.object_id),
        )?;
        if dirs.has_current() {
            return Err(OmError::precondition(
                "BUCKET_NOT_EMPTY",
                "name",
                format!("bucket {}/{} still has directories", c.volume, c.name),
            ));
        }
        dirs.status()?;
        let prefix = keys::object_prefix(&c.volume, &c.name);
        for (cf, what) in [
            (keys::OPEN_KEYS_CF, "keys being written"),
            (keys::UPLOADS_CF, "multipart uploads in progress"),
        ] {
            let mut it = self.db.iter_prefix(cf, &prefix)?;
            if it.has_current() {
                return Err(OmError::precondition(
                    "BUCKET_NOT_EMPTY",
                    "name",
                    format!("bucket {}/{} still has {what}", c.volume, c.name),
                ));
            }
            it.status()?;
        }
        let mut vol = self.volume(&c.volume, "volume")?;
        vol.bucket_count = vol.bucket_count.saturating_sub(1);
        if crate::rules::USAGE_COUNTERS.holds(self.rules) {
            vol.used_bytes = vol.used_bytes.map(|u| u.saturating_sub(bucket.used_bytes));
        }
        vol.update_id = self.index;
        table::delete::<BucketTable>(self.db, b, &keys::bucket_key(&c.volume, &c.name))?;
        // Its lifecycle configuration goes with it (a bucket created again
        // under the name starts without one).
        if crate::rules::BUCKET_LIFECYCLE.holds(self.rules) {
            table::delete::<table::LifecycleTable>(
                self.db,
                b,
                &keys::bucket_key(&c.volume, &c.name),
            )?;
        }
        // And where its scan stood (LIFECYCLE_SCAN; a recreated bucket's object id
        // differs anyway, so older entries need not remove it).
        if crate::rules::LIFECYCLE_SCAN.holds(self.rules) {
            table::delete::<table::LifecycleScanTable>(
                self.db,
                b,
                &keys::bucket_key(&c.volume, &c.name),
            )?;
        }
        table::put::<VolumeTable>(self.db, b, &keys::volume_key(&c.volume), &mut vol)?;
        ok(command_result::Result::Empty(Empty {}))
    }

    /// Enables or suspends versioning of an OBJECT_STORE bucket.
    pub(super) fn set_bucket_versioning(
        &self,
        b: &mut EntryWrites<'_>,
        c: &om_proto::store::SetBucketVersioning,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.bucket(&c.volume, &c.bucket)?;
        if c.versioning != versions::ENABLED && c.versioning != versions::SUSPENDED {
            return Err(OmError::invalid(
                "INVALID_VERSIONING",
                "versioning",
                "versioning is ENABLED or SUSPENDED; a bucket never returns to UNVERSIONED",
            ));
        }
        if bucket.layout != LAYOUT_OBJECT_STORE {
            return Err(OmError::precondition(
                "VERSIONING_NOT_SUPPORTED",
                "bucket",
                format!(
                    "bucket {}/{} is FILE_SYSTEM_OPTIMIZED; only OBJECT_STORE buckets are versioned",
                    c.volume, c.bucket
                ),
            ));
        }
        bucket.versioning = c.versioning;
        bucket.modification_time_ms = self.now;
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Bucket(bucket))
    }
}
