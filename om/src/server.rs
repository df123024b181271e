//! Wires a node together and runs its start as a list of phases: security
//! (`security`), the store and Raft (`storage`), the ports (`ports`), the
//! request layer, the servers (`serve`), the background tasks and joining
//! the cluster (`background`). `main` only parses configuration and calls
//! `Node::start`; tests can start nodes in-process the same way.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use om_raft_store::Raft;
use tokio::task::JoinHandle;

use crate::config::{Config, InitialMember};
use crate::net::{Closer, PortStats};
use crate::service::OmService;
use crate::tasks::Tasks;
use crate::tasks::catch_up::CatchUp;
use crate::tasks::rejoin::{Admission, Member};

mod background;
mod ports;
mod security;
mod serve;
mod storage;

use ports::Ports;
use security::Security;
use storage::Storage;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a stopping node's public servers and background tasks get to
/// finish what they are doing, all together; what is left is cancelled.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Hooks for tests; production nodes use the default.
#[derive(Default, Clone)]
pub struct NodeOptions {
    /// Cut Raft links between in-process nodes.
    pub faults: Option<Arc<om_raft_store::network::Faults>>,
    /// Retry-cache entries per expiry command (default `RETRY_EXPIRY_BATCH`).
    pub retry_expiry_batch: Option<u32>,
    /// Skews this node's wall clock (milliseconds; tests of clock disagreement).
    pub clock_offset_ms: i64,
    /// How often certificate files are checked for changes (default
    /// `om_tls::RELOAD_INTERVAL`).
    pub tls_reload_interval: Option<Duration>,
    /// How long a connection may stay unproven (default
    /// `net::PROVE_TIMEOUT`).
    pub prove_timeout: Option<Duration>,
    /// Background tasks that never stop by themselves (tests of shutdown).
    pub stubborn_tasks: usize,
}

/// A running node.
pub struct Node {
    pub raft: Raft,
    pub service: Arc<OmService>,
    pub grpc_addr: std::net::SocketAddr,
    pub http_addr: std::net::SocketAddr,
    pub raft_addr: std::net::SocketAddr,
    /// How the descriptor limit was split between storage and the ports.
    pub budget: crate::descriptors::Budget,
    /// Connection counters of the public gRPC, Raft and HTTP ports.
    pub port_stats: [Arc<PortStats>; 3],
    /// Whether this node takes full part in Raft yet (see `rejoin`).
    pub admission: Admission,
    /// The Raft RPC server: stopped at once on shutdown, since peers' replication
    /// streams never end on their own.
    raft_server: JoinHandle<()>,
    /// Servers and background tasks, with their stop signal.
    tasks: Tasks,
    /// Close the connections of the Raft port and of the public ports (gRPC,
    /// HTTP) on shutdown: their tasks outlive the servers (see `net`).
    raft_closer: Closer,
    public_closers: [Closer; 2],
}

impl Node {
    /// Opens the data directory, starts Raft and every server, and initializes
    /// the cluster when this node is the one to do it.
    pub async fn start(cfg: Config) -> Result<Node, BoxError> {
        Self::start_with(cfg, NodeOptions::default()).await
    }

    /// `start` with test hooks. The phases of a start, in order.
    pub async fn start_with(cfg: Config, opts: NodeOptions) -> Result<Node, BoxError> {
        let started = std::time::Instant::now();
        let prom = crate::metrics::recorder();
        let budget = descriptor_budget(&cfg)?;
        let security = Security::load(&cfg, &opts)?;
        let storage =
            Storage::open(&cfg, budget.db_max_open_files, security.audit.as_ref()).await?;
        crate::metrics::startup_phase("store_open", started.elapsed());
        let (raft, divergence) = storage.start_raft(&cfg, &opts, security.peer_tls()).await?;
        crate::metrics::startup_phase("raft_start", started.elapsed());
        let ports = Ports::bind(&cfg, &budget, &opts).await?;
        let service = Arc::new(build_service(
            &cfg,
            &opts,
            &raft,
            &storage,
            &security,
            &divergence,
        ));

        let mut tasks = Tasks::default();
        for _ in 0..opts.stubborn_tasks {
            tasks.spawn(std::future::pending::<()>());
        }
        // Decided before the Raft port serves anything: a configured member
        // on an empty data directory must not vote until it knows better.
        // So is a joiner on an empty data directory: it may be a voter that
        // lost its data, and must not vote before it has caught up.
        // And so is a member restarting with its data, which first checks
        // that no forced new cluster replaced its incarnation.
        let member =
            (cfg.join || !cfg.initial_cluster.is_empty() || !storage.empty_store).then(|| Member {
                raft: raft.clone(),
                node_id: cfg.node_id,
                data_dir: cfg.data_dir.clone(),
                members: cfg.initial_cluster.clone(),
                grpc_addr: ports.grpc.addr.to_string(),
                tls: security.peer_tls(),
                empty_store: storage.empty_store,
                incarnation: storage.incarnation.clone(),
                join: cfg.join,
            });
        let admission = match &member {
            Some(m) => crate::tasks::rejoin::initial(m).await?,
            None => Admission::open(),
        };
        security.reload_certificates(&opts);

        let (grpc_addr, raft_addr, http_addr) = (ports.grpc.addr, ports.raft.addr, ports.http.addr);
        let port_stats = ports.stats();
        let (raft_closer, public_closers) = ports.closers();
        let raft_server = serve::raft_port(
            ports.raft,
            serve::RaftPort {
                raft: &raft,
                members: &cfg.initial_cluster,
                cluster_id: &storage.cluster_id,
                incarnation: &storage.incarnation,
                leader_contact: storage.leader_contact.clone(),
                disk: storage.disk.clone(),
                admission: &admission,
                divergence: &divergence,
                service: &service,
            },
            &security,
            &tasks,
        );
        let catch_up = CatchUp::default();
        let health = (admission.clone(), catch_up.clone());
        serve::grpc_port(
            ports.grpc,
            &service,
            &security,
            health.clone(),
            &storage.incarnation,
            &mut tasks,
        )?;
        serve::http_port(
            ports.http,
            &service,
            prom,
            health,
            storage.db_options.clone(),
            &mut tasks,
        );
        background::spawn(
            &mut tasks,
            background::Inputs {
                cfg: &cfg,
                opts: &opts,
                started,
                raft: &raft,
                service: &service,
                storage: &storage,
                divergence: &divergence,
                admission: &admission,
                catch_up: &catch_up,
                peer_tls: security.peer_tls(),
            },
        );
        background::join(
            &cfg,
            member,
            &admission,
            &raft,
            (grpc_addr, raft_addr),
            &mut tasks,
        )
        .await?;
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
            budget,
            port_stats,
            admission,
            raft_server,
            tasks,
            raft_closer,
            public_closers,
        })
    }

    /// Waits until this node sees a leader, or the timeout passes.
    /// Waits until this node knows a leader and holds the cluster's id (a
    /// new cluster's first leader names it in its first entries).
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64, BoxError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let m = self
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "a leader")
            .await?;
        while self.service.cluster_id().is_none() {
            if tokio::time::Instant::now() >= deadline {
                return Err("the cluster was not named in time".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(m.current_leader.unwrap_or(0))
    }

    /// Stops the servers and Raft. Everything acknowledged is already durable.
    pub async fn shutdown(self) {
        let Node {
            raft,
            service,
            raft_server,
            tasks,
            raft_closer,
            public_closers,
            ..
        } = self;
        let db = Arc::downgrade(service.db());
        // Pinned states (verification) hold the database on threads of
        // their own: release them.
        if let Some(d) = service.divergence() {
            d.pins().close();
        }
        drop(service);
        tasks.stop();
        raft_server.abort();
        let _ = raft_server.await;
        // The public servers finish in-flight requests, within a grace
        // period. The Raft port's connections stay open meanwhile: after a
        // handover, a write still waiting here learns its commit from the new
        // leader's appends.
        tasks.join(SHUTDOWN_GRACE).await;
        // Past the grace period, what clients still hold open is closed, and
        // so are peers' streams (appends, a snapshot transfer), which would
        // keep their connections, and the database, until the peer hung up.
        for c in public_closers.iter().chain([&raft_closer]) {
            c.close();
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
    /// Serves until `signal`, then stops gracefully; or until the Raft core
    /// stops on its own (a storage error: a failed fsync of the log, a
    /// write RocksDB refuses), then stops at once and says why: a member
    /// that cannot trust its disk must not go on serving from memory.
    /// Restarted, it recovers from what its disk holds, as after a crash.
    pub async fn run_until(self, signal: impl Future<Output = ()>) -> Result<(), String> {
        let stopped = self.raft_stopped();
        tokio::select! {
            _ = signal => {
                self.stop_gracefully().await;
                Ok(())
            }
            why = stopped => {
                tracing::error!(%why, "the Raft core stopped: exiting");
                self.shutdown().await;
                Err(format!(
                    "the Raft core stopped ({why}): exiting rather than serving from a disk it \
                     cannot trust; started again, it recovers from what the disk holds"
                ))
            }
            why = crate::fault::wait() => {
                self.shutdown().await;
                Err(format!(
                    "the store cannot be trusted ({why}): rebuild this member from a peer \
                     (docs/operations.md, \"A member's store is corrupt\")"
                ))
            }
        }
    }

    /// Resolves when the Raft core stops by itself, with why.
    fn raft_stopped(&self) -> impl Future<Output = String> + use<> {
        use openraft::async_runtime::WatchReceiver;
        let mut m = self.raft.metrics();
        async move {
            loop {
                if let Err(e) = &m.borrow_watched().running_state {
                    return e.to_string();
                }
                if m.changed().await.is_err() {
                    return "the Raft core ended".to_string();
                }
            }
        }
    }

    /// What SIGTERM does: a leader first hands leadership to the most
    /// caught-up voter (so writes pause for a transfer, not an election),
    /// then the node stops serving, letting in-flight requests finish.
    pub async fn stop_gracefully(self) {
        let started = std::time::Instant::now();
        if let Some(to) = self
            .service
            .step_down(crate::service::HANDOVER_TIMEOUT)
            .await
        {
            tracing::info!(
                to,
                ms = started.elapsed().as_millis() as u64,
                "handed leadership over"
            );
        }
        tracing::info!("shutting down");
        self.shutdown().await;
    }
}

/// How the descriptor limit is split between storage and the ports.
fn descriptor_budget(cfg: &Config) -> Result<crate::descriptors::Budget, BoxError> {
    let (limit, _) = crate::descriptors::nofile_limit()?;
    let budget = crate::descriptors::budget(limit, &cfg.fd_overrides)?;
    tracing::info!(
        open_file_limit = budget.limit,
        db_max_open_files = budget.db_max_open_files,
        max_grpc_connections = budget.grpc_connections,
        max_raft_connections = budget.raft_connections,
        max_http_connections = budget.http_connections,
        idle_timeout_s = cfg.idle_timeout.as_secs(),
        "descriptor budget"
    );
    Ok(budget)
}

/// The request layer of this node, configured.
fn build_service(
    cfg: &Config,
    opts: &NodeOptions,
    raft: &Raft,
    storage: &Storage,
    security: &Security,
    divergence: &Arc<crate::divergence::Divergence>,
) -> OmService {
    let mut service = OmService::new(
        raft.clone(),
        storage.db.clone(),
        cfg.node_id,
        cfg.max_page,
        cfg.request_timeout,
        cfg.list_seek_after,
    )
    .with_min_part_size(cfg.min_part_size)
    .with_lifecycle_day_ms(cfg.lifecycle.day_ms)
    .with_max_response_bytes(cfg.max_response_bytes)
    .with_clock(storage.latest_time.clone(), opts.clock_offset_ms)
    .with_divergence(divergence.clone())
    .with_cluster_id(storage.cluster_id.clone())
    .with_incarnation(storage.incarnation.clone())
    .with_backups(storage.backups.clone())
    .with_peer_tls(security.peer_tls())
    .with_staleness(storage.leader_contact.clone(), cfg.max_staleness_ms)
    .with_leader_window(cfg.election_timeout * 2)
    .with_secrets(security.keyring.clone(), cfg.insecure)
    .with_disk(storage.disk.clone());
    // A forwarded write names its client, which the leader believes only
    // from a member proven by TLS: with authentication on and no TLS a
    // follower does not forward (its clients are sent to the leader).
    if !security.authenticator.required || security.tls.is_some() {
        service = service.with_forwarder(crate::service::Forwarder::start(
            raft.clone(),
            cfg.node_id,
            security.peer_tls(),
            cfg.request_timeout,
        ));
    }
    if security.authenticator.required {
        service = service.with_authorization(crate::service::Policy {
            admins: cfg.admins.clone(),
        });
    }
    if let Some(a) = &security.audit {
        service = service.with_audit(a.clone());
    }
    service
}
