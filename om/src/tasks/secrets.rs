//! S3 secrets at rest: every node reports how its credentials are stored
//! (`om_s3_secrets{sealing}`), and a leader with a secrets key seals those
//! it finds in plain text (a store from before sealing, or written by a
//! member without a key under `--insecure`).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::service::OmService;

/// How often the credentials are looked over.
pub const INTERVAL: Duration = Duration::from_secs(10);

/// The states `OmService::s3_secret_states` counts, as label values.
const STATES: [&str; 4] = ["plaintext", "current_key", "older_key", "unknown_key"];

pub async fn run(svc: Arc<OmService>, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut wait = Duration::from_secs(1);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        wait = every;
        let Ok(mut n) = svc.s3_secret_states() else {
            continue;
        };
        if n[0] > 0 && svc.seals_secrets() && svc.raft().is_leader() {
            match svc.reseal_s3_secrets(true, true).await {
                Ok(done) => {
                    tracing::info!(sealed = done.resealed, key = %done.key_id, "S3 secrets stored in plain text are sealed now");
                    n = svc.s3_secret_states().unwrap_or(n);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "sealing S3 secrets stored in plain text failed")
                }
            }
        }
        for (state, count) in STATES.iter().zip(n) {
            metrics::gauge!("om_s3_secrets", "sealing" => *state).set(count as f64);
        }
    }
}
