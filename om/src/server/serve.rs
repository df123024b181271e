//! The servers of a node: the Raft port (Raft and peer RPCs, members only)
//! and the public ports (the gRPC API with health and reflection, and HTTP
//! probes and metrics).

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use om_raft_store::Raft;
use om_raft_store::network::{LeaderContact, RaftGrpcService};
use tokio::task::JoinHandle;

use super::ports::Port;
use super::security::Security;
use super::{BoxError, InitialMember};
use crate::cluster_id::ClusterId;
use crate::divergence::Divergence;
use crate::grpc::auth::Authenticate;
use crate::grpc::guard::Guarded;
use crate::grpc::peer::{MemberCheck, MembersOnly, PeerGrpc, RaftGate};
use crate::grpc::{ClusterGrpc, MalformedAsInvalid, OmGrpc};
use crate::net::ProveBy;
use crate::service::OmService;
use crate::tasks::Tasks;
use crate::tasks::catch_up::CatchUp;
use crate::tasks::rejoin::Admission;

/// What the Raft port's services guard with.
pub(super) struct RaftPort<'a> {
    pub raft: &'a Raft,
    pub members: &'a [InitialMember],
    pub cluster_id: &'a Arc<ClusterId>,
    pub incarnation: &'a Arc<crate::incarnation::Incarnation>,
    pub leader_contact: Arc<LeaderContact>,
    pub disk: Arc<om_raft_store::disk::DiskSpace>,
    pub admission: &'a Admission,
    pub divergence: &'a Arc<Divergence>,
    /// Proposes the writes followers forward.
    pub service: &'a Arc<OmService>,
}

/// Serves Raft and the peer service on the Raft port until the node stops;
/// stopped at once on shutdown, since peers' replication streams never end
/// on their own.
pub(super) fn raft_port(
    port: Port,
    p: RaftPort<'_>,
    security: &Security,
    tasks: &Tasks,
) -> JoinHandle<()> {
    let members_only = Some(MemberCheck::new(
        p.raft.clone(),
        p.members
            .iter()
            .map(|m| (m.id, m.raft_addr.clone()))
            .collect(),
        security.tls.is_some(),
        p.cluster_id.clone(),
        p.incarnation.clone(),
    ));
    // Under TLS a Raft-port connection whose certificate names no member
    // is closed right after its handshake.
    let proof = match members_only.clone() {
        Some(check) => ProveBy::Member(Arc::new(move |info| check.admits_connection(info))),
        None => ProveBy::Handshake,
    };
    let gate = RaftGate {
        admission: p.admission.clone(),
        divergence: p.divergence.clone(),
    };
    let raft_svc = Guarded::new(
        Guarded::new(
            RaftGrpcService::new(p.raft.clone())
                .with_contact(p.leader_contact)
                .with_disk(p.disk)
                .into_server(),
            gate,
        ),
        MembersOnly(members_only.clone()),
    );
    let peer_svc = Guarded::new(
        PeerGrpc::server(
            p.raft.clone(),
            p.admission.clone(),
            p.divergence.clone(),
            p.cluster_id.clone(),
            p.service.clone(),
            // Only TLS proves a caller of this port a member.
            security.tls.is_some(),
        ),
        MembersOnly(members_only),
    );
    let tls = security.tls.as_ref().map(|t| t.raft.clone());
    let stopped = tasks.stopped();
    tokio::spawn(async move {
        let r = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(port.policy.keepalive()))
            .http2_keepalive_timeout(Some(port.policy.keepalive()))
            .add_service(raft_svc)
            .add_service(peer_svc)
            .serve_with_incoming_shutdown(port.listener.into_incoming(tls, proof), stopped)
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "raft server failed");
        }
    })
}

/// Serves the public gRPC API on `port` until the node stops. The gRPC
/// health service says SERVING exactly when /readyz answers 200;
/// reflection lets grpcurl list and describe the API. Neither needs
/// credentials beyond what the connection's TLS asks.
pub(super) fn grpc_port(
    port: Port,
    service: &Arc<OmService>,
    security: &Security,
    health: (Admission, CatchUp),
    incarnation: &Arc<crate::incarnation::Incarnation>,
    tasks: &mut Tasks,
) -> Result<(), BoxError> {
    let (admission, catch_up) = health;
    let om =
        om_proto::v1::ozone_manager_server::OzoneManagerServer::new(OmGrpc::new(service.clone()));
    let cluster =
        om_proto::v1::cluster_server::ClusterServer::new(ClusterGrpc::new(service.clone()));
    let (reporter, health_service) = tonic_health::server::health_reporter();
    tasks.spawn(crate::tasks::health::report_health(
        reporter,
        service.clone(),
        admission,
        catch_up,
        tasks.stop_signal(),
    ));
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(om_proto::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(om_proto::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    // With credentials required, a public connection proves itself by its
    // first authenticated request.
    let authenticator = security.authenticator.clone();
    let proof = if authenticator.required {
        ProveBy::Request
    } else {
        ProveBy::Handshake
    };
    let incarnated = crate::grpc::incarnated::Incarnated(incarnation.clone());
    let tls = security.tls.as_ref().map(|t| t.grpc.clone());
    let stopped = tasks.stopped();
    tasks.spawn(async move {
        let r = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(port.policy.keepalive()))
            .http2_keepalive_timeout(Some(port.policy.keepalive()))
            .add_service(health_service)
            .add_service(reflection)
            .add_service(reflection_alpha)
            .add_service(Guarded::new(
                Authenticate::new(MalformedAsInvalid(om), authenticator.clone()),
                incarnated.clone(),
            ))
            .add_service(Guarded::new(
                Authenticate::new(MalformedAsInvalid(cluster), authenticator),
                incarnated,
            ))
            .serve_with_incoming_shutdown(port.listener.into_incoming(tls, proof), stopped)
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "gRPC server failed");
        }
    });
    Ok(())
}

/// Serves /metrics, /healthz and /readyz on `port` until the node stops.
pub(super) fn http_port(
    port: Port,
    service: &Arc<OmService>,
    prom: PrometheusHandle,
    health: (Admission, CatchUp),
    db_options: Arc<rocksdb::Options>,
    tasks: &mut Tasks,
) {
    let (admission, catch_up) = health;
    let app = crate::http::router(service.clone(), prom, admission, catch_up, db_options);
    tasks.spawn(crate::http::serve(port.listener, app, tasks.stopped()));
}
