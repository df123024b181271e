//! The periodic replica comparison (`Divergence::check_once`) on every
//! node; a node found diverged is kept out of elections and hands over
//! leadership.

use std::sync::Arc;
use std::time::Duration;

use om_raft_store::Raft;
use tokio::sync::watch;

use crate::divergence::Divergence;
use crate::service::OmService;

/// The periodic check, on every node, until `stop`; also keeps a diverged
/// node out of elections and leadership.
pub async fn run(
    d: Arc<Divergence>,
    raft: Raft,
    svc: Arc<OmService>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        if d.diverged().is_none()
            && let Err(e) = d.check_once(&raft).await
        {
            tracing::warn!(error = %e, "replica digest check failed");
        }
        if d.diverged().is_some() {
            raft.runtime_config().elect(false);
            if svc
                .step_down(crate::service::HANDOVER_TIMEOUT)
                .await
                .is_some()
            {
                tracing::warn!("diverged replica handed leadership over");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
