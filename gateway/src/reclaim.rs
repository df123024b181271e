//! Block reclamation. When a key is overwritten or deleted, an upload
//! aborted or a write session expires, om releases the blocks and lists
//! them (`list_deleted_blocks`); this task deletes each from the block
//! store, then acknowledges the entry (`ack_deleted_blocks`) so om forgets
//! it. An entry is acknowledged only once all its blocks are gone, so a
//! failure here means a retry on the next pass, never a leak. It runs with
//! the gateway's own client (om lets only admins do this), and on one
//! gateway per block store (`--reclaim`).
//!
//! Once an hour it also sweeps what a crashed gateway left in the block
//! store: unfinished writes older than a day.

use std::sync::Arc;
use std::time::{Duration, Instant};

use om_client::OmClient;
use om_client::v1::{AckDeletedBlocksRequest, ListDeletedBlocksRequest};
use tokio::sync::watch;

use crate::blocks::BlockStore;

/// Entries asked of om per page.
const PAGE: u32 = 100;
/// An unfinished write older than this is a crashed upload's.
const UNFINISHED_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// One pass: every entry om lists now. Answers the blocks deleted and the
/// entries acknowledged.
pub async fn pass(
    om: &OmClient,
    store: &Arc<dyn BlockStore>,
) -> Result<(u64, u64), om_client::ClientError> {
    let (mut blocks, mut acked) = (0u64, 0u64);
    let mut after = String::new();
    loop {
        let page = om
            .list_deleted_blocks(ListDeletedBlocksRequest {
                read: None,
                after: after.clone(),
                max_entries: PAGE,
            })
            .await?;
        let mut ids = Vec::new();
        for entry in &page.entries {
            let mut all = true;
            for b in &entry.blocks {
                match store.delete(b.block_id).await {
                    Ok(()) => blocks += 1,
                    Err(e) => {
                        tracing::warn!(error = %e, block = b.block_id, "cannot delete a released block");
                        all = false;
                    }
                }
            }
            if all {
                ids.push(entry.id.clone());
            }
        }
        if !ids.is_empty() {
            let r = om
                .ack_deleted_blocks(AckDeletedBlocksRequest { header: None, ids })
                .await?;
            acked += r.acknowledged;
        }
        if !page.truncated || page.next_after.is_empty() {
            return Ok((blocks, acked));
        }
        after = page.next_after;
    }
}

/// Runs passes every `every` until `stop` turns true.
pub async fn run(
    om: Arc<OmClient>,
    store: Arc<dyn BlockStore>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_sweep: Option<Instant> = None;
    loop {
        match pass(&om, &store).await {
            Ok((0, 0)) => {}
            Ok((blocks, entries)) => {
                metrics::counter!("om_s3_reclaimed_blocks_total").increment(blocks);
                tracing::debug!(blocks, entries, "reclaimed released blocks");
            }
            Err(e) => tracing::warn!(error = %e, "block reclamation pass failed"),
        }
        if last_sweep.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            match store.sweep(UNFINISHED_MAX_AGE).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "swept unfinished writes"),
                Err(e) => tracing::warn!(error = %e, "sweeping unfinished writes failed"),
            }
            last_sweep = Some(Instant::now());
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}
