//! The follower's side of `ForwardWrites` (see `service::forward`): writes
//! this node's clients send it while it does not lead, gathered into batches
//! and sent to the leader's Raft port.
//!
//! At most `MAX_IN_FLIGHT` batches are on their way at once; writes that
//! arrive meanwhile wait and leave together in the next batch (at most
//! `MAX_FORWARD_WRITES` writes or `MAX_FORWARD_BYTES`). A lone write leaves
//! at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::{ForwardWritesRequest, ForwardedOutcome, ForwardedWrite, forwarded_outcome};
use om_proto::store::CommandResult;
use om_raft_store::Raft;
use openraft::async_runtime::WatchReceiver;
use prost::Message;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tonic::transport::{Channel, Endpoint};

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
        let m = self.raft.metrics();
        let m = m.borrow_watched();
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
        match m.membership_config.membership().get_node(&id) {
            Some(n) => Ok((id, n.raft_addr.clone(), n.grpc_addr.clone())),
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
            Ok((leader, grpc_addr, client)) => {
                metrics::counter!("om_forward_batches_total").increment(1);
                metrics::counter!("om_forwarded_writes_total").increment(n as u64);
                let to = Leader {
                    id: leader,
                    grpc_addr,
                    client,
                };
                ask(to, self.node_id, writes, self.timeout).await
            }
        };
        for (done, outcome) in waiting.into_iter().zip(outcomes) {
            // The client may have given up: nobody to answer.
            let _ = done.send(outcome);
        }
    }
}

/// The leader a batch goes to.
struct Leader {
    id: u64,
    grpc_addr: String,
    client: RaftPeerClient<Channel>,
}

/// Sends `writes` to `to` and returns each one's outcome, in order.
async fn ask(
    mut to: Leader,
    node_id: u64,
    writes: Vec<ForwardedWrite>,
    timeout: Duration,
) -> Vec<Result<CommandResult, OmError>> {
    let n = writes.len();
    let leader = to.id;
    let unknown = |why: String| {
        OmError::Unavailable(format!(
            "forwarding to the leader (node {leader}) failed: {why}; the outcome is unknown, retry with the same client id and seq"
        ))
    };
    let req = ForwardWritesRequest { node_id, writes };
    match tokio::time::timeout(timeout, to.client.forward_writes(req)).await {
        Ok(Ok(r)) => {
            let outcomes = r.into_inner().outcomes;
            if outcomes.len() == n {
                outcomes.into_iter().map(from_wire).collect()
            } else {
                let why = format!("{} outcomes for {n} writes", outcomes.len());
                vec![Err(unknown(why)); n]
            }
        }
        // A leader that predates forwarding took nothing: the client goes
        // to it (rolling upgrades).
        Ok(Err(s)) if s.code() == tonic::Code::Unimplemented => {
            let e = OmError::NotLeader {
                leader_id: Some(leader),
                leader_addr: Some(to.grpc_addr),
            };
            vec![Err(e); n]
        }
        Ok(Err(s)) => vec![Err(unknown(s.message().to_string())); n],
        Err(_) => vec![Err(unknown(format!("no answer within {timeout:?}"))); n],
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A leader whose Raft port does not know `ForwardWrites` (an older
    /// version) took nothing: the client is sent to it.
    #[tokio::test]
    async fn a_leader_without_forwarding_gets_the_client() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_, health) = tonic_health::server::health_reporter();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let ch = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let to = Leader {
            id: 3,
            grpc_addr: "leader:9000".to_string(),
            client: RaftPeerClient::new(ch),
        };
        let writes = vec![ForwardedWrite::default(), ForwardedWrite::default()];
        let got = ask(to, 1, writes, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 2);
        for g in got {
            match g {
                Err(OmError::NotLeader {
                    leader_id: Some(3),
                    leader_addr: Some(a),
                }) => assert_eq!(a, "leader:9000"),
                other => panic!("expected NOT_LEADER naming node 3, got {other:?}"),
            }
        }
    }
}
