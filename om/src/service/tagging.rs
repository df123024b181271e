//! Reads of object tags (GetKeyTagging).

use om_proto::store::KeyRecord;

use super::{Consistency, OmService};
use crate::error::OmError;

impl OmService {
    /// The version of a key whose tags GetKeyTagging answers with: version
    /// `version_id`, or the current one when it is empty; needs READ on the
    /// bucket. A delete marker is returned as such: the edge refuses it
    /// (`apply::tagging::taggable`), saying which marker it was.
    pub async fn tagged_version(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        key: &str,
        version_id: &str,
    ) -> Result<KeyRecord, OmError> {
        if version_id.is_empty() {
            self.lookup_key(c, volume, bucket, key).await
        } else {
            Ok(self
                .lookup_version(c, volume, bucket, key, version_id)
                .await?
                .0)
        }
    }
}
