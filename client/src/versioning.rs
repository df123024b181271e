//! Versioned buckets: versioning state, one version of a key, deleting a
//! version or adding a delete marker, and ListObjectVersions.

use crate::v1::*;
use crate::{ClientError, OmClient};

impl OmClient {
    /// Enables or suspends versioning of a bucket.
    pub async fn set_bucket_versioning(
        &self,
        volume: &str,
        bucket: &str,
        versioning: BucketVersioning,
    ) -> Result<BucketInfo, ClientError> {
        let req = SetBucketVersioningRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            versioning: versioning as i32,
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).set_bucket_versioning(req).await }
            })
            .await?;
        r.bucket
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    /// One version (or delete marker) of a key; `version_id` empty: the
    /// current version.
    pub async fn lookup_key_version(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<KeyInfo, ClientError> {
        let req = LookupKeyRequest {
            read: self.read_options(),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: version_id.to_string(),
            ..Default::default()
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).lookup_key(req).await }
            })
            .await?;
        r.key
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    /// Deletes a key (in a versioned bucket: adds a delete marker) or, with a
    /// version id, removes that version permanently; says which.
    pub async fn delete_key_version(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<DeleteKeyResponse, ClientError> {
        self.delete_key_if(volume, bucket, key, version_id, None)
            .await
    }

    /// `delete_key_version` with conditions on what it removes (S3's
    /// conditional DeleteObject): a condition that fails is
    /// FAILED_PRECONDITION `IF_MATCH_FAILED`; with conditions, nothing
    /// there is NOT_FOUND and adds no delete marker.
    pub async fn delete_key_if(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        version_id: &str,
        conditions: Option<DeleteConditions>,
    ) -> Result<DeleteKeyResponse, ClientError> {
        let req = DeleteKeyRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: version_id.to_string(),
            conditions,
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).delete_key(req).await }
        })
        .await
    }

    /// DeleteKeys with a version id per key ("" for none).
    pub async fn delete_key_versions(
        &self,
        volume: &str,
        bucket: &str,
        keys: &[String],
        version_ids: &[String],
    ) -> Result<Vec<KeyOutcome>, ClientError> {
        self.delete_keys_if(volume, bucket, keys, version_ids, &[])
            .await
    }

    /// DeleteKeys with, for none or every key, a version id ("" for none)
    /// and conditions on what its delete removes (a default
    /// `DeleteConditions` asks nothing).
    pub async fn delete_keys_if(
        &self,
        volume: &str,
        bucket: &str,
        keys: &[String],
        version_ids: &[String],
        conditions: &[DeleteConditions],
    ) -> Result<Vec<KeyOutcome>, ClientError> {
        let req = DeleteKeysRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            keys: keys.to_vec(),
            version_ids: version_ids.to_vec(),
            conditions: conditions.to_vec(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).delete_keys(req).await }
            })
            .await?;
        Ok(r.results)
    }

    /// One page of ListObjectVersions (the client's read options apply).
    pub async fn list_object_versions(
        &self,
        mut req: ListObjectVersionsRequest,
    ) -> Result<ListObjectVersionsResponse, ClientError> {
        req.read = self.read_options();
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).list_object_versions(req).await }
        })
        .await
    }
}
