//! Writes served by a follower: forwarded to the leader in batches
//! (`ForwardWrites` on the Raft port, sent by `peers::forward`), so clients
//! may spread over every member, as etcd's do, and the leader decodes one RPC
//! per batch instead of one per client request.
//!
//! The follower sends only what the client asked (client id, seq, request
//! digest, operation) and who it authenticated. The leader does everything
//! it does for its own clients: it resolves the caller (impersonation
//! included) and checks its rights against its own state, stamps its clock
//! and apply rules, and proposes. Apply checks again, as for every write.
//! The serving follower audits the outcome.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use om_proto::raft::{
    ForwardedNotLeader, ForwardedOutcome, ForwardedPrincipal, ForwardedWrite, forwarded_outcome,
};
use om_proto::store::{Caller, Command, command::Op};

use super::OmService;
use crate::authz::{self, Impersonation, Principal, RequestCtx};
use crate::error::OmError;
use crate::peers::forward::Forwarder;

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
    /// command (the leader stamps the rest) and who the client is.
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
            command: Some(cmd),
            principal,
        }
    }

    /// The caller a forwarded write of `op` is made for, resolved on this
    /// (leader) node as its own request's would be.
    fn forwarded_caller(
        &self,
        p: Option<&ForwardedPrincipal>,
        op: Option<&Op>,
    ) -> Result<Option<Caller>, OmError> {
        let Some(policy) = &self.policy else {
            return Ok(None);
        };
        let Some(p) = p else {
            // Named like any refusal: the first right the write needs.
            let (right, resource) = op
                .and_then(|op| {
                    crate::apply::ops::rights(op, crate::apply::RULES)
                        .into_iter()
                        .next()
                })
                .map(|(r, bits)| (authz::right_names(bits).join("+"), r.to_string()))
                .unwrap_or_else(|| (String::new(), "/".to_string()));
            return Err(OmError::Denied {
                message: format!(
                    "a write was forwarded without its client's identity (or over a Raft port without TLS, where no caller proves itself a member), and this leader authorizes every write (it needs {right} on {resource})"
                ),
                right,
                resource,
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

    /// The leader's side of `ForwardWrites` from member `from` (`proven`:
    /// by TLS): checks, stamps and proposes each write, and answers each
    /// once it is applied or failed, in order. Every write applied or
    /// refused is audited here too, naming the forwarding member.
    pub async fn propose_forwarded(
        &self,
        writes: Vec<ForwardedWrite>,
        from: u64,
        proven: bool,
    ) -> Vec<ForwardedOutcome> {
        let audited: Vec<_> = writes
            .iter()
            .map(|w| {
                let op = w.command.as_ref().and_then(|c| c.op.as_ref());
                (
                    w.principal.clone(),
                    op.map_or("", crate::apply::ops::name),
                    op.map_or_else(|| "/".to_string(), crate::apply::ops::target),
                )
            })
            .collect();
        let outcomes = self.propose_forwarded_writes(writes).await;
        if self.audit.is_some() {
            for ((p, op, target), o) in audited.into_iter().zip(&outcomes) {
                self.audit_forwarded(p.as_ref(), op, target, o, from, proven);
            }
        }
        outcomes
    }

    /// One audit line of a forwarded write's outcome on the leader (none
    /// for a write it did not take: another member leads, or it timed out).
    fn audit_forwarded(
        &self,
        p: Option<&ForwardedPrincipal>,
        op: &str,
        target: String,
        o: &ForwardedOutcome,
        from: u64,
        proven: bool,
    ) {
        use om_proto::store::command_result;
        let Some(log) = &self.audit else { return };
        let (result, right, refusal) = match &o.outcome {
            Some(forwarded_outcome::Outcome::Result(r)) => match &r.result {
                Some(command_result::Result::Rejected(r)) => (
                    r.reason.clone(),
                    r.right.clone(),
                    r.reason == "ACCESS_DENIED",
                ),
                _ => ("OK".to_string(), String::new(), false),
            },
            _ => return,
        };
        log.record(crate::audit::Event {
            time_ms: self.now_ms(),
            request_id: String::new(),
            principal: p.map(|p| p.name.clone()).unwrap_or_default(),
            via: "forwarded",
            impersonated_user: p
                .filter(|p| p.impersonates)
                .map(|p| p.impersonate_user.clone())
                .unwrap_or_default(),
            operation: op.to_string(),
            resource: target,
            result,
            right,
            detail: if proven {
                format!("forwarded by member {from}")
            } else {
                format!("forwarded by node {from} (unproven: no TLS on the Raft port)")
            },
            refusal,
        });
    }

    async fn propose_forwarded_writes(&self, writes: Vec<ForwardedWrite>) -> Vec<ForwardedOutcome> {
        let n = writes.len();
        if let Err(e) = self.check_not_diverged() {
            return vec![refused(e); n];
        }
        if !self.raft.is_leader() {
            return vec![refused(self.not_leader()); n];
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
                    let caller = self.forwarded_caller(w.principal.as_ref(), cmd.op.as_ref())?;
                    if let Some(op) = &mut cmd.op {
                        self.check_space(op)?;
                        self.precheck(caller.as_ref(), op)?;
                        // What the serving node stamps from its configuration
                        // is the leader's to decide, as for its own clients.
                        if let Op::CompleteMultipart(c) = op {
                            c.min_part_size = self.min_part_size;
                        }
                    }
                    let mut cmd = Command {
                        now_ms,
                        rules: crate::apply::RULES,
                        caller,
                        ..cmd
                    };
                    self.stamp_retry(&mut cmd);
                    Ok(cmd)
                });
            match checked {
                Ok(cmd) => {
                    cmds.push(cmd);
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

    /// Proposes `cmds` with the leader's own writes (`batch`: those that
    /// wait go together in the next batch entry) and fills in the outcome
    /// of each (its slot in `outcomes`) as it is applied, until the request
    /// timeout.
    async fn commit_forwarded(
        &self,
        cmds: Vec<Command>,
        slots: &[usize],
        outcomes: &mut [Option<ForwardedOutcome>],
    ) {
        let write = Box::pin(self.proposer.write_many(cmds));
        let Ok(results) = tokio::time::timeout(self.request_timeout, write).await else {
            return;
        };
        for (&i, r) in slots.iter().zip(results) {
            outcomes[i] = Some(match r {
                Ok(result) => outcome(forwarded_outcome::Outcome::Result(result)),
                Err(e) => refused(e),
            });
        }
    }
}
