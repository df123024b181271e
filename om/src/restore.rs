//! The two ways a store starts a new cluster: `om restore` (a member's
//! store from a backup) and `om --force-new-cluster` (a survivor of a lost
//! majority). Both rewrite only the Raft state (`om_raft_store::backup`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use om_backup_format::{self as backup, Manifest};
use om_raft_store::OmNode;
use om_raft_store::backup::LogFate;
use rocksdb::DB;

use crate::config::Config;
use crate::store::keys;

/// Marker of a forced new cluster in the data directory.
pub const FORCED_MARKER: &str = "force-new-cluster.done";
/// Where a restore assembles the store before moving it in.
const STAGING: &str = ".restore-staging";

/// What `restore` wrote.
#[derive(Debug)]
pub struct Restored {
    pub manifest: Manifest,
    pub from: PathBuf,
    /// The last index of the old cluster's history the store holds: the
    /// backup's, or the last replayed from the archive.
    pub applied_index: u64,
    /// Index of the new cluster's membership entry.
    pub membership_index: u64,
}

/// How far past the backup a restore replays the log archive.
#[derive(Debug, Clone)]
pub enum Target {
    /// The backup's own index.
    Backup,
    /// Through this index.
    Index { archive: PathBuf, index: u64 },
    /// Every entry stamped at or before this time (ms since the Unix epoch).
    Time { archive: PathBuf, ms: u64 },
}

/// `--to-time`: RFC 3339 or ms since the Unix epoch.
pub fn parse_time(s: &str) -> Result<u64, String> {
    if let Ok(ms) = s.parse::<u64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis().max(0) as u64)
        .map_err(|e| format!("--to-time {s:?}: neither RFC 3339 nor milliseconds: {e}"))
}

/// The members `--initial-cluster` names.
fn members(cfg: &Config) -> Result<BTreeMap<u64, OmNode>, String> {
    if cfg.initial_cluster.is_empty() {
        return Err(
            "--initial-cluster is required: it names the members of the new cluster, and every \
             member restored from the backup must be given the same list"
                .into(),
        );
    }
    if !cfg.initial_cluster.iter().any(|m| m.id == cfg.node_id) {
        return Err(format!(
            "node {} is not in --initial-cluster: restore only the members it names",
            cfg.node_id
        ));
    }
    Ok(cfg
        .initial_cluster
        .iter()
        .map(|m| {
            (
                m.id,
                OmNode {
                    raft_addr: m.raft_addr.clone(),
                    grpc_addr: m.grpc_addr.clone(),
                },
            )
        })
        .collect())
}

/// Whether `dir` holds a store (or the start of one).
fn holds_store(dir: &Path) -> bool {
    let non_empty = |p: PathBuf| std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_some());
    non_empty(dir.join("db")) || non_empty(dir.join("snapshots"))
}

fn sync_dir(p: &Path) -> std::io::Result<()> {
    std::fs::File::open(p)?.sync_all()
}

/// `om restore`: writes this member's store for a new cluster of
/// `--initial-cluster` from the backup at `from`, into an empty data
/// directory. Checks every byte of the backup first and every table's digest
/// after assembling it; on any error nothing is left in the data directory.
pub fn restore(cfg: &Config, from: &Path, target: &Target) -> Result<Restored, String> {
    let members = members(cfg)?;
    let data = &cfg.data_dir;
    if holds_store(data) {
        return Err(format!(
            "{} already holds a store: restore writes only into an empty data directory \
             (move the old one away first)",
            data.display()
        ));
    }
    let (dest, m) = backup::resolve(from).map_err(|e| e.to_string())?;
    let keys = match &cfg.backup_key_file {
        Some(k) => Some(Arc::new(backup::keys::MacKeys::load(k)?)),
        None => None,
    };
    match &keys {
        Some(k) => {
            let id = backup::authenticate(&dest.join(&m.id), k).map_err(|e| e.to_string())?;
            tracing::info!(backup = %m.id, key = %id, "the backup's manifest matches its tag");
        }
        None => tracing::warn!(
            backup = %m.id,
            "no --backup-key-file: the backup (and any archive replayed) is not authenticated"
        ),
    }
    let checked = backup::verify(&dest, &m).map_err(|e| e.to_string())?;
    tracing::info!(
        backup = %m.id,
        files = checked.files,
        bytes = checked.bytes,
        "every file of the backup read back and matches its digest"
    );
    std::fs::create_dir_all(data).map_err(|e| format!("creating {}: {e}", data.display()))?;
    std::fs::set_permissions(data, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .map_err(|e| format!("{}: {e}", data.display()))?;
    let staging = data.join(STAGING);
    let result = assemble(&staging, &dest, &m, &members, target, keys);
    let (applied_index, index) = match result {
        Ok(i) => i,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    for name in ["db", "snapshots"] {
        let (src, dst) = (staging.join(name), data.join(name));
        if src.exists() {
            if dst.exists() {
                std::fs::remove_dir(&dst).map_err(|e| format!("{}: {e}", dst.display()))?;
            }
            std::fs::rename(&src, &dst).map_err(|e| format!("{}: {e}", dst.display()))?;
        }
    }
    // Which backup this store came from: a member of a running cluster
    // restored by mistake (a replaced disk with `restore_from` still set)
    // learns at start that the others hold another history.
    let marker = data.join(crate::incarnation::RESTORED_FILE);
    std::fs::write(&marker, format!("{}\n", m.id))
        .and_then(|()| std::fs::File::open(&marker)?.sync_all())
        .map_err(|e| format!("{}: {e}", marker.display()))?;
    sync_dir(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(Restored {
        manifest: m,
        from: dest,
        applied_index,
        membership_index: index,
    })
}

/// Copies the backup's files into `staging/db`, opens the store, checks its
/// tables against the manifest and rewrites it for the new cluster.
fn assemble(
    staging: &Path,
    dest: &Path,
    m: &Manifest,
    members: &BTreeMap<u64, OmNode>,
    target: &Target,
    keys: Option<Arc<backup::keys::MacKeys>>,
) -> Result<(u64, u64), String> {
    if staging.exists() {
        std::fs::remove_dir_all(staging).map_err(|e| format!("{}: {e}", staging.display()))?;
    }
    let db_dir = staging.join("db");
    std::fs::create_dir_all(&db_dir).map_err(|e| format!("{}: {e}", db_dir.display()))?;
    for f in &m.files {
        // A new identity: the restored store is not the one backed up.
        if f.name == "IDENTITY" {
            continue;
        }
        let src = dest.join(backup::OBJECTS).join(&f.sha256);
        let dst = db_dir.join(&f.name);
        std::fs::copy(&src, &dst)
            .and_then(|_| std::fs::File::open(&dst)?.sync_all())
            .map_err(|e| format!("copying {} to {}: {e}", src.display(), dst.display()))?;
    }
    sync_dir(&db_dir).map_err(|e| format!("{}: {e}", db_dir.display()))?;
    let opts = om_raft_store::StoreOptions {
        max_open_files: Some(256),
        memory: Some(om_raft_store::memory::MemoryBudget::new(
            crate::memory::MIN_BUDGET,
        )),
        ..Default::default()
    };
    let store = om_raft_store::open_with(
        staging,
        crate::store::table_descriptors_with(opts.memory.as_ref()),
        Arc::new(crate::apply::OmApplier::default()),
        &opts,
    )
    .map_err(|e| format!("opening the restored store: {e}"))?;
    let db = store.db.clone();
    let (applied, _) = store
        .state_machine
        .read_applied()
        .map_err(|e| format!("reading the restored store: {e}"))?;
    let applied_index = applied.map_or(0, |a| a.index);
    if applied_index != m.applied_index {
        return Err(format!(
            "the restored store applied index {applied_index}, the manifest says {}",
            m.applied_index
        ));
    }
    check_tables(&db, m)?;
    let mut sm = store.state_machine.clone();
    let history = om_raft_store::archive::History {
        after: applied,
        cluster_id: m.cluster_id.clone(),
        lineage: om_raft_store::archive_lineage(&db)
            .map_err(|e| format!("reading the archive lineage: {e}"))?,
        keys,
    };
    let applied_index = replay(&mut sm, &history, m.applied_index, target)?;
    forget_cluster_id(&db)?;
    let new = om_raft_store::backup::start_new_cluster(&db, members, LogFate::DropToApplied)
        .map_err(|e| format!("writing the new cluster's Raft state: {e}"))?;
    drop(sm);
    drop(store);
    drop(db);
    Ok((applied_index, new.membership_log_id.index))
}

/// Replays the archive past the backup's index `from` as `target` asks;
/// returns the last index applied. Refuses an archive that does not reach
/// the target.
fn replay(
    sm: &mut om_raft_store::StateMachine,
    history: &om_raft_store::archive::History,
    backup_index: u64,
    target: &Target,
) -> Result<u64, String> {
    use om_raft_store::archive::{Replayed, replay};
    let (archive, to, until_ms) = match target {
        Target::Backup => return Ok(backup_index),
        Target::Index { archive, index } => {
            if *index < backup_index {
                return Err(format!(
                    "--to-index {index} is before the backup's index {backup_index}: restore an \
                     older backup"
                ));
            }
            (archive, Some(*index), None)
        }
        Target::Time { archive, ms } => (archive, None, Some(*ms)),
    };
    let mut replayed = 0u64;
    let r = replay(archive, backup_index + 1, to, history, |e| {
        if let (Some(until), openraft::EntryPayload::Normal(cmd)) = (until_ms, &e.payload)
            && cmd.command().now_ms > until
        {
            return Ok(false);
        }
        sm.replay_one(e)?;
        replayed += 1;
        Ok(true)
    })
    .map_err(|e| format!("replaying {}: {e}", archive.display()))?;
    let last = match (r, until_ms) {
        (Replayed::Complete { last }, None) | (Replayed::Stopped { last, .. }, Some(_)) => last,
        (Replayed::Gap { last, missing }, _) => {
            return Err(format!(
                "the archive {} holds no entry {missing}: it can restore this backup to index \
                 {last} at most",
                archive.display()
            ));
        }
        (Replayed::Complete { last }, Some(ms)) => {
            return Err(format!(
                "the archive {} ends at index {last} without an entry stamped after {ms} ms: \
                 later entries may be missing; restore with --to-index {last} to replay all \
                 it holds",
                archive.display()
            ));
        }
        (Replayed::Stopped { at, .. }, None) => {
            return Err(format!("the replay stopped at index {at}"));
        }
    };
    tracing::info!(
        from = backup_index + 1,
        last,
        replayed,
        "replayed the log archive"
    );
    Ok(last)
}

/// Every table's entries and digest equal the manifest's.
fn check_tables(db: &DB, m: &Manifest) -> Result<(), String> {
    let names: Vec<String> = m.tables.iter().map(|t| t.name.clone()).collect();
    let got = om_raft_store::backup::summarize(db, &names)
        .map_err(|e| format!("reading the restored tables: {e}"))?;
    for (t, g) in m.tables.iter().zip(&got) {
        let digest = hex::encode(g.digest);
        if g.entries != t.entries || digest != t.sha256 {
            return Err(format!(
                "table {} restored as {} entries with digest {digest}; the backup recorded {} \
                 entries with digest {}",
                t.name, g.entries, t.entries, t.sha256
            ));
        }
    }
    Ok(())
}

/// Drops the old cluster's id: the new cluster's first leader picks a new
/// one, so no restored member is ever taken for the old cluster's.
fn forget_cluster_id(db: &DB) -> Result<(), String> {
    let cf = db
        .cf_handle(keys::SETTINGS_CF)
        .ok_or_else(|| format!("column family {} missing", keys::SETTINGS_CF))?;
    let mut wo = rocksdb::WriteOptions::default();
    wo.set_sync(true);
    db.delete_cf_opt(cf, keys::CLUSTER_ID_KEY, &wo)
        .map_err(|e| format!("clearing the cluster id: {e}"))
}

/// `--force-new-cluster`: makes this node the only voter of its cluster,
/// keeping its log and state, once per data directory. Returns the new
/// membership entry's index, or `None` when the marker says it was done.
pub fn force_new_cluster(
    db: &DB,
    incarnation: &crate::incarnation::Incarnation,
    cfg: &Config,
    raft_addr: &str,
    grpc_addr: &str,
) -> Result<Option<u64>, String> {
    let marker = cfg.data_dir.join(FORCED_MARKER);
    if let Ok(done) = std::fs::read_to_string(&marker) {
        tracing::warn!(
            marker = %marker.display(),
            done = done.trim(),
            "--force-new-cluster is still set but was already done on this data directory: \
             ignored. Remove the flag; delete the marker only to force again"
        );
        return Ok(None);
    }
    let applied = om_raft_store::backup::applied_membership(db)
        .map_err(|e| format!("reading the membership: {e}"))?;
    // This node as the cluster knew it, else as configured.
    let me = applied
        .membership()
        .get_node(&cfg.node_id)
        .cloned()
        .or_else(|| {
            cfg.initial_cluster
                .iter()
                .find(|m| m.id == cfg.node_id)
                .map(|m| OmNode {
                    raft_addr: m.raft_addr.clone(),
                    grpc_addr: m.grpc_addr.clone(),
                })
        })
        .unwrap_or_else(|| OmNode {
            raft_addr: raft_addr.to_string(),
            grpc_addr: grpc_addr.to_string(),
        });
    let members = BTreeMap::from([(cfg.node_id, me)]);
    // The new incarnation first: a crash before the membership is rewritten
    // leaves a member whose old peers are refused (they fence themselves),
    // and the next start forces again.
    let began = om_raft_store::backup::last_log_index(db)
        .map_err(|e| format!("reading the log: {e}"))?
        .map_or(0, |i| i + 1);
    let id = incarnation
        .start_new(began)
        .map_err(|e| format!("recording the new incarnation: {e}"))?;
    let new = om_raft_store::backup::start_new_cluster(db, &members, LogFate::Keep)
        .map_err(|e| format!("rewriting the membership: {e}"))?;
    let line = format!(
        "node {} forced a new cluster at log id {} (previous last {:?}, applied {:?}), \
         incarnation {id} replacing {:?}\n",
        cfg.node_id,
        new.membership_log_id,
        new.previous_last,
        new.applied,
        incarnation.superseded()
    );
    std::fs::write(&marker, &line)
        .and_then(|()| std::fs::File::open(&marker)?.sync_all())
        .and_then(|()| sync_dir(&cfg.data_dir))
        .map_err(|e| format!("writing {}: {e}", marker.display()))?;
    tracing::error!(
        node_id = cfg.node_id,
        membership_log_id = %new.membership_log_id,
        previous_last = ?new.previous_last,
        applied = ?new.applied,
        incarnation = id,
        "FORCED A NEW CLUSTER: this node is now the only voter, with every entry its log held, \
         in a new incarnation of the cluster: the lost members refuse to serve if they come back \
         with their data. Wipe them, add them back with `omctl cluster add-node`, and remove \
         --force-new-cluster"
    );
    Ok(Some(new.membership_log_id.index))
}
