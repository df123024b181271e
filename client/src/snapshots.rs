//! Snapshots of a bucket: create, look up, list, delete, rename. Reads at a
//! snapshot are `lookup_key_in` and `ListKeysRequest.snapshot`.

use crate::v1::*;
use crate::{ClientError, OmClient};

fn info(s: Option<SnapshotInfo>) -> Result<SnapshotInfo, ClientError> {
    s.ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
}

impl OmClient {
    pub async fn create_snapshot(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
    ) -> Result<SnapshotInfo, ClientError> {
        let req = CreateSnapshotRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            name: name.to_string(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).create_snapshot(req).await }
            })
            .await?;
        info(r.snapshot)
    }

    pub async fn get_snapshot(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
    ) -> Result<SnapshotInfo, ClientError> {
        let req = GetSnapshotRequest {
            read: self.read_options(),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            name: name.to_string(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).get_snapshot(req).await }
            })
            .await?;
        info(r.snapshot)
    }

    /// One page of a bucket's snapshots by name, after `start_after`.
    pub async fn list_snapshots(
        &self,
        volume: &str,
        bucket: &str,
        start_after: &str,
        max: u32,
    ) -> Result<ListSnapshotsResponse, ClientError> {
        let req = ListSnapshotsRequest {
            read: self.read_options(),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            start_after: start_after.to_string(),
            max_results: max,
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).list_snapshots(req).await }
        })
        .await
    }

    pub async fn delete_snapshot(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
    ) -> Result<(), ClientError> {
        let req = DeleteSnapshotRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            name: name.to_string(),
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).delete_snapshot(req).await }
        })
        .await?;
        Ok(())
    }

    pub async fn rename_snapshot(
        &self,
        volume: &str,
        bucket: &str,
        name: &str,
        new_name: &str,
    ) -> Result<SnapshotInfo, ClientError> {
        let req = RenameSnapshotRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            name: name.to_string(),
            new_name: new_name.to_string(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).rename_snapshot(req).await }
            })
            .await?;
        info(r.snapshot)
    }
}

impl OmClient {
    /// One page of the keys that differ between two snapshots of a bucket
    /// (`req.to` empty: a snapshot and the live bucket).
    pub async fn snapshot_diff(
        &self,
        mut req: SnapshotDiffRequest,
    ) -> Result<SnapshotDiffResponse, ClientError> {
        req.read = self.read_options();
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).snapshot_diff(req).await }
        })
        .await
    }
}
