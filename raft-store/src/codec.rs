//! Conversions between openraft's types and their protobuf forms, in one place.

use std::collections::{BTreeMap, BTreeSet};

use om_proto::raft as pb;
use openraft::EntryPayload;
use openraft::vote::leader_id_adv::LeaderId;
use prost::Message;
use prost::bytes::Bytes;

use crate::{Entry, LogId, Membership, OmNode, SharedCommand, StoredMembership, Vote, io_err};

pub fn log_id_to_pb(id: &LogId) -> pb::LogId {
    pb::LogId {
        leader_id: Some(pb::LeaderId {
            term: id.leader_id.term,
            node_id: id.leader_id.node_id,
        }),
        index: id.index,
    }
}

pub fn log_id_from_pb(id: &pb::LogId) -> LogId {
    let l = id.leader_id.unwrap_or_default();
    LogId::new(
        LeaderId {
            term: l.term,
            node_id: l.node_id,
        },
        id.index,
    )
}

pub fn opt_log_id_to_pb(id: &Option<LogId>) -> Option<pb::LogId> {
    id.as_ref().map(log_id_to_pb)
}

pub fn opt_log_id_from_pb(id: &Option<pb::LogId>) -> Option<LogId> {
    id.as_ref().map(log_id_from_pb)
}

pub fn vote_to_pb(v: &Vote) -> pb::Vote {
    pb::Vote {
        leader_id: Some(pb::LeaderId {
            term: v.leader_id.term,
            node_id: v.leader_id.node_id,
        }),
        committed: v.committed,
    }
}

pub fn vote_from_pb(v: &pb::Vote) -> Vote {
    let l = v.leader_id.unwrap_or_default();
    Vote {
        leader_id: LeaderId {
            term: l.term,
            node_id: l.node_id,
        },
        committed: v.committed,
    }
}

pub fn membership_to_pb(m: &Membership) -> pb::Membership {
    pb::Membership {
        configs: m
            .get_joint_config()
            .iter()
            .map(|c| pb::MembershipConfig {
                voters: c.iter().copied().collect(),
            })
            .collect(),
        nodes: m
            .nodes()
            .map(|(id, n)| {
                (
                    *id,
                    pb::Node {
                        raft_addr: n.raft_addr.clone(),
                        grpc_addr: n.grpc_addr.clone(),
                    },
                )
            })
            .collect(),
    }
}

pub fn membership_from_pb(m: &pb::Membership) -> std::io::Result<Membership> {
    let configs: Vec<BTreeSet<u64>> = m
        .configs
        .iter()
        .map(|c| c.voters.iter().copied().collect())
        .collect();
    let nodes: BTreeMap<u64, OmNode> = m
        .nodes
        .iter()
        .map(|(id, n)| {
            (
                *id,
                OmNode {
                    raft_addr: n.raft_addr.clone(),
                    grpc_addr: n.grpc_addr.clone(),
                },
            )
        })
        .collect();
    Membership::new(configs, nodes).map_err(io_err)
}

pub fn stored_membership_to_pb(m: &StoredMembership) -> pb::StoredMembership {
    pb::StoredMembership {
        log_id: opt_log_id_to_pb(m.log_id()),
        membership: Some(membership_to_pb(m.membership())),
    }
}

pub fn stored_membership_from_pb(m: &pb::StoredMembership) -> std::io::Result<StoredMembership> {
    let membership = match &m.membership {
        Some(pm) => membership_from_pb(pm)?,
        None => Membership::default(),
    };
    Ok(StoredMembership::new(
        opt_log_id_from_pb(&m.log_id),
        membership,
    ))
}

pub fn entry_to_pb(e: &Entry) -> pb::Entry {
    let payload = match &e.payload {
        EntryPayload::Blank => pb::entry::Payload::Blank(pb::Blank {}),
        EntryPayload::Normal(cmd) => pb::entry::Payload::Normal(cmd.encoded().clone()),
        EntryPayload::Membership(m) => pb::entry::Payload::Membership(membership_to_pb(m)),
    };
    pb::Entry {
        log_id: Some(log_id_to_pb(&e.log_id)),
        payload: Some(payload),
    }
}

/// An entry read back from the log.
pub fn entry_from_pb(e: &pb::Entry) -> std::io::Result<Entry> {
    decode_entry_with(e, Bytes::clone)
}

/// An entry received from a peer. Its command's bytes are copied out of the
/// received message: shared, they would keep the receive buffer they were
/// decoded from allocated for as long as the log's tail cache holds the entry,
/// memory the cache's byte bound does not count.
pub fn entry_from_peer_pb(e: &pb::Entry) -> std::io::Result<Entry> {
    decode_entry_with(e, |b| Bytes::copy_from_slice(b))
}

fn decode_entry_with(e: &pb::Entry, own: impl Fn(&Bytes) -> Bytes) -> std::io::Result<Entry> {
    let log_id = log_id_from_pb(
        e.log_id
            .as_ref()
            .ok_or_else(|| io_err("log entry without log id"))?,
    );
    let payload = match &e.payload {
        Some(pb::entry::Payload::Blank(_)) | None => EntryPayload::Blank,
        Some(pb::entry::Payload::Normal(bytes)) => {
            EntryPayload::Normal(SharedCommand::decode(own(bytes))?)
        }
        Some(pb::entry::Payload::Membership(m)) => EntryPayload::Membership(membership_from_pb(m)?),
    };
    Ok(Entry { log_id, payload })
}

pub fn encode_entry(e: &Entry) -> Vec<u8> {
    entry_to_pb(e).encode_to_vec()
}

pub fn decode_entry(bytes: &[u8]) -> std::io::Result<Entry> {
    entry_from_pb(&pb::Entry::decode(bytes).map_err(io_err)?)
}

pub fn snapshot_meta_to_pb(m: &crate::SnapshotMeta) -> pb::SnapshotMeta {
    pb::SnapshotMeta {
        last_log_id: opt_log_id_to_pb(&m.last_log_id),
        last_membership: Some(stored_membership_to_pb(&m.last_membership)),
        snapshot_id: String::new(),
        state_digest: Vec::new(),
    }
}

pub fn snapshot_meta_from_pb(m: &pb::SnapshotMeta) -> std::io::Result<crate::SnapshotMeta> {
    Ok(crate::SnapshotMeta {
        last_log_id: opt_log_id_from_pb(&m.last_log_id),
        last_membership: match &m.last_membership {
            Some(sm) => stored_membership_from_pb(sm)?,
            None => StoredMembership::default(),
        },
    })
}
