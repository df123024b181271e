//! `omctl cluster`: status, membership, leadership, verification.

use anyhow::{Result, bail};
use clap::Subcommand;
use om_client::v1::*;
use om_client::{ClientError, OmClient};
use serde_json::{Value, json};

use crate::{Output, table};

/// A member as the membership names it, and its own status or why it did not answer.
pub type MemberStatus = (ClusterMember, Result<ClusterStatusResponse, ClientError>);

#[derive(Subcommand)]
pub enum ClusterCmd {
    /// Role, term, leader, log indexes and lag of every member.
    Status,
    /// Add a node started with `om --join`: as a learner, then (once caught up) a voter.
    AddNode {
        node_id: u64,
        #[arg(long)]
        raft_addr: String,
        #[arg(long)]
        grpc_addr: String,
        /// Leave it a learner.
        #[arg(long)]
        learner: bool,
    },
    /// Remove a voter or learner.
    RemoveNode { node_id: u64 },
    /// Hand leadership to another voter.
    TransferLeader { node_id: u64 },
    /// Compare every voter's state digest at the newest index all of them
    /// applied, then every table record by record at one index (a
    /// verification entry in the log), naming the first differing key;
    /// exits non-zero unless every voter agrees on both.
    Verify {
        /// Only the state digests (no table scan).
        #[arg(long)]
        digests_only: bool,
    },
}

pub fn print_verify(out: Output, r: &VerifyReplicasResponse) {
    if out == Output::Json {
        let members: Vec<Value> = r
            .members
            .iter()
            .map(|m| {
                json!({
                    "node_id": m.node_id,
                    "applied_index": m.applied_index,
                    "digest": m.digest,
                    "agrees": m.agrees,
                    "diverged": m.diverged,
                    "error": m.error,
                })
            })
            .collect();
        let tables = r.tables.as_ref().map(|t| {
            json!({
                "index": t.index,
                "all_agree": t.all_agree,
                "members": t.members.iter().map(|m| json!({
                    "node_id": m.node_id,
                    "agrees": m.agrees,
                    "error": m.error,
                    "tables": m.tables.iter().map(|x| json!({
                        "table": x.table, "entries": x.entries, "digest": x.digest,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "differences": t.differences.iter().map(|d| json!({
                    "node_id": d.node_id,
                    "compared_with": d.compared_with,
                    "table": d.table,
                    "key": d.key.escape_ascii().to_string(),
                    "what": d.what,
                })).collect::<Vec<_>>(),
            })
        });
        let v = json!({
            "index": r.index,
            "all_agree": r.all_agree,
            "majority": r.majority,
            "members": members,
            "tables": tables,
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return;
    }
    println!("compared at index {}", r.index);
    println!("{:<6} {:>12}  {:<64}  VERDICT", "NODE", "APPLIED", "DIGEST");
    for m in &r.members {
        let verdict = if !m.error.is_empty() {
            format!("unreachable: {}", m.error)
        } else if m.digest.is_empty() {
            "no digest at that index".to_string()
        } else if m.agrees {
            "agrees".to_string()
        } else if r.majority {
            "DIFFERS from the majority".to_string()
        } else {
            "no majority".to_string()
        };
        let diverged = if m.diverged { " (marked diverged)" } else { "" };
        println!(
            "{:<6} {:>12}  {:<64}  {verdict}{diverged}",
            m.node_id, m.applied_index, m.digest
        );
    }
    let Some(t) = &r.tables else {
        return;
    };
    println!();
    println!("tables compared at index {}", t.index);
    println!("{:<6} {:>14}  VERDICT", "NODE", "ENTRIES");
    for m in &t.members {
        let entries: u64 = m.tables.iter().map(|x| x.entries).sum();
        let verdict = if !m.error.is_empty() {
            format!("not compared: {}", m.error)
        } else if m.agrees {
            "agrees".to_string()
        } else {
            "DIFFERS".to_string()
        };
        println!("{:<6} {:>14}  {verdict}", m.node_id, entries);
    }
    for d in &t.differences {
        if d.table.is_empty() {
            println!("node {}: {}", d.node_id, d.what);
        } else {
            println!(
                "node {}: first difference from node {} in table {} at key \"{}\": {}",
                d.node_id,
                d.compared_with,
                d.table,
                d.key.escape_ascii(),
                d.what
            );
        }
    }
}

pub fn print_status(out: Output, all: Vec<MemberStatus>) -> Result<()> {
    // The leader's view gives each member's matched index and lag.
    let leader_view = all
        .iter()
        .find_map(|(_, s)| s.as_ref().ok().filter(|s| s.role == "leader"))
        .cloned();
    let matched = |id: u64| {
        leader_view.as_ref().and_then(|l| {
            l.members
                .iter()
                .find(|m| m.node_id == id && m.matched_known)
                .map(|m| {
                    (
                        m.matched_index,
                        l.last_log_index.saturating_sub(m.matched_index),
                    )
                })
        })
    };
    if out == Output::Json {
        let rows: Vec<Value> = all
            .iter()
            .map(|(m, s)| {
                let base = json!({"id": m.node_id, "voter": m.voter, "raft_addr": m.raft_addr, "grpc_addr": m.grpc_addr,
                    "matched_index": matched(m.node_id).map(|x| x.0), "lag": matched(m.node_id).map(|x| x.1)});
                match s {
                    Ok(s) => {
                        let mut v = base;
                        v["role"] = json!(s.role);
                        v["term"] = json!(s.term);
                        v["leader_id"] = json!(s.has_leader.then_some(s.leader_id));
                        v["last_log_index"] = json!(s.last_log_index);
                        v["committed_index"] = json!(s.committed_index);
                        v["applied_index"] = json!(s.applied_index);
                        v["snapshot_index"] = json!(s.snapshot_index);
                        v
                    }
                    Err(e) => {
                        let mut v = base;
                        v["error"] = json!(e.to_string());
                        v
                    }
                }
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "members": rows }))?
        );
        return Ok(());
    }
    let rows = all
        .iter()
        .map(|(m, s)| {
            let (mi, lag) = matched(m.node_id)
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .unwrap_or(("-".into(), "-".into()));
            let kind = if m.voter { "voter" } else { "learner" }.to_string();
            match s {
                Ok(s) => vec![
                    m.node_id.to_string(),
                    kind,
                    s.role.clone(),
                    s.term.to_string(),
                    if s.has_leader {
                        s.leader_id.to_string()
                    } else {
                        "-".into()
                    },
                    s.last_log_index.to_string(),
                    s.committed_index.to_string(),
                    s.applied_index.to_string(),
                    mi,
                    lag,
                    m.grpc_addr.clone(),
                ],
                Err(e) => vec![
                    m.node_id.to_string(),
                    kind,
                    format!("unreachable ({})", e.reason()),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    mi,
                    lag,
                    m.grpc_addr.clone(),
                ],
            }
        })
        .collect();
    table(
        &[
            "ID",
            "MEMBER",
            "ROLE",
            "TERM",
            "LEADER",
            "LAST_LOG",
            "COMMITTED",
            "APPLIED",
            "MATCHED",
            "LAG",
            "GRPC",
        ],
        rows,
    );
    Ok(())
}

pub async fn run(c: &OmClient, out: Output, cmd: ClusterCmd) -> Result<()> {
    match cmd {
        ClusterCmd::Status => print_status(out, c.cluster_status_all().await?)?,
        ClusterCmd::AddNode {
            node_id,
            raft_addr,
            grpc_addr,
            learner,
        } => {
            c.add_node(node_id, &raft_addr, &grpc_addr, learner).await?;
            println!(
                "added node {node_id} as {}",
                if learner { "learner" } else { "voter" }
            );
        }
        ClusterCmd::RemoveNode { node_id } => {
            c.remove_node(node_id).await?;
            println!("removed node {node_id}");
        }
        ClusterCmd::TransferLeader { node_id } => {
            c.transfer_leader(node_id).await?;
            println!("node {node_id} is the leader");
        }
        ClusterCmd::Verify { digests_only } => {
            let r = c.verify_replicas(!digests_only).await?;
            print_verify(out, &r);
            if let Some(t) = r.tables.as_ref().filter(|t| !t.all_agree) {
                let unanswered = t.members.iter().filter(|m| !m.error.is_empty()).count();
                let differ = t
                    .members
                    .iter()
                    .filter(|m| m.error.is_empty() && !m.agrees)
                    .count();
                bail!(
                    "replicas' tables do not all agree at index {} ({differ} member(s) differ, \
                 {unanswered} not compared)",
                    t.index
                );
            }
            if !r.all_agree {
                bail!(
                    "replicas do not all agree at index {} ({})",
                    r.index,
                    if r.index == 0 {
                        "nothing comparable yet"
                    } else if r.majority {
                        "a member differs from the majority or did not answer"
                    } else {
                        "no majority"
                    }
                );
            }
        }
    }
    Ok(())
}
