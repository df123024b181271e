//! Wires a node together: the store, Raft, the gRPC services, HTTP, and the
//! leader-side background tasks. `main` only parses configuration and calls
//! `Node::start`; tests can start nodes in-process the same way.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use om_raft_store::network::{NetworkFactory, RaftGrpcService};
use om_raft_store::{OmNode, Raft};
use tokio::task::JoinHandle;

use crate::apply::OmApplier;
use crate::config::Config;
use crate::grpc::auth::Authenticate;
use crate::grpc::peer::{MemberCheck, MembersOnly, PeerGrpc, RaftGate};
use crate::grpc::{ClusterGrpc, OmGrpc};
use crate::net::{Closer, LimitedListener, PortPolicy, PortStats};
use crate::service::OmService;
use crate::store::keys;
use crate::tasks::Tasks;
use crate::tasks::catch_up::CatchUp;
use crate::tasks::rejoin::{Admission, Member, Phase};

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

/// The TLS configurations of a node, all from `--tls-cert/--tls-key/--tls-ca`.
struct NodeTls {
    /// The public gRPC port: client certificates required when a CA is set.
    grpc: Arc<om_tls::ServerTls>,
    /// The Raft port: mutual TLS, always.
    raft: Arc<om_tls::ServerTls>,
    /// This node as a client of the other members' Raft ports.
    peer: Arc<om_tls::ClientTls>,
}

impl NodeTls {
    fn load(cfg: &Config) -> Result<Option<Self>, BoxError> {
        if cfg.tls.cert.is_none() {
            return Ok(None);
        }
        // With a token file a client may bring a token instead of a certificate.
        let grpc_auth = match (&cfg.tls.ca, &cfg.token_file) {
            (Some(_), None) => om_tls::ClientAuth::Required,
            (Some(_), Some(_)) => om_tls::ClientAuth::Optional,
            (None, _) => om_tls::ClientAuth::None,
        };
        Ok(Some(NodeTls {
            grpc: om_tls::ServerTls::load("grpc", cfg.tls.clone(), grpc_auth)?,
            raft: om_tls::ServerTls::load("raft", cfg.tls.clone(), om_tls::ClientAuth::Required)?,
            peer: om_tls::ClientTls::load("raft-client", cfg.tls.clone())?,
        }))
    }
}

/// A running node.
pub struct Node {
    pub raft: Raft,
    pub service: Arc<OmService>,
    pub grpc_addr: std::net::SocketAddr,
    pub http_addr: std::net::SocketAddr,
    pub raft_addr: std::net::SocketAddr,
    /// How the descriptor limit was split between storage and the ports.
    pub budget: crate::limits::Budget,
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

/// Opens the store, waiting (up to 10 s) for a previous instance in this
/// process to release the directory: the last handle of a stopped node may
/// still be closing RocksDB on a background thread.
async fn open_store(
    dir: &std::path::Path,
    max_open_files: u64,
    memory: om_raft_store::memory::MemoryBudget,
    archive_log: Option<&std::path::Path>,
) -> std::io::Result<om_raft_store::OpenedStore> {
    // The store is the cluster's metadata and ACLs: readable by om's user
    // only, whatever the umask (files inside inherit the protection).
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let opts = om_raft_store::StoreOptions {
        max_open_files: Some(max_open_files),
        // The old install path, kept only to measure the two side by side
        // (BENCHMARKS.md, "Scale"): memory grows with the state.
        batch_snapshot_install: std::env::var("OM_SNAPSHOT_INSTALL").as_deref() == Ok("batch"),
        // Fault injection for the crash tests of real processes
        // (`tests/tests/divergence.rs`): while the named file exists, log
        // appends are held in memory, unflushed and unacknowledged.
        hold_wal_flush_while: std::env::var_os("OM_TEST_HOLD_WAL_FLUSH").map(Into::into),
        memory: Some(memory),
        archive_log: archive_log.map(Into::into),
    };
    loop {
        let tables = crate::store::table_descriptors_with(opts.memory.as_ref());
        match om_raft_store::open_with(dir, tables, Arc::new(OmApplier), &opts) {
            Err(e) if e.to_string().contains("lock") && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r => return r,
        }
    }
}

fn raft_config(cfg: &Config) -> Result<openraft::Config, BoxError> {
    let election = cfg.election_timeout.as_millis() as u64;
    let c = openraft::Config {
        cluster_name: "om".to_string(),
        heartbeat_interval: cfg.heartbeat.as_millis() as u64,
        election_timeout_min: election,
        election_timeout_max: election * 2,
        install_snapshot_timeout: 30_000,
        // Snapshots are triggered by `snapshot_policy`, which also weighs
        // the snapshot's size against the log written since.
        snapshot_policy: openraft::SnapshotPolicy::Never,
        max_in_snapshot_log_to_keep: cfg.snapshot_keep_logs,
        // Purge in steps no larger than the snapshot interval, so a purge
        // follows every snapshot once enough log lies behind it.
        purge_batch_size: cfg.snapshot_every.clamp(1, 256),
        // A node that cannot win an election (just restarted while the leader
        // still backs off reconnecting to it, or cut off) asks first instead
        // of raising its term and deposing a healthy leader.
        enable_pre_vote: Some(true),
        // A restarted node never resumes leading in the term it led before
        // (openraft's default does, at once, from its stored vote). Entries
        // leave a leader before its own WAL fsync covers them, so a leader
        // killed with -9 can come back with a shorter log than a follower
        // holds; leading again in the same term, it would write other
        // entries under log ids that follower already has, and the follower
        // would keep its own (they match by (term, index)): the replicas
        // diverge for good. Demoted, it must win an election in a higher
        // term, whose log ids no node holds yet, and a candidate missing
        // entries that a quorum holds cannot win it.
        enable_leader_restore: Some(false),
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
        let started = std::time::Instant::now();
        let prom = crate::metrics::recorder();
        let (limit, _) = crate::limits::nofile_limit()?;
        let budget = crate::limits::budget(limit, &cfg.fd_overrides)?;
        tracing::info!(
            open_file_limit = budget.limit,
            db_max_open_files = budget.db_max_open_files,
            max_grpc_connections = budget.grpc_connections,
            max_raft_connections = budget.raft_connections,
            max_http_connections = budget.http_connections,
            idle_timeout_s = cfg.idle_timeout.as_secs(),
            "descriptor budget"
        );
        let tls = NodeTls::load(&cfg)?;
        let tokens = match &cfg.token_file {
            Some(p) => Some(crate::grpc::auth::TokenStore::load(p)?),
            None => None,
        };
        let audit = match &cfg.audit_log {
            Some(p) => Some(Arc::new(
                crate::audit::AuditLog::open(
                    p,
                    cfg.audit_log_max_bytes,
                    cfg.audit_log_keep,
                    cfg.node_id,
                )
                .map_err(|e| format!("audit log {}: {e}", p.display()))?,
            )),
            None => None,
        };
        if let Some(t) = &tokens {
            om_tls::spawn_reload(
                t.clone(),
                opts.tls_reload_interval.unwrap_or(om_tls::RELOAD_INTERVAL),
            );
        }
        let authenticator = Arc::new(crate::grpc::auth::Authenticator::new(
            cfg.tls.ca.is_some() || tokens.is_some(),
            tokens,
            audit.clone(),
        ));
        if authenticator.required {
            if cfg.admins.is_empty() {
                tracing::warn!(
                    "authentication is on but --admins is empty: only principals granted ALL \
                     on the cluster can create volumes or change the cluster ACL"
                );
            }
            tracing::info!(admins = ?cfg.admins, "requests are authorized against ACLs");
        } else {
            tracing::warn!(
                "no authentication (no --tls-ca, no --token-file): every caller may do everything"
            );
        }
        match &tls {
            Some(_) => tracing::info!(
                grpc_addr = %cfg.grpc_addr,
                raft_addr = %cfg.raft_addr,
                "TLS on the gRPC and Raft ports; the Raft port takes only members (mutual TLS)"
            ),
            None => tracing::warn!(
                grpc_addr = %cfg.grpc_addr,
                raft_addr = %cfg.raft_addr,
                "plaintext gRPC and Raft ports, without authentication: for development on \
                 loopback, or behind --insecure; see README \"Securing a cluster\""
            ),
        }
        let memory = om_raft_store::memory::MemoryBudget::new(cfg.memory_budget);
        metrics::gauge!("om_db_memory_budget_bytes").set(cfg.memory_budget as f64);
        tracing::info!(
            budget = cfg.memory_budget,
            memtables = cfg.memory_budget / 4,
            memtable_per_table = memory.write_buffer_size(),
            "RocksDB memory budget: one block cache, memtables charged to it"
        );
        let store = open_store(
            &cfg.data_dir,
            budget.db_max_open_files,
            memory,
            cfg.archive_log.as_deref(),
        )
        .await?;
        if let Some(a) = &cfg.archive_log {
            tracing::info!(dir = %a.display(), "archiving every applied entry");
        }
        let db = store.db.clone();
        if cfg.force_new_cluster {
            let forced = crate::restore::force_new_cluster(
                &db,
                &cfg,
                &cfg.raft_addr.to_string(),
                &cfg.grpc_addr.to_string(),
            )?;
            if let (Some(index), Some(a)) = (forced, &audit) {
                a.record(crate::audit::Event {
                    time_ms: crate::service::now_ms(),
                    principal: "operator".into(),
                    via: "none",
                    operation: "ForceNewCluster".into(),
                    resource: "/".into(),
                    result: "OK".into(),
                    detail: format!(
                        "node {} is the only voter from log index {index}",
                        cfg.node_id
                    ),
                    ..Default::default()
                });
            }
        }
        let backups = crate::backup::Backups::open(
            &cfg.data_dir,
            keys::TABLE_CFS.iter().map(|t| t.to_string()).collect(),
            cfg.backup_rate,
        )?;
        let db_options = store.options.clone();
        crate::store::tune_tables(&db)?;
        let empty_store = store.holds_nothing()?;
        let cluster_id = crate::cluster_id::ClusterId::new(db.clone());
        let leader_contact = Arc::new(om_raft_store::network::LeaderContact::default());
        crate::metrics::startup_phase("store_open", started.elapsed());
        let (log_store, state_machine) = (store.log_store.clone(), store.state_machine.clone());
        let divergence = crate::divergence::Divergence::open(
            cfg.node_id,
            &cfg.data_dir,
            state_machine.digests(),
            state_machine.pins(),
            state_machine.apply_faults(),
            tls.as_ref().map(|t| t.peer.clone()),
        )?;
        state_machine.set_starting(true);
        let raft = Raft::new(
            cfg.node_id,
            Arc::new(raft_config(&cfg)?),
            NetworkFactory::new(cfg.node_id, opts.faults.clone())
                .with_tls(tls.as_ref().map(|t| t.peer.clone()))
                .with_cluster_id({
                    let id = cluster_id.clone();
                    Arc::new(move || id.get())
                }),
            store.log_store,
            store.state_machine,
        )
        .await;
        state_machine.set_starting(false);
        let raft = raft?;
        crate::metrics::startup_phase("raft_start", started.elapsed());

        // Bind everything before announcing ourselves, so a port conflict fails fast.
        let grpc_listener = tokio::net::TcpListener::bind(cfg.grpc_addr).await?;
        let raft_listener = tokio::net::TcpListener::bind(cfg.raft_addr).await?;
        let http_listener = tokio::net::TcpListener::bind(cfg.http_addr).await?;
        let grpc_addr = grpc_listener.local_addr()?;
        let raft_addr = raft_listener.local_addr()?;
        let http_addr = http_listener.local_addr()?;
        let policy = |name, max_connections| {
            let mut p = PortPolicy::new(name, max_connections, cfg.idle_timeout);
            if name != "http" {
                p.proof_bytes = crate::net::H2_PREFACE_BYTES;
            }
            if let Some(t) = opts.prove_timeout {
                p.prove_timeout = t;
            }
            p
        };
        let grpc_policy = policy("grpc", budget.grpc_connections);
        let raft_policy = policy("raft", budget.raft_connections);
        let grpc_listener = LimitedListener::new(grpc_listener, grpc_policy);
        let raft_listener = LimitedListener::new(raft_listener, raft_policy);
        let http_listener =
            LimitedListener::new(http_listener, policy("http", budget.http_connections));
        let port_stats = [
            grpc_listener.stats(),
            raft_listener.stats(),
            http_listener.stats(),
        ];
        let raft_closer = raft_listener.closer();
        let public_closers = [grpc_listener.closer(), http_listener.closer()];

        let mut service = OmService::new(
            raft.clone(),
            db,
            cfg.node_id,
            cfg.max_page,
            cfg.request_timeout,
            cfg.list_seek_after,
        )
        .with_min_part_size(cfg.min_part_size)
        .with_lifecycle_day_ms(cfg.lifecycle.day_ms)
        .with_max_response_bytes(cfg.max_response_bytes)
        .with_clock_offset(opts.clock_offset_ms)
        .with_divergence(divergence.clone())
        .with_cluster_id(cluster_id.clone())
        .with_backups(backups.clone())
        .with_peer_tls(tls.as_ref().map(|t| t.peer.clone()))
        .with_staleness(leader_contact.clone(), cfg.max_staleness_ms);
        if authenticator.required {
            service = service.with_authorization(crate::service::Policy {
                admins: cfg.admins.clone(),
            });
        }
        if let Some(a) = &audit {
            service = service.with_audit(a.clone());
        }
        let service = Arc::new(service);
        let mut tasks = Tasks::default();
        let stop_rx = tasks.stop_signal();
        for _ in 0..opts.stubborn_tasks {
            tasks.spawn(std::future::pending::<()>());
        }

        // Decided before the Raft port serves anything: a configured member
        // on an empty data directory must not vote until it knows better.
        // So is a joiner on an empty data directory: it may be a voter that
        // lost its data, and must not vote before it has caught up.
        let member = (cfg.join || !cfg.initial_cluster.is_empty()).then(|| Member {
            raft: raft.clone(),
            node_id: cfg.node_id,
            data_dir: cfg.data_dir.clone(),
            members: cfg.initial_cluster.clone(),
            grpc_addr: grpc_addr.to_string(),
            tls: tls.as_ref().map(|t| t.peer.clone()),
            empty_store,
            join: cfg.join,
        });
        let admission = match &member {
            Some(m) => crate::tasks::rejoin::initial(m).await?,
            None => Admission::open(),
        };

        let members_only = Some(MemberCheck::new(
            raft.clone(),
            cfg.initial_cluster
                .iter()
                .map(|m| (m.id, m.raft_addr.clone()))
                .collect(),
            tls.is_some(),
            cluster_id.clone(),
        ));
        // Under TLS a Raft-port connection whose certificate names no member
        // is closed right after its handshake.
        let raft_proof = match members_only.clone() {
            Some(check) => {
                crate::net::ProveBy::Member(Arc::new(move |info| check.admits_connection(info)))
            }
            None => crate::net::ProveBy::Handshake,
        };
        let raft_svc = MembersOnly::new(
            RaftGate::new(
                RaftGrpcService::new(raft.clone())
                    .with_contact(leader_contact)
                    .into_server(),
                admission.clone(),
                divergence.clone(),
            ),
            members_only.clone(),
        );
        let peer_svc = MembersOnly::new(
            PeerGrpc::server(
                raft.clone(),
                admission.clone(),
                divergence.clone(),
                cluster_id.clone(),
            ),
            members_only,
        );
        let raft_tls = tls.as_ref().map(|t| t.raft.clone());
        // With credentials required, a public connection proves itself by
        // its first authenticated request.
        let grpc_proof = if authenticator.required {
            crate::net::ProveBy::Request
        } else {
            crate::net::ProveBy::Handshake
        };
        let grpc_tls = tls.as_ref().map(|t| t.grpc.clone());
        if let Some(t) = &tls {
            for r in [
                t.grpc.clone() as Arc<dyn om_tls::Reloader>,
                t.raft.clone(),
                t.peer.clone(),
            ] {
                om_tls::spawn_reload(
                    r,
                    opts.tls_reload_interval.unwrap_or(om_tls::RELOAD_INTERVAL),
                );
            }
        }
        let stopped = tasks.stopped();
        let raft_server = tokio::spawn(async move {
            let r = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(raft_policy.keepalive()))
                .http2_keepalive_timeout(Some(raft_policy.keepalive()))
                .add_service(raft_svc)
                .add_service(peer_svc)
                .serve_with_incoming_shutdown(
                    raft_listener.into_incoming(raft_tls, raft_proof),
                    stopped,
                )
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
        // grpc.health.v1 says SERVING exactly when /readyz answers 200;
        // reflection lets grpcurl list and describe the API. Neither needs
        // credentials beyond what the connection's TLS asks.
        tasks.spawn(crate::tasks::divergence::run(
            divergence.clone(),
            raft.clone(),
            service.clone(),
            cfg.divergence_check_interval,
            stop_rx.clone(),
        ));
        let catch_up = CatchUp::default();
        tasks.spawn(catch_up.clone().track(
            service.clone(),
            tls.as_ref().map(|t| t.peer.clone()),
            Duration::from_millis(500),
            stop_rx.clone(),
        ));
        tasks.spawn(crate::tasks::health::report_startup(
            started,
            service.clone(),
            admission.clone(),
            catch_up.clone(),
            stop_rx.clone(),
        ));
        let (health, health_service) = tonic_health::server::health_reporter();
        tasks.spawn(crate::tasks::health::report_health(
            health,
            service.clone(),
            admission.clone(),
            catch_up.clone(),
            stop_rx.clone(),
        ));
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(om_proto::FILE_DESCRIPTOR_SET)
            .build_v1()?;
        let reflection_alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(om_proto::FILE_DESCRIPTOR_SET)
            .build_v1alpha()?;
        let stopped = tasks.stopped();
        tasks.spawn(async move {
            let r = tonic::transport::Server::builder()
                .http2_keepalive_interval(Some(grpc_policy.keepalive()))
                .http2_keepalive_timeout(Some(grpc_policy.keepalive()))
                .add_service(health_service)
                .add_service(reflection)
                .add_service(reflection_alpha)
                .add_service(Authenticate::new(
                    crate::grpc::MalformedAsInvalid(om),
                    authenticator.clone(),
                ))
                .add_service(Authenticate::new(
                    crate::grpc::MalformedAsInvalid(cluster),
                    authenticator,
                ))
                .serve_with_incoming_shutdown(
                    grpc_listener.into_incoming(grpc_tls, grpc_proof),
                    stopped,
                )
                .await;
            if let Err(e) = r {
                tracing::error!(error = %e, "gRPC server failed");
            }
        });

        let app = crate::http::router(
            service.clone(),
            prom,
            admission.clone(),
            catch_up,
            db_options,
        );
        tasks.spawn(crate::http::serve(http_listener, app, tasks.stopped()));

        tasks.spawn(crate::tasks::snapshot_policy::run(
            raft.clone(),
            log_store,
            state_machine,
            cfg.snapshot_every,
            stop_rx.clone(),
        ));
        tasks.spawn(crate::tasks::health::publish_raft_metrics(
            raft.clone(),
            stop_rx.clone(),
        ));
        tasks.spawn(crate::tasks::expiry::expire_retry_cache(
            service.clone(),
            cfg.retry_cache_ttl,
            opts.retry_expiry_batch
                .unwrap_or(crate::tasks::expiry::RETRY_EXPIRY_BATCH),
            stop_rx.clone(),
        ));
        tasks.spawn(crate::tasks::cluster_name::name_cluster(
            service.clone(),
            cluster_id.clone(),
            stop_rx.clone(),
        ));
        tasks.spawn(backups.run(stop_rx.clone()));
        tasks.spawn(crate::tasks::expiry::purge_deleted_dirs(
            service.clone(),
            stop_rx.clone(),
        ));
        tasks.spawn(crate::tasks::expiry::expire_open_keys(
            service.clone(),
            cfg.open_key_ttl,
            stop_rx.clone(),
        ));
        tasks.spawn(crate::tasks::lifecycle::run(
            service.clone(),
            cfg.lifecycle,
            stop_rx.clone(),
        ));
        tasks.spawn(crate::tasks::lifecycle::compact_after_passes(
            service.clone(),
            stop_rx.clone(),
        ));

        match member {
            Some(m) if admission.phase() != Phase::Open => {
                tasks.spawn(crate::tasks::rejoin::run(
                    m,
                    admission.clone(),
                    stop_rx.clone(),
                ));
            }
            Some(_) => {}
            None => initialize_single(&raft, cfg.node_id, grpc_addr, raft_addr).await?,
        }
        if cfg.join && !cfg.initial_cluster.iter().any(|m| m.id == cfg.node_id) {
            tracing::info!(
                node_id = cfg.node_id,
                "not in --initial-cluster: waiting to be added (omctl cluster add-node)"
            );
        }
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
    pub async fn run_until(self, signal: impl Future<Output = ()>) {
        signal.await;
        self.stop_gracefully().await;
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

/// Initializes a single-node cluster (no `--initial-cluster`, no `--join`)
/// on first start.
async fn initialize_single(
    raft: &Raft,
    node_id: u64,
    grpc_addr: std::net::SocketAddr,
    raft_addr: std::net::SocketAddr,
) -> Result<(), BoxError> {
    if raft.is_initialized().await? {
        return Ok(());
    }
    let members = BTreeMap::from([(
        node_id,
        OmNode {
            raft_addr: raft_addr.to_string(),
            grpc_addr: grpc_addr.to_string(),
        },
    )]);
    tracing::info!("initializing a single-node cluster");
    match raft.initialize(members).await {
        Ok(()) => Ok(()),
        Err(openraft::errors::RaftError::APIError(
            openraft::errors::InitializeError::NotAllowed(_),
        )) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
