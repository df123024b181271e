//! Reads of multipart uploads: ListParts and ListMultipartUploads.

use om_proto::store::{PartRecord, UploadRecord};

use super::pages::{Listed, RolledUp, entry, utf8};
use super::{Consistency, OmService};
use crate::error::OmError;
use crate::listing::{ScanSpec, Start, scan_page_within};
use crate::store::iter::IterStats;
use crate::store::keys;
use crate::store::table::{self, PartTable, UploadTable};

/// One page of ListParts.
#[derive(Debug, Clone)]
pub struct PartPage<T> {
    pub parts: Vec<T>,
    pub truncated: bool,
    pub next_marker: u32,
    pub stats: IterStats,
}

/// A ListMultipartUploads request, validated.
#[derive(Debug, Clone, Default)]
pub struct UploadListing {
    pub volume: String,
    pub bucket: String,
    pub prefix: String,
    pub delimiter: String,
    pub key_marker: String,
    pub upload_id_marker: Option<u64>,
    pub max_uploads: u32,
}

/// One page of ListMultipartUploads.
#[derive(Debug, Clone)]
pub struct UploadPage<T> {
    pub uploads: Vec<T>,
    pub common_prefixes: Vec<String>,
    pub truncated: bool,
    pub next_key_marker: String,
    pub next_upload_id_marker: Option<u64>,
    pub stats: IterStats,
}

impl OmService {
    /// Parts of one upload after `marker`, in part-number order; `convert`
    /// turns each into what the response carries and says how many bytes it
    /// adds there.
    #[allow(clippy::too_many_arguments)]
    pub async fn list_parts<T>(
        &self,
        c: Consistency,
        volume: &str,
        bucket: &str,
        key: &str,
        upload_id: u64,
        marker: u32,
        max: u32,
        mut convert: impl FnMut(PartRecord) -> (T, usize),
    ) -> Result<PartPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(volume, bucket),
            crate::authz::LIST,
        )
        .await?;
        self.object_store_bucket_now(volume, bucket)?;
        if table::get::<UploadTable>(&self.db, &keys::upload_key(volume, bucket, key, upload_id))?
            .is_none()
        {
            return Err(OmError::not_found(
                "UPLOAD_NOT_FOUND",
                "upload_id",
                format!("no upload {upload_id:016x} of key {volume}/{bucket}/{key}"),
            ));
        }
        let parent = keys::parts_prefix(upload_id);
        let start = if marker == 0 {
            Start::Beginning
        } else {
            Start::At((marker + 1).to_be_bytes().to_vec())
        };
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::PARTS_CF,
                parent: &parent,
                prefix: b"",
                delimiter: b"",
                start,
                max: self.page_size(max),
                seek_after: usize::MAX,
                terminator: None,
                current_only: None,
                at: None,
            },
            self.item_budget(),
            |item| {
                let (_, value) = entry(item)?;
                let part = table::decode::<PartTable>(&value)?;
                let number = part.part_number;
                let (t, bytes) = convert(part);
                Ok(((number, t), bytes))
            },
        )?;
        let truncated = page.resume.is_some();
        let last = page.items.last().map_or(0, |(n, _)| *n);
        Ok(PartPage {
            next_marker: if truncated { last } else { 0 },
            parts: page.items.into_iter().map(|(_, t)| t).collect(),
            truncated,
            stats: page.stats,
        })
    }

    /// In-progress uploads in key order (uploads of one key by initiation),
    /// with S3's marker semantics and delimiter roll-up; `convert` turns each
    /// (key, upload) into what the response carries and says how many bytes
    /// it adds there.
    pub async fn list_uploads<T>(
        &self,
        c: Consistency,
        q: UploadListing,
        mut convert: impl FnMut(String, UploadRecord) -> (T, usize),
    ) -> Result<UploadPage<T>, OmError> {
        self.read_as(
            c,
            crate::authz::Resource::Bucket(&q.volume, &q.bucket),
            crate::authz::LIST,
        )
        .await?;
        self.object_store_bucket_now(&q.volume, &q.bucket)?;
        let marker = q.key_marker.as_bytes();
        let rolled_up = crate::listing::marker_prefix(
            marker,
            q.prefix.as_bytes(),
            q.delimiter.as_bytes(),
            None,
        );
        let start = match (marker.is_empty(), rolled_up, q.upload_id_marker) {
            (true, _, _) => Start::Beginning,
            // A key marker inside a common prefix (or the prefix itself): S3
            // lists the prefix only when it sorts after the marker, so the
            // page starts after everything under it, upload-id marker or not.
            (false, Some(cp), _) => Start::After(cp.to_vec()),
            // After that upload of that key.
            (false, None, Some(id)) => {
                let mut name = marker.to_vec();
                name.push(0);
                name.extend_from_slice(&id.to_be_bytes());
                Start::After(name)
            }
            // After every upload of that key.
            (false, None, None) => {
                let mut at = marker.to_vec();
                at.push(1);
                Start::At(at)
            }
        };
        let parent = keys::object_prefix(&q.volume, &q.bucket);
        let page = scan_page_within(
            &self.db,
            &ScanSpec {
                table: keys::UPLOADS_CF,
                parent: &parent,
                prefix: q.prefix.as_bytes(),
                delimiter: q.delimiter.as_bytes(),
                start,
                max: self.page_size(q.max_uploads),
                seek_after: self.seek_after,
                terminator: Some(0),
                current_only: None,
                at: None,
            },
            self.item_budget(),
            |item| {
                Listed::read(item, |name, value| {
                    let (key, id) = keys::split_key_run(&name)
                        .ok_or_else(|| OmError::Internal("malformed upload entry".to_string()))?;
                    let key = utf8(key.to_vec())?;
                    let (t, bytes) = convert(key.clone(), table::decode::<UploadTable>(&value)?);
                    Ok((key, id, t, bytes))
                })
            },
        )?;
        let rolled = RolledUp::of(page.items);
        let mut out = UploadPage {
            uploads: rolled.entries,
            common_prefixes: rolled.prefixes,
            truncated: page.resume.is_some(),
            next_key_marker: String::new(),
            next_upload_id_marker: None,
            stats: page.stats,
        };
        if out.truncated
            && let Some((key, id)) = rolled.last
        {
            out.next_key_marker = key;
            out.next_upload_id_marker = id;
        }
        Ok(out)
    }
}
