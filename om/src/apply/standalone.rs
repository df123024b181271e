//! Applying one command outside the state machine, as a run of its own
//! over a plain database: for tests and tools. The only apply source that
//! holds the database itself; it builds the view every read goes through.

use om_proto::store::{Command, CommandResult};
use om_raft_store::{ApplyView, EntryWrites, Overlay, Position, Tables};

use super::apply_command;
use crate::error::OmError;
use crate::store::keys;

/// The tables om's apply writes, in `db`.
pub fn state_tables(db: &rocksdb::DB) -> Result<Tables, OmError> {
    let names: Vec<String> = keys::TABLE_CFS.iter().map(|s| s.to_string()).collect();
    Tables::new(db, &names).map_err(|e| OmError::Internal(e.to_string()))
}

/// Applies `cmd` on `db` as a run of its own, without writing it: the
/// result, and how many writes the entry staged (tests of refusals).
pub fn stage_alone(
    db: &rocksdb::DB,
    log_index: u64,
    cmd: &Command,
) -> Result<(CommandResult, usize), OmError> {
    alone(db, log_index, cmd, false)
}

/// Applies `cmd` on `db` as a run of its own and writes it, as the state
/// machine would (without the applied state): for tests and tools that
/// apply outside Raft. The result, and how many writes the entry staged.
pub fn apply_alone(
    db: &rocksdb::DB,
    log_index: u64,
    cmd: &Command,
) -> Result<(CommandResult, usize), OmError> {
    alone(db, log_index, cmd, true)
}

fn alone(
    db: &rocksdb::DB,
    log_index: u64,
    cmd: &Command,
    write: bool,
) -> Result<(CommandResult, usize), OmError> {
    let tables = state_tables(db)?;
    let mut overlay = Overlay::new(&tables);
    let internal = |e: std::io::Error| OmError::Internal(e.to_string());
    // A batch entry's writes apply one after another, each over the ones
    // before it, as the state machine applies them.
    let writes: Vec<(Position, &Command)> = if cmd.batch.is_empty() {
        vec![(Position::entry(log_index), cmd)]
    } else {
        (0u32..)
            .zip(&cmd.batch)
            .map(|(slot, c)| {
                let at = Position {
                    index: log_index,
                    slot: Some(slot),
                };
                (at, c)
            })
            .collect()
    };
    let mut results = Vec::with_capacity(writes.len());
    let mut n = 0;
    for (at, c) in writes {
        let mut w = EntryWrites::new(&tables);
        results.push(apply_command(
            &ApplyView::new(db, &tables, &overlay),
            &mut w,
            at,
            c,
        )?);
        n += w.len();
        overlay.absorb(w).map_err(internal)?;
    }
    if write {
        let mut batch = rocksdb::WriteBatch::default();
        overlay.drain_into(db, &tables, &mut batch);
        db.write(batch)?;
    }
    let r = if cmd.batch.is_empty() {
        results.pop().unwrap_or_default()
    } else {
        CommandResult {
            batch: results,
            ..Default::default()
        }
    };
    Ok((r, n))
}
