//! Record-by-record comparison of the replicas (`VerifyReplicas` with
//! `tables`, `omctl cluster verify`).
//!
//! The state digests of `divergence` say whether replicas differ and from
//! which index; this says where in the tables. The service proposes a
//! verification entry; every replica pins its state right after applying it
//! (raft-store's `pins`), so all of them are compared at that one index while
//! writes go on. Each voter returns a digest per table and per chunk of 1,024
//! entries; a member whose tables differ from the majority's is compared with
//! a majority member chunk by chunk, and the first differing chunk's keys
//! (with value digests) name the first differing key.

use std::time::Duration;

use om_proto::raft::{TableDigestRequest, TableDigestResponse};
use om_proto::v1::{TableDifference, TableDigestSummary, TableMember, TableVerification};
use om_raft_store::Raft;
use om_raft_store::pins::{KeyDigest, TableSummary};
use openraft::async_runtime::WatchReceiver;

use crate::divergence::Divergence;

/// How long a member may take to apply the entry and digest its tables.
const SUMMARY_WAIT: Duration = Duration::from_secs(60);

/// Where a voter's answers come from.
#[derive(Clone)]
enum Voter {
    Me,
    Peer(String),
}

fn summary_from_proto(r: TableDigestResponse) -> Result<Vec<TableSummary>, String> {
    let digest = |b: &[u8]| -> Result<[u8; 32], String> {
        b.try_into()
            .map_err(|_| "a digest is not 32 bytes".to_string())
    };
    r.tables
        .into_iter()
        .map(|t| {
            Ok(TableSummary {
                digest: digest(&t.digest)?,
                chunks: t
                    .chunks
                    .iter()
                    .map(|c| digest(c))
                    .collect::<Result<_, _>>()?,
                name: t.name,
                entries: t.entries,
            })
        })
        .collect()
}

async fn summary(d: &Divergence, v: &Voter, index: u64) -> Result<Vec<TableSummary>, String> {
    match v {
        Voter::Me => {
            let pins = d.pins().clone();
            tokio::task::spawn_blocking(move || pins.summary(index, SUMMARY_WAIT))
                .await
                .map_err(|e| e.to_string())?
        }
        Voter::Peer(addr) => {
            let mut c = d.peer(addr, SUMMARY_WAIT + Duration::from_secs(5)).await?;
            let r = c
                .table_digest(TableDigestRequest {
                    node_id: d.node_id(),
                    index,
                    table: String::new(),
                    chunk: 0,
                })
                .await
                .map_err(|s| format!("{addr}: {}", s.message()))?
                .into_inner();
            summary_from_proto(r)
        }
    }
}

async fn chunk(
    d: &Divergence,
    v: &Voter,
    index: u64,
    table: &str,
    n: u64,
) -> Result<Vec<KeyDigest>, String> {
    match v {
        Voter::Me => {
            let (pins, table) = (d.pins().clone(), table.to_string());
            tokio::task::spawn_blocking(move || pins.chunk(index, &table, n))
                .await
                .map_err(|e| e.to_string())?
        }
        Voter::Peer(addr) => {
            let mut c = d.peer(addr, SUMMARY_WAIT).await?;
            let r = c
                .table_digest(TableDigestRequest {
                    node_id: d.node_id(),
                    index,
                    table: table.to_string(),
                    chunk: n,
                })
                .await
                .map_err(|s| format!("{addr}: {}", s.message()))?
                .into_inner();
            r.keys
                .into_iter()
                .map(|k| {
                    let v: [u8; 32] = k
                        .value_digest
                        .as_slice()
                        .try_into()
                        .map_err(|_| "a digest is not 32 bytes".to_string())?;
                    Ok((k.key, v))
                })
                .collect()
        }
    }
}

/// The first entry where two replicas' copies of one chunk differ: the key
/// and what differs there.
pub fn first_key_difference(a: &[KeyDigest], b: &[KeyDigest]) -> Option<(Vec<u8>, &'static str)> {
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (None, None) => return None,
            (Some(x), None) => return Some((x.0.clone(), "only on the member")),
            (None, Some(y)) => return Some((y.0.clone(), "only on the majority")),
            (Some(x), Some(y)) => match x.0.cmp(&y.0) {
                std::cmp::Ordering::Less => return Some((x.0.clone(), "only on the member")),
                std::cmp::Ordering::Greater => {
                    return Some((y.0.clone(), "only on the majority"));
                }
                std::cmp::Ordering::Equal if x.1 != y.1 => {
                    return Some((x.0.clone(), "value differs"));
                }
                std::cmp::Ordering::Equal => {
                    i += 1;
                    j += 1;
                }
            },
        }
    }
}

/// Compares every voter's tables at `index`, the log index of a
/// verification entry.
pub async fn compare(d: &Divergence, raft: &Raft, index: u64) -> TableVerification {
    let m = raft.metrics().borrow_watched().clone();
    let membership = m.membership_config.membership().clone();
    let voters: Vec<(u64, Voter)> = membership
        .voter_ids()
        .filter_map(|id| {
            if id == d.node_id() {
                Some((id, Voter::Me))
            } else {
                membership
                    .get_node(&id)
                    .map(|n| (id, Voter::Peer(n.raft_addr.clone())))
            }
        })
        .collect();
    let answers = futures::future::join_all(
        voters
            .iter()
            .map(|(id, v)| async move { (*id, v.clone(), summary(d, v, index).await) }),
    )
    .await;
    // The majority's tables: the most common answer, held by more than half.
    let mut counts: Vec<(&Vec<TableSummary>, usize)> = Vec::new();
    for (_, _, a) in &answers {
        if let Ok(t) = a {
            match counts.iter_mut().find(|(x, _)| *x == t) {
                Some(c) => c.1 += 1,
                None => counts.push((t, 1)),
            }
        }
    }
    let majority = counts
        .iter()
        .max_by_key(|(_, n)| *n)
        .filter(|(_, n)| *n * 2 > voters.len())
        .map(|(t, _)| (*t).clone());
    let majority_member = majority.as_ref().and_then(|mt| {
        answers
            .iter()
            .find(|(_, _, a)| a.as_ref().is_ok_and(|t| t == mt))
            .map(|(id, v, _)| (*id, v.clone()))
    });
    let mut out = TableVerification {
        index,
        all_agree: counts.len() == 1 && answers.iter().all(|(_, _, a)| a.is_ok()),
        ..Default::default()
    };
    for (id, v, a) in &answers {
        let agrees = matches!((a, &majority), (Ok(t), Some(mt)) if t == mt);
        out.members.push(TableMember {
            node_id: *id,
            error: a.as_ref().err().cloned().unwrap_or_default(),
            tables: a
                .as_ref()
                .map(|ts| {
                    ts.iter()
                        .map(|t| TableDigestSummary {
                            table: t.name.clone(),
                            entries: t.entries,
                            digest: hex::encode(t.digest),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            agrees,
        });
        let (Ok(mine), Some(theirs), Some((mid, mv))) = (a, &majority, &majority_member) else {
            continue;
        };
        if agrees {
            continue;
        }
        match locate(d, index, (v, mine), (mv, theirs)).await {
            Ok(Some((table, key, what))) => out.differences.push(TableDifference {
                node_id: *id,
                compared_with: *mid,
                table,
                key,
                what: what.to_string(),
            }),
            Ok(None) => {}
            Err(e) => out.differences.push(TableDifference {
                node_id: *id,
                compared_with: *mid,
                what: format!("cannot locate the difference: {e}"),
                ..Default::default()
            }),
        }
    }
    out
}

/// The first table, and in it the first key, where `member` differs from
/// `majority`.
async fn locate(
    d: &Divergence,
    index: u64,
    (mv, mine): (&Voter, &[TableSummary]),
    (jv, theirs): (&Voter, &[TableSummary]),
) -> Result<Option<(String, Vec<u8>, &'static str)>, String> {
    for (a, b) in mine.iter().zip(theirs) {
        if a == b {
            continue;
        }
        // The chunks before the first differing one hold the same entries,
        // so it holds the first differing key.
        let n = (0..a.chunks.len().max(b.chunks.len()))
            .find(|i| a.chunks.get(*i) != b.chunks.get(*i))
            .unwrap_or(0) as u64;
        let (x, y) = futures::join!(
            chunk(d, mv, index, &a.name, n),
            chunk(d, jv, index, &b.name, n)
        );
        return Ok(Some(match first_key_difference(&x?, &y?) {
            Some((key, what)) => (a.name.clone(), key, what),
            // A chunk answer is bounded: in the open-ended last chunk of a
            // very large table the difference may lie past it.
            None => (
                a.name.clone(),
                Vec::new(),
                "differs past the entries a chunk answer holds",
            ),
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_key_difference_is_named_with_what_differs() {
        let e = |k: &str, v: u8| (k.as_bytes().to_vec(), [v; 32]);
        let a = vec![e("a", 1), e("b", 2), e("d", 4)];
        assert_eq!(first_key_difference(&a, &a), None);
        let b = vec![e("a", 1), e("b", 9), e("d", 4)];
        assert_eq!(
            first_key_difference(&a, &b),
            Some((b"b".to_vec(), "value differs"))
        );
        let c = vec![e("a", 1), e("c", 3), e("d", 4)];
        assert_eq!(
            first_key_difference(&a, &c),
            Some((b"b".to_vec(), "only on the member"))
        );
        assert_eq!(
            first_key_difference(&c, &a),
            Some((b"b".to_vec(), "only on the majority"))
        );
        assert_eq!(
            first_key_difference(&a[..2], &a),
            Some((b"d".to_vec(), "only on the majority"))
        );
    }
}
