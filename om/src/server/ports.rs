//! A node's three ports, bound before anything is announced so a port
//! conflict fails fast, each with its connection limits (`net`).

use std::net::SocketAddr;
use std::sync::Arc;

use super::{BoxError, NodeOptions};
use crate::config::Config;
use crate::descriptors::Budget;
use crate::net::{Closer, LimitedListener, PortPolicy, PortStats};

pub(super) struct Port {
    pub listener: LimitedListener,
    pub policy: PortPolicy,
    pub addr: SocketAddr,
}

pub(super) struct Ports {
    pub grpc: Port,
    pub raft: Port,
    pub http: Port,
}

impl Ports {
    pub async fn bind(
        cfg: &Config,
        budget: &Budget,
        opts: &NodeOptions,
    ) -> Result<Ports, BoxError> {
        let grpc = tokio::net::TcpListener::bind(cfg.grpc_addr).await?;
        let raft = tokio::net::TcpListener::bind(cfg.raft_addr).await?;
        let http = tokio::net::TcpListener::bind(cfg.http_addr).await?;
        let port = |listener: tokio::net::TcpListener, name, max_connections| {
            let mut policy = PortPolicy::new(name, max_connections, cfg.idle_timeout);
            if name == "http" {
                // Probes and scrapes hold a connection or two each: a few
                // busy addresses fill at most three quarters of the port,
                // and the rest is for addresses holding none (the
                // kubelet's probes).
                policy.per_source = (max_connections / 16).max(2);
                policy.reserve = max_connections / 4;
            } else {
                policy.proof_bytes = crate::net::H2_PREFACE_BYTES;
            }
            if let Some(t) = opts.prove_timeout {
                policy.prove_timeout = t;
            }
            let addr = listener.local_addr()?;
            Ok::<_, std::io::Error>(Port {
                listener: LimitedListener::new(listener, policy),
                policy,
                addr,
            })
        };
        Ok(Ports {
            grpc: port(grpc, "grpc", budget.grpc_connections)?,
            raft: port(raft, "raft", budget.raft_connections)?,
            http: port(http, "http", budget.http_connections)?,
        })
    }

    /// Connection counters of the gRPC, Raft and HTTP ports.
    pub fn stats(&self) -> [Arc<PortStats>; 3] {
        [
            self.grpc.listener.stats(),
            self.raft.listener.stats(),
            self.http.listener.stats(),
        ]
    }

    /// Closers of the Raft port and of the public ports (gRPC, HTTP).
    pub fn closers(&self) -> (Closer, [Closer; 2]) {
        (
            self.raft.listener.closer(),
            [self.grpc.listener.closer(), self.http.listener.closer()],
        )
    }
}
