//! Writes served by a follower: forwarded to the leader in batches
//! (`ForwardWrites` on the Raft port), so clients may spread over every
//! member, as etcd's do, and the leader decodes one RPC per batch instead of
//! one per client request.
//!
//! The follower sends only what the client asked (client id, seq, request
//! digest, operation) and who it authenticated. The leader does everything
//! it does for its own clients: it resolves the caller (impersonation
//! included) and checks its rights against its own state, stamps its clock
//! and apply rules, and proposes. Apply checks again, as for every write.
//! The serving follower audits the outcome.
//!
//! Batching: at most `MAX_IN_FLIGHT` batches are on their way at once; writes
//! that arrive meanwhile wait and leave together in the next batch (at most
//! `MAX_FORWARD_WRITES` writes or `MAX_FORWARD_BYTES`). A lone write leaves
//! at once.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::{
    ForwardWritesRequest, ForwardedNotLeader, ForwardedOutcome, ForwardedPrincipal, ForwardedWrite,
    forwarded_outcome,
};
use om_proto::store::{Caller, Command, CommandResult, command::Op};
use om_raft_store::Raft;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::ClientWriteError;
use prost::Message;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tonic::transport::{Channel, Endpoint};

use super::OmService;
use crate::authz::{self, Impersonation, Principal, RequestCtx};
use crate::error::OmError;

/// Most writes in one forwarded batch.
pub const MAX_FORWARD_WRITES: usize = 256;
/// Most encoded bytes of the writes in one forwarded batch (a single larger
/// write still goes, alone).
pub const MAX_FORWARD_BYTES: usize = 4 << 20;
/// Largest `ForwardWrites` request or response either side accepts: a batch
/// at its byte limit plus one command of the largest size, and the results,
/// each bounded like the records they hold.
pub const MAX_FORWARD_MESSAGE: usize = 64 << 20;
/// Batches on their way to the leader at once.
const MAX_IN_FLIGHT: usize = 4;
/// Writes waiting for a batch; a client past it is told to retry.
const QUEUE: usize = 8192;

struct Pending {
    write: ForwardedWrite,
    bytes: usize,
    done: oneshot::Sender<Result<CommandResult, OmError>>,
}

/// A follower's way to the leader for its clients' writes.
pub struct Forwarder {
    queue: mpsc::Sender<Pending>,
    timeout: Duration,
}

/// What the batches share: the way to the current leader.
struct Link {
    raft: Raft,
    node_id: u64,
    tls: Option<Arc<om_tls::ClientTls>>,
    timeout: Duration,
    /// The leader's Raft address and a channel to it.
    leader: Mutex<Option<(String, RaftPeerClient<Channel>)>>,
}

impl Forwarder {
    /// Starts the batching task (it ends when the forwarder is dropped).
    /// `timeout` bounds each batch's round trip, as a request's own write.
    pub fn start(
        raft: Raft,
        node_id: u64,
        tls: Option<Arc<om_tls::ClientTls>>,
        timeout: Duration,
    ) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        let link = Arc::new(Link {
            raft,
            node_id,
            tls,
            timeout,
            leader: Mutex::new(None),
        });
        tokio::spawn(batches(rx, link));
        Forwarder { queue, timeout }
    }

    /// Sends `write` to the leader with the next batch and waits for its
    /// outcome.
    pub async fn forward(&self, write: ForwardedWrite) -> Result<CommandResult, OmError> {
        let (done, outcome) = oneshot::channel();
        let bytes = write.encoded_len();
        self.queue
            .try_send(Pending { write, bytes, done })
            .map_err(|_| {
                OmError::Unavailable(
                    "too many writes waiting to be forwarded to the leader; retry".to_string(),
                )
            })?;
        // The batch's own timeout answers first; this guards the wait itself.
        match tokio::time::timeout(self.timeout + Duration::from_secs(1), outcome).await {
            Ok(Ok(r)) => r,
            _ => Err(OmError::Unavailable(
                "the forwarded write's outcome is unknown; retry with the same client id and seq"
                    .to_string(),
            )),
        }
    }
}

/// Gathers waiting writes into batches and sends each on its own task.
async fn batches(mut rx: mpsc::Receiver<Pending>, link: Arc<Link>) {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut carried: Option<Pending> = None;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < MAX_FORWARD_WRITES {
            match rx.try_recv() {
                Ok(p) if bytes + p.bytes > MAX_FORWARD_BYTES => {
                    carried = Some(p);
                    break;
                }
                Ok(p) => {
                    bytes += p.bytes;
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let link = link.clone();
        tokio::spawn(async move {
            link.send(batch).await;
            drop(slot);
        });
    }
}

impl Link {
    /// The leader this node knows: its id, Raft address and client address.
    fn leader(&self) -> Result<(u64, String, String), OmError> {
        let m = self.raft.metrics().borrow_watched().clone();
        let Some(id) = m.current_leader else {
            return Err(OmError::NotLeader {
                leader_id: None,
                leader_addr: None,
            });
        };
        if id == self.node_id {
            return Err(OmError::Unavailable(
                "this node became the leader while the write waited; retry with the same client id and seq"
                    .to_string(),
            ));
        }
        let node = m.membership_config.membership().get_node(&id).cloned();
        match node {
            Some(n) => Ok((id, n.raft_addr, n.grpc_addr)),
            None => Err(OmError::NotLeader {
                leader_id: Some(id),
                leader_addr: None,
            }),
        }
    }

    fn client(&self, addr: &str) -> Result<RaftPeerClient<Channel>, OmError> {
        let mut cached = self.leader.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((a, c)) = cached.as_ref()
            && a == addr
        {
            return Ok(c.clone());
        }
        let ch = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| OmError::Unavailable(format!("leader address {addr}: {e}")))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .connect_with_connector_lazy(om_tls::Connector::new(self.tls.clone()));
        let c = RaftPeerClient::new(ch)
            .max_encoding_message_size(MAX_FORWARD_MESSAGE)
            .max_decoding_message_size(MAX_FORWARD_MESSAGE);
        *cached = Some((addr.to_string(), c.clone()));
        Ok(c)
    }

    /// Sends one batch and answers each of its writes.
    async fn send(&self, batch: Vec<Pending>) {
        let (writes, waiting): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|p| (p.write, p.done)).unzip();
        let n = writes.len();
        let leader = self
            .leader()
            .and_then(|(id, raft_addr, grpc_addr)| Ok((id, grpc_addr, self.client(&raft_addr)?)));
        let outcomes = match leader {
            Err(e) => vec![Err(e); n],
            Ok((leader, grpc_addr, mut client)) => {
                metrics::counter!("om_forward_batches_total").increment(1);
                metrics::counter!("om_forwarded_writes_total").increment(n as u64);
                let req = ForwardWritesRequest {
                    node_id: self.node_id,
                    writes,
                };
                let unknown = |why: String| {
                    OmError::Unavailable(format!(
                        "forwarding to the leader (node {leader}) failed: {why}; the outcome is unknown, retry with the same client id and seq"
                    ))
                };
                match tokio::time::timeout(self.timeout, client.forward_writes(req)).await {
                    Ok(Ok(r)) => {
                        let outcomes = r.into_inner().outcomes;
                        if outcomes.len() == n {
                            outcomes.into_iter().map(from_wire).collect()
                        } else {
                            let why = format!("{} outcomes for {n} writes", outcomes.len());
                            vec![Err(unknown(why)); n]
                        }
                    }
                    // A leader that predates forwarding took nothing: the
                    // client goes to it (rolling upgrades).
                    Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => {
                        let e = OmError::NotLeader {
                            leader_id: Some(leader),
                            leader_addr: Some(grpc_addr),
                        };
                        vec![Err(e); n]
                    }
                    Ok(Err(s)) => vec![Err(unknown(s.message().to_string())); n],
                    Err(_) => vec![Err(unknown(format!("no answer within {:?}", self.timeout))); n],
                }
            }
        };
        for (done, outcome) in waiting.into_iter().zip(outcomes) {
            // The client may have given up: nobody to answer.
            let _ = done.send(outcome);
        }
    }
}

/// A leader's outcome as the serving follower's.
fn from_wire(o: ForwardedOutcome) -> Result<CommandResult, OmError> {
    match o.outcome {
        Some(forwarded_outcome::Outcome::Result(r)) => Ok(r),
        Some(forwarded_outcome::Outcome::NotLeader(n)) => Err(OmError::NotLeader {
            leader_id: (n.leader_id != 0).then_some(n.leader_id),
            leader_addr: (!n.leader_grpc_addr.is_empty()).then_some(n.leader_grpc_addr),
        }),
        Some(forwarded_outcome::Outcome::Unavailable(m)) => Err(OmError::Unavailable(m)),
        None => Err(OmError::Unavailable(
            "the leader's answer held no outcome; retry with the same client id and seq"
                .to_string(),
        )),
    }
}

fn outcome(o: forwarded_outcome::Outcome) -> ForwardedOutcome {
    ForwardedOutcome { outcome: Some(o) }
}

/// A write refused by the leader's checks, as the result apply would give.
fn refused(e: OmError) -> ForwardedOutcome {
    match e {
        e @ (OmError::Request { .. } | OmError::Denied { .. }) => outcome(
            forwarded_outcome::Outcome::Result(crate::apply::rejection(e)),
        ),
        OmError::NotLeader {
            leader_id,
            leader_addr,
        } => outcome(forwarded_outcome::Outcome::NotLeader(ForwardedNotLeader {
            leader_id: leader_id.unwrap_or(0),
            leader_grpc_addr: leader_addr.unwrap_or_default(),
        })),
        other => outcome(forwarded_outcome::Outcome::Unavailable(other.to_string())),
    }
}

impl OmService {
    /// Uses `f` for writes this node serves while it does not lead.
    pub fn with_forwarder(mut self, f: Forwarder) -> Self {
        self.forwarder = Some(Arc::new(f));
        self
    }

    /// The forwarder, when this node should forward its clients' writes now.
    pub(super) fn forwarding(&self) -> Option<&Arc<Forwarder>> {
        self.forwarder.as_ref().filter(|_| !self.raft.is_leader())
    }

    /// What a follower sends for a write it serves: the client's part of the
    /// command and who the client is.
    pub(super) fn forwarded_write(&self, cmd: Command) -> ForwardedWrite {
        let principal = self
            .policy
            .as_ref()
            .and(authz::request())
            .map(|ctx| ForwardedPrincipal {
                name: ctx.principal.name,
                groups: ctx.principal.groups,
                impersonates: ctx.impersonate.is_some(),
                impersonate_user: ctx
                    .impersonate
                    .as_ref()
                    .map(|i| i.user.clone())
                    .unwrap_or_default(),
                impersonate_groups: ctx.impersonate.map(|i| i.groups).unwrap_or_default(),
            });
        ForwardedWrite {
            command: Some(Command {
                now_ms: 0,
                rules: 0,
                caller: None,
                ..cmd
            }),
            principal,
        }
    }

    /// The caller a forwarded write is made for, resolved on this (leader)
    /// node as its own request's would be.
    fn forwarded_caller(&self, p: Option<&ForwardedPrincipal>) -> Result<Option<Caller>, OmError> {
        let Some(policy) = &self.policy else {
            return Ok(None);
        };
        let Some(p) = p else {
            return Err(OmError::Denied {
                right: String::new(),
                resource: "/".to_string(),
                message: "a member forwarded a write without its client's identity, and this leader authorizes every write"
                    .to_string(),
            });
        };
        let ctx = RequestCtx {
            principal: Principal {
                name: p.name.clone(),
                groups: p.groups.clone(),
                via: "forwarded",
            },
            impersonate: p.impersonates.then(|| Impersonation {
                user: p.impersonate_user.clone(),
                groups: p.impersonate_groups.clone(),
            }),
            operation: String::new(),
            request_id: String::new(),
            staleness_ms: Arc::new(AtomicU64::new(u64::MAX)),
            leader_hint: Arc::default(),
        };
        self.resolve(policy, &ctx).map(Some)
    }

    /// The leader's side of `ForwardWrites`: checks, stamps and proposes
    /// each write, and answers each once it is applied or failed, in order.
    pub async fn propose_forwarded(&self, writes: Vec<ForwardedWrite>) -> Vec<ForwardedOutcome> {
        let n = writes.len();
        if let Err(e) = self.check_not_diverged() {
            return vec![refused(e); n];
        }
        if !self.raft.is_leader() {
            let m = self.raft.metrics().borrow_watched().clone();
            let leader_addr = m
                .current_leader
                .and_then(|l| m.membership_config.membership().get_node(&l).cloned())
                .map(|n| n.grpc_addr);
            return vec![
                refused(OmError::NotLeader {
                    leader_id: m.current_leader,
                    leader_addr,
                });
                n
            ];
        }
        metrics::counter!("om_forwarded_writes_received_total").increment(n as u64);
        let now_ms = self.now_ms();
        let mut outcomes: Vec<Option<ForwardedOutcome>> = vec![None; n];
        let (mut cmds, mut slots) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for (i, w) in writes.into_iter().enumerate() {
            let checked = w
                .command
                .ok_or_else(|| {
                    OmError::invalid("EMPTY_COMMAND", "command", "forwarded write has no command")
                })
                .and_then(|mut cmd| {
                    let caller = self.forwarded_caller(w.principal.as_ref())?;
                    if let Some(op) = &mut cmd.op {
                        self.precheck(caller.as_ref(), op)?;
                        // What the serving node stamps from its configuration
                        // is the leader's to decide, as for its own clients.
                        if let Op::CompleteMultipart(c) = op {
                            c.min_part_size = self.min_part_size;
                        }
                    }
                    Ok(Command {
                        now_ms,
                        rules: crate::apply::RULES,
                        caller,
                        ..cmd
                    })
                });
            match checked {
                Ok(cmd) => {
                    cmds.push(cmd.into());
                    slots.push(i);
                }
                Err(e) => outcomes[i] = Some(refused(e)),
            }
        }
        if !cmds.is_empty() {
            self.commit_forwarded(cmds, &slots, &mut outcomes).await;
        }
        outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    refused(OmError::Unavailable(format!(
                        "write not committed within {:?}; its outcome is unknown, retry with the same client id and seq",
                        self.request_timeout
                    )))
                })
            })
            .collect()
    }

    /// Proposes `cmds` in one message to Raft and fills in the outcome of
    /// each (its slot in `outcomes`) as it is applied, until the request
    /// timeout.
    async fn commit_forwarded(
        &self,
        cmds: Vec<om_raft_store::SharedCommand>,
        slots: &[usize],
        outcomes: &mut [Option<ForwardedOutcome>],
    ) {
        let mut results = match self.raft.client_write_many(cmds).await {
            Ok(s) => s,
            Err(fatal) => {
                for &i in slots {
                    outcomes[i] = Some(refused(OmError::Unavailable(format!(
                        "raft stopped: {fatal}"
                    ))));
                }
                return;
            }
        };
        let collect = async {
            for &i in slots {
                let Some(r) = results.next().await else { break };
                outcomes[i] = Some(match r {
                    Ok(Ok(resp)) => outcome(forwarded_outcome::Outcome::Result(resp.response)),
                    Ok(Err(ClientWriteError::ForwardToLeader(f))) => {
                        refused(super::forward_err(&f))
                    }
                    Ok(Err(e)) => {
                        refused(super::write_err(openraft::errors::RaftError::APIError(e)))
                    }
                    Err(fatal) => refused(OmError::Unavailable(format!("raft stopped: {fatal}"))),
                });
            }
        };
        let _ = tokio::time::timeout(self.request_timeout, collect).await;
    }
}
