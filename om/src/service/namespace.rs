//! Reads of volumes and buckets.

use om_proto::store::{BucketRecord, VolumeRecord};

use super::{Consistency, OmService, Page, filtered_page, list_page};
use crate::error::OmError;
use crate::store::keys;
use crate::store::table::{self, BucketTable, VolumeTable};

impl OmService {
    /// A volume, its used bytes filled in even before a write kept them.
    pub async fn get_volume(&self, c: Consistency, name: &str) -> Result<VolumeRecord, OmError> {
        self.read_as(c, crate::authz::Resource::Volume(name), crate::authz::READ)
            .await?;
        let mut v =
            table::get::<VolumeTable>(&self.db, &keys::volume_key(name))?.ok_or_else(|| {
                OmError::not_found(
                    "VOLUME_NOT_FOUND",
                    "name",
                    format!("volume {name:?} does not exist"),
                )
            })?;
        v.used_bytes = Some(crate::apply::volume_used_bytes(&self.db, &v)?);
        Ok(v)
    }

    pub async fn get_bucket(
        &self,
        c: Consistency,
        volume: &str,
        name: &str,
    ) -> Result<BucketRecord, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, name),
            crate::authz::READ,
        )
        .await?;
        self.bucket_now(volume, name)
    }

    pub(super) fn bucket_now(&self, volume: &str, name: &str) -> Result<BucketRecord, OmError> {
        if table::get::<VolumeTable>(&self.db, &keys::volume_key(volume))?.is_none() {
            return Err(OmError::not_found(
                "VOLUME_NOT_FOUND",
                "volume",
                format!("volume {volume:?} does not exist"),
            ));
        }
        table::get::<BucketTable>(&self.db, &keys::bucket_key(volume, name))?.ok_or_else(|| {
            OmError::not_found(
                "BUCKET_NOT_FOUND",
                "bucket",
                format!("bucket {volume}/{name} does not exist"),
            )
        })
    }

    /// One page of volumes; `convert` turns each into what the response
    /// carries and says how many bytes it adds there. With authorization on,
    /// a caller sees the volumes it may READ (an admin all): the page is
    /// read as usual and the others left out, so it may hold fewer items
    /// (even none) and still continue after the last volume it read.
    pub async fn list_volumes<T>(
        &self,
        c: Consistency,
        prefix: &str,
        start_after: &str,
        max: u32,
        convert: impl FnMut(VolumeRecord) -> (T, usize),
    ) -> Result<Page<T>, OmError> {
        self.read_barrier(c).await?;
        let visible = self.volume_filter()?;
        filtered_page::<VolumeTable, T>(
            &self.db,
            &[],
            prefix,
            start_after,
            (self.page_size(max), self.item_budget()),
            |v| visible(v),
            convert,
        )
    }

    /// One page of a volume's buckets; `convert` as for `list_volumes`.
    pub async fn list_buckets<T>(
        &self,
        c: Consistency,
        volume: &str,
        prefix: &str,
        start_after: &str,
        max: u32,
        convert: impl FnMut(BucketRecord) -> (T, usize),
    ) -> Result<Page<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Volume(volume),
            crate::authz::LIST,
        )
        .await?;
        if table::get::<VolumeTable>(&self.db, &keys::volume_key(volume))?.is_none() {
            return Err(OmError::not_found(
                "VOLUME_NOT_FOUND",
                "volume",
                format!("volume {volume:?} does not exist"),
            ));
        }
        // Only the buckets the caller may read (a volume's owner or an admin
        // reads them all), so a listing shows nothing GetBucket refuses.
        let caller = self.caller()?;
        let vol_admin = match &caller {
            None => true,
            Some(c) => {
                crate::authz::rights_on(&self.db, c, crate::authz::Resource::Volume(volume))?
                    .is_some_and(|r| r == crate::authz::ALL)
            }
        };
        if vol_admin {
            return list_page::<BucketTable, T>(
                &self.db,
                &keys::bucket_prefix(volume),
                prefix,
                start_after,
                (self.page_size(max), self.item_budget()),
                convert,
            );
        }
        let caller = caller.unwrap_or_default();
        filtered_page::<BucketTable, T>(
            &self.db,
            &keys::bucket_prefix(volume),
            prefix,
            start_after,
            (self.page_size(max), self.item_budget()),
            |b| {
                b.owner == caller.user
                    || crate::authz::granted(&b.acl, &caller) & crate::authz::READ != 0
            },
            convert,
        )
    }
}
