//! Background work of a node, one layer above `service`: every task that
//! runs on its own schedule, on the leader (expiry, purge, the lifecycle
//! scanner, naming the cluster) or on every node (readiness and health,
//! replica comparison, snapshots, rejoining). A task owns its schedule and
//! its metrics and ends when the node's stop signal is raised; `server`
//! only starts them (`Tasks::spawn`) and stops them (`Tasks::join`).

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub mod catch_up;
pub mod cluster_name;
pub mod divergence;
pub mod expiry;
pub mod health;
pub mod lifecycle;
pub mod rejoin;
pub mod scrub;
pub mod secrets;
pub mod snapshot_policy;

/// The running tasks of a node and the stop signal they watch.
pub struct Tasks {
    stop: watch::Sender<bool>,
    running: Vec<JoinHandle<()>>,
}

impl Default for Tasks {
    fn default() -> Self {
        Tasks {
            stop: watch::channel(false).0,
            running: Vec::new(),
        }
    }
}

impl Tasks {
    /// The signal a task watches: true once the node stops.
    pub fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Completes once the node stops (for servers' graceful shutdown).
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.stop_signal();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    }

    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.running.push(tokio::spawn(task));
    }

    /// Raises the stop signal.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Waits for every task to end, all within one `grace` period (waiting
    /// one after another would add a period per task that does not stop);
    /// what is still running then is cancelled.
    pub async fn join(self, grace: Duration) {
        self.stop();
        let grace = tokio::time::Instant::now() + grace;
        futures::future::join_all(self.running.into_iter().map(|mut t| async move {
            if tokio::time::timeout_at(grace, &mut t).await.is_err() {
                t.abort();
                let _ = t.await;
            }
        }))
        .await;
    }
}
