//! The Raft port's admission side (see `rejoin`): the `RaftPeer` service
//! members ask each other, its client calls, and `RaftGate`, which refuses
//! the Raft RPCs a node may not take yet.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::raft_peer_server::{RaftPeer, RaftPeerServer};
use om_proto::raft::{PeerStateRequest, PeerStateResponse, RejoinRequest, RejoinResponse};
use om_raft_store::Raft;
use openraft::async_runtime::WatchReceiver;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use crate::rejoin::{Admission, PeerView, needs_reset};

/// Answers other members' admission questions from this node's Raft state.
pub struct PeerGrpc {
    raft: Raft,
}

impl PeerGrpc {
    pub fn server(raft: Raft) -> RaftPeerServer<Self> {
        RaftPeerServer::new(PeerGrpc { raft })
    }
}

#[tonic::async_trait]
impl RaftPeer for PeerGrpc {
    async fn peer_state(
        &self,
        _req: Request<PeerStateRequest>,
    ) -> Result<Response<PeerStateResponse>, Status> {
        let m = self.raft.metrics().borrow_watched().clone();
        let leader = m.current_leader.unwrap_or(0);
        let leader_raft_addr = m
            .current_leader
            .and_then(|l| m.membership_config.membership().get_node(&l).cloned())
            .map(|n| n.raft_addr)
            .unwrap_or_default();
        Ok(Response::new(PeerStateResponse {
            node_id: m.id,
            has_state: m.current_term > 0 || m.last_log_index.is_some() || m.snapshot.is_some(),
            has_history: m.last_log_index.is_some_and(|i| i >= 1) || m.snapshot.is_some(),
            last_log_index: m.last_log_index.unwrap_or(0),
            term: m.current_term,
            leader_id: leader,
            leader_raft_addr,
        }))
    }

    async fn rejoin(
        &self,
        req: Request<RejoinRequest>,
    ) -> Result<Response<RejoinResponse>, Status> {
        let r = req.into_inner();
        let m = self.raft.metrics().borrow_watched().clone();
        if m.state != openraft::ServerState::Leader {
            return Err(Status::failed_precondition(format!(
                "node {} is not the leader (leader: {:?})",
                m.id, m.current_leader
            )));
        }
        let member = m
            .membership_config
            .membership()
            .get_node(&r.node_id)
            .is_some();
        let matched = m
            .replication
            .as_ref()
            .and_then(|rep| rep.get(&r.node_id).cloned())
            .flatten()
            .map(|l| l.index);
        let follower_last = (r.last_log_index > 0 || r.caught_up).then_some(r.last_log_index);
        let fatal = |e: openraft::errors::Fatal<om_raft_store::TypeConfig>| {
            Status::unavailable(format!("raft: {e}"))
        };
        let mut reset = false;
        if r.caught_up {
            // Clears the one-time permission if no reversion consumed it.
            let _ = self
                .raft
                .trigger()
                .allow_next_revert(&r.node_id, false)
                .await
                .map_err(fatal)?;
        } else if member && needs_reset(matched, follower_last) {
            tracing::warn!(
                node_id = r.node_id,
                matched = ?matched,
                "a member reports an empty log though it had acknowledged entries: \
                 replicating to it from scratch"
            );
            self.raft
                .trigger()
                .allow_next_revert(&r.node_id, true)
                .await
                .map_err(fatal)?
                .map_err(|e| Status::failed_precondition(e.to_string()))?;
            reset = true;
        }
        Ok(Response::new(RejoinResponse {
            leader_id: m.id,
            last_log_index: m.last_log_index.unwrap_or(0),
            member,
            reset,
        }))
    }
}

/// Longest wait for a member's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

async fn client(addr: &str) -> Result<RaftPeerClient<tonic::transport::Channel>, String> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(ASK_TIMEOUT)
        .timeout(ASK_TIMEOUT)
        .connect()
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    Ok(RaftPeerClient::new(ch))
}

/// Asks the member at `addr` what it holds.
pub async fn peer_state(addr: &str, me: u64) -> Result<PeerView, String> {
    let r = client(addr)
        .await?
        .peer_state(PeerStateRequest { node_id: me })
        .await
        .map_err(|s| format!("{addr}: {}", s.message()))?
        .into_inner();
    Ok(PeerView {
        node_id: r.node_id,
        has_state: r.has_state,
        has_history: r.has_history,
        leader_id: r.leader_id,
        leader_raft_addr: r.leader_raft_addr,
    })
}

/// Asks the leader at `addr` to take node `me` back (`caught_up` false), or
/// tells it `me` has caught up.
pub async fn rejoin(
    addr: &str,
    me: u64,
    last_log_index: Option<u64>,
    caught_up: bool,
) -> Result<RejoinResponse, String> {
    Ok(client(addr)
        .await?
        .rejoin(RejoinRequest {
            node_id: me,
            last_log_index: last_log_index.unwrap_or(0),
            caught_up,
        })
        .await
        .map_err(|s| format!("{addr}: {}", s.message()))?
        .into_inner())
}

/// Wraps the Raft service: refuses, with `UNAVAILABLE`, the RPCs the node's
/// admission phase does not allow (all while sealed, votes and leadership
/// transfers while catching up). A refused RPC looks to the sender like an
/// unreachable node, which Raft already tolerates.
#[derive(Clone)]
pub struct RaftGate<S> {
    inner: S,
    admission: Admission,
}

impl<S> RaftGate<S> {
    pub fn new(inner: S, admission: Admission) -> Self {
        RaftGate { inner, admission }
    }
}

impl<S: NamedService> NamedService for RaftGate<S> {
    const NAME: &'static str = S::NAME;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, B> Service<http::Request<B>> for RaftGate<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.uri().path().rsplit('/').next().unwrap_or_default();
        if let Some(why) = self.admission.refuses(method) {
            let resp = Status::unavailable(why).into_http();
            return Box::pin(async move { Ok(resp) });
        }
        Box::pin(self.inner.call(req))
    }
}
