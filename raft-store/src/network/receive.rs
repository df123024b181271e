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
//! The staging file is a guard: it is removed when the transfer ends in any
//! way, including the client going away mid-stream (the handler is dropped).
//! Writes and fsyncs go through tokio's file API (the blocking pool).

use std::sync::atomic::Ordering;

use futures::StreamExt;
use om_proto::raft as pb;
use openraft::Snapshot;
use tokio::io::AsyncWriteExt;
use tonic::{Status, Streaming};

use super::{fatal, invalid};
use crate::snapshot::SnapshotError;
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

pub(super) async fn install_snapshot(
    raft: &Raft,
    inbox: &SnapshotInbox,
    mut input: Streaming<pb::SnapshotChunk>,
) -> Result<pb::SnapshotResponse, Status> {
    let store = inbox.snapshots.clone();
    let Ok(_permit) = store.incoming.clone().try_acquire_owned() else {
        return Err(refused(
            "busy",
            Status::resource_exhausted("another snapshot is being received"),
        ));
    };
    let max = store.max_incoming_bytes.load(Ordering::Relaxed);
    let s = store.clone();
    let (staged, file) = blocking(move || s.create_tmp("incoming"))
        .await
        .map_err(io_refusal)?;
    let mut out = tokio::fs::File::from_std(file);
    let mut crc = crc32fast::Hasher::new();
    let mut expected_offset = 0u64;
    let mut last: Option<pb::SnapshotChunk> = None;
    while let Some(chunk) = input.next().await {
        let chunk = chunk?;
        if chunk.offset != expected_offset {
            return Err(refused("protocol", invalid("snapshot chunk out of order")));
        }
        let end = expected_offset + chunk.data.len() as u64;
        if end > max {
            return Err(refused(
                "too_large",
                Status::resource_exhausted(format!("snapshot exceeds the limit of {max} bytes")),
            ));
        }
        crc.update(&chunk.data);
        out.write_all(&chunk.data).await.map_err(io_status)?;
        expected_offset = end;
        if chunk.done {
            last = Some(chunk);
            break;
        }
    }
    let Some(last) = last else {
        return Err(refused("protocol", invalid("snapshot stream ended early")));
    };
    if crc.finalize() != last.crc32c {
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
