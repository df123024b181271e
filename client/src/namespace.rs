//! Volumes and buckets.

use crate::v1::*;
use crate::{ClientError, OmClient};

impl OmClient {
    pub async fn create_volume(&self, name: &str, owner: &str) -> Result<VolumeInfo, ClientError> {
        self.create_volume_with(CreateVolumeRequest {
            name: name.to_string(),
            owner: owner.to_string(),
            ..Default::default()
        })
        .await
    }

    pub async fn create_volume_with(
        &self,
        mut req: CreateVolumeRequest,
    ) -> Result<VolumeInfo, ClientError> {
        req.header = Some(self.next_header());
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).create_volume(req).await }
            })
            .await?;
        r.volume
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn get_volume(&self, name: &str) -> Result<VolumeInfo, ClientError> {
        let req = GetVolumeRequest {
            read: self.read_options(),
            name: name.to_string(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).get_volume(req).await }
            })
            .await?;
        r.volume
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn list_volumes(
        &self,
        prefix: &str,
        start_after: &str,
        max: u32,
    ) -> Result<ListVolumesResponse, ClientError> {
        let req = ListVolumesRequest {
            read: self.read_options(),
            prefix: prefix.to_string(),
            start_after: start_after.to_string(),
            max_results: max,
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).list_volumes(req).await }
        })
        .await
    }

    pub async fn delete_volume(&self, name: &str) -> Result<(), ClientError> {
        let req = DeleteVolumeRequest {
            header: Some(self.next_header()),
            name: name.to_string(),
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).delete_volume(req).await }
        })
        .await?;
        Ok(())
    }

    pub async fn create_bucket(
        &self,
        volume: &str,
        name: &str,
        layout: BucketLayout,
    ) -> Result<BucketInfo, ClientError> {
        self.create_bucket_with(CreateBucketRequest {
            volume: volume.to_string(),
            name: name.to_string(),
            layout: layout as i32,
            ..Default::default()
        })
        .await
    }

    /// Creates a bucket from a full request (quotas, metadata).
    pub async fn create_bucket_with(
        &self,
        mut req: CreateBucketRequest,
    ) -> Result<BucketInfo, ClientError> {
        req.header = Some(self.next_header());
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).create_bucket(req).await }
            })
            .await?;
        r.bucket
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn get_bucket(&self, volume: &str, name: &str) -> Result<BucketInfo, ClientError> {
        let req = GetBucketRequest {
            read: self.read_options(),
            volume: volume.to_string(),
            name: name.to_string(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).get_bucket(req).await }
            })
            .await?;
        r.bucket
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    /// Replaces a bucket's tags (S3 bucket tagging); none removes them.
    pub async fn set_bucket_tags(
        &self,
        volume: &str,
        bucket: &str,
        tags: std::collections::BTreeMap<String, String>,
    ) -> Result<BucketInfo, ClientError> {
        let req = SetBucketTagsRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            tags,
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).set_bucket_tags(req).await }
            })
            .await?;
        r.bucket
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn list_buckets(
        &self,
        volume: &str,
        prefix: &str,
        start_after: &str,
        max: u32,
    ) -> Result<ListBucketsResponse, ClientError> {
        let req = ListBucketsRequest {
            read: self.read_options(),
            volume: volume.to_string(),
            prefix: prefix.to_string(),
            start_after: start_after.to_string(),
            max_results: max,
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).list_buckets(req).await }
        })
        .await
    }

    pub async fn delete_bucket(&self, volume: &str, name: &str) -> Result<(), ClientError> {
        let req = DeleteBucketRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            name: name.to_string(),
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).delete_bucket(req).await }
        })
        .await?;
        Ok(())
    }
}
