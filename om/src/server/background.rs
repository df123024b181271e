//! The background tasks a node starts (`crate::tasks`), and how a node
//! joins its cluster: rejoining as a member, or initializing a single-node
//! cluster on first start.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use om_raft_store::{OmNode, Raft};

use super::storage::Storage;
use super::{BoxError, NodeOptions};
use crate::config::Config;
use crate::divergence::Divergence;
use crate::service::OmService;
use crate::tasks::Tasks;
use crate::tasks::catch_up::CatchUp;
use crate::tasks::rejoin::{Admission, Member, Phase};

/// What the tasks work on.
pub(super) struct Inputs<'a> {
    pub cfg: &'a Config,
    pub opts: &'a NodeOptions,
    pub started: Instant,
    pub raft: &'a Raft,
    pub service: &'a Arc<OmService>,
    pub storage: &'a Storage,
    pub divergence: &'a Arc<Divergence>,
    pub admission: &'a Admission,
    pub catch_up: &'a CatchUp,
    pub peer_tls: Option<Arc<om_tls::ClientTls>>,
}

/// Starts every background task of a node: per node (replica comparison,
/// catch-up tracking, start-up report, snapshots, Raft gauges, backup
/// sessions) and per leader (expiry, purge, cluster naming, the lifecycle
/// scanner).
pub(super) fn spawn(tasks: &mut Tasks, i: Inputs<'_>) {
    let stop = tasks.stop_signal();
    let svc = i.service;
    tasks.spawn(crate::tasks::divergence::run(
        i.divergence.clone(),
        i.raft.clone(),
        svc.clone(),
        i.cfg.divergence_check_interval,
        stop.clone(),
    ));
    tasks.spawn(i.catch_up.clone().track(
        svc.clone(),
        i.peer_tls,
        Duration::from_millis(500),
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::health::report_startup(
        i.started,
        svc.clone(),
        i.admission.clone(),
        i.catch_up.clone(),
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::snapshot_policy::run(
        i.raft.clone(),
        i.storage.log_store.clone(),
        i.storage.state_machine.clone(),
        i.cfg.snapshot_every,
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::health::publish_raft_metrics(
        svc.clone(),
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::scrub::run(
        i.storage.db.clone(),
        i.cfg.data_dir.clone(),
        i.cfg.scrub_interval,
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::health::publish_disk_space(
        svc.clone(),
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::expiry::expire_retry_cache(
        svc.clone(),
        i.cfg.retry_cache_ttl,
        i.opts
            .retry_expiry_batch
            .unwrap_or(crate::tasks::expiry::RETRY_EXPIRY_BATCH),
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::cluster_name::name_cluster(
        svc.clone(),
        i.storage.cluster_id.clone(),
        stop.clone(),
    ));
    tasks.spawn(i.storage.backups.clone().run(stop.clone()));
    tasks.spawn(crate::tasks::expiry::purge_deleted_dirs(
        svc.clone(),
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::expiry::reclaim_snapshots(
        svc.clone(),
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::expiry::expire_open_keys(
        svc.clone(),
        i.cfg.open_key_ttl,
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::lifecycle::run(
        svc.clone(),
        i.cfg.lifecycle,
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::secrets::run(
        svc.clone(),
        crate::tasks::secrets::INTERVAL,
        stop.clone(),
    ));
    tasks.spawn(crate::tasks::lifecycle::compact_after_passes(
        svc.clone(),
        stop,
    ));
}

/// A member's rejoin runs until it is admitted; a node outside any cluster
/// configuration initializes a single-node cluster on its first start.
pub(super) async fn join(
    cfg: &Config,
    member: Option<Member>,
    admission: &Admission,
    raft: &Raft,
    addrs: (std::net::SocketAddr, std::net::SocketAddr),
    tasks: &mut Tasks,
) -> Result<(), BoxError> {
    let (grpc_addr, raft_addr) = addrs;
    match member {
        Some(m) if admission.phase() != Phase::Open => {
            tasks.spawn(crate::tasks::rejoin::run(
                m,
                admission.clone(),
                tasks.stop_signal(),
            ));
        }
        Some(_) => {}
        None => initialize_single(raft, cfg.node_id, grpc_addr, raft_addr).await?,
    }
    if cfg.join && !cfg.initial_cluster.iter().any(|m| m.id == cfg.node_id) {
        tracing::info!(
            node_id = cfg.node_id,
            "not in --initial-cluster: waiting to be added (omctl cluster add-node)"
        );
    }
    Ok(())
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
