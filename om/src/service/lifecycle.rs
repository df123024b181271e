//! Reads of lifecycle configurations, of where their scans stand, and of
//! the expiration they give an object.

use om_proto::store::{KeyRecord, LifecycleRecord};
use om_proto::v1::LifecycleStatus;

use super::{Consistency, OmService};
use crate::error::OmError;
use crate::lifecycle::eval::{self, Subject};
use crate::lifecycle::scan;
use crate::store::keys;
use crate::store::table::{self, BucketTable, LifecycleScanTable, LifecycleTable};

impl OmService {
    /// A bucket's lifecycle configuration: NOT_FOUND
    /// `NO_SUCH_LIFECYCLE_CONFIGURATION` when it has none (S3's
    /// NoSuchLifecycleConfiguration).
    pub async fn get_bucket_lifecycle(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
    ) -> Result<LifecycleRecord, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::READ,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        table::get::<LifecycleTable>(&self.db, &keys::bucket_key(volume, bucket))?
            // A configuration of an earlier bucket of the same name (deleted
            // before configurations went with their bucket) is not this one's.
            .filter(|r| r.bucket_object_id == b.object_id)
            .ok_or_else(|| {
                OmError::not_found(
                    "NO_SUCH_LIFECYCLE_CONFIGURATION",
                    "bucket",
                    format!("bucket {volume}/{bucket} has no lifecycle configuration"),
                )
            })
    }
}

impl OmService {
    /// When the bucket's rules expire the current version `rec` of `key`
    /// (S3's x-amz-expiration): the instant and the rule, read from the
    /// configuration as this replica holds it (after the caller's read
    /// barrier). None without a configuration or a matching rule.
    pub fn expiration_of(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        rec: &KeyRecord,
    ) -> Result<Option<(u64, String)>, OmError> {
        if rec.delete_marker {
            return Ok(None);
        }
        // Writes answer this too, and most buckets have no rules: look for
        // a configuration first, and only then at the bucket it must
        // belong to (one left by a deleted bucket of the same name does not).
        let at = keys::bucket_key(volume, bucket);
        let Some(config) = table::get::<LifecycleTable>(&self.db, &at)? else {
            return Ok(None);
        };
        let Some(b) = table::get::<BucketTable>(&self.db, &at)? else {
            return Ok(None);
        };
        if config.bucket_object_id != b.object_id {
            return Ok(None);
        }
        let subject = Subject {
            key,
            size: rec.size,
            tags: &rec.tags,
            sized: true,
        };
        Ok(eval::current_expiry(
            &config.rules,
            &subject,
            eval::written_ms(rec),
            self.lifecycle_day_ms(),
        )
        .map(|d| (d.at_ms, d.rule_id.to_string())))
    }

    /// Where the bucket's lifecycle scan stands, with the rules in force.
    pub async fn lifecycle_status(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
    ) -> Result<(Option<LifecycleStatus>, Vec<om_proto::v1::LifecycleRule>), OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::READ,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        let bkey = keys::bucket_key(volume, bucket);
        let config = table::get::<LifecycleTable>(&self.db, &bkey)?
            .filter(|r| r.bucket_object_id == b.object_id);
        let Some(s) = table::get::<LifecycleScanTable>(&self.db, &bkey)?
            .filter(|s| s.bucket_object_id == b.object_id)
        else {
            return Ok((None, config.map(|c| c.rules).unwrap_or_default()));
        };
        // The cursor names a key: only for a caller who may list the bucket.
        let caller = self.caller()?;
        let may_list = match &caller {
            None => true,
            Some(c) => crate::authz::rights_on(
                &self.db,
                c,
                crate::authz::Resource::Bucket(volume, bucket),
            )?
            .is_some_and(|r| r & crate::authz::LIST != 0),
        };
        let (cursor, cursor_version_id) = if may_list {
            scan::cursor_names(&s, &keys::object_prefix(volume, bucket))
        } else {
            (String::new(), String::new())
        };
        let current = config.as_ref().is_some_and(|c| scan::is_current(&s, &b, c));
        let status = LifecycleStatus {
            pass: s.pass,
            phase: scan::phase_name(s.phase).to_string(),
            cursor,
            cursor_version_id,
            pass_started_ms: s.pass_started_ms,
            cursor_ms: s.cursor_ms,
            evaluated: s.evaluated,
            actions: s.actions,
            rule_actions: s.rule_actions,
            last_pass_started_ms: s.last_pass_started_ms,
            last_pass_completed_ms: s.last_pass_completed_ms,
            last_pass_evaluated: s.last_pass_evaluated,
            last_pass_actions: s.last_pass_actions,
            total_evaluated: s.total_evaluated,
            total_actions: s.total_actions,
            last_resume_seeks: s.last_resume_seeks,
            last_resume_before_cursor: s.last_resume_before_cursor,
            current,
            bucket_key_count: b.key_count,
        };
        Ok((Some(status), config.map(|c| c.rules).unwrap_or_default()))
    }
}
