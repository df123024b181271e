//! The om client library, shared by `omctl`, the tests and gateways.
//!
//! It holds a list of endpoints, finds and caches the leader (following the
//! `om-leader` hint a follower returns), retries unavailable endpoints with
//! backoff within a deadline, and stamps every write with this client's id and
//! a fresh sequence number, so a retry (even across a failover) is answered
//! from the replicated retry cache and applied exactly once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_proto::v1::cluster_client::ClusterClient;
use om_proto::v1::ozone_manager_client::OzoneManagerClient;
use om_proto::v1::*;
use prost::Message;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

pub use om_proto::v1;

pub mod backup;
mod cluster;
mod keys;
mod namespace;
mod snapshots;
mod versioning;

/// An error as the client sees it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClientError {
    /// om refused the request; `reason` is stable and machine-readable.
    #[error("{code:?} {reason}{}: {message}", if field.is_empty() { String::new() } else { format!(" (field {field})") })]
    Api {
        code: Code,
        reason: String,
        field: String,
        message: String,
        /// NOT_FOUND because the key's current version is a delete marker:
        /// the marker's version id (S3's `x-amz-delete-marker`).
        delete_marker: Option<String>,
    },
    /// No endpoint answered within the deadline.
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("bad endpoint: {0}")]
    Endpoint(String),
}

impl ClientError {
    pub fn reason(&self) -> &str {
        match self {
            ClientError::Api { reason, .. } => reason,
            ClientError::Unavailable(_) => "UNAVAILABLE",
            ClientError::Endpoint(_) => "BAD_ENDPOINT",
        }
    }

    pub fn code(&self) -> Code {
        match self {
            ClientError::Api { code, .. } => *code,
            _ => Code::Unavailable,
        }
    }

    fn from_status(s: &Status) -> ClientError {
        let detail = ErrorDetail::decode(s.details()).unwrap_or_default();
        ClientError::Api {
            code: s.code(),
            reason: if detail.reason.is_empty() {
                format!("{:?}", s.code()).to_uppercase()
            } else {
                detail.reason
            },
            field: detail.field,
            message: s.message().to_string(),
            delete_marker: detail.delete_marker.then_some(detail.version_id),
        }
    }
}

/// Retry and timeout settings.
#[derive(Clone)]
pub struct ClientOptions {
    /// Give up on a call after this long, retries included.
    pub deadline: Duration,
    /// Timeout of one attempt.
    pub attempt_timeout: Duration,
    /// First backoff between attempts; doubles up to `max_backoff`.
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// Serve reads from whichever node answers, possibly stale.
    pub stale_reads: bool,
    /// With `stale_reads`: the oldest state accepted, in milliseconds since
    /// the serving node last heard from a leader (0: the server's default).
    pub max_staleness_ms: u64,
    /// Linearizable reads under the leader's lease (no quorum round trip).
    pub lease_reads: bool,
    /// TLS to the servers (CA, and a client certificate for mutual TLS).
    pub tls: Option<Arc<om_tls::ClientTls>>,
    /// Bearer token sent with every request (`authorization` metadata).
    pub token: Option<String>,
    /// Act for this end user (`om-impersonate-user`); the principal needs
    /// the IMPERSONATE right.
    pub impersonate: Option<String>,
    /// The impersonated user's groups (`om-impersonate-groups`).
    pub impersonate_groups: Vec<String>,
    /// Stay on the member that answers rather than follow the leader: a
    /// follower forwards the writes it takes to the leader, and the leader
    /// it names in such an answer (`om-leader`) is not followed. For
    /// clients spread over the members, as etcd's are; by default a client
    /// goes to the leader it is told of (one hop less per write).
    pub spread: bool,
}

impl std::fmt::Debug for ClientOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientOptions")
            .field("deadline", &self.deadline)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("backoff", &self.backoff)
            .field("max_backoff", &self.max_backoff)
            .field("stale_reads", &self.stale_reads)
            .field("lease_reads", &self.lease_reads)
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("impersonate", &self.impersonate)
            .field("impersonate_groups", &self.impersonate_groups)
            .field("spread", &self.spread)
            .finish()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            deadline: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            stale_reads: false,
            max_staleness_ms: 0,
            lease_reads: false,
            tls: None,
            token: None,
            impersonate: None,
            impersonate_groups: Vec::new(),
            spread: false,
        }
    }
}

struct Endpoints {
    addrs: Vec<String>,
    channels: Vec<AuthChannel>,
    /// Index of the node believed to be the leader.
    preferred: usize,
}

pub struct OmClient {
    endpoints: Mutex<Endpoints>,
    /// The cluster and incarnation (`om-cluster`: `ID/INCARNATION`) of the
    /// first answer; answers from another are refused (a member of a
    /// replaced incarnation, or of another cluster behind the same names).
    cluster: Mutex<Option<String>>,
    client_id: String,
    seq: AtomicU64,
    opts: ClientOptions,
}

/// A channel that adds the client's bearer token and impersonation (if
/// any) to every request.
#[derive(Clone)]
pub struct AuthChannel {
    inner: Channel,
    headers: Arc<Vec<(&'static str, tonic::codegen::http::HeaderValue)>>,
}

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for AuthChannel {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = <Channel as tonic::codegen::Service<
        tonic::codegen::http::Request<tonic::body::Body>,
    >>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        tonic::codegen::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut req: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        for (name, v) in self.headers.iter() {
            req.headers_mut().insert(*name, v.clone());
        }
        tonic::codegen::Service::call(&mut self.inner, req)
    }
}

/// `channel` with `opts`' TLS settings, bearer token and impersonation.
fn auth_channel(addr: &str, opts: &ClientOptions) -> Result<AuthChannel, ClientError> {
    with_headers(channel(addr, opts.tls.as_ref())?, opts)
}

/// `inner` carrying `opts`' bearer token and impersonation.
fn with_headers(inner: Channel, opts: &ClientOptions) -> Result<AuthChannel, ClientError> {
    use tonic::codegen::http::HeaderValue;
    let value = |what: &str, v: &str| {
        HeaderValue::from_str(v).map_err(|_| {
            ClientError::Endpoint(format!("the {what} has characters a header cannot carry"))
        })
    };
    let mut headers = Vec::new();
    if let Some(t) = &opts.token {
        let mut v = value("token", &format!("Bearer {t}"))?;
        v.set_sensitive(true);
        headers.push(("authorization", v));
    }
    if let Some(u) = &opts.impersonate {
        headers.push(("om-impersonate-user", value("impersonated user", u)?));
        if !opts.impersonate_groups.is_empty() {
            let groups = opts.impersonate_groups.join(",");
            headers.push(("om-impersonate-groups", value("groups", &groups)?));
        }
    }
    Ok(AuthChannel {
        inner,
        headers: Arc::new(headers),
    })
}

/// A lazily connecting channel to `addr` (`host:port`, optionally with an
/// `http://` or `https://` scheme), over TLS when `tls` is given.
fn channel(addr: &str, tls: Option<&Arc<om_tls::ClientTls>>) -> Result<Channel, ClientError> {
    let hostport = addr
        .strip_prefix("https://")
        .or_else(|| addr.strip_prefix("http://"))
        .unwrap_or(addr);
    if addr.starts_with("https://") && tls.is_none() {
        return Err(ClientError::Endpoint(format!(
            "{addr}: an https endpoint needs TLS settings (--cacert)"
        )));
    }
    // TLS is done by the connector, below HTTP/2: the URI stays http.
    Ok(Endpoint::from_shared(format!("http://{hostport}"))
        .map_err(|e| ClientError::Endpoint(format!("{addr}: {e}")))?
        .connect_timeout(Duration::from_secs(2))
        .connect_with_connector_lazy(om_tls::Connector::new(tls.cloned())))
}

/// A new random client id: 16 hex digits from the OS random source.
fn new_client_id() -> String {
    format!("c-{:016x}", rand::random::<u64>())
}

/// The response header naming the answering member's cluster and
/// incarnation (`ID/INCARNATION`).
pub const CLUSTER_HEADER: &str = "om-cluster";
/// The response header listing the incarnations the answering member's
/// replaced.
pub const SUPERSEDED_HEADER: &str = "om-superseded";

/// What to do after a failed attempt.
enum Next {
    /// Retry on the node at this address (the leader hint).
    Redirect(String),
    /// Retry on another node after a backoff.
    Rotate,
    /// Give up with this error.
    Fail(ClientError),
}

fn classify(s: &Status) -> Next {
    let reason = s
        .metadata()
        .get("om-reason")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // A member that a forced new cluster left behind serves nothing: ask
    // another.
    if reason == "SUPERSEDED" {
        return Next::Rotate;
    }
    if reason == "NOT_LEADER" {
        if let Some(l) = s.metadata().get("om-leader").and_then(|v| v.to_str().ok())
            && !l.is_empty()
        {
            return Next::Redirect(l.to_string());
        }
        return Next::Rotate;
    }
    match s.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
            Next::Rotate
        }
        _ => Next::Fail(ClientError::from_status(s)),
    }
}

impl OmClient {
    /// A client over `endpoints` (`host:port`, comma-separated lists accepted).
    pub fn new(endpoints: &[String], opts: ClientOptions) -> Result<OmClient, ClientError> {
        let addrs: Vec<String> = endpoints
            .iter()
            .flat_map(|e| e.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if addrs.is_empty() {
            return Err(ClientError::Endpoint("no endpoints given".to_string()));
        }
        let channels = addrs
            .iter()
            .map(|a| auth_channel(a, &opts))
            .collect::<Result<_, _>>()?;
        Ok(OmClient {
            endpoints: Mutex::new(Endpoints {
                addrs,
                channels,
                preferred: 0,
            }),
            cluster: Mutex::new(None),
            client_id: new_client_id(),
            seq: AtomicU64::new(0),
            opts,
        })
    }

    /// A client over the same endpoints and settings that acts for `user`
    /// (and `groups`): every request carries the impersonation metadata, so
    /// om checks and audits that user's rights. The principal this client
    /// authenticates as needs the IMPERSONATE right. Channels are shared with
    /// `self` (one connection per endpoint), the client id is new.
    pub fn impersonating(&self, user: &str, groups: &[String]) -> Result<OmClient, ClientError> {
        let mut opts = self.opts.clone();
        opts.impersonate = Some(user.to_string());
        opts.impersonate_groups = groups.to_vec();
        let (addrs, channels, preferred) = {
            let e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
            let channels = e
                .channels
                .iter()
                .map(|c| with_headers(c.inner.clone(), &opts))
                .collect::<Result<Vec<_>, _>>()?;
            (e.addrs.clone(), channels, e.preferred)
        };
        Ok(OmClient {
            endpoints: Mutex::new(Endpoints {
                addrs,
                channels,
                preferred,
            }),
            cluster: Mutex::new(self.cluster_label()),
            client_id: new_client_id(),
            seq: AtomicU64::new(0),
            opts,
        })
    }

    pub fn connect(endpoint: &str) -> Result<OmClient, ClientError> {
        Self::new(&[endpoint.to_string()], ClientOptions::default())
    }

    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// A header for one logical write; reuse it for that write's retries.
    pub fn next_header(&self) -> WriteHeader {
        WriteHeader {
            client_id: self.client_id.clone(),
            seq: self.seq.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }

    fn read_options(&self) -> Option<ReadOptions> {
        Some(ReadOptions {
            consistency: if self.opts.stale_reads {
                ReadConsistency::Stale as i32
            } else if self.opts.lease_reads {
                ReadConsistency::Lease as i32
            } else {
                ReadConsistency::Linearizable as i32
            },
            max_staleness_ms: self.opts.max_staleness_ms,
        })
    }

    fn pick(&self) -> (usize, AuthChannel) {
        let e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        (e.preferred, e.channels[e.preferred].clone())
    }

    fn redirect(&self, addr: &str) -> Result<(), ClientError> {
        let mut e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = e.addrs.iter().position(|a| a == addr) {
            e.preferred = i;
        } else {
            let c = auth_channel(addr, &self.opts)?;
            e.addrs.push(addr.to_string());
            e.channels.push(c);
            e.preferred = e.addrs.len() - 1;
        }
        Ok(())
    }

    /// Whether a leader hint may be followed: it is one of the addresses
    /// this client was given (or already vouched for), or the client address
    /// of a member in the membership of the node that gave it. A hint is
    /// never followed blindly: the client would send its credentials there.
    async fn vouched(&self, asked: AuthChannel, addr: &str) -> bool {
        let known = {
            let e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
            e.addrs.iter().any(|a| a == addr)
        };
        if known {
            return true;
        }
        let status = tokio::time::timeout(
            self.opts.attempt_timeout,
            ClusterClient::new(asked).status(ClusterStatusRequest {}),
        )
        .await;
        matches!(status, Ok(Ok(r)) if r.get_ref().members.iter().any(|m| m.grpc_addr == addr))
    }

    /// Whether an answer's `om-cluster` is one this client may take,
    /// pinning the first it sees: the same cluster and incarnation, or a
    /// newer incarnation of it (one that lists the pinned one as replaced,
    /// which the client then follows). An answer without one (a member that
    /// predates it, or one not yet named) passes.
    fn same_cluster(&self, md: &tonic::metadata::MetadataMap) -> bool {
        let Some(theirs) = md.get(CLUSTER_HEADER).and_then(|v| v.to_str().ok()) else {
            return true;
        };
        let mut pinned = self.cluster.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = pinned.as_deref() else {
            *pinned = Some(theirs.to_string());
            return true;
        };
        if p == theirs {
            return true;
        }
        let split = |l: &str| {
            l.rsplit_once('/')
                .map(|(c, i)| (c.to_string(), i.to_string()))
        };
        let (Some((pc, pi)), Some((tc, _))) = (split(p), split(theirs)) else {
            return false;
        };
        let replaced: Vec<&str> = md
            .get(SUPERSEDED_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').collect())
            .unwrap_or_default();
        if pc == tc && replaced.contains(&pi.as_str()) {
            tracing::warn!(
                from = %p,
                to = %theirs,
                "the cluster was forced into a new incarnation: following it"
            );
            *pinned = Some(theirs.to_string());
            return true;
        }
        false
    }

    /// The cluster and incarnation this client follows (`ID/INCARNATION`),
    /// once an answer named it.
    pub fn cluster_label(&self) -> Option<String> {
        self.cluster
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn addr_of(&self, i: usize) -> String {
        let e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        e.addrs.get(i).cloned().unwrap_or_default()
    }

    fn rotate(&self, from: usize) {
        let mut e = self.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        if e.preferred == from {
            e.preferred = (from + 1) % e.addrs.len();
        }
    }

    /// Runs `f` against the preferred node, following leader hints and
    /// retrying unavailable nodes with backoff until the deadline.
    pub async fn call<T, F, Fut>(&self, f: F) -> Result<T, ClientError>
    where
        F: Fn(AuthChannel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        self.call_within(self.opts.attempt_timeout, self.opts.deadline, f)
            .await
    }

    /// `call` with its own attempt timeout and deadline, for calls that may
    /// take long on the server.
    pub async fn call_within<T, F, Fut>(
        &self,
        attempt_timeout: Duration,
        deadline: Duration,
        f: F,
    ) -> Result<T, ClientError>
    where
        F: Fn(AuthChannel) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        let started = Instant::now();
        let mut backoff = self.opts.backoff;
        let mut last_err;
        loop {
            let (i, ch) = self.pick();
            let asked = ch.clone();
            match tokio::time::timeout(attempt_timeout, f(ch)).await {
                Ok(Ok(r)) if !self.same_cluster(r.metadata()) => {
                    last_err = format!(
                        "{} answered for cluster {:?}, not {:?}, the one this client follows",
                        self.addr_of(i),
                        r.metadata().get(CLUSTER_HEADER),
                        self.cluster
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .as_deref()
                    );
                    tracing::warn!("{last_err}");
                    self.rotate(i);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(self.opts.max_backoff);
                }
                Ok(Ok(r)) => {
                    // A follower forwarded the write: go to the leader next.
                    let hint = (!self.opts.spread)
                        .then(|| r.metadata().get("om-leader")?.to_str().ok())
                        .flatten();
                    if let Some(addr) = hint
                        && self.vouched(asked, addr).await
                    {
                        let _ = self.redirect(addr);
                    }
                    return Ok(r.into_inner());
                }
                Ok(Err(s)) => {
                    last_err = s.message().to_string();
                    match classify(&s) {
                        Next::Fail(e) => return Err(e),
                        Next::Redirect(addr) if self.vouched(asked, &addr).await => {
                            self.redirect(&addr)?;
                            // A fresh hint: retry at once, but never spin.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Next::Redirect(addr) => {
                            tracing::warn!(hint = %addr, "leader hint names no member: not followed");
                            self.rotate(i);
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(self.opts.max_backoff);
                        }
                        Next::Rotate => {
                            self.rotate(i);
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(self.opts.max_backoff);
                        }
                    }
                }
                Err(_) => {
                    last_err = "attempt timed out".to_string();
                    self.rotate(i);
                }
            }
            if started.elapsed() >= deadline {
                return Err(ClientError::Unavailable(last_err));
            }
        }
    }

    fn om(ch: AuthChannel) -> OzoneManagerClient<AuthChannel> {
        OzoneManagerClient::new(ch)
    }
}

/// A write RPC taking its full request: the header is stamped once, so every
/// retry of the call carries the same client id and sequence number.
macro_rules! write_rpcs {
    ($($(#[$doc:meta])* $name:ident($req:ty) -> $resp:ty;)*) => {$(
        $(#[$doc])*
        pub async fn $name(&self, mut req: $req) -> Result<$resp, ClientError> {
            req.header = Some(self.next_header());
            self.call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).$name(req).await }
            })
            .await
        }
    )*};
}

/// A read RPC taking its full request; the client's read consistency is applied.
macro_rules! read_rpcs {
    ($($(#[$doc:meta])* $name:ident($req:ty) -> $resp:ty;)*) => {$(
        $(#[$doc])*
        pub async fn $name(&self, mut req: $req) -> Result<$resp, ClientError> {
            req.read = self.read_options();
            self.call(|ch| {
                let req = req.clone();
                async move { Self::om(ch).$name(req).await }
            })
            .await
        }
    )*};
}

impl OmClient {
    write_rpcs! {
        /// Opens a write session for a key (optionally with blocks).
        open_key(OpenKeyRequest) -> OpenKeyResponse;
        /// Allocates more blocks to an open session.
        allocate_block(AllocateBlockRequest) -> AllocateBlockResponse;
        /// Commits an open session as the key's new version.
        commit_key(CommitKeyRequest) -> CommitKeyResponse;
        /// Closes an open session uncommitted; its blocks are freed.
        abort_key(AbortKeyRequest) -> AbortKeyResponse;
        /// Copies a key server-side, sharing its blocks.
        copy_key(CopyKeyRequest) -> CopyKeyResponse;
        /// Replaces the tags of a key's version (an empty set removes them).
        put_key_tagging(PutKeyTaggingRequest) -> PutKeyTaggingResponse;
        /// Removes every tag of a key's version.
        delete_key_tagging(DeleteKeyTaggingRequest) -> DeleteKeyTaggingResponse;
        initiate_multipart_upload(InitiateMultipartUploadRequest) -> InitiateMultipartUploadResponse;
        commit_part(CommitPartRequest) -> CommitPartResponse;
        complete_multipart_upload(CompleteMultipartUploadRequest) -> CompleteMultipartUploadResponse;
        abort_multipart_upload(AbortMultipartUploadRequest) -> AbortMultipartUploadResponse;
        /// Acknowledges deleted-blocks entries whose blocks were freed.
        ack_deleted_blocks(AckDeletedBlocksRequest) -> AckDeletedBlocksResponse;
        create_directory(CreateDirectoryRequest) -> CreateDirectoryResponse;
        /// Opens a file session in an FSO bucket; commit with `commit_key`.
        create_file(CreateFileRequest) -> CreateFileResponse;
        delete_path(DeletePathRequest) -> DeletePathResponse;
        rename_path(RenamePathRequest) -> RenamePathResponse;
        /// Sets or clears a volume's quotas (absent fields stay as they are).
        set_volume_quota(SetVolumeQuotaRequest) -> SetVolumeQuotaResponse;
        /// Sets or clears a bucket's quotas (absent fields stay as they are).
        set_bucket_quota(SetBucketQuotaRequest) -> SetBucketQuotaResponse;
        /// Replaces a bucket's lifecycle rules.
        put_bucket_lifecycle(PutBucketLifecycleRequest) -> PutBucketLifecycleResponse;
        /// Removes a bucket's lifecycle rules.
        delete_bucket_lifecycle(DeleteBucketLifecycleRequest) -> DeleteBucketLifecycleResponse;
        /// Replaces, adds to or removes from the grants of the cluster, a
        /// volume or a bucket.
        set_acl(SetAclRequest) -> SetAclResponse;
        /// Creates an S3 credential (access key and secret key) for a user.
        create_s3_secret(CreateS3SecretRequest) -> CreateS3SecretResponse;
        /// Revokes an S3 credential.
        revoke_s3_secret(RevokeS3SecretRequest) -> RevokeS3SecretResponse;
        /// Seals every S3 secret under the current secrets key (admins only).
        rotate_s3_secret_key(RotateS3SecretKeyRequest) -> RotateS3SecretKeyResponse;
    }

    read_rpcs! {
        /// The tags of a key's version (the current one unless named).
        get_key_tagging(GetKeyTaggingRequest) -> GetKeyTaggingResponse;
        /// A bucket's lifecycle rules (NOT_FOUND NO_SUCH_LIFECYCLE_CONFIGURATION when none).
        get_bucket_lifecycle(GetBucketLifecycleRequest) -> GetBucketLifecycleResponse;
        /// Where a bucket's lifecycle scan stands.
        get_lifecycle_status(GetLifecycleStatusRequest) -> GetLifecycleStatusResponse;
        list_open_keys(ListOpenKeysRequest) -> ListOpenKeysResponse;
        list_parts(ListPartsRequest) -> ListPartsResponse;
        list_multipart_uploads(ListMultipartUploadsRequest) -> ListMultipartUploadsResponse;
        /// A page of blocks awaiting reclamation, oldest first.
        list_deleted_blocks(ListDeletedBlocksRequest) -> ListDeletedBlocksResponse;
        get_file_status(GetFileStatusRequest) -> GetFileStatusResponse;
        list_status(ListStatusRequest) -> ListStatusResponse;
        /// The owner and grants of the cluster, a volume or a bucket.
        get_acl(GetAclRequest) -> GetAclResponse;
        /// An S3 credential with its secret key (NOT_FOUND S3_SECRET_NOT_FOUND
        /// when it does not exist or was revoked).
        get_s3_secret(GetS3SecretRequest) -> GetS3SecretResponse;
        /// A page of S3 credentials, without their secrets.
        list_s3_secrets(ListS3SecretsRequest) -> ListS3SecretsResponse;
    }

    /// Who the server takes this client for.
    pub async fn who_am_i(&self) -> Result<WhoAmIResponse, ClientError> {
        self.call(|ch| async move { Self::om(ch).who_am_i(WhoAmIRequest {}).await })
            .await
    }
}
