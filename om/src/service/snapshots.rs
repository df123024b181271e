//! Reads of a bucket's snapshots (`apply::snapshots`); reads of keys at a
//! snapshot are in `objects.rs`.

use om_proto::store::SnapshotRecord;

use super::{Consistency, OmService, Page, list_page};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, SnapshotTable};

impl OmService {
    /// Live snapshot `name` of a bucket, without a barrier (the caller
    /// passed one).
    pub(super) fn snapshot_now(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
        field: &'static str,
    ) -> Result<SnapshotRecord, OmError> {
        crate::validate::snapshot_name(field, name)?;
        table::get::<SnapshotTable>(&self.db, &keys::snapshot_key(volume, bucket, name))?
            .ok_or_else(|| {
                OmError::not_found(
                    "SNAPSHOT_NOT_FOUND",
                    field,
                    format!("bucket {volume}/{bucket} has no snapshot {name:?}"),
                )
            })
    }

    pub async fn get_snapshot(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        name: &str,
    ) -> Result<SnapshotRecord, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::READ,
        )
        .await?;
        self.bucket_now(volume, bucket)?;
        self.snapshot_now(volume, bucket, name, "name")
    }

    /// One page of a bucket's live snapshots by name, after `start_after`:
    /// one seek.
    pub async fn list_snapshots<T>(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        start_after: &str,
        max: u32,
        convert: impl FnMut(SnapshotRecord) -> (T, usize),
    ) -> Result<Page<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::LIST,
        )
        .await?;
        self.bucket_now(volume, bucket)?;
        list_page::<SnapshotTable, T>(
            &self.db,
            &keys::snapshot_name_prefix(volume, bucket),
            "",
            start_after,
            (self.page_size(max), self.item_budget()),
            convert,
        )
    }
}
