//! Helpers shared by the store's tests: a key-value applier, a store
//! on a temporary directory, and a dump of every column family.

#![allow(dead_code)]

use std::sync::Arc;

use futures::stream;
use om_proto::store::{Command, CommandResult, PutKey, command::Op};
use om_raft_store::{
    Applier, ApplyError, ApplyView, Entry, EntryWrites, LogId, LogStore, Position, StateMachine,
    TypeConfig, open,
};
use openraft::storage::{RaftStateMachine, StorageHelper};
use openraft::type_config::alias::SnapshotOf;
use openraft::vote::leader_id_adv::LeaderId;
use openraft::{EntryPayload, RaftSnapshotBuilder, RaftState};
use rocksdb::{ColumnFamilyDescriptor, DB, IteratorMode, Options};

pub const KV: &str = "kv";
/// Every column family of a test store.
pub const ALL_CFS: [&str; 4] = ["raft_log", "raft_meta", "sm_meta", KV];

/// `PutKey { key, volume }` writes `key -> volume` into `kv`; a key named
/// "fail" is a storage failure.
pub struct KvApplier;

impl Applier for KvApplier {
    fn apply(
        &self,
        view: &ApplyView<'_>,
        batch: &mut EntryWrites<'_>,
        _at: Position,
        cmd: &Command,
    ) -> Result<CommandResult, ApplyError> {
        if let Some(Op::PutKey(p)) = &cmd.op {
            if p.key == "fail" {
                return Err(ApplyError("injected".into()));
            }
            batch.put_cf(
                view.db().cf_handle(KV).unwrap(),
                p.key.as_bytes(),
                p.volume.as_bytes(),
            );
        }
        Ok(CommandResult::default())
    }
}

pub fn open_store(dir: &std::path::Path) -> std::io::Result<(LogStore, StateMachine, Arc<DB>)> {
    let s = open(
        dir,
        vec![ColumnFamilyDescriptor::new(KV, Options::default())],
        Arc::new(KvApplier),
    )?;
    Ok((s.log_store, s.state_machine, s.db))
}

pub fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: 1 }, index)
}

pub fn put(index: u64, key: &str, value: &str) -> Entry {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(
            Command {
                op: Some(Op::PutKey(PutKey {
                    key: key.into(),
                    volume: value.into(),
                    ..Default::default()
                })),
                ..Default::default()
            }
            .into(),
        ),
    }
}

pub async fn apply(sm: &mut StateMachine, entries: Vec<Entry>) -> std::io::Result<()> {
    sm.apply(stream::iter(entries.into_iter().map(|e| Ok((e, None)))))
        .await
}

pub fn kv(db: &DB, k: &str) -> Option<String> {
    db.get_cf(db.cf_handle(KV).unwrap(), k)
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap())
}

/// Builds and publishes a snapshot of `sm`'s state.
pub async fn build(sm: &mut StateMachine) -> SnapshotOf<TypeConfig, std::fs::File> {
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap()
}

/// What openraft runs when node `id` starts, as a node runs it (with
/// `set_starting` around it).
pub async fn start_up(ls: &mut LogStore, sm: &mut StateMachine, id: u64) -> RaftState<TypeConfig> {
    sm.set_starting(true);
    let state = StorageHelper::new(ls, sm)
        .with_id(id)
        .get_initial_state()
        .await
        .unwrap();
    sm.set_starting(false);
    state
}

/// Every entry of every column family, for before/after comparisons (but
/// the record of the published snapshot file).
pub fn dump(db: &DB) -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for name in ALL_CFS {
        let cf = db.cf_handle(name).unwrap();
        for item in db.iterator_cf(cf, IteratorMode::Start) {
            let (k, v) = item.unwrap();
            // Node-local bookkeeping of the snapshot file, not state.
            if &*k == om_raft_store::keys::PUBLISHED_SNAPSHOT_KEY {
                continue;
            }
            out.push((name, k.to_vec(), v.to_vec()));
        }
    }
    out
}

/// The names of the files in `dir`.
pub fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}
