//! The public gRPC edge: validates requests, calls `OmService`, converts
//! records to API messages, and maps `OmError` to `tonic::Status` in exactly
//! one place (`to_status`). Only this module knows `tonic::Status`.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use om_proto::store::{self as st, command_result};
use om_proto::v1::cluster_server::Cluster;
use om_proto::v1::ozone_manager_server::OzoneManager;
use om_proto::v1::*;
use prost::Message;
use tonic::{Request, Response, Status};

use crate::error::{ErrorKind, OmError};
use crate::service::{Consistency, OmService, WriteId, item_len};

mod acl;
mod bulk;
mod cluster;
mod files;
mod keys;
mod lifecycle;
mod malformed;
mod multipart;
mod namespace;
mod objects;
mod quota;
mod s3;
mod snapshots;
mod tagging;
mod versions;

pub use cluster::cluster_status;
pub use malformed::MalformedAsInvalid;

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

pub use crate::limits::MAX_STATUS_MESSAGE_BYTES;
pub use objects::MAX_RECORD_BLOCKS;
pub mod auth;
pub mod guard;
pub mod incarnated;
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
                ErrorKind::ResourceExhausted => tonic::Code::ResourceExhausted,
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
        OmError::Unavailable(_) | OmError::Diverged(_) | OmError::Superseded(_) => {
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
        owner: b.owner,
        tags: b.tags,
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
        part_sizes: k.part_sizes,
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

/// Runs one RPC: records `om_grpc_requests_total{method,code}` and its latency,
/// and maps the error (`to_status`).
async fn observe<T, E: Into<Refused>>(
    method: &'static str,
    f: impl Future<Output = Result<T, E>>,
) -> Result<Response<T>, Status> {
    let started = Instant::now();
    let r = f.await.map_err(Into::into);
    let code = match &r {
        Ok(_) => None,
        Err(Refused { error, .. }) => Some(to_status(error).code()),
    };
    let (seconds, total) = request_metrics(method, code);
    seconds.record(started.elapsed().as_secs_f64());
    total.increment(1);
    match r {
        Ok(v) => Ok(Response::new(v)),
        Err(Refused {
            error,
            delete_marker,
        }) => {
            if matches!(error, OmError::Internal(_)) {
                tracing::error!(method, error = %error, "request failed");
            } else {
                tracing::debug!(method, reason = error.reason(), "request refused");
            }
            let status = to_status(&error);
            Err(match delete_marker {
                Some(version_id) => versions::deleted(status, &version_id),
                None => status,
            })
        }
    }
}

/// A handler's refusal: the error, and when it is about a key whose current
/// version is a delete marker, that marker's version id (S3's
/// `x-amz-delete-marker`; see `versions::deleted`).
pub struct Refused {
    error: OmError,
    delete_marker: Option<String>,
}

impl From<OmError> for Refused {
    fn from(error: OmError) -> Self {
        Refused {
            error,
            delete_marker: None,
        }
    }
}

impl Refused {
    fn delete_marker(error: OmError, version_id: String) -> Self {
        Refused {
            error,
            delete_marker: Some(version_id),
        }
    }
}

/// The table of RPCs: each line names the trait method, its request and
/// response, the method label of its metrics and the handler, an
/// `async fn(&OmService, Request) -> Result<Response, E>` with `E` an
/// `OmError` or a `Refused`. Every RPC runs through `observe`, so adding
/// one is one line here and a handler.
macro_rules! rpcs {
    (
        impl $service:ident for $grpc:ident {
            $(stream $smethod:ident($sreq:ty) -> $stype:ident of $sitem:ty = $sname:literal $shandler:path;)*
            $(rpc $method:ident($req:ty) -> $resp:ty = $name:literal $handler:path;)*
        }
    ) => {
        #[tonic::async_trait]
        impl $service for $grpc {
            $(
                type $stype = std::pin::Pin<
                    Box<dyn futures::Stream<Item = Result<$sitem, Status>> + Send + 'static>,
                >;

                async fn $smethod(
                    &self,
                    req: Request<$sreq>,
                ) -> Result<Response<Self::$stype>, Status> {
                    let items = observe($sname, $shandler(&self.svc, req.into_inner()))
                        .await?
                        .into_inner();
                    let stream = items.map(|item| item.map_err(|e| to_status(&e)));
                    Ok(Response::new(Box::pin(stream)))
                }
            )*
            $(
                async fn $method(&self, req: Request<$req>) -> Result<Response<$resp>, Status> {
                    observe($name, $handler(&self.svc, req.into_inner())).await
                }
            )*
        }
    };
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

rpcs! {
    impl OzoneManager for OmGrpc {
        rpc create_volume(CreateVolumeRequest) -> CreateVolumeResponse
            = "CreateVolume" namespace::create_volume;
        rpc get_volume(GetVolumeRequest) -> GetVolumeResponse = "GetVolume" namespace::get_volume;
        rpc list_volumes(ListVolumesRequest) -> ListVolumesResponse
            = "ListVolumes" namespace::list_volumes;
        rpc delete_volume(DeleteVolumeRequest) -> DeleteVolumeResponse
            = "DeleteVolume" namespace::delete_volume;
        rpc create_bucket(CreateBucketRequest) -> CreateBucketResponse
            = "CreateBucket" namespace::create_bucket;
        rpc get_bucket(GetBucketRequest) -> GetBucketResponse = "GetBucket" namespace::get_bucket;
        rpc list_buckets(ListBucketsRequest) -> ListBucketsResponse
            = "ListBuckets" namespace::list_buckets;
        rpc delete_bucket(DeleteBucketRequest) -> DeleteBucketResponse
            = "DeleteBucket" namespace::delete_bucket;
        rpc put_key(PutKeyRequest) -> PutKeyResponse = "PutKey" keys::put_key;
        rpc lookup_key(LookupKeyRequest) -> LookupKeyResponse = "LookupKey" keys::lookup_key;
        rpc delete_key(DeleteKeyRequest) -> DeleteKeyResponse = "DeleteKey" keys::delete_key;
        rpc delete_keys(DeleteKeysRequest) -> DeleteKeysResponse = "DeleteKeys" keys::delete_keys;
        rpc rename_key(RenameKeyRequest) -> RenameKeyResponse = "RenameKey" keys::rename_key;
        rpc list_keys(ListKeysRequest) -> ListKeysResponse = "ListKeys" keys::list_keys;
        rpc list_object_versions(ListObjectVersionsRequest) -> ListObjectVersionsResponse
            = "ListObjectVersions" versions::list_object_versions;
        rpc set_bucket_versioning(SetBucketVersioningRequest) -> SetBucketVersioningResponse
            = "SetBucketVersioning" versions::set_bucket_versioning;
        rpc set_bucket_tags(SetBucketTagsRequest) -> SetBucketTagsResponse
            = "SetBucketTags" namespace::set_bucket_tags;
        rpc create_snapshot(CreateSnapshotRequest) -> CreateSnapshotResponse
            = "CreateSnapshot" snapshots::create;
        rpc get_snapshot(GetSnapshotRequest) -> GetSnapshotResponse
            = "GetSnapshot" snapshots::get;
        rpc list_snapshots(ListSnapshotsRequest) -> ListSnapshotsResponse
            = "ListSnapshots" snapshots::list;
        rpc delete_snapshot(DeleteSnapshotRequest) -> DeleteSnapshotResponse
            = "DeleteSnapshot" snapshots::delete;
        rpc rename_snapshot(RenameSnapshotRequest) -> RenameSnapshotResponse
            = "RenameSnapshot" snapshots::rename;
        rpc snapshot_diff(SnapshotDiffRequest) -> SnapshotDiffResponse
            = "SnapshotDiff" snapshots::diff;
        rpc put_bucket_lifecycle(PutBucketLifecycleRequest) -> PutBucketLifecycleResponse
            = "PutBucketLifecycle" lifecycle::put;
        rpc get_bucket_lifecycle(GetBucketLifecycleRequest) -> GetBucketLifecycleResponse
            = "GetBucketLifecycle" lifecycle::get;
        rpc get_lifecycle_status(GetLifecycleStatusRequest) -> GetLifecycleStatusResponse
            = "GetLifecycleStatus" lifecycle::status;
        rpc delete_bucket_lifecycle(DeleteBucketLifecycleRequest) -> DeleteBucketLifecycleResponse
            = "DeleteBucketLifecycle" lifecycle::delete;
        rpc set_volume_quota(SetVolumeQuotaRequest) -> SetVolumeQuotaResponse
            = "SetVolumeQuota" quota::set_volume_quota;
        rpc set_bucket_quota(SetBucketQuotaRequest) -> SetBucketQuotaResponse
            = "SetBucketQuota" quota::set_bucket_quota;
        rpc open_key(OpenKeyRequest) -> OpenKeyResponse = "OpenKey" objects::open_key;
        rpc allocate_block(AllocateBlockRequest) -> AllocateBlockResponse
            = "AllocateBlock" objects::allocate_block;
        rpc commit_key(CommitKeyRequest) -> CommitKeyResponse = "CommitKey" objects::commit_key;
        rpc abort_key(AbortKeyRequest) -> AbortKeyResponse = "AbortKey" objects::abort_key;
        rpc list_open_keys(ListOpenKeysRequest) -> ListOpenKeysResponse
            = "ListOpenKeys" objects::list_open_keys;
        rpc copy_key(CopyKeyRequest) -> CopyKeyResponse = "CopyKey" objects::copy_key;
        rpc put_keys(PutKeysRequest) -> PutKeysResponse = "PutKeys" bulk::put_keys;
        rpc put_key_tagging(PutKeyTaggingRequest) -> PutKeyTaggingResponse
            = "PutKeyTagging" tagging::put;
        rpc get_key_tagging(GetKeyTaggingRequest) -> GetKeyTaggingResponse
            = "GetKeyTagging" tagging::get;
        rpc delete_key_tagging(DeleteKeyTaggingRequest) -> DeleteKeyTaggingResponse
            = "DeleteKeyTagging" tagging::delete;
        rpc initiate_multipart_upload(InitiateMultipartUploadRequest) -> InitiateMultipartUploadResponse
            = "InitiateMultipartUpload" multipart::initiate_multipart;
        rpc commit_part(CommitPartRequest) -> CommitPartResponse
            = "CommitPart" multipart::commit_part;
        rpc complete_multipart_upload(CompleteMultipartUploadRequest) -> CompleteMultipartUploadResponse
            = "CompleteMultipartUpload" multipart::complete_multipart;
        rpc abort_multipart_upload(AbortMultipartUploadRequest) -> AbortMultipartUploadResponse
            = "AbortMultipartUpload" multipart::abort_multipart;
        rpc list_parts(ListPartsRequest) -> ListPartsResponse = "ListParts" multipart::list_parts;
        rpc list_multipart_uploads(ListMultipartUploadsRequest) -> ListMultipartUploadsResponse
            = "ListMultipartUploads" multipart::list_uploads;
        rpc list_deleted_blocks(ListDeletedBlocksRequest) -> ListDeletedBlocksResponse
            = "ListDeletedBlocks" objects::list_deleted_blocks;
        rpc ack_deleted_blocks(AckDeletedBlocksRequest) -> AckDeletedBlocksResponse
            = "AckDeletedBlocks" objects::ack_deleted_blocks;
        rpc create_directory(CreateDirectoryRequest) -> CreateDirectoryResponse
            = "CreateDirectory" files::create_directory;
        rpc create_file(CreateFileRequest) -> CreateFileResponse = "CreateFile" files::create_file;
        rpc get_file_status(GetFileStatusRequest) -> GetFileStatusResponse
            = "GetFileStatus" files::get_file_status;
        rpc delete_path(DeletePathRequest) -> DeletePathResponse = "DeletePath" files::delete_path;
        rpc rename_path(RenamePathRequest) -> RenamePathResponse = "RenamePath" files::rename_path;
        rpc list_status(ListStatusRequest) -> ListStatusResponse = "ListStatus" files::list_status;
        rpc get_acl(GetAclRequest) -> GetAclResponse = "GetAcl" acl::get_acl;
        rpc set_acl(SetAclRequest) -> SetAclResponse = "SetAcl" acl::set_acl;
        rpc who_am_i(WhoAmIRequest) -> WhoAmIResponse = "WhoAmI" acl::who_am_i;
        rpc create_s3_secret(CreateS3SecretRequest) -> CreateS3SecretResponse
            = "CreateS3Secret" s3::create;
        rpc get_s3_secret(GetS3SecretRequest) -> GetS3SecretResponse = "GetS3Secret" s3::get;
        rpc list_s3_secrets(ListS3SecretsRequest) -> ListS3SecretsResponse
            = "ListS3Secrets" s3::list;
        rpc revoke_s3_secret(RevokeS3SecretRequest) -> RevokeS3SecretResponse
            = "RevokeS3Secret" s3::revoke;
        rpc rotate_s3_secret_key(RotateS3SecretKeyRequest) -> RotateS3SecretKeyResponse
            = "RotateS3SecretKey" s3::rotate_key;
    }
}

/// Cluster introspection and administration (`omctl cluster`, `omctl backup`).
#[derive(Clone)]
pub struct ClusterGrpc {
    svc: Arc<OmService>,
}

impl ClusterGrpc {
    pub fn new(svc: Arc<OmService>) -> Self {
        ClusterGrpc { svc }
    }
}

rpcs! {
    impl Cluster for ClusterGrpc {
        stream read_backup_file(ReadBackupFileRequest) -> ReadBackupFileStream of BackupFileChunk
            = "ReadBackupFile" cluster::read_backup_file;
        rpc start_backup(StartBackupRequest) -> StartBackupResponse
            = "StartBackup" cluster::start_backup;
        rpc finish_backup(FinishBackupRequest) -> FinishBackupResponse
            = "FinishBackup" cluster::finish_backup;
        rpc status(ClusterStatusRequest) -> ClusterStatusResponse = "ClusterStatus" cluster::status;
        rpc add_node(AddNodeRequest) -> AddNodeResponse = "AddNode" cluster::add_node;
        rpc remove_node(RemoveNodeRequest) -> RemoveNodeResponse
            = "RemoveNode" cluster::remove_node;
        rpc transfer_leader(TransferLeaderRequest) -> TransferLeaderResponse
            = "TransferLeader" cluster::transfer_leader;
        rpc verify_replicas(VerifyReplicasRequest) -> VerifyReplicasResponse
            = "VerifyReplicas" cluster::verify_replicas;
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
