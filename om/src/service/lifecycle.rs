//! Reads of lifecycle configurations.

use om_proto::store::LifecycleRecord;

use super::{Consistency, OmService};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, LifecycleTable};

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
