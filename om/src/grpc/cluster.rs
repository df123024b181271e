//! Handlers of the Cluster service: status, membership, leadership,
//! replica verification and backups.

use futures::Stream;
use om_proto::v1::*;
use openraft::async_runtime::WatchReceiver;

use crate::error::OmError;
use crate::service::OmService;
use crate::validate;

pub fn cluster_status(svc: &OmService) -> ClusterStatusResponse {
    let m = svc.raft().metrics().borrow_watched().clone();
    // The leader this node heard from within an election timeout: a member
    // cut off from the majority says it knows none.
    let heard = svc.heard_leader(&m);
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
        leader_id: heard.unwrap_or(0),
        has_leader: heard.is_some(),
        last_log_index: m.last_log_index.unwrap_or(0),
        committed_index: m.local_committed.as_ref().map_or(0, |l| l.index),
        applied_index: m.last_applied.as_ref().map_or(0, |l| l.index),
        snapshot_index: m.snapshot.as_ref().map_or(0, |l| l.index),
        purged_index: m.purged.as_ref().map_or(0, |l| l.index),
        members,
        cluster_id: svc.cluster_id().map(|c| c.to_string()).unwrap_or_default(),
    }
}

pub async fn status(
    svc: &OmService,
    _r: ClusterStatusRequest,
) -> Result<ClusterStatusResponse, OmError> {
    Ok(cluster_status(svc))
}

pub async fn start_backup(
    svc: &OmService,
    _r: StartBackupRequest,
) -> Result<StartBackupResponse, OmError> {
    svc.start_backup().await
}

/// The file's chunks, read at the session's rate.
pub async fn read_backup_file(
    svc: &OmService,
    r: ReadBackupFileRequest,
) -> Result<impl Stream<Item = Result<BackupFileChunk, OmError>> + Send + 'static, OmError> {
    let rx = svc.read_backup_file(&r.session, &r.name, r.bytes_per_second)?;
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}

pub async fn finish_backup(
    svc: &OmService,
    r: FinishBackupRequest,
) -> Result<FinishBackupResponse, OmError> {
    svc.finish_backup(&r.session).await?;
    Ok(FinishBackupResponse {})
}

pub async fn add_node(svc: &OmService, r: AddNodeRequest) -> Result<AddNodeResponse, OmError> {
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
    let outcome = svc.add_node(r.node_id, node, r.learner_only).await;
    svc.audit_admin(format!("/nodes/{}", r.node_id), &outcome);
    outcome?;
    Ok(AddNodeResponse {
        status: Some(cluster_status(svc)),
    })
}

pub async fn remove_node(
    svc: &OmService,
    r: RemoveNodeRequest,
) -> Result<RemoveNodeResponse, OmError> {
    let outcome = svc.remove_node(r.node_id).await;
    svc.audit_admin(format!("/nodes/{}", r.node_id), &outcome);
    outcome?;
    Ok(RemoveNodeResponse {
        status: Some(cluster_status(svc)),
    })
}

pub async fn transfer_leader(
    svc: &OmService,
    r: TransferLeaderRequest,
) -> Result<TransferLeaderResponse, OmError> {
    let outcome = svc
        .transfer_leader(r.to, std::time::Duration::from_secs(10))
        .await;
    svc.audit_admin(format!("/nodes/{}", r.to), &outcome);
    outcome?;
    Ok(TransferLeaderResponse {
        status: Some(cluster_status(svc)),
    })
}

pub async fn verify_replicas(
    svc: &OmService,
    r: VerifyReplicasRequest,
) -> Result<VerifyReplicasResponse, OmError> {
    let tables = r.tables;
    let (r, t) = svc.verify_replicas(tables).await?;
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
}
