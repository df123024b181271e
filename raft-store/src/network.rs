//! Raft transport over gRPC: the client side (`NetworkFactory`, one cached
//! channel per peer address, with the peer's reachability in `peer`) and the
//! server side (`RaftGrpcService`, receiving snapshots in `receive`).
//!
//! Snapshots travel as a stream of chunks; the last chunk carries the meta and
//! a CRC32 of all data bytes. The receiver stages the chunks in a file, checks
//! the CRC and verifies the whole file before openraft sees it (see
//! `receive`). Message sizes are capped explicitly on both ends.

mod faults;
pub mod peer;
mod pipeline;
mod receive;
mod server;

pub use faults::Faults;
use server::fatal;
pub use server::{AuthenticatedPeers, LeaderContact, RaftGrpcService};

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use om_proto::raft as pb;
use om_proto::raft::raft_service_client::RaftServiceClient;
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{Backoff, RPCOption};
use openraft::raft::StreamAppendResult;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::alias::SnapshotOf;
use openraft::{OptionalSend, RaftNetworkFactory, RaftNetworkV2};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::{LogId, NodeId, OmNode, TypeConfig, Vote, codec};
use peer::{Admit, PeerConnector, PeerHealth};

/// Largest gRPC message either side accepts or sends.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// Size of one snapshot chunk.
pub const SNAPSHOT_CHUNK_BYTES: usize = 1024 * 1024;

type RpcErr = RPCError<TypeConfig>;

/// The (prev, last] log-id range of a request in flight on a replication stream.
type InFlight = (Option<LogId>, Option<LogId>);

/// One peer's channel and reachability, shared by every client to it.
#[derive(Clone)]
struct PeerLink {
    client: RaftServiceClient<Channel>,
    health: Arc<PeerHealth>,
}

/// Creates clients to peers; channels are shared per peer and address and
/// connect lazily, through `PeerConnector` and `PeerHealth`.
#[derive(Clone, Default)]
pub struct NetworkFactory {
    links: Arc<Mutex<HashMap<(NodeId, String), PeerLink>>>,
    me: NodeId,
    faults: Option<Arc<Faults>>,
    tls: Option<Arc<om_tls::ClientTls>>,
    identity: Option<Arc<dyn PeerIdentity>>,
    disk: Arc<crate::disk::DiskSpace>,
}

/// Who a node says it is in every Raft RPC, and what it does when a peer
/// refuses it: om's cluster id and incarnation (see om's `incarnation`).
pub trait PeerIdentity: Send + Sync {
    /// Headers every RPC carries (name, value), as they are now.
    fn headers(&self) -> Arc<Vec<(&'static str, tonic::metadata::AsciiMetadataValue)>>;
    /// Why this node sends nothing at all, if it must not.
    fn silenced(&self) -> Option<String>;
    /// A peer answered an RPC with this error status.
    fn refused(&self, status: &Status);
}

/// The header every Raft RPC carries its sender's cluster id in, once the
/// sender holds one; the receiving member refuses another cluster's.
pub const CLUSTER_ID_HEADER: &str = "om-cluster-id";

impl NetworkFactory {
    /// The network of node `me`, with optional fault injection.
    pub fn new(me: NodeId, faults: Option<Arc<Faults>>) -> Self {
        NetworkFactory {
            links: Arc::default(),
            me,
            faults,
            tls: None,
            identity: None,
            disk: Arc::default(),
        }
    }

    /// Records in `disk` what followers say of their space.
    pub fn with_disk(mut self, disk: Arc<crate::disk::DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    /// Sends `identity`'s headers with every RPC and tells it of refusals.
    pub fn with_identity(mut self, identity: Arc<dyn PeerIdentity>) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Connects to peers over mutual TLS with `tls` (this node's certificate
    /// and the cluster CA); each new connection uses the files as they are then.
    pub fn with_tls(mut self, tls: Option<Arc<om_tls::ClientTls>>) -> Self {
        self.tls = tls;
        self
    }

    fn link(&self, target: NodeId, addr: &str) -> Result<PeerLink, String> {
        let mut map = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let key = (target, addr.to_string());
        if let Some(l) = map.get(&key) {
            return Ok(l.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .connect_timeout(Duration::from_secs(1))
            .http2_keep_alive_interval(Duration::from_secs(5));
        let health = Arc::new(PeerHealth::new(target, addr.to_string()));
        let channel = endpoint.connect_with_connector_lazy(PeerConnector {
            health: health.clone(),
            tls: self.tls.clone(),
        });
        let client = RaftServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let l = PeerLink { client, health };
        map.insert(key, l.clone());
        Ok(l)
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &OmNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.raft_addr.clone(),
            link: self.link(target, &node.raft_addr).ok(),
            me: self.me,
            faults: self.faults.clone(),
            identity: self.identity.clone(),
            disk: self.disk.clone(),
        }
    }
}

/// The client to one peer.
pub struct PeerClient {
    target: NodeId,
    addr: String,
    link: Option<PeerLink>,
    me: NodeId,
    faults: Option<Arc<Faults>>,
    identity: Option<Arc<dyn PeerIdentity>>,
    disk: Arc<crate::disk::DiskSpace>,
}

/// Records what `target` said of its space: in an append's answer, or by
/// refusing it as full.
fn heard_space(
    disk: &crate::disk::DiskSpace,
    target: NodeId,
    r: &Result<pb::AppendEntriesResponse, Status>,
) {
    match r {
        Ok(a) => disk.reported(target, crate::disk::Space::from_code(a.disk_space)),
        Err(s) if s.code() == tonic::Code::ResourceExhausted => {
            disk.reported(target, crate::disk::Space::Full)
        }
        Err(_) => {}
    }
}

fn status_to_rpc(s: Status) -> RpcErr {
    match s.code() {
        // A member whose volume is full (`disk`): retried after openraft's
        // backoff, like an unreachable one.
        tonic::Code::Unavailable
        | tonic::Code::DeadlineExceeded
        | tonic::Code::Cancelled
        | tonic::Code::ResourceExhausted => {
            RPCError::Unreachable(Unreachable::from_string(s.to_string()))
        }
        _ => RPCError::Network(NetworkError::from_string(s.to_string())),
    }
}

fn invalid(msg: &str) -> Status {
    Status::invalid_argument(msg.to_string())
}

/// Status codes that mean the peer could not be reached (as opposed to a
/// peer that answered with an error).
fn unreachable_code(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
    )
}

/// Pending, with a wake-up soon to look at the faults again (tests only).
fn recheck_later<T>(
    timer: &mut Option<Pin<Box<tokio::time::Sleep>>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Option<T>> {
    loop {
        let t = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_millis(5))));
        if t.as_mut().poll(cx).is_pending() {
            return std::task::Poll::Pending;
        }
        *timer = None;
    }
}

fn cut_error(me: NodeId, target: NodeId) -> RpcErr {
    RPCError::Unreachable(Unreachable::from_string(format!(
        "link {me} -> {target} is cut"
    )))
}

impl PeerClient {
    /// A request carrying this node's identity headers.
    fn request<T>(&self, msg: T) -> Request<T> {
        let mut req = Request::new(msg);
        if let Some(i) = &self.identity {
            for (name, v) in i.headers().iter() {
                req.metadata_mut().insert(*name, v.clone());
            }
        }
        req
    }

    /// `observe` for this peer: also tells the identity of a refusal, and
    /// records the round trip of an answered RPC sent at `sent`.
    fn observe<T>(
        &self,
        health: &PeerHealth,
        sent: Option<std::time::Instant>,
        r: Result<T, Status>,
    ) -> Result<T, RpcErr> {
        observe_with(health, self.identity.as_deref(), self.target, sent, r)
    }

    /// The client for one RPC, once the peer's backoff (see `Gate`) allows it.
    async fn ready(
        &self,
        gate: Gate,
    ) -> Result<(RaftServiceClient<Channel>, Arc<PeerHealth>), RpcErr> {
        let Some(link) = &self.link else {
            return Err(RPCError::Unreachable(Unreachable::from_string(format!(
                "bad address {:?} for node {}",
                self.addr, self.target
            ))));
        };
        if let Some(why) = self.identity.as_ref().and_then(|i| i.silenced()) {
            return Err(RPCError::Unreachable(Unreachable::from_string(why)));
        }
        if gate != Gate::Always {
            loop {
                match link.health.admit() {
                    Admit::Now => break,
                    Admit::At(t) if gate == Gate::Wait => tokio::time::sleep_until(t.into()).await,
                    Admit::At(t) => {
                        return Err(RPCError::Unreachable(Unreachable::from_string(format!(
                            "node {} at {} is unreachable; next attempt in {:?}",
                            self.target,
                            self.addr,
                            t.saturating_duration_since(std::time::Instant::now())
                        ))));
                    }
                }
            }
        }
        if let Some(f) = &self.faults
            && (f.is_cut(self.me, self.target)
                || (gate != Gate::Wait && f.is_stalled(self.me, self.target)))
        {
            link.health.failed(&"link is cut");
            return Err(cut_error(self.me, self.target));
        }
        Ok((link.client.clone(), link.health.clone()))
    }

    /// A single RPC's answer, lost when the link holds answers back.
    fn answer<T>(&self, r: Result<T, RpcErr>) -> Result<T, RpcErr> {
        match &self.faults {
            Some(f) if f.answers_held(self.target, self.me) => Err(RPCError::Unreachable(
                Unreachable::from_string(format!("answer {} -> {} lost", self.target, self.me)),
            )),
            _ => r,
        }
    }

    async fn vote_rpc(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
        pre: bool,
    ) -> Result<VoteResponse<TypeConfig>, RpcErr> {
        let mut req = self.request(pb::VoteRequest {
            vote: Some(codec::vote_to_pb(&rpc.vote)),
            last_log_id: codec::opt_log_id_to_pb(&rpc.last_log_id),
            leadership_transfer: rpc.leadership_transfer,
        });
        req.set_timeout(option.soft_ttl());
        let (mut client, health) = self.ready(Gate::Always).await?;
        let sent = std::time::Instant::now();
        let r = if pre {
            match client.pre_vote(req).await {
                // A peer that predates PreVote: count it as granting, as
                // openraft does for networks without it, so an upgrade can
                // proceed node by node.
                Err(s) if s.code() == tonic::Code::Unimplemented => {
                    health.succeeded();
                    return Ok(VoteResponse::new(rpc.vote, None, true));
                }
                r => r,
            }
        } else {
            client.vote(req).await
        };
        let r = self
            .answer(self.observe(&health, Some(sent), r))?
            .into_inner();
        Ok(VoteResponse {
            vote: codec::vote_from_pb(&r.vote.unwrap_or_default()),
            vote_granted: r.vote_granted,
            last_log_id: codec::opt_log_id_from_pb(&r.last_log_id),
        })
    }
}

/// How an RPC meets a peer's reconnect backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Sleep until the next attempt is due: `StreamAppend`, which carries
    /// replication (openraft would otherwise reopen it at once) and
    /// heartbeats (whose own timeout ends the wait).
    Wait,
    /// Fail at once as unreachable, without a connection attempt: single
    /// appends and snapshots (openraft backs off between snapshot attempts).
    FailFast,
    /// Always attempt: votes and leader transfers are paced by election
    /// timeouts and rare; their success also ends a peer's backoff early.
    Always,
}

/// Records the outcome of one exchange in the peer's health and converts
/// the error for openraft.
fn observe_with<T>(
    health: &PeerHealth,
    identity: Option<&dyn PeerIdentity>,
    target: NodeId,
    sent: Option<std::time::Instant>,
    r: Result<T, Status>,
) -> Result<T, RpcErr> {
    match r {
        Ok(v) => {
            health.succeeded();
            if let Some(t) = sent {
                round_trip(target, t.elapsed());
            }
            Ok(v)
        }
        Err(s) => {
            if unreachable_code(s.code()) {
                health.failed(&s.message());
            } else if let Some(i) = identity {
                i.refused(&s);
            }
            Err(status_to_rpc(s))
        }
    }
}

/// Records one answered RPC's round trip to `peer`
/// (`om_raft_peer_round_trip_seconds`).
pub(crate) fn round_trip(peer: NodeId, d: Duration) {
    metrics::histogram!("om_raft_peer_round_trip_seconds", "peer" => peer.to_string())
        .record(d.as_secs_f64());
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = File;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RpcErr> {
        let mut req = self.request(append_to_pb(&rpc));
        req.set_timeout(option.soft_ttl());
        let (mut client, health) = self.ready(Gate::FailFast).await?;
        let sent = std::time::Instant::now();
        let r = client.append_entries(req).await.map(|r| r.into_inner());
        heard_space(&self.disk, self.target, &r);
        let resp = self.answer(self.observe(&health, Some(sent), r))?;
        append_resp_from_pb(&resp).map_err(|e| RPCError::Network(NetworkError::from_string(e)))
    }

    /// Pipelined replication on one bidirectional gRPC stream: requests go out
    /// as openraft produces them, responses come back in order and are matched
    /// with the log-id range of the request they answer. The stream ends after
    /// the first conflict, higher vote, partial success or transport error,
    /// as openraft expects. An acknowledgement reaches openraft only when it
    /// cannot make openraft credit a request that is still unanswered (see
    /// `pipeline`): the time it credits is what reads trust.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        _option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RpcErr>>, RpcErr>>
    where
        S: Stream<Item = AppendEntriesRequest<TypeConfig>> + OptionalSend + Unpin + 'static,
    {
        Box::pin(async move {
            let (mut client, health) = self.ready(Gate::Wait).await?;
            // A stream opened while the link holds answers back never hears
            // one (its answers would queue behind the held ones): as lost.
            if let Some(f) = &self.faults
                && f.answers_held(self.target, self.me)
            {
                return Err(cut_error(self.target, self.me));
            }
            let pipeline = Arc::new(pipeline::Pipeline::default());
            let sent = pipeline.clone();
            // Injected faults apply to every message, not just to opening the
            // stream; a cut link pulls no more requests from openraft.
            let link = (self.me, self.target, self.faults.clone());
            let cut = move || link.2.as_ref().is_some_and(|f| f.is_cut(link.0, link.1));
            let cut_out = cut.clone();
            let faults_out = self.faults.clone();
            let faults_in = self.faults.clone();
            let mut input = input;
            let mut stalled_recheck: Option<Pin<Box<tokio::time::Sleep>>> = None;
            let outbound = futures::stream::poll_fn(move |cx| {
                if cut_out() {
                    return std::task::Poll::Ready(None);
                }
                if faults_out
                    .as_ref()
                    .is_some_and(|f| f.is_stalled(link.0, link.1))
                {
                    return recheck_later(&mut stalled_recheck, cx);
                }
                sent.poll_request(
                    &mut input,
                    |req: &AppendEntriesRequest<TypeConfig>| {
                        let last = req.entries.last().map(|e| e.log_id).or(req.prev_log_id);
                        (req.prev_log_id, last)
                    },
                    cx,
                )
                .map(|r| r.map(|req| append_to_pb(&req)))
            });
            let mut responses = self
                .observe(
                    &health,
                    None,
                    client.stream_append(self.request(outbound)).await,
                )?
                .into_inner();
            let (me, target) = (self.me, self.target);
            let identity = self.identity.clone();
            let disk = self.disk.clone();
            let mut ended = false;
            let mut held_recheck: Option<Pin<Box<tokio::time::Sleep>>> = None;
            let results = futures::stream::poll_fn(move |cx| {
                use std::task::Poll;
                if ended {
                    return Poll::Ready(None);
                }
                pipeline.resumed();
                loop {
                    if faults_in
                        .as_ref()
                        .is_some_and(|f| !f.answer_may_pass(target, me))
                    {
                        return recheck_later(&mut held_recheck, cx);
                    }
                    let r = match responses.poll_next_unpin(cx) {
                        Poll::Pending => return Poll::Pending,
                        // An acknowledgement held back is dropped with the
                        // stream; openraft sends those entries again.
                        Poll::Ready(None) => {
                            ended = true;
                            return Poll::Ready(None);
                        }
                        Poll::Ready(Some(r)) => r,
                    };
                    if let Some(f) = &faults_in {
                        f.answer_passed(target, me);
                    }
                    heard_space(&disk, target, &r);
                    let item = (|| {
                        if cut() {
                            health.failed(&"link is cut");
                            return Err(cut_error(me, target));
                        }
                        let sent = pipeline.answered_sent();
                        let r = observe_with(
                            &health,
                            identity.as_deref(),
                            target,
                            sent.map(|(_, at)| at),
                            r,
                        )?;
                        let ((prev, last), _) = sent.ok_or_else(|| {
                            RPCError::Network(NetworkError::from_string(
                                "response without a request",
                            ))
                        })?;
                        let resp = append_resp_from_pb(&r)
                            .map_err(|e| RPCError::Network(NetworkError::from_string(e)))?;
                        let partial =
                            matches!(&resp, AppendEntriesResponse::PartialSuccess(p) if *p != last);
                        Ok((resp.into_stream_result(prev, last), partial))
                    })();
                    match item {
                        Ok((Ok(matching), false)) => {
                            if pipeline.hand_over(&matching) {
                                return Poll::Ready(Some(Ok(Ok(matching))));
                            }
                            // Held back: the next answer covers it.
                        }
                        Ok((result, _)) => {
                            ended = true;
                            return Poll::Ready(Some(Ok(result)));
                        }
                        Err(e) => {
                            ended = true;
                            return Poll::Ready(Some(Err(e)));
                        }
                    }
                }
            });
            let boxed: BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RpcErr>> =
                Box::pin(results);
            Ok(boxed)
        })
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RpcErr> {
        self.vote_rpc(rpc, option, false).await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RpcErr> {
        self.vote_rpc(rpc, option, true).await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotOf<TypeConfig, File>,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let (mut client, health) = self.ready(Gate::FailFast).await?;
        let meta = codec::snapshot_meta_to_pb(&snapshot.meta);
        let vote_pb = codec::vote_to_pb(&vote);
        let mut file = snapshot.snapshot;
        let total = file
            .metadata()
            .map_err(|e| StreamingError::Network(NetworkError::new(&e)))?
            .len();
        // Continue where a dropped connection stopped an earlier attempt
        // (a peer that cannot tell, or holds nothing of this file, says 0).
        let start = match client
            .snapshot_offset(self.request(pb::SnapshotOffsetRequest {
                meta: Some(meta.clone()),
                total_bytes: total,
            }))
            .await
        {
            Ok(r) => r.into_inner().offset.min(total),
            Err(_) => 0,
        };
        if start > 0 {
            tracing::info!(
                peer = self.target,
                offset = start,
                total,
                "continuing a snapshot transfer"
            );
        }
        let (tx, rx) = tokio::sync::mpsc::channel::<pb::SnapshotChunk>(4);
        // Read the file on a blocking thread and feed the stream; the bytes
        // before `start` are only read for the whole-file CRC.
        let reader = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut crc = crc32fast::Hasher::new();
            let mut buf = vec![0u8; SNAPSHOT_CHUNK_BYTES];
            let mut offset = 0u64;
            file.seek(SeekFrom::Start(0))?;
            while offset < start {
                let want = (start - offset).min(buf.len() as u64) as usize;
                file.read_exact(&mut buf[..want])?;
                crc.update(&buf[..want]);
                offset += want as u64;
            }
            loop {
                let n = file.read(&mut buf)?;
                let done = n == 0;
                crc.update(&buf[..n]);
                let chunk = pb::SnapshotChunk {
                    vote: Some(vote_pb),
                    offset,
                    data: buf[..n].to_vec(),
                    done,
                    meta: (done || offset == start).then(|| meta.clone()),
                    crc32c: if done { crc.clone().finalize() } else { 0 },
                    total_bytes: total,
                    chunk_crc32c: crc32fast::hash(&buf[..n]),
                };
                offset += n as u64;
                if tx.blocking_send(chunk).is_err() || done {
                    return Ok(());
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let call = client.install_snapshot(self.request(stream));
        tokio::select! {
            closed = cancel => {
                reader.abort();
                Err(StreamingError::Closed(closed))
            }
            r = call => {
                if let Err(s) = &r
                    && !unreachable_code(s.code())
                {
                    tracing::warn!(
                        peer = self.target,
                        code = ?s.code(),
                        error = %s.message(),
                        "the peer refused a snapshot; it will be sent again"
                    );
                }
                let resp = self
                    .observe(&health, None, r)
                    .map_err(StreamingError::from)?
                    .into_inner();
                match reader.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(StreamingError::Network(NetworkError::new(&e))),
                    Err(e) => return Err(StreamingError::Network(NetworkError::from_string(e.to_string()))),
                }
                Ok(SnapshotResponse::new(codec::vote_from_pb(&resp.vote.unwrap_or_default())))
            }
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RpcErr> {
        let mut r = self.request(pb::TransferLeaderRequest {
            from: Some(codec::vote_to_pb(req.from_leader())),
            to: *req.to_node_id(),
            last_log_id: req.last_log_id().map(codec::log_id_to_pb),
        });
        r.set_timeout(option.soft_ttl());
        let (mut client, health) = self.ready(Gate::Always).await?;
        let r = client.transfer_leader(r).await;
        self.observe(&health, None, r)?;
        Ok(Ok(()))
    }

    /// openraft's own backoff (between requests of a stream after errors,
    /// and between snapshot attempts to an unreachable peer) follows the same
    /// schedule as reconnecting.
    fn backoff(&self) -> Option<Backoff> {
        Some(Backoff::new((1u32..).map(peer::retry_delay)))
    }
}

pub fn append_to_pb(rpc: &AppendEntriesRequest<TypeConfig>) -> pb::AppendEntriesRequest {
    pb::AppendEntriesRequest {
        vote: Some(codec::vote_to_pb(&rpc.vote)),
        prev_log_id: codec::opt_log_id_to_pb(&rpc.prev_log_id),
        entries: rpc.entries.iter().map(codec::entry_to_pb).collect(),
        leader_commit: codec::opt_log_id_to_pb(&rpc.leader_commit),
    }
}

pub fn append_from_pb(
    r: &pb::AppendEntriesRequest,
) -> std::io::Result<AppendEntriesRequest<TypeConfig>> {
    Ok(AppendEntriesRequest {
        vote: codec::vote_from_pb(&r.vote.unwrap_or_default()),
        prev_log_id: codec::opt_log_id_from_pb(&r.prev_log_id),
        entries: r
            .entries
            .iter()
            .map(codec::entry_from_peer_pb)
            .collect::<Result<_, _>>()?,
        leader_commit: codec::opt_log_id_from_pb(&r.leader_commit),
    })
}

pub fn append_resp_to_pb(r: &AppendEntriesResponse<TypeConfig>) -> pb::AppendEntriesResponse {
    use pb::append_entries_response::Result as R;
    let result = match r {
        AppendEntriesResponse::Success => R::Success(pb::Blank {}),
        AppendEntriesResponse::PartialSuccess(Some(l)) => R::PartialSuccess(codec::log_id_to_pb(l)),
        AppendEntriesResponse::PartialSuccess(None) => R::PartialSuccessNone(true),
        AppendEntriesResponse::Conflict => R::Conflict(pb::Blank {}),
        AppendEntriesResponse::HigherVote(v) => R::HigherVote(codec::vote_to_pb(v)),
    };
    pb::AppendEntriesResponse {
        result: Some(result),
        disk_space: 0,
    }
}

pub fn append_resp_from_pb(
    r: &pb::AppendEntriesResponse,
) -> Result<AppendEntriesResponse<TypeConfig>, String> {
    use pb::append_entries_response::Result as R;
    Ok(match &r.result {
        Some(R::Success(_)) => AppendEntriesResponse::Success,
        Some(R::PartialSuccess(l)) => {
            AppendEntriesResponse::PartialSuccess(Some(codec::log_id_from_pb(l)))
        }
        Some(R::PartialSuccessNone(_)) => AppendEntriesResponse::PartialSuccess(None),
        Some(R::Conflict(_)) => AppendEntriesResponse::Conflict,
        Some(R::HigherVote(v)) => AppendEntriesResponse::HigherVote(codec::vote_from_pb(v)),
        None => return Err("empty append-entries response".to_string()),
    })
}
