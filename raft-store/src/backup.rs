//! Online backups and the two ways a store starts a new cluster.
//!
//! A backup is a RocksDB checkpoint: a new directory whose SST files are hard
//! links of the live store's (taken after flushing the memtables) and whose
//! MANIFEST names exactly them, so the copy is the store at one instant. The
//! applied state and the tables are written in one batch per entry, so that
//! instant is one applied index: [`describe`] reads it back from the copy,
//! with every table's entry count and digest.
//!
//! A store holds the Raft log and vote of the cluster it was copied from.
//! [`start_new_cluster`] rewrites them so the store starts a cluster of the
//! given members instead: by appending a membership entry in a term no one
//! has used, after the log ([`LogFate::Keep`], a survivor of a lost majority)
//! or after the applied index with the log dropped ([`LogFate::DropToApplied`],
//! a restored backup, where every member writes the same entry).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use openraft::EntryPayload;
use openraft::vote::leader_id_adv::LeaderId;
use prost::Message;
use rocksdb::{DB, Options, WriteBatch, WriteOptions};

use crate::pins::TableSummary;
use crate::{
    Entry, LogId, Membership, NodeId, OmNode, StoredMembership, Vote, codec, io_err, keys,
};
use om_proto::raft as pb;

/// Takes a checkpoint of `db` into `dir`, which must not exist yet (its
/// parent must, on the same file system as the store for hard links).
pub fn checkpoint(db: &DB, dir: &Path) -> std::io::Result<()> {
    let cp = rocksdb::checkpoint::Checkpoint::new(db).map_err(io_err)?;
    cp.create_checkpoint(dir).map_err(io_err)?;
    // A checkpoint's IDENTITY (which `describe` reports) is the store's,
    // where RocksDB leaves it out.
    let identity = dir.join("IDENTITY");
    if !identity.exists() {
        std::fs::copy(db.path().join("IDENTITY"), &identity)?;
    }
    Ok(())
}

/// What a checkpoint (or any closed store directory) holds.
#[derive(Debug, Clone)]
pub struct Description {
    /// The last applied log id; `None` for a store that applied nothing.
    pub applied: Option<LogId>,
    pub membership: StoredMembership,
    /// Every table's entry count and digest, in the order asked for.
    pub tables: Vec<TableSummary>,
    /// The store's files (name, bytes), by name.
    pub files: Vec<(String, u64)>,
    /// RocksDB's identity of the store the checkpoint was taken from: SST
    /// files of one identity and number are the same file forever.
    pub identity: String,
}

/// Opens the store in `dir` read-only and describes it, summarizing
/// `tables`; `pace` is called with the bytes read every few thousand
/// entries (and may sleep to bound the rate).
pub fn describe(dir: &Path, tables: &[String], pace: &dyn Fn(u64)) -> std::io::Result<Description> {
    let names = DB::list_cf(&Options::default(), dir).map_err(io_err)?;
    let db = DB::open_cf_for_read_only(&Options::default(), dir, &names, false).map_err(io_err)?;
    let (applied, membership) = crate::snapshot_store::read_applied(&db, None)?;
    let never = std::sync::atomic::AtomicBool::new(false);
    let tables = crate::pins::summarize(&db, tables, rocksdb::ReadOptions::default, &never, pace)
        .map_err(io_err)?;
    drop(db);
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let meta = e.metadata()?;
        if !meta.is_file() {
            continue;
        }
        let name = e
            .file_name()
            .into_string()
            .map_err(|n| io_err(format!("file name {n:?} is not UTF-8")))?;
        files.push((name, meta.len()));
    }
    files.sort();
    let identity = std::fs::read_to_string(dir.join("IDENTITY"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    Ok(Description {
        applied,
        membership,
        tables,
        files,
        identity,
    })
}

/// Every entry count and digest of `tables` in an open store.
pub fn summarize(db: &DB, tables: &[String]) -> std::io::Result<Vec<TableSummary>> {
    let never = std::sync::atomic::AtomicBool::new(false);
    crate::pins::summarize(db, tables, rocksdb::ReadOptions::default, &never, &|_| {})
        .map_err(io_err)
}

/// What [`start_new_cluster`] does with the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFate {
    /// Keep every entry (committed or not: a survivor's entries may have
    /// been committed by members that are gone); the new membership follows
    /// the last one.
    Keep,
    /// Drop the log; the store's applied state becomes its whole history
    /// (last purged = applied) and the new membership follows it.
    DropToApplied,
}

/// The Raft state [`start_new_cluster`] wrote.
#[derive(Debug, Clone)]
pub struct NewCluster {
    /// The membership entry's log id.
    pub membership_log_id: LogId,
    /// The applied log id the store starts from.
    pub applied: Option<LogId>,
    /// The last log id before the membership entry.
    pub previous_last: Option<LogId>,
}

/// Rewrites the Raft state of a store that is open but not running Raft so
/// that it starts a new cluster whose voters are exactly `members`: appends
/// a membership entry in a term above every term the store has seen (its
/// vote, its log, its applied state), led by the lowest member id, and votes
/// for that leader in that term. Table data and the applied state are not
/// touched. The write is one synced batch.
pub fn start_new_cluster(
    db: &DB,
    members: &BTreeMap<NodeId, OmNode>,
    fate: LogFate,
) -> std::io::Result<NewCluster> {
    let leader = *members
        .keys()
        .next()
        .ok_or_else(|| io_err("a new cluster needs at least one member"))?;
    let meta = cf(db, keys::RAFT_META_CF)?;
    let log = cf(db, keys::LOG_CF)?;
    let get = |key: &[u8]| db.get_pinned_cf(meta, key).map_err(io_err);
    let vote = get(keys::VOTE_KEY)?
        .map(|b| pb::Vote::decode(b.as_ref()).map(|v| codec::vote_from_pb(&v)))
        .transpose()
        .map_err(io_err)?;
    let purged = get(keys::LAST_PURGED_KEY)?
        .map(|b| pb::LogId::decode(b.as_ref()).map(|l| codec::log_id_from_pb(&l)))
        .transpose()
        .map_err(io_err)?;
    let (applied, _) = crate::snapshot_store::read_applied(db, None)?;
    let last_entry = crate::log_store::last_entry_id(db)?;
    let last = last_entry.or(purged);
    let term = [
        vote.map(|v| v.leader_id.term),
        last.map(|l| l.leader_id.term),
        applied.map(|l| l.leader_id.term),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(0)
        + 1;

    let mut b = WriteBatch::default();
    let after = match fate {
        LogFate::Keep => last,
        LogFate::DropToApplied => {
            b.delete_range_cf(log, &keys::log_key(0)[..], &keys::LOG_END[..]);
            match applied {
                Some(a) => {
                    let a_pb = codec::log_id_to_pb(&a).encode_to_vec();
                    b.put_cf(meta, keys::LAST_PURGED_KEY, &a_pb);
                    b.put_cf(meta, keys::COMMITTED_KEY, &a_pb);
                }
                None => {
                    b.delete_cf(meta, keys::LAST_PURGED_KEY);
                    b.delete_cf(meta, keys::COMMITTED_KEY);
                }
            }
            // The published snapshot belongs to the old cluster's history.
            b.delete_cf(meta, keys::PUBLISHED_SNAPSHOT_KEY);
            // A history of its own from here on: archived apart from the
            // one it forks from.
            b.put_cf(
                meta,
                keys::ARCHIVE_LINEAGE_KEY,
                new_lineage(applied).as_bytes(),
            );
            applied
        }
    };
    let index = after.map_or(0, |l| l.index + 1);
    let leader_id = LeaderId {
        term,
        node_id: leader,
    };
    let log_id = LogId::new(leader_id, index);
    let voters: BTreeSet<NodeId> = members.keys().copied().collect();
    let membership = Membership::new(vec![voters], members.clone()).map_err(io_err)?;
    let entry = Entry {
        log_id,
        payload: EntryPayload::Membership(membership),
    };
    b.put_cf(log, keys::log_key(index), codec::encode_entry(&entry));
    let vote = Vote {
        leader_id,
        committed: false,
    };
    b.put_cf(
        meta,
        keys::VOTE_KEY,
        codec::vote_to_pb(&vote).encode_to_vec(),
    );
    let mut wo = WriteOptions::default();
    wo.set_sync(true);
    db.write_opt(b, &wo).map_err(io_err)?;
    db.flush_wal(true).map_err(io_err)?;
    Ok(NewCluster {
        membership_log_id: log_id,
        applied,
        previous_last: after,
    })
}

/// A new archive lineage for a history that forks after `at`: readable
/// (where it forks) and unique (64 random bits).
fn new_lineage(at: Option<LogId>) -> String {
    format!(
        "restored-at-{}-{:016x}",
        at.map_or(0, |a| a.index),
        crate::nonce()
    )
}

/// The index of the last entry the store's log holds or purged, if any.
pub fn last_log_index(db: &DB) -> std::io::Result<Option<u64>> {
    let meta = cf(db, keys::RAFT_META_CF)?;
    let purged = db
        .get_pinned_cf(meta, keys::LAST_PURGED_KEY)
        .map_err(io_err)?
        .map(|b| pb::LogId::decode(b.as_ref()).map(|l| codec::log_id_from_pb(&l)))
        .transpose()
        .map_err(io_err)?;
    Ok(crate::log_store::last_entry_id(db)?
        .or(purged)
        .map(|l| l.index))
}

/// The membership a store last applied, as stored.
pub fn applied_membership(db: &DB) -> std::io::Result<StoredMembership> {
    Ok(crate::snapshot_store::read_applied(db, None)?.1)
}

fn cf<'a>(db: &'a DB, name: &str) -> std::io::Result<&'a rocksdb::ColumnFamily> {
    db.cf_handle(name)
        .ok_or_else(|| io_err(format!("column family {name} missing")))
}
