//! The server side of the Raft transport: `RaftGrpcService` receives
//! appends, votes, snapshots and leadership transfers for the local Raft
//! node, checking that a caller speaks only for the members it
//! authenticated as.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use om_proto::raft as pb;
use om_proto::raft::raft_service_server::RaftService;
use openraft::raft::{AppendEntriesResponse, TransferLeaderRequest, VoteRequest, VoteResponse};
use tonic::{Request, Response, Status, Streaming};

use super::*;
use crate::{NodeId, Raft, SnapshotInbox, TypeConfig, codec};

/// The members a Raft-port caller is authenticated as: those whose Raft
/// hosts its certificate names. Set (as a request extension) by the port's
/// admission layer under mutual TLS; every RPC that names its sender must
/// then name one of them, so a member cannot speak as another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedPeers(pub Vec<NodeId>);

/// Refuses a message whose sender (`vote`'s leader or candidate) is not one
/// of the members the caller authenticated as.
fn check_sender(peers: Option<&AuthenticatedPeers>, vote: Option<&pb::Vote>) -> Result<(), Status> {
    let Some(peers) = peers else {
        return Ok(());
    };
    let sender = vote
        .and_then(|v| v.leader_id.as_ref())
        .map(|l| l.node_id)
        .unwrap_or(0);
    if peers.0.contains(&sender) {
        return Ok(());
    }
    Err(Status::permission_denied(format!(
        "the message speaks for node {sender}, but the client certificate is that of node(s) {:?}",
        peers.0
    )))
}

/// When this node last took an append from a leader (a follower's measure
/// of how old its state may be).
#[derive(Debug)]
pub struct LeaderContact {
    base: std::time::Instant,
    /// Milliseconds after `base` plus one; 0: never.
    at: std::sync::atomic::AtomicU64,
}

impl Default for LeaderContact {
    fn default() -> Self {
        LeaderContact {
            base: std::time::Instant::now(),
            at: Default::default(),
        }
    }
}

impl LeaderContact {
    fn touch(&self) {
        let ms = self.base.elapsed().as_millis() as u64 + 1;
        self.at.fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Time since the last append a leader sent that this node accepted
    /// as coming from a current leader; `None` if none ever came.
    pub fn since(&self) -> Option<Duration> {
        match self.at.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.base
                    .elapsed()
                    .saturating_sub(Duration::from_millis(at - 1)),
            ),
        }
    }
}

/// Whether this node accepted an append (its log matches a current
/// leader's up to what it sent).
fn from_current_leader(r: &AppendEntriesResponse<TypeConfig>) -> bool {
    matches!(
        r,
        AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)
    )
}

/// The server side: hands incoming Raft RPCs to the local `Raft`.
pub struct RaftGrpcService {
    raft: Raft,
    contact: Arc<LeaderContact>,
    /// This member's space, told in every append answer; when full, appends
    /// carrying entries are refused.
    disk: Arc<crate::disk::DiskSpace>,
    /// Where and how incoming snapshots are staged: the state machine's,
    /// fetched from it on the first transfer.
    inbox: tokio::sync::OnceCell<SnapshotInbox>,
}

impl RaftGrpcService {
    pub fn new(raft: Raft) -> Self {
        RaftGrpcService {
            raft,
            contact: Arc::default(),
            disk: Arc::default(),
            inbox: tokio::sync::OnceCell::new(),
        }
    }

    /// Records in `contact` when appends from a current leader arrive.
    pub fn with_contact(mut self, contact: Arc<LeaderContact>) -> Self {
        self.contact = contact;
        self
    }

    /// Tells leaders of this member's space (`disk`) and refuses entries
    /// while it is full.
    pub fn with_disk(mut self, disk: Arc<crate::disk::DiskSpace>) -> Self {
        self.disk = disk;
        self
    }

    /// The tonic service with explicit message-size limits.
    pub fn into_server(self) -> om_proto::raft::raft_service_server::RaftServiceServer<Self> {
        om_proto::raft::raft_service_server::RaftServiceServer::new(self)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    async fn inbox(&self) -> Result<&SnapshotInbox, Status> {
        self.inbox
            .get_or_try_init(|| async {
                self.raft
                    .with_state_machine(|sm: &mut crate::StateMachine| {
                        let inbox = sm.snapshot_inbox();
                        Box::pin(async move { inbox })
                    })
                    .await
                    .map_err(fatal)
            })
            .await
    }
}

fn vote_from_pb(r: pb::VoteRequest) -> Result<VoteRequest<TypeConfig>, Status> {
    Ok(VoteRequest {
        vote: codec::vote_from_pb(&r.vote.ok_or_else(|| invalid("vote missing"))?),
        last_log_id: codec::opt_log_id_from_pb(&r.last_log_id),
        leadership_transfer: r.leadership_transfer,
    })
}

fn vote_resp_to_pb(resp: &VoteResponse<TypeConfig>) -> pb::VoteResponse {
    pb::VoteResponse {
        vote: Some(codec::vote_to_pb(&resp.vote)),
        vote_granted: resp.vote_granted,
        last_log_id: codec::opt_log_id_to_pb(&resp.last_log_id),
    }
}

pub(super) fn fatal(e: impl std::fmt::Display) -> Status {
    Status::unavailable(format!("raft: {e}"))
}

/// Hands one append to Raft unless this member is too full to take its
/// entries; the answer says how much room this member has.
async fn append(
    raft: &Raft,
    contact: &LeaderContact,
    disk: &crate::disk::DiskSpace,
    rpc: openraft::raft::AppendEntriesRequest<TypeConfig>,
) -> Result<pb::AppendEntriesResponse, Status> {
    disk.admit_entries(rpc.entries.len())
        .map_err(Status::resource_exhausted)?;
    let resp = raft.append_entries(rpc).await.map_err(fatal)?;
    if from_current_leader(&resp) {
        contact.touch();
    }
    Ok(pb::AppendEntriesResponse {
        disk_space: disk.space().code(),
        ..append_resp_to_pb(&resp)
    })
}

type AppendStream = Pin<Box<dyn Stream<Item = Result<pb::AppendEntriesResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RaftService for RaftGrpcService {
    async fn vote(
        &self,
        req: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        check_sender(req.extensions().get(), req.get_ref().vote.as_ref())?;
        let rpc = vote_from_pb(req.into_inner())?;
        let resp = self.raft.vote(rpc).await.map_err(fatal)?;
        Ok(Response::new(vote_resp_to_pb(&resp)))
    }

    async fn pre_vote(
        &self,
        req: Request<pb::VoteRequest>,
    ) -> Result<Response<pb::VoteResponse>, Status> {
        check_sender(req.extensions().get(), req.get_ref().vote.as_ref())?;
        let rpc = vote_from_pb(req.into_inner())?;
        let resp = self.raft.pre_vote(rpc).await.map_err(fatal)?;
        Ok(Response::new(vote_resp_to_pb(&resp)))
    }

    async fn append_entries(
        &self,
        req: Request<pb::AppendEntriesRequest>,
    ) -> Result<Response<pb::AppendEntriesResponse>, Status> {
        check_sender(req.extensions().get(), req.get_ref().vote.as_ref())?;
        let rpc = append_from_pb(req.get_ref()).map_err(|e| invalid(&e.to_string()))?;
        Ok(Response::new(
            append(&self.raft, &self.contact, &self.disk, rpc).await?,
        ))
    }

    type StreamAppendStream = AppendStream;

    async fn stream_append(
        &self,
        req: Request<Streaming<pb::AppendEntriesRequest>>,
    ) -> Result<Response<Self::StreamAppendStream>, Status> {
        let raft = self.raft.clone();
        let contact = self.contact.clone();
        let disk = self.disk.clone();
        let peers: Option<AuthenticatedPeers> = req.extensions().get().cloned();
        let input = req.into_inner();
        let out = input.then(move |r| {
            let raft = raft.clone();
            let peers = peers.clone();
            let contact = contact.clone();
            let disk = disk.clone();
            async move {
                let r = r?;
                check_sender(peers.as_ref(), r.vote.as_ref())?;
                let rpc = append_from_pb(&r).map_err(|e| invalid(&e.to_string()))?;
                append(&raft, &contact, &disk, rpc).await
            }
        });
        Ok(Response::new(Box::pin(out)))
    }

    async fn install_snapshot(
        &self,
        req: Request<Streaming<pb::SnapshotChunk>>,
    ) -> Result<Response<pb::SnapshotResponse>, Status> {
        let inbox = self.inbox().await?;
        let peers: Option<AuthenticatedPeers> = req.extensions().get().cloned();
        let input = req.into_inner().map(move |c| {
            c.and_then(|c| check_sender(peers.as_ref(), c.vote.as_ref()).map(|()| c))
        });
        let resp = receive::install_snapshot(&self.raft, inbox, input).await?;
        Ok(Response::new(resp))
    }

    async fn snapshot_offset(
        &self,
        req: Request<pb::SnapshotOffsetRequest>,
    ) -> Result<Response<pb::SnapshotOffsetResponse>, Status> {
        let inbox = self.inbox().await?;
        let offset = receive::offset(inbox, req.get_ref());
        Ok(Response::new(pb::SnapshotOffsetResponse { offset }))
    }

    async fn transfer_leader(
        &self,
        req: Request<pb::TransferLeaderRequest>,
    ) -> Result<Response<pb::TransferLeaderResponse>, Status> {
        check_sender(req.extensions().get(), req.get_ref().from.as_ref())?;
        let r = req.into_inner();
        let rpc = TransferLeaderRequest::new(
            codec::vote_from_pb(&r.from.unwrap_or_default()),
            r.to,
            codec::opt_log_id_from_pb(&r.last_log_id),
        );
        match self.raft.handle_transfer_leader(rpc).await.map_err(fatal)? {
            Ok(()) => Ok(Response::new(pb::TransferLeaderResponse {})),
            Err(e) => Err(Status::failed_precondition(e.to_string())),
        }
    }
}
