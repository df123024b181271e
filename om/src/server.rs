//! Wires a node together: the store, Raft, the gRPC services, HTTP, and the
//! leader-side background tasks. `main` only parses configuration and calls
//! `Node::start`; tests can start nodes in-process the same way.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use om_proto::store::{ExpireRetryCache, command::Op};
use om_raft_store::network::{NetworkFactory, RaftGrpcService};
use om_raft_store::{OmNode, Raft};
use openraft::async_runtime::WatchReceiver;
use rocksdb::{ColumnFamilyDescriptor, Options};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;

use crate::apply::OmApplier;
use crate::config::Config;
use crate::grpc::{ClusterGrpc, OmGrpc};
use crate::service::{OmService, WriteId, now_ms};
use crate::store::keys;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Hooks for tests; production nodes use the default.
#[derive(Default, Clone)]
pub struct NodeOptions {
    /// Cut Raft links between in-process nodes.
    pub faults: Option<Arc<om_raft_store::network::Faults>>,
}

/// A running node.
pub struct Node {
    pub raft: Raft,
    pub service: Arc<OmService>,
    pub grpc_addr: std::net::SocketAddr,
    pub http_addr: std::net::SocketAddr,
    pub raft_addr: std::net::SocketAddr,
    stop: watch::Sender<bool>,
    /// The Raft RPC server: stopped at once on shutdown, since peers' replication
    /// streams never end on their own.
    raft_server: JoinHandle<()>,
    tasks: Vec<JoinHandle<()>>,
}

/// Options of the metadata tables' column families.
///
/// Tables that see bulk deletions get RocksDB's deletion-triggered compaction:
/// an SST file is marked for compaction when any window of
/// `DELETION_WINDOW` consecutive entries holds `DELETION_TRIGGER` or more
/// tombstones, or when tombstones make up `DELETION_RATIO` of the file. That
/// compacts tombstone bands away soon after they land, instead of waiting for
/// size-based compaction, so scans do not keep paying for deleted keys.
fn table_descriptors() -> Vec<ColumnFamilyDescriptor> {
    keys::TABLE_CFS
        .iter()
        .map(|name| {
            let mut o = Options::default();
            if keys::DELETION_HEAVY_CFS.contains(name) {
                o.add_compact_on_deletion_collector_factory(
                    DELETION_WINDOW,
                    DELETION_TRIGGER,
                    DELETION_RATIO,
                );
            }
            ColumnFamilyDescriptor::new(*name, o)
        })
        .collect()
}

/// Opens the store, waiting (up to 10 s) for a previous instance in this
/// process to release the directory: the last handle of a stopped node may
/// still be closing RocksDB on a background thread.
async fn open_store(dir: &std::path::Path) -> std::io::Result<om_raft_store::OpenedStore> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match om_raft_store::open(dir, table_descriptors(), Arc::new(OmApplier)) {
            Err(e) if e.to_string().contains("lock") && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r => return r,
        }
    }
}

/// Entries per sliding window of the deletion-triggered compaction collector.
pub const DELETION_WINDOW: usize = 32 * 1024;
/// Tombstones within one window that mark the file for compaction.
pub const DELETION_TRIGGER: usize = 8 * 1024;
/// Fraction of tombstones in a whole file that marks it for compaction.
pub const DELETION_RATIO: f64 = 0.5;

fn raft_config(cfg: &Config) -> Result<openraft::Config, BoxError> {
    let election = cfg.election_timeout.as_millis() as u64;
    let c = openraft::Config {
        cluster_name: "om".to_string(),
        heartbeat_interval: cfg.heartbeat.as_millis() as u64,
        election_timeout_min: election,
        election_timeout_max: election * 2,
        install_snapshot_timeout: 30_000,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(cfg.snapshot_every),
        max_in_snapshot_log_to_keep: cfg.snapshot_keep_logs,
        // Purge in steps no larger than the snapshot interval, so a purge
        // follows every snapshot once enough log lies behind it.
        purge_batch_size: cfg.snapshot_every.clamp(1, 256),
        ..Default::default()
    };
    Ok(c.validate()?)
}

impl Node {
    /// Opens the data directory, starts Raft and every server, and initializes
    /// the cluster when this node is the one to do it.
    pub async fn start(cfg: Config) -> Result<Node, BoxError> {
        Self::start_with(cfg, NodeOptions::default()).await
    }

    /// `start` with test hooks.
    pub async fn start_with(cfg: Config, opts: NodeOptions) -> Result<Node, BoxError> {
        let prom = crate::metrics::recorder();
        let store = open_store(&cfg.data_dir).await?;
        let db = store.db.clone();
        crate::store::tune_tables(&db)?;
        let raft = Raft::new(
            cfg.node_id,
            Arc::new(raft_config(&cfg)?),
            NetworkFactory::new(cfg.node_id, opts.faults),
            store.log_store,
            store.state_machine,
        )
        .await?;

        // Bind everything before announcing ourselves, so a port conflict fails fast.
        let grpc_listener = tokio::net::TcpListener::bind(cfg.grpc_addr).await?;
        let raft_listener = tokio::net::TcpListener::bind(cfg.raft_addr).await?;
        let http_listener = tokio::net::TcpListener::bind(cfg.http_addr).await?;
        let grpc_addr = grpc_listener.local_addr()?;
        let raft_addr = raft_listener.local_addr()?;
        let http_addr = http_listener.local_addr()?;

        let service = Arc::new(
            OmService::new(
                raft.clone(),
                db,
                cfg.node_id,
                cfg.max_page,
                cfg.request_timeout,
                cfg.list_seek_after,
            )
            .with_min_part_size(cfg.min_part_size),
        );
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();

        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };

        let raft_svc = RaftGrpcService::new(raft.clone(), &cfg.data_dir).into_server();
        let rx = stop_rx.clone();
        let raft_server = tokio::spawn(async move {
            let r = tonic::transport::Server::builder()
                .add_service(raft_svc)
                .serve_with_incoming_shutdown(nodelay(raft_listener), stopped(rx))
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "raft server failed");
            }
        });

        let om = om_proto::v1::ozone_manager_server::OzoneManagerServer::new(OmGrpc::new(
            service.clone(),
        ));
        let cluster =
            om_proto::v1::cluster_server::ClusterServer::new(ClusterGrpc::new(service.clone()));
        let rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let r = tonic::transport::Server::builder()
                .add_service(om)
                .add_service(cluster)
                .serve_with_incoming_shutdown(nodelay(grpc_listener), stopped(rx))
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "gRPC server failed");
            }
        }));

        let app = crate::http::router(service.clone(), prom);
        let rx = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let r = axum::serve(http_listener, app)
                .with_graceful_shutdown(stopped(rx))
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "HTTP server failed");
            }
        }));

        tasks.push(tokio::spawn(publish_raft_metrics(
            raft.clone(),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(expire_retry_cache(
            service.clone(),
            cfg.retry_cache_ttl,
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(purge_deleted_dirs(
            service.clone(),
            stop_rx.clone(),
        )));
        tasks.push(tokio::spawn(expire_open_keys(
            service.clone(),
            cfg.open_key_ttl,
            stop_rx.clone(),
        )));

        bootstrap(&raft, &cfg, grpc_addr, raft_addr).await?;
        tracing::info!(
            node_id = cfg.node_id,
            %grpc_addr,
            %raft_addr,
            %http_addr,
            data_dir = %cfg.data_dir.display(),
            "om started"
        );
        Ok(Node {
            raft,
            service,
            grpc_addr,
            http_addr,
            raft_addr,
            stop,
            raft_server,
            tasks,
        })
    }

    /// Waits until this node sees a leader, or the timeout passes.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64, BoxError> {
        let m = self
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "a leader")
            .await?;
        Ok(m.current_leader.unwrap_or(0))
    }

    /// Stops the servers and Raft. Everything acknowledged is already durable.
    pub async fn shutdown(self) {
        let Node {
            raft,
            service,
            stop,
            raft_server,
            tasks,
            ..
        } = self;
        let db = Arc::downgrade(service.db());
        drop(service);
        let _ = stop.send(true);
        raft_server.abort();
        let _ = raft_server.await;
        // The public servers finish in-flight requests, within a grace period.
        for mut t in tasks {
            if tokio::time::timeout(Duration::from_secs(2), &mut t)
                .await
                .is_err()
            {
                t.abort();
                let _ = t.await;
            }
        }
        if let Err(e) = raft.shutdown().await {
            tracing::warn!(error = %e, "raft shutdown");
        }
        drop(raft);
        // Connection tasks and Raft's workers release the database as they
        // wind down; wait for that, so a restart in the same process can open
        // (and lock) the directory again.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while db.strong_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if db.strong_count() > 0 {
            tracing::warn!("database still referenced after shutdown");
        }
    }

    /// Runs until `signal` completes, then shuts down.
    pub async fn run_until(self, signal: impl Future<Output = ()>) {
        signal.await;
        tracing::info!("shutting down");
        self.shutdown().await;
    }
}

/// Accepted connections with Nagle's algorithm off: Raft and client RPCs are
/// small messages whose latency matters more than packet count.
fn nodelay(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use futures::StreamExt;
    TcpListenerStream::new(listener).map(|r| {
        r.inspect(|s| {
            if let Err(e) = s.set_nodelay(true) {
                tracing::debug!(error = %e, "set_nodelay");
            }
        })
    })
}

async fn bootstrap(
    raft: &Raft,
    cfg: &Config,
    grpc_addr: std::net::SocketAddr,
    raft_addr: std::net::SocketAddr,
) -> Result<(), BoxError> {
    if cfg.join || raft.is_initialized().await? {
        return Ok(());
    }
    let members: BTreeMap<u64, OmNode> = if cfg.initial_cluster.is_empty() {
        BTreeMap::from([(
            cfg.node_id,
            OmNode {
                raft_addr: raft_addr.to_string(),
                grpc_addr: grpc_addr.to_string(),
            },
        )])
    } else {
        // Only the lowest id initializes; the others learn the membership from it.
        if cfg.initial_cluster[0].id != cfg.node_id {
            return Ok(());
        }
        cfg.initial_cluster
            .iter()
            .map(|m| {
                let grpc = if m.id == cfg.node_id && m.grpc_addr.is_empty() {
                    grpc_addr.to_string()
                } else {
                    m.grpc_addr.clone()
                };
                (
                    m.id,
                    OmNode {
                        raft_addr: m.raft_addr.clone(),
                        grpc_addr: grpc,
                    },
                )
            })
            .collect()
    };
    tracing::info!(members = ?members.keys().collect::<Vec<_>>(), "initializing cluster");
    match raft.initialize(members).await {
        Ok(()) => Ok(()),
        Err(openraft::errors::RaftError::APIError(
            openraft::errors::InitializeError::NotAllowed(_),
        )) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn publish_raft_metrics(raft: Raft, mut stop: watch::Receiver<bool>) {
    let mut rx = raft.metrics();
    let mut leader = None;
    loop {
        let m = rx.borrow_watched().clone();
        crate::metrics::raft(&m, &mut leader);
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// On the leader, periodically proposes dropping retry-cache entries older than `ttl`.
async fn expire_retry_cache(svc: Arc<OmService>, ttl: Duration, mut stop: watch::Receiver<bool>) {
    let every = (ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if !svc.raft().is_leader() {
            continue;
        }
        let before_ms = now_ms().saturating_sub(ttl.as_millis() as u64);
        if let Err(e) = svc
            .propose(
                WriteId::default(),
                Op::ExpireRetryCache(ExpireRetryCache { before_ms }),
            )
            .await
        {
            tracing::debug!(error = %e, "retry cache expiry not proposed");
        }
    }
}

/// On the leader, periodically proposes expiring open-key sessions older than
/// `ttl`; a full batch is followed at once by the next.
async fn expire_open_keys(svc: Arc<OmService>, ttl: Duration, mut stop: watch::Receiver<bool>) {
    let every = (ttl / 4).clamp(Duration::from_millis(500), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        while svc.raft().is_leader() {
            let before_ms = now_ms().saturating_sub(ttl.as_millis() as u64);
            if !open_sessions_expired(&svc, before_ms) {
                break;
            }
            let op = Op::ExpireOpenKeys(om_proto::store::ExpireOpenKeys { before_ms });
            match svc.propose(WriteId::default(), op).await {
                Ok(om_proto::store::command_result::Result::Count(c))
                    if c.count as usize == crate::apply::OPEN_KEY_EXPIRY_BATCH => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "open-key expiry not proposed");
                    break;
                }
            }
        }
    }
}

/// Whether any session (key or file) was opened before `before_ms`: one seek
/// per table in the expiry indexes, so an idle leader proposes nothing.
fn open_sessions_expired(svc: &OmService, before_ms: u64) -> bool {
    [
        (keys::OPEN_KEYS_CF, keys::OPEN_EXPIRY_PREFIX),
        (keys::OPEN_FILES_CF, keys::OPEN_FILE_EXPIRY_PREFIX),
    ]
    .iter()
    .any(|(cf, prefix)| {
        let mut upper = prefix.to_vec();
        upper.extend_from_slice(&before_ms.to_be_bytes());
        crate::store::iter::DeferredSeekIter::new(svc.db(), cf, Some(prefix.to_vec()), Some(upper))
            .map(|mut it| it.has_current())
            .unwrap_or(true)
    })
}

/// Children purged per `PurgeDeletedDirs` command: bounds one apply.
pub const PURGE_BATCH: u32 = 1000;

/// Whether any recursively deleted directory awaits purging (one seek).
fn deleted_dirs_pending(svc: &OmService) -> bool {
    let Ok(mut it) =
        crate::store::iter::DeferredSeekIter::new(svc.db(), keys::DELETED_DIRS_CF, None, None)
    else {
        return false;
    };
    it.seek_to_first();
    it.has_current()
}

/// On the leader, purges recursively deleted directories in bounded batches
/// through Raft until none is left. Progress is replicated state: a new
/// leader (or a restarted one) continues where the last batch stopped.
async fn purge_deleted_dirs(svc: Arc<OmService>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        while svc.raft().is_leader() && deleted_dirs_pending(&svc) {
            let op = Op::PurgeDeletedDirs(om_proto::store::PurgeDeletedDirs {
                max_children: PURGE_BATCH,
            });
            match svc.propose(WriteId::default(), op).await {
                Ok(om_proto::store::command_result::Result::Count(c)) if c.count > 0 => {}
                Ok(_) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "deleted-directory purge not proposed");
                    break;
                }
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}
