//! The public gRPC edge: validates requests, calls `OmService`, converts
//! records to API messages, and maps `OmError` to `tonic::Status` in exactly
//! one place (`to_status`). Only this module knows `tonic::Status`.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use om_proto::store::{self as st, command::Op, command_result};
use om_proto::v1::cluster_server::Cluster;
use om_proto::v1::ozone_manager_server::OzoneManager;
use om_proto::v1::*;
use openraft::async_runtime::WatchReceiver;
use prost::Message;
use tonic::{Request, Response, Status};

use crate::error::{ErrorKind, OmError};
use crate::service::{Consistency, KeyListing, OmService, WriteId, item_len};
use crate::validate;

mod acl;
mod bulk;
mod files;
mod lifecycle;
mod malformed;
mod objects;
mod quota;
mod tagging;
mod versions;

pub use malformed::MalformedAsInvalid;

/// Longest message a status carries (in `grpc-message` and again in the
/// `ErrorDetail`). Messages quote at most a short prefix of any input
/// (`validate::quote_prefix`); this cap is the last line of defence, so no
/// error can outgrow a client's header limits.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 1024;

/// `m` cut to `MAX_STATUS_MESSAGE_BYTES` on a character boundary, with its
/// full length noted when cut.
fn capped(m: String) -> String {
    if m.len() <= MAX_STATUS_MESSAGE_BYTES {
        return m;
    }
    let mut end = MAX_STATUS_MESSAGE_BYTES;
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…({} bytes)", &m[..end], m.len())
}

pub use objects::MAX_RECORD_BLOCKS;
pub mod auth;
pub mod peer;
pub mod tokens;

/// Maps an error to a status carrying an `ErrorDetail` and `om-reason` metadata.
/// A refusal made before a request reaches the service (authentication,
/// the Raft port's member check): `code` with a stable `reason` (also in
/// `om-reason`) and the offending `field`, if any.
pub fn refusal(code: tonic::Code, reason: &str, field: &str, message: &str) -> Status {
    let detail = ErrorDetail {
        reason: reason.to_string(),
        field: field.to_string(),
        message: message.to_string(),
        leader_id: 0,
        leader_addr: String::new(),
        right: String::new(),
        resource: String::new(),
        delete_marker: false,
        version_id: String::new(),
    };
    let mut status = Status::with_details(code, message, detail.encode_to_vec().into());
    if let Ok(v) = reason.parse() {
        status.metadata_mut().insert("om-reason", v);
    }
    if !field.is_empty()
        && let Ok(v) = field.parse()
    {
        status.metadata_mut().insert("om-field", v);
    }
    status
}

pub fn to_status(e: &OmError) -> Status {
    let (code, field, leader_id, leader_addr) = match e {
        OmError::Request { kind, field, .. } => (
            match kind {
                ErrorKind::InvalidArgument => tonic::Code::InvalidArgument,
                ErrorKind::NotFound => tonic::Code::NotFound,
                ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
                ErrorKind::FailedPrecondition => tonic::Code::FailedPrecondition,
                ErrorKind::PermissionDenied => tonic::Code::PermissionDenied,
            },
            field.clone(),
            None,
            None,
        ),
        OmError::Denied { .. } => (tonic::Code::PermissionDenied, String::new(), None, None),
        OmError::NotLeader {
            leader_id,
            leader_addr,
        } => (
            tonic::Code::Unavailable,
            String::new(),
            *leader_id,
            leader_addr.clone(),
        ),
        OmError::Unavailable(_) | OmError::Diverged(_) => {
            (tonic::Code::Unavailable, String::new(), None, None)
        }
        OmError::Internal(_) => (tonic::Code::Internal, String::new(), None, None),
    };
    let message = capped(e.to_string());
    let detail = ErrorDetail {
        reason: e.reason().to_string(),
        field: field.clone(),
        message: message.clone(),
        leader_id: leader_id.unwrap_or(0),
        leader_addr: leader_addr.clone().unwrap_or_default(),
        right: match e {
            OmError::Denied { right, .. } => right.clone(),
            _ => String::new(),
        },
        resource: match e {
            OmError::Denied { resource, .. } => resource.clone(),
            _ => String::new(),
        },
        delete_marker: false,
        version_id: String::new(),
    };
    let mut status = Status::with_details(code, message, detail.encode_to_vec().into());
    let md = status.metadata_mut();
    if let Ok(v) = e.reason().parse() {
        md.insert("om-reason", v);
    }
    if !field.is_empty()
        && let Ok(v) = field.parse()
    {
        md.insert("om-field", v);
    }
    if let Some(addr) = leader_addr
        && let Ok(v) = addr.parse()
    {
        md.insert("om-leader", v);
    }
    status
}

fn consistency(r: &Option<ReadOptions>) -> Consistency {
    match r.as_ref().map(|r| r.consistency()) {
        Some(ReadConsistency::Stale) => Consistency::Stale {
            max_ms: r.as_ref().map_or(0, |r| r.max_staleness_ms),
        },
        Some(ReadConsistency::Lease) => Consistency::Lease,
        _ => Consistency::Linearizable,
    }
}

/// The retry-cache identity of a write: its header's client id and sequence
/// number, and a digest of the whole request (header included, which a retry
/// repeats), so a different request reusing a (client id, seq) is refused
/// with `RETRY_MISMATCH` instead of being answered with another request's
/// result. The digest detects accidents (a client reusing a sequence number),
/// it is not a security measure: a client can only confuse its own retries.
fn write_id<R: Message>(h: &Option<WriteHeader>, request: &R) -> Result<WriteId, OmError> {
    match h {
        Some(h) if !h.client_id.is_empty() => {
            if h.client_id.len() > 128 || h.client_id.contains('\0') {
                return Err(OmError::invalid(
                    "INVALID_CLIENT_ID",
                    "header.client_id",
                    "client id must be at most 128 bytes without NUL",
                ));
            }
            Ok(WriteId {
                client_id: h.client_id.clone(),
                seq: h.seq,
                request_digest: request_digest(&request.encode_to_vec()),
            })
        }
        _ => Ok(WriteId::default()),
    }
}

/// MD5 of a request's canonical protobuf encoding (prost encodes fields in
/// number order and maps in key order, so equal requests give equal bytes).
pub fn request_digest(encoded: &[u8]) -> Vec<u8> {
    use md5::Digest;
    md5::Md5::digest(encoded).to_vec()
}

pub fn volume_info(v: st::VolumeRecord) -> VolumeInfo {
    VolumeInfo {
        name: v.name,
        owner: v.owner,
        quota_bytes: v.quota_bytes,
        quota_namespace: v.quota_namespace,
        creation_time_ms: v.creation_time_ms,
        modification_time_ms: v.modification_time_ms,
        object_id: v.object_id,
        update_id: v.update_id,
        metadata: v.metadata,
        bucket_count: v.bucket_count,
        used_bytes: v.used_bytes.unwrap_or(0),
    }
}

pub fn bucket_info(b: st::BucketRecord) -> BucketInfo {
    let used_namespace = crate::apply::bucket_namespace(&b);
    let layout = match b.layout {
        crate::apply::LAYOUT_FSO => BucketLayout::FileSystemOptimized,
        _ => BucketLayout::ObjectStore,
    };
    BucketInfo {
        volume: b.volume,
        name: b.name,
        layout: layout as i32,
        creation_time_ms: b.creation_time_ms,
        modification_time_ms: b.modification_time_ms,
        object_id: b.object_id,
        update_id: b.update_id,
        metadata: b.metadata,
        used_namespace,
        key_count: b.key_count,
        used_bytes: b.used_bytes,
        open_key_count: b.open_key_count,
        quota_bytes: b.quota_bytes,
        quota_namespace: b.quota_namespace,
        versioning: match b.versioning {
            crate::apply::versions::ENABLED => BucketVersioning::Enabled,
            crate::apply::versions::SUSPENDED => BucketVersioning::Suspended,
            _ => BucketVersioning::Unversioned,
        } as i32,
    }
}

/// A key's version as the API shows it; `is_latest` is set (listings of
/// versions clear it for noncurrent ones).
pub fn key_info(volume: &str, bucket: &str, name: String, k: st::KeyRecord) -> KeyInfo {
    KeyInfo {
        version_id: crate::apply::versions::version_id(&k),
        delete_marker: k.delete_marker,
        is_latest: true,
        noncurrent_since_ms: k.noncurrent_since_ms,
        tag_count: u32::try_from(k.tags.len()).unwrap_or(u32::MAX),
        volume: volume.to_string(),
        bucket: bucket.to_string(),
        name,
        size: k.size,
        blocks: objects::block_infos(k.blocks),
        etag: k.etag,
        metadata: k.metadata,
        content_type: k.content_type,
        creation_time_ms: k.creation_time_ms,
        modification_time_ms: k.modification_time_ms,
        object_id: k.object_id,
        update_id: k.update_id,
        expiration_ms: 0,
        expiration_rule_id: String::new(),
    }
}

/// A response item with the bytes it adds to the repeated field carrying it.
fn sized<M: Message>(m: M) -> (M, usize) {
    let n = item_len(m.encoded_len());
    (m, n)
}

fn scan_stats(s: crate::store::iter::IterStats) -> ScanStats {
    ScanStats {
        seeks: s.seeks,
        nexts: s.nexts,
        tombstones_skipped: s.tombstones,
    }
}

fn unexpected(r: command_result::Result) -> OmError {
    OmError::Internal(format!("unexpected command result {r:?}"))
}

/// The public API service.
#[derive(Clone)]
pub struct OmGrpc {
    svc: Arc<OmService>,
}

impl OmGrpc {
    pub fn new(svc: Arc<OmService>) -> Self {
        OmGrpc { svc }
    }
}

/// Runs one RPC: records `om_grpc_requests_total{method,code}` and its latency,
/// and maps the error.
/// The latency histogram and request counter of (`method`, `code`; None is
/// OK), registered once per pair: looking them up by their labels on every
/// request allocated the label strings and hashed them each time.
fn request_metrics(
    method: &'static str,
    code: Option<tonic::Code>,
) -> (metrics::Histogram, metrics::Counter) {
    type Handles = std::collections::HashMap<
        (&'static str, Option<tonic::Code>),
        (metrics::Histogram, metrics::Counter),
    >;
    static HANDLES: std::sync::OnceLock<std::sync::Mutex<Handles>> = std::sync::OnceLock::new();
    let mut handles = HANDLES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    handles
        .entry((method, code))
        .or_insert_with(|| {
            let code = code.map_or_else(|| "OK".to_string(), |c| format!("{c:?}"));
            (
                metrics::histogram!("om_grpc_request_seconds", "method" => method, "code" => code.clone()),
                metrics::counter!("om_grpc_requests_total", "method" => method, "code" => code),
            )
        })
        .clone()
}

async fn observe<T>(
    method: &'static str,
    f: impl Future<Output = Result<T, OmError>>,
) -> Result<Response<T>, Status> {
    let started = Instant::now();
    let r = f.await;
    let code = match &r {
        Ok(_) => None,
        Err(e) => Some(to_status(e).code()),
    };
    let (seconds, total) = request_metrics(method, code);
    seconds.record(started.elapsed().as_secs_f64());
    total.increment(1);
    match r {
        Ok(v) => Ok(Response::new(v)),
        Err(e) => {
            if matches!(e, OmError::Internal(_)) {
                tracing::error!(method, error = %e, "request failed");
            } else {
                tracing::debug!(method, reason = e.reason(), "request refused");
            }
            Err(to_status(&e))
        }
    }
}

#[tonic::async_trait]
impl OzoneManager for OmGrpc {
    async fn create_volume(
        &self,
        req: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let r = req.into_inner();
        observe("CreateVolume", async {
            validate::resource_name("name", &r.name)?;
            validate::owner("owner", &r.owner)?;
            validate::metadata("metadata", &r.metadata)?;
            let id = write_id(&r.header, &r)?;
            match self
                .svc
                .propose(
                    id,
                    Op::CreateVolume(st::CreateVolume {
                        name: r.name,
                        owner: r.owner,
                        quota_bytes: r.quota_bytes,
                        quota_namespace: r.quota_namespace,
                        metadata: r.metadata,
                    }),
                )
                .await?
            {
                command_result::Result::Volume(v) => Ok(CreateVolumeResponse {
                    volume: Some(volume_info(v)),
                }),
                other => Err(unexpected(other)),
            }
        })
        .await
    }

    async fn get_volume(
        &self,
        req: Request<GetVolumeRequest>,
    ) -> Result<Response<GetVolumeResponse>, Status> {
        let r = req.into_inner();
        observe("GetVolume", async {
            validate::resource_name("name", &r.name)?;
            let v = self.svc.get_volume(consistency(&r.read), &r.name).await?;
            Ok(GetVolumeResponse {
                volume: Some(volume_info(v)),
            })
        })
        .await
    }

    async fn list_volumes(
        &self,
        req: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        let r = req.into_inner();
        observe("ListVolumes", async {
            validate::optional_key("prefix", &r.prefix)?;
            validate::optional_key("start_after", &r.start_after)?;
            let page = self
                .svc
                .list_volumes(
                    consistency(&r.read),
                    &r.prefix,
                    &r.start_after,
                    r.max_results,
                    |v| sized(volume_info(v)),
                )
                .await?;
            Ok(ListVolumesResponse {
                volumes: page.items.into_iter().map(|(_, v)| v).collect(),
                truncated: page.truncated,
                next_start_after: page.next_start_after,
            })
        })
        .await
    }

    async fn delete_volume(
        &self,
        req: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        let r = req.into_inner();
        observe("DeleteVolume", async {
            validate::resource_name("name", &r.name)?;
            let id = write_id(&r.header, &r)?;
            self.svc
                .propose(id, Op::DeleteVolume(st::DeleteVolume { name: r.name }))
                .await?;
            Ok(DeleteVolumeResponse {})
        })
        .await
    }

    async fn create_bucket(
        &self,
        req: Request<CreateBucketRequest>,
    ) -> Result<Response<CreateBucketResponse>, Status> {
        let r = req.into_inner();
        observe("CreateBucket", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("name", &r.name)?;
            validate::metadata("metadata", &r.metadata)?;
            let layout = match BucketLayout::try_from(r.layout) {
                Ok(BucketLayout::Unspecified) | Ok(BucketLayout::ObjectStore) => {
                    crate::apply::LAYOUT_OBJECT_STORE
                }
                Ok(BucketLayout::FileSystemOptimized) => crate::apply::LAYOUT_FSO,
                Err(_) => {
                    return Err(OmError::invalid(
                        "INVALID_LAYOUT",
                        "layout",
                        format!("unknown bucket layout {}", r.layout),
                    ));
                }
            };
            let id = write_id(&r.header, &r)?;
            match self
                .svc
                .propose(
                    id,
                    Op::CreateBucket(st::CreateBucket {
                        volume: r.volume,
                        name: r.name,
                        layout,
                        metadata: r.metadata,
                        quota_bytes: r.quota_bytes,
                        quota_namespace: r.quota_namespace,
                    }),
                )
                .await?
            {
                command_result::Result::Bucket(b) => Ok(CreateBucketResponse {
                    bucket: Some(bucket_info(b)),
                }),
                other => Err(unexpected(other)),
            }
        })
        .await
    }

    async fn get_bucket(
        &self,
        req: Request<GetBucketRequest>,
    ) -> Result<Response<GetBucketResponse>, Status> {
        let r = req.into_inner();
        observe("GetBucket", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("name", &r.name)?;
            let b = self
                .svc
                .get_bucket(consistency(&r.read), &r.volume, &r.name)
                .await?;
            Ok(GetBucketResponse {
                bucket: Some(bucket_info(b)),
            })
        })
        .await
    }

    async fn list_buckets(
        &self,
        req: Request<ListBucketsRequest>,
    ) -> Result<Response<ListBucketsResponse>, Status> {
        let r = req.into_inner();
        observe("ListBuckets", async {
            validate::resource_name("volume", &r.volume)?;
            validate::optional_key("prefix", &r.prefix)?;
            validate::optional_key("start_after", &r.start_after)?;
            let page = self
                .svc
                .list_buckets(
                    consistency(&r.read),
                    &r.volume,
                    &r.prefix,
                    &r.start_after,
                    r.max_results,
                    |b| sized(bucket_info(b)),
                )
                .await?;
            Ok(ListBucketsResponse {
                buckets: page.items.into_iter().map(|(_, b)| b).collect(),
                truncated: page.truncated,
                next_start_after: page.next_start_after,
            })
        })
        .await
    }

    async fn delete_bucket(
        &self,
        req: Request<DeleteBucketRequest>,
    ) -> Result<Response<DeleteBucketResponse>, Status> {
        let r = req.into_inner();
        observe("DeleteBucket", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("name", &r.name)?;
            let id = write_id(&r.header, &r)?;
            self.svc
                .propose(
                    id,
                    Op::DeleteBucket(st::DeleteBucket {
                        volume: r.volume,
                        name: r.name,
                    }),
                )
                .await?;
            Ok(DeleteBucketResponse {})
        })
        .await
    }

    async fn put_key(
        &self,
        req: Request<PutKeyRequest>,
    ) -> Result<Response<PutKeyResponse>, Status> {
        let r = req.into_inner();
        observe("PutKey", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("bucket", &r.bucket)?;
            validate::key_name("key", &r.key)?;
            let etag = validate::normalize_etag(&r.etag);
            validate::etag("etag", &etag)?;
            validate::metadata("metadata", &r.metadata)?;
            validate::content_type("content_type", &r.content_type)?;
            validate::tags("tags", &r.tags)?;
            if r.size > crate::apply::MAX_KEY_SIZE {
                return Err(OmError::invalid(
                    "KEY_TOO_LARGE",
                    "size",
                    format!("size {} exceeds the 5 TiB object limit", r.size),
                ));
            }
            let id = write_id(&r.header, &r)?;
            match self
                .svc
                .propose(
                    id,
                    Op::PutKey(st::PutKey {
                        volume: r.volume,
                        bucket: r.bucket,
                        key: r.key,
                        size: r.size,
                        etag,
                        content_type: r.content_type,
                        metadata: r.metadata,
                        conditions: objects::conditions(r.conditions)?,
                        block_size: crate::apply::BLOCK_SIZE,
                        tags: r.tags,
                    }),
                )
                .await?
            {
                command_result::Result::Key(k) => Ok(PutKeyResponse {
                    key: Some(key_info(
                        &k.volume,
                        &k.bucket,
                        k.name,
                        k.key.unwrap_or_default(),
                    )),
                }),
                other => Err(unexpected(other)),
            }
        })
        .await
    }

    async fn lookup_key(
        &self,
        req: Request<LookupKeyRequest>,
    ) -> Result<Response<LookupKeyResponse>, Status> {
        let r = req.into_inner();
        let mut marker = None;
        let out = observe("LookupKey", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("bucket", &r.bucket)?;
            validate::key_name("key", &r.key)?;
            versions::optional_version_id("version_id", &r.version_id)?;
            let (k, latest) = if r.version_id.is_empty() {
                let k = self
                    .svc
                    .lookup_key(consistency(&r.read), &r.volume, &r.bucket, &r.key)
                    .await?;
                if k.delete_marker {
                    marker = Some(crate::apply::versions::version_id(&k));
                    return Err(OmError::not_found(
                        "KEY_NOT_FOUND",
                        "key",
                        format!(
                            "the current version of {}/{}/{} is a delete marker",
                            r.volume, r.bucket, r.key
                        ),
                    ));
                }
                (k, true)
            } else {
                self.svc
                    .lookup_version(
                        consistency(&r.read),
                        &r.volume,
                        &r.bucket,
                        &r.key,
                        &r.version_id,
                    )
                    .await?
            };
            let expiration = if latest {
                self.svc.expiration_of(&r.volume, &r.bucket, &r.key, &k)?
            } else {
                None
            };
            let mut info = key_info(&r.volume, &r.bucket, r.key.clone(), k);
            info.is_latest = latest;
            if let Some((at_ms, rule_id)) = expiration {
                info.expiration_ms = at_ms;
                info.expiration_rule_id = rule_id;
            }
            Ok(LookupKeyResponse { key: Some(info) })
        })
        .await;
        match (out, marker) {
            (Err(status), Some(version_id)) => Err(versions::deleted(status, &version_id)),
            (out, _) => out,
        }
    }

    async fn delete_key(
        &self,
        req: Request<DeleteKeyRequest>,
    ) -> Result<Response<DeleteKeyResponse>, Status> {
        let r = req.into_inner();
        observe("DeleteKey", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("bucket", &r.bucket)?;
            validate::key_name("key", &r.key)?;
            versions::optional_version_id("version_id", &r.version_id)?;
            let id = write_id(&r.header, &r)?;
            let done = self
                .svc
                .propose(
                    id,
                    Op::DeleteKey(st::DeleteKey {
                        volume: r.volume,
                        bucket: r.bucket,
                        key: r.key,
                        version_id: r.version_id,
                    }),
                )
                .await?;
            Ok(match done {
                command_result::Result::Deleted(d) => DeleteKeyResponse {
                    version_id: d.version_id,
                    delete_marker: d.delete_marker,
                },
                _ => DeleteKeyResponse::default(),
            })
        })
        .await
    }

    async fn delete_keys(
        &self,
        req: Request<DeleteKeysRequest>,
    ) -> Result<Response<DeleteKeysResponse>, Status> {
        let r = req.into_inner();
        observe("DeleteKeys", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("bucket", &r.bucket)?;
            if r.keys.is_empty() || r.keys.len() > validate::MAX_DELETE_KEYS {
                return Err(OmError::invalid(
                    "INVALID_KEY_COUNT",
                    "keys",
                    format!(
                        "between 1 and {} keys per request, got {}",
                        validate::MAX_DELETE_KEYS,
                        r.keys.len()
                    ),
                ));
            }
            for k in &r.keys {
                validate::key_name("keys", k)?;
            }
            crate::apply::versions::check_version_id_count(r.keys.len(), r.version_ids.len())?;
            for v in &r.version_ids {
                versions::optional_version_id("version_ids", v)?;
            }
            let id = write_id(&r.header, &r)?;
            match self
                .svc
                .propose(
                    id,
                    Op::DeleteKeys(st::DeleteKeys {
                        volume: r.volume,
                        bucket: r.bucket,
                        keys: r.keys,
                        version_ids: r.version_ids,
                    }),
                )
                .await?
            {
                command_result::Result::DeleteKeys(d) => Ok(DeleteKeysResponse {
                    results: d
                        .outcomes
                        .into_iter()
                        .map(|o| KeyOutcome {
                            key: o.key,
                            reason: o.reason,
                            message: o.message,
                            version_id: o.version_id,
                            delete_marker: o.delete_marker,
                        })
                        .collect(),
                }),
                other => Err(unexpected(other)),
            }
        })
        .await
    }

    async fn rename_key(
        &self,
        req: Request<RenameKeyRequest>,
    ) -> Result<Response<RenameKeyResponse>, Status> {
        let r = req.into_inner();
        observe("RenameKey", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("bucket", &r.bucket)?;
            validate::key_name("from", &r.from)?;
            validate::key_name("to", &r.to)?;
            if r.from == r.to {
                return Err(OmError::invalid(
                    "SAME_NAME",
                    "to",
                    "the new name equals the old one",
                ));
            }
            let id = write_id(&r.header, &r)?;
            match self
                .svc
                .propose(
                    id,
                    Op::RenameKey(st::RenameKey {
                        volume: r.volume,
                        bucket: r.bucket,
                        from: r.from,
                        to: r.to,
                    }),
                )
                .await?
            {
                command_result::Result::Key(k) => Ok(RenameKeyResponse {
                    key: Some(key_info(
                        &k.volume,
                        &k.bucket,
                        k.name,
                        k.key.unwrap_or_default(),
                    )),
                }),
                other => Err(unexpected(other)),
            }
        })
        .await
    }

    async fn list_keys(
        &self,
        req: Request<ListKeysRequest>,
    ) -> Result<Response<ListKeysResponse>, Status> {
        let r = req.into_inner();
        observe("ListKeys", async {
            validate::resource_name("volume", &r.volume)?;
            validate::resource_name("bucket", &r.bucket)?;
            validate::optional_key("prefix", &r.prefix)?;
            validate::optional_key("start_after", &r.start_after)?;
            validate::delimiter("delimiter", &r.delimiter)?;
            crate::listing::check_token_len(&r.continuation_token)?;
            let omit_blocks = r.omit_blocks;
            let page = self
                .svc
                .list_keys(
                    consistency(&r.read),
                    KeyListing {
                        volume: r.volume.clone(),
                        bucket: r.bucket.clone(),
                        prefix: r.prefix,
                        delimiter: r.delimiter,
                        start_after: r.start_after,
                        continuation_token: r.continuation_token,
                        max_keys: r.max_keys,
                    },
                    |name, mut k| {
                        if omit_blocks {
                            k.blocks = Vec::new();
                        }
                        sized(key_info(&r.volume, &r.bucket, name, k))
                    },
                )
                .await?;
            Ok(ListKeysResponse {
                keys: page.keys,
                truncated: !page.next_continuation_token.is_empty(),
                next_start_after: page.next_start_after,
                common_prefixes: page.common_prefixes,
                next_continuation_token: page.next_continuation_token,
                scan: Some(scan_stats(page.stats)),
            })
        })
        .await
    }
    async fn list_object_versions(
        &self,
        req: Request<ListObjectVersionsRequest>,
    ) -> Result<Response<ListObjectVersionsResponse>, Status> {
        observe(
            "ListObjectVersions",
            versions::list_object_versions(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn set_bucket_versioning(
        &self,
        req: Request<SetBucketVersioningRequest>,
    ) -> Result<Response<SetBucketVersioningResponse>, Status> {
        observe(
            "SetBucketVersioning",
            versions::set_bucket_versioning(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn put_bucket_lifecycle(
        &self,
        req: Request<PutBucketLifecycleRequest>,
    ) -> Result<Response<PutBucketLifecycleResponse>, Status> {
        observe(
            "PutBucketLifecycle",
            lifecycle::put(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn get_bucket_lifecycle(
        &self,
        req: Request<GetBucketLifecycleRequest>,
    ) -> Result<Response<GetBucketLifecycleResponse>, Status> {
        observe(
            "GetBucketLifecycle",
            lifecycle::get(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn get_lifecycle_status(
        &self,
        req: Request<GetLifecycleStatusRequest>,
    ) -> Result<Response<GetLifecycleStatusResponse>, Status> {
        observe(
            "GetLifecycleStatus",
            lifecycle::status(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: Request<DeleteBucketLifecycleRequest>,
    ) -> Result<Response<DeleteBucketLifecycleResponse>, Status> {
        observe(
            "DeleteBucketLifecycle",
            lifecycle::delete(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn set_volume_quota(
        &self,
        req: Request<SetVolumeQuotaRequest>,
    ) -> Result<Response<SetVolumeQuotaResponse>, Status> {
        observe(
            "SetVolumeQuota",
            quota::set_volume_quota(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn set_bucket_quota(
        &self,
        req: Request<SetBucketQuotaRequest>,
    ) -> Result<Response<SetBucketQuotaResponse>, Status> {
        observe(
            "SetBucketQuota",
            quota::set_bucket_quota(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn open_key(
        &self,
        req: Request<OpenKeyRequest>,
    ) -> Result<Response<OpenKeyResponse>, Status> {
        observe("OpenKey", objects::open_key(&self.svc, req.into_inner())).await
    }

    async fn allocate_block(
        &self,
        req: Request<AllocateBlockRequest>,
    ) -> Result<Response<AllocateBlockResponse>, Status> {
        observe(
            "AllocateBlock",
            objects::allocate_block(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn commit_key(
        &self,
        req: Request<CommitKeyRequest>,
    ) -> Result<Response<CommitKeyResponse>, Status> {
        observe(
            "CommitKey",
            objects::commit_key(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn list_open_keys(
        &self,
        req: Request<ListOpenKeysRequest>,
    ) -> Result<Response<ListOpenKeysResponse>, Status> {
        observe(
            "ListOpenKeys",
            objects::list_open_keys(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn copy_key(
        &self,
        req: Request<CopyKeyRequest>,
    ) -> Result<Response<CopyKeyResponse>, Status> {
        observe("CopyKey", objects::copy_key(&self.svc, req.into_inner())).await
    }

    async fn put_keys(
        &self,
        req: Request<PutKeysRequest>,
    ) -> Result<Response<PutKeysResponse>, Status> {
        observe("PutKeys", bulk::put_keys(&self.svc, req.into_inner())).await
    }

    async fn put_key_tagging(
        &self,
        req: Request<PutKeyTaggingRequest>,
    ) -> Result<Response<PutKeyTaggingResponse>, Status> {
        observe("PutKeyTagging", tagging::put(&self.svc, req.into_inner())).await
    }

    async fn get_key_tagging(
        &self,
        req: Request<GetKeyTaggingRequest>,
    ) -> Result<Response<GetKeyTaggingResponse>, Status> {
        tagging::get(&self.svc, req.into_inner()).await
    }

    async fn delete_key_tagging(
        &self,
        req: Request<DeleteKeyTaggingRequest>,
    ) -> Result<Response<DeleteKeyTaggingResponse>, Status> {
        observe(
            "DeleteKeyTagging",
            tagging::delete(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn initiate_multipart_upload(
        &self,
        req: Request<InitiateMultipartUploadRequest>,
    ) -> Result<Response<InitiateMultipartUploadResponse>, Status> {
        observe(
            "InitiateMultipartUpload",
            objects::initiate_multipart(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn commit_part(
        &self,
        req: Request<CommitPartRequest>,
    ) -> Result<Response<CommitPartResponse>, Status> {
        observe(
            "CommitPart",
            objects::commit_part(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn complete_multipart_upload(
        &self,
        req: Request<CompleteMultipartUploadRequest>,
    ) -> Result<Response<CompleteMultipartUploadResponse>, Status> {
        observe(
            "CompleteMultipartUpload",
            objects::complete_multipart(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn abort_multipart_upload(
        &self,
        req: Request<AbortMultipartUploadRequest>,
    ) -> Result<Response<AbortMultipartUploadResponse>, Status> {
        observe(
            "AbortMultipartUpload",
            objects::abort_multipart(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn list_parts(
        &self,
        req: Request<ListPartsRequest>,
    ) -> Result<Response<ListPartsResponse>, Status> {
        observe(
            "ListParts",
            objects::list_parts(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn list_multipart_uploads(
        &self,
        req: Request<ListMultipartUploadsRequest>,
    ) -> Result<Response<ListMultipartUploadsResponse>, Status> {
        observe(
            "ListMultipartUploads",
            objects::list_uploads(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn list_deleted_blocks(
        &self,
        req: Request<ListDeletedBlocksRequest>,
    ) -> Result<Response<ListDeletedBlocksResponse>, Status> {
        observe(
            "ListDeletedBlocks",
            objects::list_deleted_blocks(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn ack_deleted_blocks(
        &self,
        req: Request<AckDeletedBlocksRequest>,
    ) -> Result<Response<AckDeletedBlocksResponse>, Status> {
        observe(
            "AckDeletedBlocks",
            objects::ack_deleted_blocks(&self.svc, req.into_inner()),
        )
        .await
    }
    async fn create_directory(
        &self,
        req: Request<CreateDirectoryRequest>,
    ) -> Result<Response<CreateDirectoryResponse>, Status> {
        observe(
            "CreateDirectory",
            files::create_directory(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn create_file(
        &self,
        req: Request<CreateFileRequest>,
    ) -> Result<Response<CreateFileResponse>, Status> {
        observe(
            "CreateFile",
            files::create_file(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn get_file_status(
        &self,
        req: Request<GetFileStatusRequest>,
    ) -> Result<Response<GetFileStatusResponse>, Status> {
        observe(
            "GetFileStatus",
            files::get_file_status(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn delete_path(
        &self,
        req: Request<DeletePathRequest>,
    ) -> Result<Response<DeletePathResponse>, Status> {
        observe(
            "DeletePath",
            files::delete_path(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn rename_path(
        &self,
        req: Request<RenamePathRequest>,
    ) -> Result<Response<RenamePathResponse>, Status> {
        observe(
            "RenamePath",
            files::rename_path(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn list_status(
        &self,
        req: Request<ListStatusRequest>,
    ) -> Result<Response<ListStatusResponse>, Status> {
        observe(
            "ListStatus",
            files::list_status(&self.svc, req.into_inner()),
        )
        .await
    }

    async fn get_acl(
        &self,
        req: Request<GetAclRequest>,
    ) -> Result<Response<GetAclResponse>, Status> {
        observe("GetAcl", acl::get_acl(&self.svc, req.into_inner())).await
    }

    async fn set_acl(
        &self,
        req: Request<SetAclRequest>,
    ) -> Result<Response<SetAclResponse>, Status> {
        observe("SetAcl", acl::set_acl(&self.svc, req.into_inner())).await
    }

    async fn who_am_i(
        &self,
        _req: Request<WhoAmIRequest>,
    ) -> Result<Response<WhoAmIResponse>, Status> {
        observe("WhoAmI", acl::who_am_i(&self.svc)).await
    }
}

/// Cluster introspection for `omctl cluster status` and probes.
#[derive(Clone)]
pub struct ClusterGrpc {
    svc: Arc<OmService>,
}

impl ClusterGrpc {
    pub fn new(svc: Arc<OmService>) -> Self {
        ClusterGrpc { svc }
    }
}

pub fn cluster_status(svc: &OmService) -> ClusterStatusResponse {
    let m = svc.raft().metrics().borrow_watched().clone();
    let role = match m.state {
        openraft::ServerState::Leader => "leader",
        openraft::ServerState::Follower => "follower",
        openraft::ServerState::Candidate => "candidate",
        openraft::ServerState::Learner => "learner",
        openraft::ServerState::Shutdown => "shutdown",
    };
    let membership = m.membership_config.membership();
    let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
    let members = membership
        .nodes()
        .map(|(id, n)| {
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(id).cloned())
                .flatten();
            ClusterMember {
                node_id: *id,
                raft_addr: n.raft_addr.clone(),
                grpc_addr: n.grpc_addr.clone(),
                voter: voters.contains(id),
                matched_index: matched.as_ref().map_or(0, |l| l.index),
                matched_known: m.replication.is_some(),
            }
        })
        .collect();
    ClusterStatusResponse {
        node_id: svc.node_id(),
        role: role.to_string(),
        term: m.current_term,
        leader_id: m.current_leader.unwrap_or(0),
        has_leader: m.current_leader.is_some(),
        last_log_index: m.last_log_index.unwrap_or(0),
        committed_index: m.local_committed.as_ref().map_or(0, |l| l.index),
        applied_index: m.last_applied.as_ref().map_or(0, |l| l.index),
        snapshot_index: m.snapshot.as_ref().map_or(0, |l| l.index),
        purged_index: m.purged.as_ref().map_or(0, |l| l.index),
        members,
        cluster_id: svc.cluster_id().map(|c| c.to_string()).unwrap_or_default(),
    }
}

#[tonic::async_trait]
impl Cluster for ClusterGrpc {
    type ReadBackupFileStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<BackupFileChunk, Status>> + Send + 'static>,
    >;

    async fn start_backup(
        &self,
        _req: Request<StartBackupRequest>,
    ) -> Result<Response<StartBackupResponse>, Status> {
        observe("StartBackup", self.svc.start_backup()).await
    }

    async fn read_backup_file(
        &self,
        req: Request<ReadBackupFileRequest>,
    ) -> Result<Response<Self::ReadBackupFileStream>, Status> {
        let r = req.into_inner();
        let rx = observe("ReadBackupFile", async {
            self.svc
                .read_backup_file(&r.session, &r.name, r.bytes_per_second)
        })
        .await?
        .into_inner();
        let stream =
            tokio_stream::wrappers::ReceiverStream::new(rx).map(|c| c.map_err(|e| to_status(&e)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn finish_backup(
        &self,
        req: Request<FinishBackupRequest>,
    ) -> Result<Response<FinishBackupResponse>, Status> {
        let r = req.into_inner();
        observe("FinishBackup", async {
            self.svc.finish_backup(&r.session).await?;
            Ok(FinishBackupResponse {})
        })
        .await
    }

    async fn status(
        &self,
        _req: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusResponse>, Status> {
        observe("ClusterStatus", async { Ok(cluster_status(&self.svc)) }).await
    }

    async fn add_node(
        &self,
        req: Request<AddNodeRequest>,
    ) -> Result<Response<AddNodeResponse>, Status> {
        let r = req.into_inner();
        observe("AddNode", async {
            if r.node_id == 0 {
                return Err(OmError::invalid(
                    "INVALID_NODE_ID",
                    "node_id",
                    "node ids start at 1",
                ));
            }
            validate::address("raft_addr", &r.raft_addr)?;
            validate::address("grpc_addr", &r.grpc_addr)?;
            let node = om_raft_store::OmNode {
                raft_addr: r.raft_addr,
                grpc_addr: r.grpc_addr,
            };
            let outcome = self.svc.add_node(r.node_id, node, r.learner_only).await;
            self.svc
                .audit_admin(format!("/nodes/{}", r.node_id), &outcome);
            outcome?;
            Ok(AddNodeResponse {
                status: Some(cluster_status(&self.svc)),
            })
        })
        .await
    }

    async fn remove_node(
        &self,
        req: Request<RemoveNodeRequest>,
    ) -> Result<Response<RemoveNodeResponse>, Status> {
        let r = req.into_inner();
        observe("RemoveNode", async {
            let outcome = self.svc.remove_node(r.node_id).await;
            self.svc
                .audit_admin(format!("/nodes/{}", r.node_id), &outcome);
            outcome?;
            Ok(RemoveNodeResponse {
                status: Some(cluster_status(&self.svc)),
            })
        })
        .await
    }

    async fn transfer_leader(
        &self,
        req: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderResponse>, Status> {
        let r = req.into_inner();
        observe("TransferLeader", async {
            let outcome = self
                .svc
                .transfer_leader(r.to, std::time::Duration::from_secs(10))
                .await;
            self.svc.audit_admin(format!("/nodes/{}", r.to), &outcome);
            outcome?;
            Ok(TransferLeaderResponse {
                status: Some(cluster_status(&self.svc)),
            })
        })
        .await
    }

    async fn verify_replicas(
        &self,
        req: Request<VerifyReplicasRequest>,
    ) -> Result<Response<VerifyReplicasResponse>, Status> {
        let tables = req.get_ref().tables;
        observe("VerifyReplicas", async {
            let (r, t) = self.svc.verify_replicas(tables).await?;
            Ok(VerifyReplicasResponse {
                index: r.index,
                members: r
                    .members
                    .into_iter()
                    .map(|m| ReplicaDigest {
                        node_id: m.node_id,
                        applied_index: m.applied_index,
                        digest: m.digest.map(hex::encode).unwrap_or_default(),
                        agrees: m.agrees,
                        diverged: m.diverged,
                        error: m.error.unwrap_or_default(),
                    })
                    .collect(),
                all_agree: r.all_agree,
                majority: r.majority,
                tables: t,
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_are_capped_on_a_character_boundary() {
        let e = OmError::invalid("SOME_REASON", "name", "é".repeat(600_000));
        let s = to_status(&e);
        assert!(s.message().len() < MAX_STATUS_MESSAGE_BYTES + 32);
        assert!(s.message().ends_with("…(1200000 bytes)"), "{}", s.message());
        let d = ErrorDetail::decode(s.details()).unwrap();
        assert_eq!(d.message, s.message());
        assert_eq!(d.reason, "SOME_REASON");
        // Short messages pass unchanged.
        assert_eq!(
            to_status(&OmError::invalid("R", "", "short")).message(),
            "short"
        );
    }
}
