//! Receiving a snapshot: stage the chunks, verify the whole file, and only
//! then hand it to openraft.
//!
//! openraft treats an error from the state machine's `install_snapshot` as
//! fatal, so nothing that can be wrong with a transfer may surface there. A
//! transfer is refused here, with a status the sender sees as a network error
//! (openraft sends the snapshot again), when:
//!
//! - another snapshot is being staged (one at a time: `RESOURCE_EXHAUSTED`);
//! - its chunks are out of order, or the stream ends early (`INVALID_ARGUMENT`);
//! - it grows past the limit (`MAX_SNAPSHOT_BYTES`: `RESOURCE_EXHAUSTED`);
//! - the stream CRC, or the file's own format, lengths, CRC, record count,
//!   column families (all known to this node) or meta (equal to the meta sent
//!   with the stream) are wrong (`DATA_LOSS`);
//! - staging hits a transient shortage (descriptors, space): that transfer
//!   fails (`RESOURCE_EXHAUSTED`), the node goes on.
//!
//! A transfer cut short by the transport (the stream fails or ends without
//! its last chunk, or the handler is dropped) keeps its staging file: the
//! store holds one such partial file, named by the snapshot's meta and size,
//! and answers `SnapshotOffset` with its length, so the sender's next attempt
//! streams only the rest (each chunk with its own CRC, the whole file's CRC
//! carried on from the staged bytes). A refused transfer, or a new one from
//! offset 0, removes it. Writes and fsyncs go through tokio's file API (the
//! blocking pool).

use std::io::{Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use om_proto::raft as pb;
use openraft::Snapshot;
use tokio::io::AsyncWriteExt;
use tonic::Status;

use super::{fatal, invalid};
use crate::snapshot::SnapshotError;
use crate::snapshot_store::{Partial, SnapshotStore, TransferId};
use crate::{Raft, SnapshotInbox, codec};

fn refused(reason: &'static str, status: Status) -> Status {
    crate::metrics::snapshot_refused(reason);
    tracing::warn!(reason, error = %status.message(), "incoming snapshot refused");
    status
}

fn io_refusal(e: SnapshotError) -> Status {
    if e.is_transient() {
        refused(
            "transient",
            Status::resource_exhausted(format!("cannot stage the snapshot: {e}")),
        )
    } else {
        refused(
            "io",
            Status::internal(format!("cannot stage the snapshot: {e}")),
        )
    }
}

fn io_status(e: std::io::Error) -> Status {
    io_refusal(SnapshotError::Io(e))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SnapshotError> + Send + 'static,
) -> Result<T, SnapshotError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SnapshotError::Io(crate::io_err(e)))?
}

/// The transfer a chunk names, if its sender can resume (sets the meta and
/// the size).
fn transfer_id(chunk: &pb::SnapshotChunk) -> Option<TransferId> {
    use prost::Message;
    let meta = chunk.meta.as_ref()?;
    (chunk.total_bytes > 0).then(|| TransferId {
        meta: meta.encode_to_vec(),
        total: chunk.total_bytes,
    })
}

/// `SnapshotOffset`: where the sender of `id` continues.
pub(super) fn offset(inbox: &SnapshotInbox, req: &pb::SnapshotOffsetRequest) -> u64 {
    use prost::Message;
    let Some(meta) = &req.meta else { return 0 };
    inbox.snapshots.staged_offset(&TransferId {
        meta: meta.encode_to_vec(),
        total: req.total_bytes,
    })
}

/// The transfer being staged. Dropped while `keep` (the transport failed, or
/// the handler itself was dropped), a resumable partial file goes back to the
/// store for the sender's next attempt; otherwise its file is removed.
struct Staging {
    store: Arc<SnapshotStore>,
    part: Option<Partial>,
    keep: bool,
}

impl Staging {
    /// Refuses the transfer: its file is removed, not kept for resuming.
    fn refuse(&mut self, reason: &'static str, status: Status) -> Status {
        self.keep = false;
        refused(reason, status)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(p) = self.part.take()
            && self.keep
            && p.id.is_some()
            && p.len > 0
        {
            *self.store.partial.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
        }
    }
}

pub(super) async fn install_snapshot(
    raft: &Raft,
    inbox: &SnapshotInbox,
    mut input: impl futures::Stream<Item = Result<pb::SnapshotChunk, Status>> + Unpin,
) -> Result<pb::SnapshotResponse, Status> {
    let store = inbox.snapshots.clone();
    let Ok(_permit) = store.incoming.clone().try_acquire_owned() else {
        return Err(refused(
            "busy",
            Status::resource_exhausted("another snapshot is being received"),
        ));
    };
    let max = store.max_incoming_bytes.load(Ordering::Relaxed);
    let first = match input.next().await {
        Some(c) => c?,
        None => return Err(refused("protocol", invalid("snapshot stream ended early"))),
    };
    let id = transfer_id(&first);
    let previous = store
        .partial
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let (part, file) = if first.offset == 0 {
        drop(previous);
        let s = store.clone();
        let (tmp, file) = blocking(move || s.create_tmp("incoming"))
            .await
            .map_err(io_refusal)?;
        let part = Partial {
            id,
            tmp,
            len: 0,
            crc: crc32fast::Hasher::new(),
        };
        (part, file)
    } else {
        let Some(p) = previous.filter(|p| id.is_some() && p.id == id && p.len == first.offset)
        else {
            return Err(refused(
                "protocol",
                Status::failed_precondition(format!(
                    "no partial snapshot to continue at offset {}",
                    first.offset
                )),
            ));
        };
        let (path, len) = (p.tmp.path().to_path_buf(), p.len);
        let file = blocking(move || {
            let mut f = std::fs::OpenOptions::new().write(true).open(&path)?;
            f.set_len(len)?;
            f.seek(SeekFrom::Start(len))?;
            Ok(f)
        })
        .await
        .map_err(io_refusal)?;
        store.stats.resumed.fetch_add(1, Ordering::Relaxed);
        store.stats.resumed_bytes.fetch_add(len, Ordering::Relaxed);
        tracing::info!(
            offset = len,
            "continuing a snapshot transfer a dropped connection cut short"
        );
        (p, file)
    };
    let mut staging = Staging {
        store: store.clone(),
        part: Some(part),
        keep: true,
    };
    let mut out = tokio::fs::File::from_std(file);
    let mut next = Some(first);
    let last = loop {
        let chunk = match next.take() {
            Some(c) => c,
            None => match input.next().await {
                Some(c) => c?,
                None => {
                    return Err(refused("protocol", invalid("snapshot stream ended early")));
                }
            },
        };
        let Some(part) = staging.part.as_mut() else {
            unreachable!("the staging file is taken only after the loop")
        };
        if chunk.offset != part.len {
            return Err(staging.refuse("protocol", invalid("snapshot chunk out of order")));
        }
        let end = part.len + chunk.data.len() as u64;
        if end > max {
            return Err(staging.refuse(
                "too_large",
                Status::resource_exhausted(format!("snapshot exceeds the limit of {max} bytes")),
            ));
        }
        let past_total = part
            .id
            .as_ref()
            .is_some_and(|id| end > id.total || (chunk.done && end != id.total));
        if past_total {
            return Err(staging.refuse(
                "protocol",
                invalid("snapshot stream does not match the size it announced"),
            ));
        }
        if part.id.is_some() && crc32fast::hash(&chunk.data) != chunk.chunk_crc32c {
            return Err(staging.refuse(
                "corrupt",
                Status::data_loss("snapshot chunk checksum mismatch"),
            ));
        }
        if let Err(e) = out.write_all(&chunk.data).await {
            return Err(staging.refuse("io", io_status(e)));
        }
        part.crc.update(&chunk.data);
        part.len = end;
        if chunk.done {
            break chunk;
        }
        if store.faults.incoming_cut(part.len) {
            let _ = out.flush().await;
            return Err(Status::unavailable(
                "injected fault: the snapshot stream was cut",
            ));
        }
    };
    staging.keep = false;
    let Some(part) = staging.part.take() else {
        unreachable!("the staging file is set before the loop")
    };
    let staged = part.tmp;
    if part.crc.finalize() != last.crc32c {
        return Err(refused(
            "corrupt",
            Status::data_loss("snapshot stream checksum mismatch"),
        ));
    }
    let meta = last
        .meta
        .as_ref()
        .ok_or_else(|| refused("protocol", invalid("snapshot meta missing")))
        .and_then(|m| {
            codec::snapshot_meta_from_pb(m)
                .map_err(|e| refused("protocol", invalid(&format!("snapshot meta: {e}"))))
        })?;
    out.flush().await.map_err(io_status)?;
    out.sync_all().await.map_err(io_status)?;
    drop(out);

    let (s, path, m) = (store.clone(), staged.path().to_path_buf(), meta.clone());
    let file = blocking(move || {
        s.verify(&path, Some(&m))?;
        Ok(std::fs::File::open(&path)?)
    })
    .await
    .map_err(|e| {
        if e.is_transient() {
            io_refusal(e)
        } else {
            refused(
                "corrupt",
                Status::data_loss(format!("snapshot refused: {e}")),
            )
        }
    })?;
    let vote = codec::vote_from_pb(&last.vote.unwrap_or_default());
    let resp = raft
        .install_full_snapshot(
            vote,
            Snapshot {
                meta,
                snapshot: file,
            },
        )
        .await
        .map_err(fatal)?;
    drop(staged);
    Ok(pb::SnapshotResponse {
        vote: Some(codec::vote_to_pb(&resp.vote)),
    })
}
