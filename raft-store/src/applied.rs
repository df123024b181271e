//! The applied-state record (`sm_meta`/`applied`): the last applied log id,
//! membership and state digest, written in the batch of every applied entry.

use om_proto::raft as pb;
use prost::Message;
use rocksdb::{DB, ReadOptions};

use crate::{io_err, keys};

/// The stored `AppliedState` record (empty before the first entry), as of
/// `snapshot` when given.
pub(crate) fn read_record(
    db: &DB,
    snapshot: Option<&rocksdb::Snapshot<'_>>,
) -> std::io::Result<pb::AppliedState> {
    let c = db
        .cf_handle(keys::SM_META_CF)
        .ok_or_else(|| io_err(format!("column family {} missing", keys::SM_META_CF)))?;
    let bytes = match snapshot {
        Some(s) => {
            let mut ro = ReadOptions::default();
            ro.set_snapshot(s);
            db.get_pinned_cf_opt(c, keys::APPLIED_KEY, &ro)
                .map_err(io_err)?
        }
        None => db.get_pinned_cf(c, keys::APPLIED_KEY).map_err(io_err)?,
    };
    match bytes {
        Some(b) => pb::AppliedState::decode(b.as_ref()).map_err(io_err),
        None => Ok(pb::AppliedState::default()),
    }
}
