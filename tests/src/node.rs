//! Members that run inside the test process: `TestNode`, the addresses of
//! a static cluster's members, and clients of them.

use std::sync::Arc;
use std::time::Duration;

use om::config::{Args, Config};
use om::server::{Node, NodeOptions};
use om_client::{ClientOptions, OmClient};

use crate::{Faults, MTLS_CLIENT, client_options, free_port, mtls};

/// A node running inside the test process.
pub struct TestNode {
    pub node: Node,
    pub dir: tempfile::TempDir,
}

impl TestNode {
    /// A single-node cluster on a fresh data directory, ready to serve.
    pub async fn start() -> TestNode {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Args)) -> TestNode {
        Self::start_in(tempfile::tempdir().expect("tempdir"), tweak).await
    }

    /// Stops the node and starts it again on the same data directory (new
    /// ports: take a fresh `client()`).
    pub async fn restart(self, tweak: impl FnOnce(&mut Args)) -> TestNode {
        let dir = self.stop().await;
        Self::start_in(dir, tweak).await
    }

    /// A single-node cluster on `dir`, initialized on first use.
    pub async fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Args)) -> TestNode {
        Self::start_in_opts(dir, NodeOptions::default(), tweak).await
    }

    /// `start_in` with test hooks.
    pub async fn start_in_opts(
        dir: tempfile::TempDir,
        opts: NodeOptions,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let mut args = Args {
            data_dir: Some(dir.path().to_path_buf()),
            grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
            http_addr: Some("127.0.0.1:0".parse().unwrap()),
            raft_addr: Some("127.0.0.1:0".parse().unwrap()),
            secrets_key_file: Some(crate::test_secrets_key_file()),
            ..Args::default()
        };
        if let Some(p) = mtls() {
            args.tls_cert = Some(p.member.cert.clone());
            args.tls_key = Some(p.member.key.clone());
            args.tls_ca = Some(p.ca_path.clone());
            args.admins = Some(MTLS_CLIENT.to_string());
        }
        tweak(&mut args);
        let node = Node::start_with(Config::load(args).expect("config"), opts)
            .await
            .expect("node starts");
        node.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("leader elected");
        TestNode { node, dir }
    }

    /// Shuts the node down and hands back its data directory for a restart.
    pub async fn stop(self) -> tempfile::TempDir {
        self.node.shutdown().await;
        self.dir
    }

    pub fn endpoint(&self) -> String {
        self.node.grpc_addr.to_string()
    }

    pub fn client(&self) -> OmClient {
        OmClient::new(&[self.endpoint()], ClientOptions::default()).expect("client")
    }

    /// Every metadata-table entry (retry cache excluded), for before/after comparisons.
    pub fn dump(&self) -> om::store::TableDump {
        om::store::dump_tables(self.node.service.db()).expect("dump")
    }
}

/// Addresses of one member of a test cluster.
#[derive(Debug, Clone)]
pub struct MemberAddrs {
    pub id: u64,
    pub grpc: String,
    pub http: String,
    pub raft: String,
}

/// Fresh loopback addresses for `n` members, ids 1..=n.
pub fn cluster_addrs(n: u64) -> Vec<MemberAddrs> {
    (1..=n)
        .map(|id| MemberAddrs {
            id,
            grpc: format!("127.0.0.1:{}", free_port()),
            http: format!("127.0.0.1:{}", free_port()),
            raft: format!("127.0.0.1:{}", free_port()),
        })
        .collect()
}

/// A snapshot of `n`'s Raft metrics.
pub fn metrics_of(n: &TestNode) -> openraft::RaftMetrics<om_raft_store::TypeConfig> {
    let m = n.node.raft.metrics();
    openraft::async_runtime::WatchReceiver::borrow_watched(&m).clone()
}

/// A client of every member in `addrs`, with a 20 s deadline.
pub fn members_client(addrs: &[MemberAddrs]) -> OmClient {
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    OmClient::new(
        &eps,
        ClientOptions {
            deadline: Duration::from_secs(20),
            ..client_options()
        },
    )
    .unwrap()
}

/// A client of one member alone that reads its state as it is (stale
/// reads), giving up after `deadline`.
pub fn local_client(addr: &MemberAddrs, deadline: Duration) -> OmClient {
    OmClient::new(
        std::slice::from_ref(&addr.grpc),
        ClientOptions {
            stale_reads: true,
            deadline,
            attempt_timeout: deadline,
            ..client_options()
        },
    )
    .unwrap()
}

/// The `--initial-cluster` value for `members`.
pub fn initial_cluster(members: &[MemberAddrs]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}/{}", m.id, m.raft, m.grpc))
        .collect::<Vec<_>>()
        .join(",")
}

impl TestNode {
    /// Starts member `me` of a static cluster without waiting for a leader.
    pub async fn start_member(me: &MemberAddrs, all: &[MemberAddrs]) -> TestNode {
        Self::start_member_with(me, all, None, |_| {}).await
    }

    /// `start_member` with Raft fault injection and extra settings.
    pub async fn start_member_with(
        me: &MemberAddrs,
        all: &[MemberAddrs],
        faults: Option<Arc<Faults>>,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_member_in(dir, me, all, faults, tweak).await
    }

    /// Starts member `me` on an existing data directory (a restart).
    pub async fn start_member_in(
        dir: tempfile::TempDir,
        me: &MemberAddrs,
        all: &[MemberAddrs],
        faults: Option<Arc<Faults>>,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let opts = NodeOptions {
            faults,
            ..NodeOptions::default()
        };
        Self::start_member_opts(dir, me, all, opts, tweak).await
    }

    /// `start_member_in` with every test hook of `NodeOptions`.
    pub async fn start_member_opts(
        dir: tempfile::TempDir,
        me: &MemberAddrs,
        all: &[MemberAddrs],
        opts: NodeOptions,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let mut args = Args {
            data_dir: Some(dir.path().to_path_buf()),
            grpc_addr: Some(me.grpc.parse().unwrap()),
            http_addr: Some(me.http.parse().unwrap()),
            raft_addr: Some(me.raft.parse().unwrap()),
            node_id: Some(me.id),
            initial_cluster: Some(initial_cluster(all)),
            heartbeat_ms: Some(50),
            election_timeout_ms: Some(300),
            request_timeout_ms: Some(3000),
            secrets_key_file: Some(crate::test_secrets_key_file()),
            ..Args::default()
        };
        if let Some(p) = mtls() {
            args.tls_cert = Some(p.member.cert.clone());
            args.tls_key = Some(p.member.key.clone());
            args.tls_ca = Some(p.ca_path.clone());
            args.admins = Some(MTLS_CLIENT.to_string());
        }
        tweak(&mut args);
        let node = Node::start_with(Config::load(args).expect("config"), opts)
            .await
            .expect("node starts");
        TestNode { node, dir }
    }
}
