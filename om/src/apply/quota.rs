//! Usage and quotas of volumes and buckets.
//!
//! Usage is committed data, as in Ozone: a bucket's `used_bytes` is the size
//! of its committed keys and files, and its namespace counts its keys, files
//! and directories; a volume's bytes are the sum of its buckets' and its
//! namespace is its bucket count. Each counter changes in the same batch as
//! the write that changes it. Open sessions, uploaded parts and blocks
//! awaiting reclamation count for nothing until a commit (or completion)
//! makes them a key.
//!
//! Only growth is refused: a write that frees at least as much as it adds
//! always goes through, so deleting makes room again (an overwrite frees the
//! replaced version first). The refusal is FAILED_PRECONDITION
//! `QUOTA_EXCEEDED` naming the resource (`bucket` or `volume`).
//!
//! Everything here is rules 1 (see `Command.rules`): commands of rules 0
//! change bucket counters as they always did and touch no volume.

use om_proto::store::{
    BucketRecord, CommandResult, KeyRecord, SetBucketQuota, SetVolumeQuota, VolumeRecord,
    command_result,
};
use om_raft_store::EntryWrites;

use super::limits;
use super::ops::Operation;
use super::{Ctx, ok};
use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, BucketTable, VolumeTable};
use crate::store::view::StateRead;

impl Operation for om_proto::store::SetVolumeQuota {
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
        ctx.set_volume_quota(b, self)
    }
}

impl Operation for om_proto::store::SetBucketQuota {
    fn rights(&self, _rules: u32) -> Vec<(Resource<'_>, u32)> {
        vec![(Resource::Cluster, authz::ALL)]
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
        ctx.set_bucket_quota(b, self)
    }
}

/// How one command changes one bucket's usage.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Usage {
    pub add_bytes: u64,
    pub free_bytes: u64,
    /// Keys (object-store buckets) or files (FSO buckets).
    pub add_keys: u64,
    pub free_keys: u64,
    pub add_dirs: u64,
    pub free_dirs: u64,
}

impl Usage {
    /// A committed key or file of `size` bytes, replacing `old` if any.
    pub fn write(old: Option<&KeyRecord>, size: u64) -> Usage {
        Usage {
            add_bytes: size,
            free_bytes: old.map_or(0, |o| o.size),
            add_keys: u64::from(old.is_none()),
            ..Usage::default()
        }
    }

    /// A key or file of `size` bytes removed.
    pub fn removal(size: u64) -> Usage {
        Usage {
            free_bytes: size,
            free_keys: 1,
            ..Usage::default()
        }
    }

    /// New directories.
    pub fn dirs_added(n: u64) -> Usage {
        Usage {
            add_dirs: n,
            ..Usage::default()
        }
    }

    /// Frees only: the sums saturate, which only ever takes a counter to 0.
    pub fn free(&mut self, other: Usage) {
        self.free_bytes = self.free_bytes.saturating_add(other.free_bytes);
        self.free_keys = self.free_keys.saturating_add(other.free_keys);
        self.free_dirs = self.free_dirs.saturating_add(other.free_dirs);
    }
}

/// A bucket's used namespace: keys and files, plus directories where they
/// are counted (FSO buckets created from rules 1 on).
pub fn bucket_namespace(b: &BucketRecord) -> u64 {
    b.key_count.saturating_add(b.dir_count.unwrap_or(0))
}

/// A volume's used bytes: its counter, or for a volume no rules-1 write has
/// touched yet, the sum of its buckets' (one scan of its buckets).
pub fn volume_used_bytes(db: &(impl StateRead + ?Sized), v: &VolumeRecord) -> Result<u64, OmError> {
    if let Some(n) = v.used_bytes {
        return Ok(n);
    }
    let mut it = db.iter_prefix(keys::BUCKETS_CF, &keys::bucket_prefix(&v.name))?;
    let mut sum = 0u64;
    while let Some((_, val)) = it.current() {
        sum = sum.saturating_add(table::decode::<BucketTable>(val)?.used_bytes);
        it.advance();
    }
    it.status()?;
    Ok(sum)
}

/// Refuses `used` past `quota` (0: none) of `resource` (`bucket`/`volume`).
fn within_quota(
    resource: &'static str,
    name: &str,
    what: &str,
    used: u64,
    quota: u64,
) -> Result<(), OmError> {
    if quota == 0 || used <= quota {
        return Ok(());
    }
    Err(OmError::precondition(
        "QUOTA_EXCEEDED",
        resource,
        format!("{resource} {name} would hold {used} {what}; its quota is {quota}"),
    ))
}

impl Ctx<'_> {
    /// `n + by`. From rules 1 on an overflow is refused (FAILED_PRECONDITION
    /// `COUNTER_OVERFLOW` on `field`); rules-0 commands wrap, as the release
    /// build they were applied with did.
    pub(super) fn grow(&self, n: u64, by: u64, field: &str, what: &str) -> Result<u64, OmError> {
        if !crate::rules::COUNTER_OVERFLOW.holds(self.rules) {
            return Ok(n.wrapping_add(by));
        }
        n.checked_add(by).ok_or_else(|| {
            OmError::precondition(
                "COUNTER_OVERFLOW",
                field,
                format!("{what} would pass {}", u64::MAX),
            )
        })
    }

    /// Applies `u` to `bucket`'s counters and (rules 1) to its volume's used
    /// bytes, refusing growth past either's quota. Stages nothing: the caller
    /// stages `bucket` and the returned volume (`put_volume`) with its other
    /// writes, so it must call this before staging anything, unless `u` only
    /// frees, which is never refused.
    pub(super) fn charge(
        &self,
        bucket: &mut BucketRecord,
        u: Usage,
    ) -> Result<Option<VolumeRecord>, OmError> {
        let used = self.grow(
            bucket.used_bytes.saturating_sub(u.free_bytes),
            u.add_bytes,
            "size",
            "the bucket's used bytes",
        )?;
        let keys = self.grow(
            bucket.key_count.saturating_sub(u.free_keys),
            u.add_keys,
            "key",
            "the bucket's key count",
        )?;
        if !crate::rules::USAGE_COUNTERS.holds(self.rules) {
            bucket.used_bytes = used;
            bucket.key_count = keys;
            return Ok(None);
        }
        let dirs = match bucket.dir_count {
            Some(d) => Some(self.grow(
                d.saturating_sub(u.free_dirs),
                u.add_dirs,
                "path",
                "the bucket's directory count",
            )?),
            None => None,
        };
        let path = format!("{}/{}", bucket.volume, bucket.name);
        let grows = u.add_bytes > u.free_bytes;
        if grows {
            within_quota("bucket", &path, "bytes", used, bucket.quota_bytes)?;
        }
        let ns_before = bucket_namespace(bucket);
        let ns_after = keys.saturating_add(dirs.unwrap_or(0));
        if ns_after > ns_before {
            within_quota(
                "bucket",
                &path,
                "keys, files and directories",
                ns_after,
                bucket.quota_namespace,
            )?;
        }
        let vol = if u.add_bytes == 0 && u.free_bytes == 0 {
            None
        } else if let Some(mut v) =
            table::get::<VolumeTable>(self.db, &keys::volume_key(&bucket.volume))?
        {
            let after = self.grow(
                volume_used_bytes(self.db, &v)?.saturating_sub(u.free_bytes),
                u.add_bytes,
                "size",
                "the volume's used bytes",
            )?;
            if grows {
                within_quota("volume", &v.name, "bytes", after, v.quota_bytes)?;
            }
            v.used_bytes = Some(after);
            Some(v)
        } else {
            None
        };
        bucket.used_bytes = used;
        bucket.key_count = keys;
        bucket.dir_count = dirs;
        Ok(vol)
    }

    /// Stages a volume `charge` returned.
    pub(super) fn put_volume(
        &self,
        b: &mut EntryWrites<'_>,
        vol: Option<VolumeRecord>,
    ) -> Result<(), OmError> {
        if let Some(mut v) = vol {
            let key = keys::volume_key(&v.name);
            table::put::<VolumeTable>(self.db, b, &key, &mut v)?;
        }
        Ok(())
    }

    /// Sets or clears (0) a volume's quotas; absent fields stay. A quota
    /// below what the volume already holds is refused.
    pub(super) fn set_volume_quota(
        &self,
        b: &mut EntryWrites<'_>,
        c: &SetVolumeQuota,
    ) -> Result<CommandResult, OmError> {
        let mut v = self.volume(&c.name, "name")?;
        if let Some(q) = c.quota_bytes {
            let used = volume_used_bytes(self.db, &v)?;
            below_usage("quota_bytes", "volume", &c.name, q, used, "bytes")?;
            v.quota_bytes = q;
            v.used_bytes = Some(used);
        }
        if let Some(q) = c.quota_namespace {
            below_usage(
                "quota_namespace",
                "volume",
                &c.name,
                q,
                v.bucket_count,
                "buckets",
            )?;
            v.quota_namespace = q;
        }
        v.modification_time_ms = self.now;
        v.update_id = self.index;
        table::put::<VolumeTable>(self.db, b, &keys::volume_key(&c.name), &mut v)?;
        ok(command_result::Result::Volume(v))
    }

    /// Sets or clears (0) a bucket's quotas; absent fields stay. A quota
    /// below what the bucket already holds is refused.
    pub(super) fn set_bucket_quota(
        &self,
        b: &mut EntryWrites<'_>,
        c: &SetBucketQuota,
    ) -> Result<CommandResult, OmError> {
        let mut bucket = self.bucket(&c.volume, &c.name)?;
        let path = format!("{}/{}", c.volume, c.name);
        if let Some(q) = c.quota_bytes {
            below_usage(
                "quota_bytes",
                "bucket",
                &path,
                q,
                bucket.used_bytes,
                "bytes",
            )?;
            bucket.quota_bytes = q;
        }
        if let Some(q) = c.quota_namespace {
            below_usage(
                "quota_namespace",
                "bucket",
                &path,
                q,
                bucket_namespace(&bucket),
                "keys, files and directories",
            )?;
            bucket.quota_namespace = q;
        }
        bucket.modification_time_ms = self.now;
        bucket.update_id = self.index;
        self.put_bucket(b, &mut bucket)?;
        ok(command_result::Result::Bucket(bucket))
    }
}

/// A new quota (0: none) must not be below what the resource holds (Ozone
/// refuses it too): FAILED_PRECONDITION `QUOTA_BELOW_USAGE` on `field`.
fn below_usage(
    field: &'static str,
    resource: &str,
    name: &str,
    quota: u64,
    used: u64,
    what: &str,
) -> Result<(), OmError> {
    if quota == 0 || quota >= used {
        return Ok(());
    }
    Err(OmError::precondition(
        "QUOTA_BELOW_USAGE",
        field,
        format!("{resource} {name} already holds {used} {what}, more than {quota}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_of_writes_and_removals() {
        let old = KeyRecord {
            size: 7,
            ..Default::default()
        };
        assert_eq!(
            Usage::write(None, 5),
            Usage {
                add_bytes: 5,
                add_keys: 1,
                ..Usage::default()
            }
        );
        assert_eq!(
            Usage::write(Some(&old), 5),
            Usage {
                add_bytes: 5,
                free_bytes: 7,
                ..Usage::default()
            }
        );
        let mut u = Usage::removal(u64::MAX);
        u.free(Usage::removal(3));
        assert_eq!(u.free_bytes, u64::MAX);
        assert_eq!(u.free_keys, 2);
    }

    #[test]
    fn quotas_refuse_only_past_the_limit() {
        assert!(within_quota("bucket", "v/b", "bytes", 10, 10).is_ok());
        assert!(within_quota("bucket", "v/b", "bytes", 11, 0).is_ok());
        let e = within_quota("volume", "v", "bytes", 11, 10).unwrap_err();
        assert_eq!(e.reason(), "QUOTA_EXCEEDED");
        assert!(below_usage("quota_bytes", "bucket", "v/b", 0, 5, "bytes").is_ok());
        assert!(below_usage("quota_bytes", "bucket", "v/b", 5, 5, "bytes").is_ok());
        assert!(below_usage("quota_bytes", "bucket", "v/b", 4, 5, "bytes").is_err());
    }
}
