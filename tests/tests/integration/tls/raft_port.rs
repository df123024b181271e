//! Mutual TLS on the Raft port: an outsider holding a valid certificate of
//! the cluster's CA is refused on every RPC, and a joiner admits only the
//! members it was given, with every replica unchanged.

use std::sync::Arc;
use std::time::Duration;

use om_client::v1::BucketLayout;
use om_proto::raft as pb;
use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::raft_service_client::RaftServiceClient;
use om_tests::certs::{Issued, TestCa};
use om_tests::{MemberAddrs, TestNode, cluster_addrs, metrics_of, wait_for};
use om_tls::ClientTls;
use tonic::transport::{Channel, Endpoint};

use super::{channel, client, identity, refused, secure_cluster};

fn vote(term: u64, node_id: u64) -> pb::Vote {
    pb::Vote {
        leader_id: Some(pb::LeaderId { term, node_id }),
        committed: true,
    }
}

/// An outsider holding a valid certificate of the cluster's CA, but not a
/// member's identity, cannot vote, append (a forged entry of a higher term),
/// install a snapshot, move leadership or ask admission questions; without a
/// certificate it does not get past the handshake. Every replica is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_port_serves_only_members() {
    let sc = secure_cluster(3).await;
    let c = client(&sc.addrs, Some(sc.admin.clone()), Duration::from_secs(20));
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..10u64 {
        c.put_key("vol1", "bkt1", &format!("k{i:03}"), i)
            .await
            .unwrap();
    }
    // Let every replica apply everything before taking its picture.
    let last = metrics_of(&sc.nodes[0]).last_log_index;
    wait_for(Duration::from_secs(10), "replicas to converge", || {
        let ok = sc.nodes.iter().all(|n| {
            let m = metrics_of(n);
            m.last_applied.map(|l| l.index) == m.last_log_index && m.last_log_index >= last
        });
        async move { ok.then_some(()) }
    })
    .await;
    let before: Vec<_> = sc
        .nodes
        .iter()
        .map(|n| {
            let m = metrics_of(n);
            (
                m.current_term,
                m.current_leader,
                m.last_log_index,
                om::store::dump_tables(n.node.service.db()).unwrap(),
            )
        })
        .collect();
    let leader = before[0].1.unwrap();
    let target = &sc.addrs[(leader - 1) as usize].raft;

    let outsider_cert = sc
        .ca
        .issue(sc.dir.path(), "outsider", &["outsider.example"]);
    let outsider = identity(&sc.ca_path, Some(&outsider_cert));
    // Its connection is closed right after the handshake, and whatever it
    // managed to send is refused.
    assert!(closed_after_handshake(target, &outsider).await);
    let ch = lazy_channel(target, Some(outsider.clone()));
    let mut raft = RaftServiceClient::new(ch.clone());
    let high = before[0].0 + 100;
    let v = raft
        .vote(pb::VoteRequest {
            vote: Some(vote(high, 9)),
            last_log_id: None,
            leadership_transfer: false,
        })
        .await;
    refused(v);
    let forged = pb::Entry {
        log_id: Some(pb::LogId {
            leader_id: Some(pb::LeaderId {
                term: high,
                node_id: 9,
            }),
            index: before[0].2.unwrap_or(0) + 1,
        }),
        payload: Some(pb::entry::Payload::Normal(vec![1, 2, 3].into())),
    };
    let a = raft
        .append_entries(pb::AppendEntriesRequest {
            vote: Some(vote(high, 9)),
            prev_log_id: None,
            entries: vec![forged.clone()],
            leader_commit: None,
        })
        .await;
    refused(a);
    let s = raft
        .install_snapshot(futures::stream::iter(vec![pb::SnapshotChunk {
            vote: Some(vote(high, 9)),
            offset: 0,
            data: vec![0; 1 << 20],
            done: true,
            meta: None,
            crc32c: 0,
            ..Default::default()
        }]))
        .await;
    refused(s);
    let t = raft
        .transfer_leader(pb::TransferLeaderRequest {
            from: Some(vote(before[0].0, leader)),
            to: 9,
            last_log_id: None,
        })
        .await;
    refused(t);
    let mut peer = RaftPeerClient::new(ch);
    let p = peer.peer_state(pb::PeerStateRequest { node_id: 9 }).await;
    refused(p);
    let r = peer
        .rejoin(pb::RejoinRequest {
            node_id: 1,
            has_log: false,
            last_log_index: 0,
            stuck: true,
        })
        .await;
    refused(r);

    // Without a client certificate, or with one from another CA, the
    // handshake itself fails.
    let no_cert = identity(&sc.ca_path, None);
    let other = TestCa::new("another CA");
    let foreign = other.issue(sc.dir.path(), "foreign", &["127.0.0.1"]);
    for tls in [
        Some(no_cert),
        Some(identity(&sc.ca_path, Some(&foreign))),
        None,
    ] {
        let refused = match channel(target, tls).await {
            Err(_) => true,
            Ok(ch) => RaftServiceClient::new(ch)
                .vote(pb::VoteRequest {
                    vote: Some(vote(high, 9)),
                    last_log_id: None,
                    leadership_transfer: false,
                })
                .await
                .is_err(),
        };
        assert!(refused);
    }

    // A client certificate naming a member's host is not a member's: it
    // lacks the member marker, and its connection is closed likewise.
    let client_only = sc.ca.issue(sc.dir.path(), "client-ip", &["127.0.0.1"]);
    let client_only = identity(&sc.ca_path, Some(&client_only));
    assert!(closed_after_handshake(target, &client_only).await);
    let ch = lazy_channel(target, Some(client_only));
    refused(
        RaftServiceClient::new(ch.clone())
            .vote(pb::VoteRequest {
                vote: Some(vote(high, 2)),
                last_log_id: None,
                leadership_transfer: false,
            })
            .await,
    );
    refused(
        RaftPeerClient::new(ch)
            .peer_state(pb::PeerStateRequest { node_id: 2 })
            .await,
    );

    // A member's identity is served (the check refuses outsiders, not all).
    let member = sc.ca.issue_member(sc.dir.path(), "member", &["127.0.0.1"]);
    let member = identity(&sc.ca_path, Some(&member));
    assert!(!closed_after_handshake(target, &member).await);
    let ch = channel(target, Some(member)).await.unwrap();
    let answer = RaftPeerClient::new(ch)
        .peer_state(pb::PeerStateRequest { node_id: 2 })
        .await
        .unwrap()
        .into_inner();
    assert!(answer.has_state);

    tokio::time::sleep(Duration::from_millis(500)).await;
    for (n, b) in sc.nodes.iter().zip(&before) {
        let m = metrics_of(n);
        assert_eq!(m.current_term, b.0, "no term moved");
        assert_eq!(m.current_leader, b.1, "no leader moved");
        assert_eq!(m.last_log_index, b.2, "nothing appended");
        assert_eq!(
            om::store::dump_tables(n.node.service.db()).unwrap(),
            b.3,
            "state unchanged"
        );
    }
    sc.shutdown().await;
}

/// A node joining under TLS takes Raft traffic only from the members it was
/// given (`--initial-cluster`) until it holds the cluster's membership: a
/// member certificate naming another host is refused, and a member's
/// certificate speaks only for that member. None of it reaches its store.
/// (A forged append from any certificate of the CA used to install a
/// membership, a volume and an admin grant on such a node.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joiner_admits_only_the_members_it_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("om test CA");
    let ca_path = ca.write(dir.path(), "ca");
    // The members it joins are at 127.0.0.2 and 127.0.0.3 (nothing runs
    // there: only their certificates matter here).
    let members: Vec<MemberAddrs> = (1..=2)
        .map(|id| MemberAddrs {
            id,
            raft: format!("127.0.0.{}:9872", id + 1),
            grpc: format!("127.0.0.{}:9862", id + 1),
            http: format!("127.0.0.{}:9874", id + 1),
        })
        .collect();
    let mut me = cluster_addrs(1).pop().unwrap();
    me.id = 4;
    let cert = ca.issue_member(dir.path(), "joiner", &["127.0.0.1"]);
    let ca_for_node = ca_path.clone();
    let joiner = TestNode::start_member_with(&me, &members, None, move |a| {
        a.tls_cert = Some(cert.cert);
        a.tls_key = Some(cert.key);
        a.tls_ca = Some(ca_for_node);
        a.join = true;
    })
    .await;
    let denied = tonic::Code::PermissionDenied;
    let ask = |who: &Issued, claims: u64| {
        let tls = identity(&ca_path, Some(who));
        let target = me.raft.clone();
        async move {
            let ch = lazy_channel(&target, Some(tls));
            RaftServiceClient::new(ch)
                .vote(pb::VoteRequest {
                    vote: Some(vote(7, claims)),
                    last_log_id: None,
                    leadership_transfer: false,
                })
                .await
        }
    };
    // Another host's member certificate; a client certificate of a member's
    // host: closed after the handshake, nothing served.
    let stranger = ca.issue_member(dir.path(), "stranger", &["127.0.0.9"]);
    let client_only = ca.issue(dir.path(), "client", &["127.0.0.2"]);
    for who in [&stranger, &client_only] {
        assert!(closed_after_handshake(&me.raft, &identity(&ca_path, Some(who))).await);
        refused(ask(who, 1).await);
    }
    // Member 1's certificate speaking for member 2 (in an append: a sealed
    // node refuses every vote before looking at it).
    let one = ca.issue_member(dir.path(), "one", &["127.0.0.2"]);
    let ch = channel(&me.raft, Some(identity(&ca_path, Some(&one))))
        .await
        .unwrap();
    let s = RaftServiceClient::new(ch)
        .append_entries(pb::AppendEntriesRequest {
            vote: Some(vote(7, 2)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), denied, "{s:?}");
    assert!(s.message().contains("speaks for node 2"), "{s:?}");
    // As itself it gets through to Raft (which refuses a vote from a node
    // not yet admitted: UNAVAILABLE, not a refusal of who it is).
    let s = ask(&one, 1).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");

    let m = metrics_of(&joiner);
    assert_eq!(m.current_term, 0);
    assert_eq!(m.last_log_index, None);
    assert_eq!(m.membership_config.membership().nodes().count(), 0);
    joiner.node.shutdown().await;
}

/// A channel that connects on its first request.
fn lazy_channel(addr: &str, tls: Option<Arc<ClientTls>>) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_with_connector_lazy(om_tls::Connector::new(tls))
}

/// Whether the server closes a connection right after its TLS handshake
/// (its certificate names no member), rather than waiting for requests.
async fn closed_after_handshake(addr: &str, tls: &ClientTls) -> bool {
    use tokio::io::AsyncReadExt;
    let mut s = match om_tls::connect(addr, Some(tls)).await {
        Ok(s) => s,
        Err(_) => return true,
    };
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // A session ticket or the server's HTTP/2 settings: read on.
            Ok(Ok(_)) => continue,
        }
    }
}

/// Over TLS a follower forwards its clients' writes and the leader believes
/// the principal a member names: an admin's write through a follower is
/// applied, a user without rights is refused by the leader's check of that
/// user (the clients are pinned to the follower, so only forwarding can
/// answer them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_forward_their_clients_principals_over_tls() {
    let sc = secure_cluster(3).await;
    let admin = client(&sc.addrs, Some(sc.admin.clone()), Duration::from_secs(20));
    admin.create_volume("vol1", "").await.unwrap();
    admin
        .create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    let leader = admin.cluster_status().await.unwrap().leader_id;
    let follower = sc.addrs.iter().find(|a| a.id != leader).unwrap();
    let pinned = |tls: Arc<ClientTls>| {
        om_client::OmClient::new(
            std::slice::from_ref(&follower.grpc),
            om_client::ClientOptions {
                spread: true,
                deadline: Duration::from_secs(20),
                tls: Some(tls),
                ..Default::default()
            },
        )
        .unwrap()
    };
    pinned(sc.admin.clone())
        .put_key("vol1", "bkt1", "by-admin", 1)
        .await
        .unwrap();
    admin.lookup_key("vol1", "bkt1", "by-admin").await.unwrap();
    let alice_cert = sc.ca.issue(sc.dir.path(), "alice", &["alice.example"]);
    let alice = pinned(identity(&sc.ca_path, Some(&alice_cert)));
    match alice.put_key("vol1", "bkt1", "by-alice", 1).await {
        Err(om_client::ClientError::Api { code, reason, .. }) => {
            assert_eq!(
                (code, reason.as_str()),
                (tonic::Code::PermissionDenied, "ACCESS_DENIED")
            );
        }
        other => panic!("expected ACCESS_DENIED, got {other:?}"),
    }
    // Each port's certificate expiry is exported, for the alert.
    let m = om_tests::http_get(sc.nodes[0].node.http_addr, "/metrics").await;
    for name in ["grpc", "raft", "raft-client"] {
        let line = format!("om_tls_certificate_expiry_timestamp_seconds{{name=\"{name}\"}} ");
        let at: f64 = m
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .unwrap_or_else(|| panic!("no {line} in {m}"))
            .trim()
            .parse()
            .unwrap();
        // rcgen's certificates run to 4096.
        assert!(at > 4_000_000_000.0, "{name}: {at}");
    }
    sc.shutdown().await;
}
