//! The admission of a member that restarted with its data: it takes part
//! in Raft only once it knows its history is the cluster's (see
//! `incarnation`).

use super::{Admission, Member, Outcome, membership_of, open};

/// One round of a member that restarted with its data: asks the other
/// members of its membership which incarnation of the cluster they belong
/// to. Fences this member when one answers from an incarnation that
/// replaced its own; admits it once every member answered, or a majority of
/// the voters (this one included) confirmed its incarnation. True once the
/// round decided (admitted or fenced).
pub(super) async fn step(m: &Member, admission: &Admission) -> bool {
    let Ok((nodes, voters)) = membership_of(m).await else {
        return false;
    };
    let peers: Vec<(u64, String)> = nodes
        .into_iter()
        .filter(|(id, _)| *id != m.node_id)
        .map(|(id, n)| (id, n.raft_addr))
        .collect();
    let asked = futures::future::join_all(
        peers
            .iter()
            .map(|(_, a)| crate::peers::peer_state(a, m.node_id, m.tls.as_ref())),
    )
    .await;
    let ours = m.incarnation.id();
    let mut confirmed = u64::from(voters.contains(&m.node_id));
    let mut silent = Vec::new();
    let restored = m.incarnation.restored_from().to_string();
    let ours_named = m.incarnation.cluster_id();
    for ((id, _), r) in peers.iter().zip(asked) {
        match r {
            Ok(v) => {
                // A store restored from a backup starts a new cluster; a
                // member of a running cluster that was not restored from the
                // same backup (and is not the cluster this store has since
                // joined) holds another history, which this store would fork.
                if !restored.is_empty()
                    && v.has_history
                    && !v.cluster_id.is_empty()
                    && v.restored_from != restored
                    && ours_named.as_deref() != Some(v.cluster_id.as_str())
                {
                    let why = format!(
                        "this data directory was restored from backup {restored} to start a new \
                         cluster, but member {id} runs cluster {} with a history of its own \
                         (not restored from that backup): joining would fork it",
                        v.cluster_id
                    );
                    m.incarnation.fence(0, why.clone());
                    admission.say(format!("fenced: {why}"));
                    return true;
                }
                if m.incarnation
                    .check_peer(&v.cluster_id, v.incarnation, &v.superseded)
                {
                    admission.say(format!(
                        "superseded: member {id} belongs to incarnation {} of the cluster, which \
                         replaced this member's ({ours}). {}",
                        v.incarnation,
                        crate::incarnation::fence_advice()
                    ));
                    return true;
                }
                if !v.fenced && v.incarnation == ours && voters.contains(id) {
                    confirmed += 1;
                }
            }
            Err(_) => silent.push(*id),
        }
    }
    let majority = voters.len() as u64 / 2 + 1;
    if silent.is_empty() || confirmed >= majority {
        return open(m, admission, Outcome::Restarted).await;
    }
    admission.say(format!(
        "restarted with its data; not voting until a majority of the voters confirm its \
         incarnation {ours}: {confirmed} of {majority} so far, no answer from members {silent:?}"
    ));
    false
}
