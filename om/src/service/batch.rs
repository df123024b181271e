//! The leader's proposals: several writes per Raft entry.
//!
//! A write proposed while fewer than `MAX_IN_FLIGHT` entries of writes are
//! on their way through Raft is proposed at once, alone, as before batches
//! existed: a lone client waits for nothing. Writes that arrive while that
//! many are in flight wait, and the next entry takes every write waiting (at
//! most `MAX_BATCH_WRITES` writes or `MAX_BATCH_BYTES`; one larger write goes
//! alone) as one batch entry (`Command.batch`). Under load a batch holds
//! what arrived during one commit, so openraft's work per entry, the log's
//! record, the replication message and the state digest step are paid once
//! per batch instead of once per write.
//!
//! Apply gives each write of a batch its own result, retry-cache record and
//! refusal, and its own ids (ARCHITECTURE.md, "Several writes per entry"),
//! so what a write returns does not depend on the batch it went in. Only
//! `apply::ops::batchable` operations are batched; the rest are proposed
//! alone, outside the count.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use om_proto::store::{Command, CommandResult};
use om_raft_store::Raft;
use openraft::errors::{ClientWriteError, RaftError};
use prost::Message;
use tokio::sync::oneshot;

use crate::apply::MAX_BATCH_WRITES;
use crate::error::OmError;

/// Entries of writes on their way through Raft at once before writes wait
/// to go together in the next batch. `OM_BATCH_IN_FLIGHT` replaces it, for
/// side-by-side measurements only (`0`: no batches, every write alone).
pub const MAX_IN_FLIGHT: usize = 2;

/// Most encoded bytes of the writes of one batch entry.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

type Outcome = Result<CommandResult, OmError>;

/// Proposes the leader's writes, batching those that wait.
pub(crate) struct Proposer {
    raft: Raft,
    state: Mutex<State>,
    /// `MAX_IN_FLIGHT`, or `None`: no batches.
    in_flight: Option<usize>,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Waiting>,
    /// Entries of batchable writes proposed and not yet answered.
    in_flight: usize,
}

struct Waiting {
    cmd: Command,
    bytes: usize,
    done: oneshot::Sender<Outcome>,
}

/// A slot of `in_flight` held by one proposal; freeing it (also when the
/// proposal's future is dropped) starts the next batch if writes wait.
struct Slot(Arc<Proposer>);

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = self.0.lock();
        s.in_flight -= 1;
        self.0.start_next(&mut s);
    }
}

impl Proposer {
    pub(crate) fn new(raft: Raft) -> Arc<Proposer> {
        let in_flight = match std::env::var("OM_BATCH_IN_FLIGHT") {
            Ok(v) => match v.parse::<usize>() {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(_) => Some(MAX_IN_FLIGHT),
            },
            Err(_) => Some(MAX_IN_FLIGHT),
        };
        Arc::new(Proposer {
            raft,
            state: Mutex::default(),
            in_flight,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves the queue consistent (every
        // change is one push or one drain).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Proposes `cmd` and waits until it is applied: its result, or why
    /// its outcome is not known.
    pub(crate) async fn write(self: &Arc<Self>, cmd: Command) -> Outcome {
        let Some(max) = self.in_flight.filter(|_| is_batchable(&cmd)) else {
            return self.propose(cmd).await;
        };
        let alone = {
            let mut s = self.lock();
            if s.waiting.is_empty() && s.in_flight < max {
                s.in_flight += 1;
                Ok((Slot(self.clone()), cmd))
            } else {
                let rx = enqueue(&mut s, cmd);
                self.start_next(&mut s);
                Err(rx)
            }
        };
        match alone {
            Ok((_slot, cmd)) => self.propose(cmd).await,
            Err(rx) => answer(rx).await,
        }
    }

    /// Proposes `cmds` (a forwarded batch): every batchable one waits for
    /// the next batch entry, the others are proposed alone. The outcome of
    /// each, in order.
    pub(crate) async fn write_many(self: &Arc<Self>, cmds: Vec<Command>) -> Vec<Outcome> {
        let mut pending = Vec::with_capacity(cmds.len());
        {
            let mut s = self.lock();
            for cmd in cmds {
                pending.push(if self.in_flight.is_some() && is_batchable(&cmd) {
                    Ok(enqueue(&mut s, cmd))
                } else {
                    Err(cmd)
                });
            }
            self.start_next(&mut s);
        }
        let waits = pending.into_iter().map(|p| async move {
            match p {
                Ok(rx) => answer(rx).await,
                Err(cmd) => self.propose(cmd).await,
            }
        });
        futures::future::join_all(waits).await
    }

    /// Sends the writes waiting as the next entry, if a slot is free.
    fn start_next(self: &Arc<Self>, s: &mut State) {
        if s.waiting.is_empty() || s.in_flight >= self.in_flight.unwrap_or(0) {
            return;
        }
        let mut bytes = 0;
        let mut batch = Vec::new();
        while let Some(w) = s.waiting.front() {
            if !batch.is_empty()
                && (batch.len() >= MAX_BATCH_WRITES || bytes + w.bytes > MAX_BATCH_BYTES)
            {
                break;
            }
            bytes += w.bytes;
            batch.extend(s.waiting.pop_front());
        }
        // Without a runtime (shutting down) the writes are dropped, and
        // their clients told the outcome is unknown.
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        s.in_flight += 1;
        let slot = Slot(self.clone());
        rt.spawn(async move {
            slot.0.send(batch).await;
            drop(slot);
        });
    }

    /// Proposes `batch` as one entry (a lone write as a plain entry) and
    /// answers each of its writes.
    async fn send(&self, mut batch: Vec<Waiting>) {
        if batch.len() == 1 {
            let w = batch.pop().expect("one write");
            let _ = w.done.send(self.propose(w.cmd).await);
            return;
        }
        crate::metrics::proposed_batch(batch.len());
        let (cmds, done): (Vec<Command>, Vec<_>) =
            batch.into_iter().map(|w| (w.cmd, w.done)).unzip();
        let entry = Command {
            rules: crate::apply::RULES,
            batch: cmds,
            ..Command::default()
        };
        let n = done.len();
        let results = self.propose(entry).await.and_then(|r| {
            if r.batch.len() == n {
                Ok(r.batch)
            } else {
                Err(OmError::Internal(format!(
                    "a batch of {n} writes applied with {} results",
                    r.batch.len()
                )))
            }
        });
        match results {
            Ok(results) => {
                for (result, tx) in results.into_iter().zip(done) {
                    let _ = tx.send(Ok(result));
                }
            }
            Err(e) => {
                for tx in done {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }

    /// Proposes one entry and waits for its result.
    async fn propose(&self, cmd: Command) -> Outcome {
        // Boxed: openraft's write future is large, and every future that
        // awaits it would otherwise hold it inline and be copied whole each
        // time it is moved (memcpy was ~20 % of the leader's instructions
        // per PutKey).
        let write = Box::pin(self.raft.client_write(cmd.into()));
        match write.await {
            Ok(resp) => Ok(resp.data),
            Err(e) => {
                crate::metrics::proposal_failed(match &e {
                    RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => "not_leader",
                    RaftError::Fatal(_) => "shutdown",
                    _ => "other",
                });
                Err(super::write_err(e))
            }
        }
    }
}

fn is_batchable(cmd: &Command) -> bool {
    cmd.batch.is_empty() && cmd.op.as_ref().is_some_and(crate::apply::ops::batchable)
}

fn enqueue(s: &mut State, cmd: Command) -> oneshot::Receiver<Outcome> {
    let (done, rx) = oneshot::channel();
    s.waiting.push_back(Waiting {
        bytes: cmd.encoded_len(),
        cmd,
        done,
    });
    rx
}

async fn answer(rx: oneshot::Receiver<Outcome>) -> Outcome {
    rx.await.unwrap_or_else(|_| {
        Err(OmError::Unavailable(
            "the write's batch was dropped before it was answered; its outcome is unknown, retry with the same client id and seq"
                .to_string(),
        ))
    })
}
