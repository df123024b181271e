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

/// One page of a snapshot diff, and the token of the next.
pub struct SnapshotDiff {
    pub page: crate::store::snapshot::DiffPage,
    pub next_continuation_token: String,
}

impl OmService {
    /// The keys of a bucket that differ between snapshot `from` and
    /// snapshot `to` (empty: the live bucket, as of this page), one page.
    #[allow(clippy::too_many_arguments)]
    pub async fn snapshot_diff(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        from: &str,
        to: &str,
        max: u32,
        token: &str,
    ) -> Result<SnapshotDiff, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::LIST,
        )
        .await?;
        let b = self.bucket_now(volume, bucket)?;
        let from_at = self.snapshot_now(volume, bucket, from, "from")?.index;
        let to_at = if to.is_empty() {
            None
        } else {
            let t = self.snapshot_now(volume, bucket, to, "to")?.index;
            if t <= from_at {
                return Err(OmError::invalid(
                    "INVALID_ARGUMENT",
                    "to",
                    format!("snapshot {to:?} is not newer than {from:?}"),
                ));
            }
            Some(t)
        };
        let expect = crate::listing::ContinuationToken::expected(
            &format!("diff@{from_at}-{}", to_at.unwrap_or(0)),
            &b,
            b"",
            b"",
        );
        let resume = if token.is_empty() {
            None
        } else {
            Some(crate::listing::ContinuationToken::decode_token(token, &expect)?.resume)
        };
        let page = crate::store::snapshot::diff_page(
            &self.db,
            volume,
            bucket,
            from_at,
            to_at,
            resume.as_deref(),
            self.page_size(max),
            crate::limits::MAX_PAGE_EVALUATED,
        )?;
        let next_continuation_token = match &page.resume {
            Some(r) => crate::listing::ContinuationToken {
                resume: r.clone(),
                ..expect
            }
            .encode_token(),
            None => String::new(),
        };
        Ok(SnapshotDiff {
            page,
            next_continuation_token,
        })
    }
}
