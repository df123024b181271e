//! Keys written whole: put, look up, delete, rename, list.

use crate::v1::*;
use crate::{ClientError, OmClient};

impl OmClient {
    /// Puts a key; `req.header` is filled in here.
    pub async fn put_key_with(&self, mut req: PutKeyRequest) -> Result<KeyInfo, ClientError> {
        req.header = Some(self.next_header());
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).put_key(req).await }
            })
            .await?;
        r.key
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn put_key(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        size: u64,
    ) -> Result<KeyInfo, ClientError> {
        self.put_key_with(PutKeyRequest {
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            size,
            ..Default::default()
        })
        .await
    }

    pub async fn lookup_key(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
    ) -> Result<KeyInfo, ClientError> {
        self.lookup_key_in(volume, bucket, key, "").await
    }

    /// Looks a key up as snapshot `snapshot` of the bucket shows it (empty:
    /// the live bucket).
    pub async fn lookup_key_in(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
        snapshot: &str,
    ) -> Result<KeyInfo, ClientError> {
        let req = LookupKeyRequest {
            read: self.read_options(),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: String::new(),
            snapshot: snapshot.to_string(),
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

    pub async fn delete_key(
        &self,
        volume: &str,
        bucket: &str,
        key: &str,
    ) -> Result<(), ClientError> {
        let req = DeleteKeyRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            key: key.to_string(),
            version_id: String::new(),
            conditions: None,
        };
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).delete_key(req).await }
        })
        .await?;
        Ok(())
    }

    /// Creates up to 256 new keys in one unversioned bucket as one Raft
    /// command, all or none; answers how many were created.
    pub async fn put_keys(
        &self,
        volume: &str,
        bucket: &str,
        keys: Vec<NewKey>,
    ) -> Result<u64, ClientError> {
        let req = PutKeysRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            keys,
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).put_keys(req).await }
            })
            .await?;
        Ok(r.created)
    }

    /// Deletes several keys of one bucket; one outcome per key.
    pub async fn delete_keys(
        &self,
        volume: &str,
        bucket: &str,
        keys: &[String],
    ) -> Result<Vec<KeyOutcome>, ClientError> {
        let req = DeleteKeysRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            keys: keys.to_vec(),
            version_ids: Vec::new(),
            conditions: Vec::new(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).delete_keys(req).await }
            })
            .await?;
        Ok(r.results)
    }

    pub async fn rename_key(
        &self,
        volume: &str,
        bucket: &str,
        from: &str,
        to: &str,
    ) -> Result<KeyInfo, ClientError> {
        let req = RenameKeyRequest {
            header: Some(self.next_header()),
            volume: volume.to_string(),
            bucket: bucket.to_string(),
            from: from.to_string(),
            to: to.to_string(),
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).rename_key(req).await }
            })
            .await?;
        r.key
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn list_keys(
        &self,
        mut req: ListKeysRequest,
    ) -> Result<ListKeysResponse, ClientError> {
        req.read = self.read_options();
        self.call(|ch| {
            let req = req.clone();
            async move { Self::om(ch).list_keys(req).await }
        })
        .await
    }
}
