//! The Raft port's admission side (see `rejoin`): the `RaftPeer` service
//! members ask each other, its client calls, `RaftGate`, which refuses
//! the Raft RPCs a node may not take yet, and `MembersOnly`, which under TLS
//! refuses every caller whose certificate names no member.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use om_proto::raft::raft_peer_server::{RaftPeer, RaftPeerServer};
use om_proto::raft::{
    ForwardWritesRequest, ForwardWritesResponse, KeyDigest, PeerStateRequest, PeerStateResponse,
    RejoinRequest, RejoinResponse, StateDigestRequest, StateDigestResponse, TableDigestRequest,
    TableDigestResponse, TableSummary,
};
use om_raft_store::Raft;
use openraft::async_runtime::WatchReceiver;
use tonic::codegen::http;
use tonic::{Request, Response, Status};

use super::guard::{Guard, Refusal};
use crate::divergence::Divergence;
use crate::service::{MAX_FORWARD_MESSAGE, MAX_FORWARD_WRITES, OmService};
use crate::tasks::rejoin::{Admission, Phase, handover_target, needs_reset};

/// Answers other members' admission questions from this node's Raft state,
/// and their questions about its state digests.
pub struct PeerGrpc {
    raft: Raft,
    admission: Admission,
    divergence: Arc<Divergence>,
    cluster_id: Arc<crate::cluster_id::ClusterId>,
    /// Proposes the writes followers forward (`ForwardWrites`).
    service: Arc<OmService>,
    /// Whether every caller of this port proved membership (TLS, with
    /// `MembersOnly`): only then is a forwarded write's principal believed.
    members_proven: bool,
}

impl PeerGrpc {
    pub fn server(
        raft: Raft,
        admission: Admission,
        divergence: Arc<Divergence>,
        cluster_id: Arc<crate::cluster_id::ClusterId>,
        service: Arc<OmService>,
        members_proven: bool,
    ) -> RaftPeerServer<Self> {
        RaftPeerServer::new(PeerGrpc {
            raft,
            admission,
            divergence,
            cluster_id,
            service,
            members_proven,
        })
        // Table digests of a large store (up to 16,384 chunk digests per
        // table) and forwarded batches with their results.
        .max_encoding_message_size(MAX_FORWARD_MESSAGE.max(16 << 20))
        .max_decoding_message_size(MAX_FORWARD_MESSAGE)
    }
}

#[tonic::async_trait]
impl RaftPeer for PeerGrpc {
    async fn forward_writes(
        &self,
        req: Request<ForwardWritesRequest>,
    ) -> Result<Response<ForwardWritesResponse>, Status> {
        let req = req.into_inner();
        let (from, mut writes) = (req.node_id, req.writes);
        if writes.len() > MAX_FORWARD_WRITES {
            return Err(Status::invalid_argument(format!(
                "a forwarded batch holds at most {MAX_FORWARD_WRITES} writes, not {}",
                writes.len()
            )));
        }
        // Without TLS anyone may call this port, so the identity a caller
        // names is not believed: the writes carry none, and a leader that
        // authorizes refuses them (followers do not forward then).
        if !self.members_proven {
            for w in &mut writes {
                w.principal = None;
            }
        }
        let outcomes = self
            .service
            .propose_forwarded(writes, from, self.members_proven)
            .await;
        Ok(Response::new(ForwardWritesResponse { outcomes }))
    }

    async fn peer_state(
        &self,
        _req: Request<PeerStateRequest>,
    ) -> Result<Response<PeerStateResponse>, Status> {
        let m = self.raft.metrics().borrow_watched().clone();
        let incarnation = self.service.incarnation();
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
            admitted: self.admission.phase() == Phase::Open,
            cluster_id: self
                .cluster_id
                .get()
                .map(|id| id.to_string())
                .unwrap_or_default(),
            incarnation: incarnation.map_or(0, |i| i.id()),
            superseded: incarnation.map(|i| i.superseded()).unwrap_or_default(),
            fenced: incarnation.is_some_and(|i| i.fenced().is_some()),
            restored_from: incarnation
                .map(|i| i.restored_from().to_string())
                .unwrap_or_default(),
        }))
    }

    async fn state_digest(
        &self,
        req: Request<StateDigestRequest>,
    ) -> Result<Response<StateDigestResponse>, Status> {
        let divergence = self.divergence.clone();
        let req = req.into_inner();
        // Reads the store (checkpoints): off the async workers.
        tokio::task::spawn_blocking(move || divergence.answer(&req))
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map(Response::new)
            .map_err(Status::internal)
    }

    async fn table_digest(
        &self,
        req: Request<TableDigestRequest>,
    ) -> Result<Response<TableDigestResponse>, Status> {
        let (pins, node_id) = (self.divergence.pins().clone(), self.divergence.node_id());
        let r = req.into_inner();
        // Waits for apply and scans (summary) or reads a chunk: blocking.
        tokio::task::spawn_blocking(move || {
            if r.table.is_empty() {
                let tables = pins.summary(r.index, Duration::from_secs(60))?;
                Ok::<_, String>(TableDigestResponse {
                    node_id,
                    tables: tables
                        .into_iter()
                        .map(|t| TableSummary {
                            name: t.name,
                            entries: t.entries,
                            digest: t.digest.to_vec(),
                            chunks: t.chunks.iter().map(|c| c.to_vec()).collect(),
                        })
                        .collect(),
                    keys: Vec::new(),
                })
            } else {
                let keys = pins.chunk(r.index, &r.table, r.chunk)?;
                Ok(TableDigestResponse {
                    node_id,
                    tables: Vec::new(),
                    keys: keys
                        .into_iter()
                        .map(|(key, v)| KeyDigest {
                            key,
                            value_digest: v.to_vec(),
                        })
                        .collect(),
                })
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map(Response::new)
        .map_err(Status::unavailable)
    }

    async fn rejoin(
        &self,
        req: Request<RejoinRequest>,
    ) -> Result<Response<RejoinResponse>, Status> {
        if let Some(peers) = req
            .extensions()
            .get::<om_raft_store::network::AuthenticatedPeers>()
            && !peers.0.contains(&req.get_ref().node_id)
        {
            return Err(Status::permission_denied(format!(
                "the request speaks for node {}, but the client certificate is that of node(s) {:?}",
                req.get_ref().node_id,
                peers.0
            )));
        }
        let r = req.into_inner();
        let m = self.raft.metrics().borrow_watched().clone();
        if m.state != openraft::ServerState::Leader {
            return Err(Status::failed_precondition(format!(
                "node {} is not the leader (leader: {:?})",
                m.id, m.current_leader
            )));
        }
        let membership = m.membership_config.membership();
        let member = membership.get_node(&r.node_id).is_some();
        let matched: BTreeMap<u64, Option<u64>> = m
            .replication
            .as_ref()
            .map(|rep| {
                rep.iter()
                    .map(|(id, l)| (*id, l.as_ref().map(|l| l.index)))
                    .collect()
            })
            .unwrap_or_default();
        let follower_last = r.has_log.then_some(r.last_log_index);
        let mut reset = false;
        if r.stuck
            && member
            && needs_reset(
                matched.get(&r.node_id).copied().flatten(),
                follower_last,
                m.purged.as_ref().map(|p| p.index),
            )
        {
            let voters: Vec<u64> = membership.voter_ids().collect();
            let Some(to) = handover_target(m.id, r.node_id, &voters, &matched) else {
                return Err(Status::failed_precondition(format!(
                    "node {} lost entries this leader recorded it as holding, and no other \
                     voter can take over leadership to replicate to it from scratch",
                    r.node_id
                )));
            };
            tracing::warn!(
                node_id = r.node_id,
                matched = ?matched.get(&r.node_id),
                to,
                "a member lost entries it had acknowledged: handing leadership over so \
                 replication to it starts from scratch"
            );
            self.raft
                .trigger()
                .transfer_leader(to)
                .await
                .map_err(|e| Status::unavailable(format!("raft: {e}")))?;
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

/// Wraps the Raft service: refuses, with `UNAVAILABLE`, the RPCs a node not
/// yet admitted, or one that diverged, may not take (votes and leadership
/// transfers). A refused vote
/// looks to the candidate like an unreachable node, which Raft tolerates.
/// Appends and snapshots always pass: refusing a streaming append would
/// leave the sender's request stream running on the connection.
#[derive(Clone)]
pub struct RaftGate {
    pub admission: Admission,
    pub divergence: Arc<Divergence>,
}

impl Guard for RaftGate {
    type Admitted = ();

    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), Refusal> {
        let method = super::guard::method(req);
        let diverged = matches!(method, "Vote" | "TransferLeader")
            .then(|| self.divergence.diverged())
            .flatten()
            .map(|why| format!("this replica diverged ({why}): it neither votes nor leads"));
        match diverged.or_else(|| self.admission.refuses(method)) {
            Some(why) => Err(Box::new(Status::unavailable(why).into_http())),
            None => Ok(()),
        }
    }
}

/// The subject alternative name (a URI) that marks a member's certificate.
/// The Raft port admits no certificate without it, so a client certificate
/// of the same CA that happens to name a member's host is still refused.
pub const MEMBER_MARKER: &str = "urn:om:member";

/// Whether the certificate `der` carries `MEMBER_MARKER`.
pub fn is_member_certificate(der: &[u8]) -> bool {
    use x509_parser::prelude::*;
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return false;
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return false;
    };
    san.value
        .general_names
        .iter()
        .any(|n| matches!(n, GeneralName::URI(u) if *u == MEMBER_MARKER))
}

/// Who may call the Raft port.
///
/// Always: a request carrying another cluster's id (`om-cluster-id`) is
/// refused once this node holds its own. Under mutual TLS, also: the
/// client's certificate (verified against the CA during the handshake) must
/// carry `MEMBER_MARKER` and name the host of a member's Raft address, taken
/// from the current membership once there is one, else from the
/// `--initial-cluster` list (members ask each other before a membership
/// exists; a `--join` node is given the members it joins). The members whose
/// hosts it names are passed on (`AuthenticatedPeers`), and a message that
/// speaks for any other node is refused.
pub struct MemberCheck {
    raft: Raft,
    initial: Vec<(u64, String)>,
    tls: bool,
    cluster_id: Arc<crate::cluster_id::ClusterId>,
    incarnation: Arc<crate::incarnation::Incarnation>,
    refused: std::sync::atomic::AtomicU64,
}

impl MemberCheck {
    pub fn new(
        raft: Raft,
        initial: Vec<(u64, String)>,
        tls: bool,
        cluster_id: Arc<crate::cluster_id::ClusterId>,
        incarnation: Arc<crate::incarnation::Incarnation>,
    ) -> Arc<Self> {
        Arc::new(MemberCheck {
            raft,
            initial,
            tls,
            cluster_id,
            incarnation,
            refused: Default::default(),
        })
    }

    /// Judges the sender's incarnation (see `incarnation`). `PeerState`
    /// is answered whatever it is: that is how members learn it.
    fn judge_incarnation<B>(
        &self,
        req: &http::Request<B>,
        theirs: Option<&str>,
    ) -> Result<(), Status> {
        if super::guard::method(req) == "PeerState" {
            return Ok(());
        }
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        let Some(sender) = crate::incarnation::Theirs::parse(
            header(crate::incarnation::HEADER),
            header(crate::incarnation::SUPERSEDED_HEADER),
        ) else {
            return Err(super::refusal(
                tonic::Code::InvalidArgument,
                "INVALID_INCARNATION",
                crate::incarnation::HEADER,
                "the sender's incarnation headers are malformed",
            ));
        };
        match self.incarnation.judge(theirs, &sender) {
            crate::incarnation::Judgement::Admit => Ok(()),
            crate::incarnation::Judgement::Refuse { reason, message } => Err(super::refusal(
                tonic::Code::FailedPrecondition,
                reason,
                "",
                &message,
            )),
        }
    }

    /// The members a request is admitted as (`None`: TLS off, no identity
    /// to check), or why it is refused.
    fn admit<B>(
        &self,
        req: &http::Request<B>,
    ) -> Result<Option<om_raft_store::network::AuthenticatedPeers>, Status> {
        let theirs = req
            .headers()
            .get(crate::cluster_id::HEADER)
            .and_then(|v| v.to_str().ok());
        if let (Some(theirs), Some(ours)) = (theirs, self.cluster_id.get())
            && theirs != &*ours
        {
            return Err(super::refusal(
                tonic::Code::PermissionDenied,
                "CLUSTER_MISMATCH",
                "",
                &format!(
                    "the sender belongs to cluster {}, this node to cluster {ours}",
                    crate::validate::quote_prefix(theirs)
                ),
            ));
        }
        // Judged only once the sender proved it is a member: the judgement
        // may record an incarnation or fence this member.
        let peers = if self.tls {
            let info = req.extensions().get::<crate::net::ConnInfo>();
            Some(om_raft_store::network::AuthenticatedPeers(
                self.members_named(info)?,
            ))
        } else {
            None
        };
        self.judge_incarnation(req, theirs)?;
        Ok(peers)
    }

    /// Whether a connection that finished its handshake may stay: it
    /// presented a member certificate naming a member (see `members_named`).
    pub fn admits_connection(&self, info: &crate::net::ConnInfo) -> bool {
        self.members_named(Some(info)).is_ok()
    }

    /// The members whose Raft host the connection's certificate names, once
    /// it carries the member marker; else why it is refused. Members are the
    /// current membership, or `--initial-cluster` before there is one.
    fn members_named(&self, info: Option<&crate::net::ConnInfo>) -> Result<Vec<u64>, Status> {
        let Some(cert) = info
            .and_then(|i| i.peer_certs.as_ref())
            .and_then(|c| c.first())
        else {
            return Err(super::refusal(
                tonic::Code::Unauthenticated,
                "NO_CLIENT_CERTIFICATE",
                "",
                "the Raft port serves only members: no client certificate",
            ));
        };
        if !is_member_certificate(cert) {
            return Err(super::refusal(
                tonic::Code::PermissionDenied,
                "NOT_A_MEMBER_CERTIFICATE",
                "",
                &format!(
                    "the Raft port serves only members: the client certificate lacks the \
                     member marker (URI subject alternative name {MEMBER_MARKER})"
                ),
            ));
        }
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let current: Vec<(u64, String)> = membership
            .nodes()
            .map(|(id, n)| (*id, n.raft_addr.clone()))
            .collect();
        let members = if current.is_empty() {
            &self.initial
        } else {
            &current
        };
        let ids = named_members(cert, members);
        if ids.is_empty() {
            return Err(super::refusal(
                tonic::Code::PermissionDenied,
                "NOT_A_MEMBER",
                "",
                "the Raft port serves only members: the client certificate names none of the \
                 current members' Raft hosts",
            ));
        }
        Ok(ids)
    }
}

/// The ids among `members` whose Raft host `cert` names.
fn named_members(
    cert: &om_tls::rustls::pki_types::CertificateDer<'_>,
    members: &[(u64, String)],
) -> Vec<u64> {
    members
        .iter()
        .filter(|(_, addr)| om_tls::names_host(cert, addr))
        .map(|(id, _)| *id)
        .collect()
}

/// Guards a Raft-port service: with a `MemberCheck`, a request from a client
/// that is not a member is answered before its message is decoded.
#[derive(Clone)]
pub struct MembersOnly(pub Option<Arc<MemberCheck>>);

impl Guard for MembersOnly {
    type Admitted = ();

    fn admit<B>(&self, req: &mut http::Request<B>) -> Result<(), Refusal> {
        let Some(check) = &self.0 else {
            return Ok(());
        };
        let status = match check.admit(req) {
            Ok(Some(peers)) => {
                req.extensions_mut().insert(peers);
                return Ok(());
            }
            Ok(None) => return Ok(()),
            Err(status) => status,
        };
        metrics::counter!("om_raft_port_refused_total", "code" => format!("{:?}", status.code()))
            .increment(1);
        // Logged at 1, 2, 4, 8... refusals: an outsider cannot flood the log.
        let n = check
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if n.is_power_of_two() {
            tracing::warn!(
                remote = ?req.extensions().get::<crate::net::ConnInfo>().and_then(|i| i.remote),
                reason = status.message(),
                refused = n,
                "Raft port request refused"
            );
        }
        // The whole connection is refused, not only this request.
        if let Some(close) = req
            .extensions()
            .get::<crate::net::ConnInfo>()
            .and_then(|i| i.close.clone())
        {
            tokio::spawn(async move {
                // After the refusal has been written.
                tokio::time::sleep(Duration::from_millis(100)).await;
                close.call();
            });
        }
        Err(Box::new(status.into_http()))
    }
}
