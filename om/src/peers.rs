//! Asking another member, on its Raft port, what it holds (`PeerState`) or
//! to take this node back (`Rejoin`), and forwarding writes to the leader
//! (`forward`): the client side of `grpc::peer`.

pub mod forward;

use std::sync::Arc;
use std::time::Duration;

use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::{PeerStateRequest, RejoinRequest, RejoinResponse};

/// What one member answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerView {
    pub node_id: u64,
    pub has_state: bool,
    pub has_history: bool,
    pub leader_id: u64,
    pub leader_raft_addr: String,
    pub admitted: bool,
    pub last_log_index: u64,
    /// The id of the cluster whose state it holds (empty: none yet).
    pub cluster_id: String,
    /// Its incarnation, the ones that replaced, and whether it is fenced
    /// (see `incarnation`).
    pub incarnation: u64,
    pub superseded: Vec<u64>,
    pub fenced: bool,
    /// The backup its store was restored from (empty: none).
    pub restored_from: String,
}

/// Longest wait for a member's answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

async fn client(
    addr: &str,
    tls: Option<&Arc<om_tls::ClientTls>>,
) -> Result<RaftPeerClient<tonic::transport::Channel>, String> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(ASK_TIMEOUT)
        .timeout(ASK_TIMEOUT)
        .connect_with_connector(om_tls::Connector::new(tls.cloned()))
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    Ok(RaftPeerClient::new(ch))
}

/// Asks the member at `addr` what it holds.
pub async fn peer_state(
    addr: &str,
    me: u64,
    tls: Option<&Arc<om_tls::ClientTls>>,
) -> Result<PeerView, String> {
    let r = client(addr, tls)
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
        admitted: r.admitted,
        last_log_index: r.last_log_index,
        cluster_id: r.cluster_id,
        incarnation: r.incarnation,
        superseded: r.superseded,
        fenced: r.fenced,
        restored_from: r.restored_from,
    })
}

/// Asks the leader at `addr` to take node `me`, whose last log index is
/// `last_log_index`, back; `stuck` when its log stayed empty while the
/// leader was known.
pub async fn rejoin(
    addr: &str,
    me: u64,
    last_log_index: Option<u64>,
    stuck: bool,
    tls: Option<&Arc<om_tls::ClientTls>>,
) -> Result<RejoinResponse, String> {
    Ok(client(addr, tls)
        .await?
        .rejoin(RejoinRequest {
            node_id: me,
            has_log: last_log_index.is_some(),
            last_log_index: last_log_index.unwrap_or(0),
            stuck,
        })
        .await
        .map_err(|s| format!("{addr}: {}", s.message()))?
        .into_inner())
}
