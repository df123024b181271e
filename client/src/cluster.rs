//! Cluster status, membership, leadership and replica verification.

use std::sync::Arc;

use crate::v1::cluster_client::ClusterClient;
use crate::v1::*;
use crate::{ClientError, OmClient, auth_channel, channel};

impl OmClient {
    /// The status of the node the client currently talks to.
    pub async fn cluster_status(&self) -> Result<ClusterStatusResponse, ClientError> {
        self.call(|ch| async move { ClusterClient::new(ch).status(ClusterStatusRequest {}).await })
            .await
    }

    /// Adds a node (learner, caught up, then voter unless `learner_only`).
    pub async fn add_node(
        &self,
        node_id: u64,
        raft_addr: &str,
        grpc_addr: &str,
        learner_only: bool,
    ) -> Result<ClusterStatusResponse, ClientError> {
        let req = AddNodeRequest {
            node_id,
            raft_addr: raft_addr.to_string(),
            grpc_addr: grpc_addr.to_string(),
            learner_only,
        };
        let r = self
            .call(|ch| {
                let req = req.clone();
                async move { ClusterClient::new(ch).add_node(req).await }
            })
            .await?;
        r.status
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn remove_node(&self, node_id: u64) -> Result<ClusterStatusResponse, ClientError> {
        let r = self
            .call(|ch| async move {
                ClusterClient::new(ch)
                    .remove_node(RemoveNodeRequest { node_id })
                    .await
            })
            .await?;
        r.status
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    pub async fn transfer_leader(&self, to: u64) -> Result<ClusterStatusResponse, ClientError> {
        let r = self
            .call(|ch| async move {
                ClusterClient::new(ch)
                    .transfer_leader(TransferLeaderRequest { to })
                    .await
            })
            .await?;
        r.status
            .ok_or_else(|| ClientError::Unavailable("empty response".to_string()))
    }

    /// Compares the members' state digests at one index and, with
    /// `tables`, every table record by record at one index
    /// (`VerifyReplicas`).
    pub async fn verify_replicas(
        &self,
        tables: bool,
    ) -> Result<VerifyReplicasResponse, ClientError> {
        self.call(|ch| async move {
            ClusterClient::new(ch)
                .verify_replicas(VerifyReplicasRequest { tables })
                .await
        })
        .await
    }

    /// The status of the contacted node and of every member it knows, each
    /// asked directly; members that do not answer are reported as errors.
    pub async fn cluster_status_all(
        &self,
    ) -> Result<Vec<(ClusterMember, Result<ClusterStatusResponse, ClientError>)>, ClientError> {
        let first = self.cluster_status().await?;
        let mut out = Vec::new();
        for m in &first.members {
            let s = if m.node_id == first.node_id {
                Ok(first.clone())
            } else if m.grpc_addr.is_empty() {
                Err(ClientError::Endpoint(format!(
                    "node {} has no client address",
                    m.node_id
                )))
            } else {
                match auth_channel(&m.grpc_addr, &self.opts) {
                    Ok(ch) => Self::status_on(ch).await,
                    Err(e) => Err(e),
                }
            };
            out.push((m.clone(), s));
        }
        Ok(out)
    }

    /// The status of the node at `addr` specifically.
    pub async fn node_status(addr: &str) -> Result<ClusterStatusResponse, ClientError> {
        Self::node_status_with(addr, None).await
    }

    /// `node_status` over TLS when `tls` is given.
    pub async fn node_status_with(
        addr: &str,
        tls: Option<&Arc<om_tls::ClientTls>>,
    ) -> Result<ClusterStatusResponse, ClientError> {
        Self::status_on(channel(addr, tls)?).await
    }

    async fn status_on<T>(ch: T) -> Result<ClusterStatusResponse, ClientError>
    where
        T: tonic::client::GrpcService<tonic::body::Body>,
        T::Error: Into<tonic::codegen::StdError>,
        T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
        <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
    {
        ClusterClient::new(ch)
            .status(ClusterStatusRequest {})
            .await
            .map(|r| r.into_inner())
            .map_err(|s| ClientError::from_status(&s))
    }
}
