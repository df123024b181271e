//! Whether this node is ready: how far the leader's log reached when this
//! follower last asked (`CatchUp::track`), and the readiness rule `/readyz`
//! and the gRPC health service both answer.

use std::sync::Arc;

use openraft::async_runtime::WatchReceiver;

use super::rejoin::{Admission, Phase};
use crate::service::OmService;

/// The leader's last log index as a follower last heard it (`track`), so
/// readiness can wait until the follower has applied that far.
#[derive(Clone, Default)]
pub struct CatchUp {
    seen: Arc<std::sync::Mutex<Option<(u64, u64)>>>,
}

impl CatchUp {
    /// The leader's id and last log index, when asked since it led.
    pub fn target(&self) -> Option<(u64, u64)> {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, v: Option<(u64, u64)>) {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = v;
    }

    /// Asks the leader (on its Raft port, as members ask each other) for
    /// its last log index every `every` while this node follows and has not
    /// applied that far, every ten times `every` once it has.
    pub async fn track(
        self,
        svc: Arc<OmService>,
        tls: Option<Arc<om_tls::ClientTls>>,
        every: std::time::Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            let m = svc.raft().metrics().borrow_watched().clone();
            match m.current_leader {
                Some(l) if l != m.id => {
                    let addr = m
                        .membership_config
                        .membership()
                        .get_node(&l)
                        .map(|n| n.raft_addr.clone());
                    if let Some(addr) = addr {
                        match crate::peers::peer_state(&addr, m.id, tls.as_ref()).await {
                            Ok(v) if v.node_id == l => self.set(Some((l, v.last_log_index))),
                            Ok(_) => {}
                            Err(e) => tracing::debug!(error = %e, "asking the leader's progress"),
                        }
                    }
                }
                _ => self.set(None),
            }
            let applied = m.last_applied.as_ref().map_or(0, |l| l.index);
            let caught_up = self.target().is_some_and(|(_, t)| applied >= t);
            let pause = if caught_up { every * 10 } else { every };
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// Ready once Raft runs, a leader is known and this node takes full part in
/// Raft (a member that lost its data says why it does not, see `rejoin`);
/// else why not. `/readyz` and the gRPC health service both answer this.
pub fn readiness(svc: &OmService, admission: &Admission, catch_up: &CatchUp) -> Result<(), String> {
    let m = svc.raft().metrics().borrow_watched().clone();
    let applied = m.last_applied.as_ref().map_or(0, |l| l.index);
    if let Some(why) = svc.incarnation().and_then(|i| i.fenced()) {
        return Err(format!(
            "fenced: {why}. {}",
            crate::incarnation::fence_advice()
        ));
    }
    if admission.phase() != Phase::Open {
        return Err(format!("not admitted: {}", admission.message()));
    }
    if let Some(why) = svc.divergence().and_then(|d| d.diverged()) {
        return Err(format!("replica diverged: {why}"));
    }
    if m.running_state.is_err() {
        return Err("raft stopped".to_string());
    }
    let Some(leader) = svc.heard_leader(&m) else {
        return Err(match m.current_leader {
            Some(l) if l == m.id => format!(
                "no leader: this node leads term {} but no quorum acknowledged it within an \
                 election timeout",
                m.current_term
            ),
            Some(l) => format!(
                "no leader: nothing heard from leader {l} within an election timeout (a \
                 majority of the members may be down)"
            ),
            None => "no leader".to_string(),
        });
    };
    if leader == m.id {
        return Ok(());
    }
    match catch_up.target() {
        Some((l, target)) if l == leader && applied >= target => Ok(()),
        Some((l, target)) if l == leader => Err(format!(
            "catching up: applied {applied} of the leader's {target}"
        )),
        _ => Err("catching up: the leader's progress is not known yet".to_string()),
    }
}
