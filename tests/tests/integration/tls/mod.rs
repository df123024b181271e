//! TLS on the public gRPC port and mutual TLS on the Raft port: a cluster
//! that serves and replicates over it, clients and outsiders it refuses
//! (with every replica unchanged), and certificates replaced while serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use om::server::NodeOptions;
use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_proto::raft as pb;
use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::raft_service_client::RaftServiceClient;
use om_tests::certs::{Issued, TestCa};

const ALICE_TOKEN: &str = "omt_00000000000000a1_alice-s3cret-alice-s3cret-alice-s3cret";
use om_tests::{MemberAddrs, TestNode, cluster_addrs, metrics_of, wait_for};
use om_tls::rustls::pki_types::pem::PemObject;
use om_tls::{ClientTls, TlsFiles};
use tonic::transport::{Channel, Endpoint};

/// A client identity: the CA it trusts and, for mutual TLS, its certificate.
fn identity(ca: &Path, cert: Option<&Issued>) -> Arc<ClientTls> {
    ClientTls::load(
        "test",
        TlsFiles {
            cert: cert.map(|c| c.cert.clone()),
            key: cert.map(|c| c.key.clone()),
            ca: Some(ca.to_path_buf()),
            crl: None,
        },
    )
    .unwrap()
}

fn client(addrs: &[MemberAddrs], tls: Option<Arc<ClientTls>>, deadline: Duration) -> OmClient {
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    OmClient::new(
        &eps,
        ClientOptions {
            deadline,
            attempt_timeout: Duration::from_secs(2).min(deadline),
            tls,
            ..Default::default()
        },
    )
    .unwrap()
}

/// A channel to `addr` as `tls` (no TLS when `None`).
async fn channel(
    addr: &str,
    tls: Option<Arc<ClientTls>>,
) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_with_connector(om_tls::Connector::new(tls))
        .await
}

/// A 3-node cluster with mutual TLS on both ports; every node's certificate
/// names 127.0.0.1, the host of every member's Raft address.
struct SecureCluster {
    dir: tempfile::TempDir,
    ca: TestCa,
    ca_path: PathBuf,
    addrs: Vec<MemberAddrs>,
    nodes: Vec<TestNode>,
    admin: Arc<ClientTls>,
}

async fn secure_cluster(n: u64) -> SecureCluster {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("om test CA");
    let ca_path = ca.write(dir.path(), "ca");
    let addrs = cluster_addrs(n);
    let mut nodes = Vec::new();
    for a in &addrs {
        let me = ca.issue_member(
            dir.path(),
            &format!("node{}", a.id),
            &["127.0.0.1", "localhost"],
        );
        let ca_path = ca_path.clone();
        nodes.push(
            TestNode::start_member_opts(
                tempfile::tempdir().unwrap(),
                a,
                &addrs,
                NodeOptions {
                    tls_reload_interval: Some(Duration::from_millis(100)),
                    ..NodeOptions::default()
                },
                move |args| {
                    args.tls_cert = Some(me.cert);
                    args.tls_key = Some(me.key);
                    args.tls_ca = Some(ca_path);
                    args.admins = Some("admin.example".to_string());
                },
            )
            .await,
        );
    }
    let admin_cert = ca.issue(dir.path(), "admin", &["admin.example"]);
    let admin = identity(&ca_path, Some(&admin_cert));
    let c = client(&addrs, Some(admin.clone()), Duration::from_secs(20));
    wait_for(Duration::from_secs(20), "a leader over TLS", || {
        let c = &c;
        async move {
            c.cluster_status()
                .await
                .ok()
                .filter(|s| s.has_leader && !s.cluster_id.is_empty())
        }
    })
    .await;
    SecureCluster {
        dir,
        ca,
        ca_path,
        addrs,
        nodes,
        admin,
    }
}

impl SecureCluster {
    async fn shutdown(self) {
        for n in self.nodes {
            n.node.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_serves_and_replicates_over_mutual_tls_and_refuses_other_clients() {
    let sc = secure_cluster(3).await;
    let c = client(&sc.addrs, Some(sc.admin.clone()), Duration::from_secs(20));
    c.create_volume("vol1", "").await.unwrap();
    c.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..20u64 {
        c.put_key("vol1", "bkt1", &format!("k{i:03}"), i)
            .await
            .unwrap();
    }
    // Every replica has them (read locally on each node, over TLS).
    for a in &sc.addrs {
        let local = OmClient::new(
            std::slice::from_ref(&a.grpc),
            ClientOptions {
                stale_reads: true,
                deadline: Duration::from_secs(2),
                tls: Some(sc.admin.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        wait_for(Duration::from_secs(10), "the replica to have k019", || {
            let local = &local;
            async move { local.lookup_key("vol1", "bkt1", "k019").await.ok() }
        })
        .await;
    }

    // Refused: plaintext, TLS without a client certificate, a certificate
    // from another CA, an expired certificate, and a client that does not
    // trust the cluster's CA.
    let other = TestCa::new("another CA");
    let other_path = other.write(sc.dir.path(), "other-ca");
    let foreign = other.issue(sc.dir.path(), "foreign", &["admin.example"]);
    let expired = sc
        .ca
        .issue_expired(sc.dir.path(), "expired", &["admin.example"]);
    let admin_cert = sc.ca.issue(sc.dir.path(), "admin2", &["admin.example"]);
    let refused: Vec<(&str, Option<Arc<ClientTls>>)> = vec![
        ("plaintext", None),
        ("no client certificate", Some(identity(&sc.ca_path, None))),
        (
            "a certificate from another CA",
            Some(identity(&sc.ca_path, Some(&foreign))),
        ),
        (
            "an expired certificate",
            Some(identity(&sc.ca_path, Some(&expired))),
        ),
        (
            "a client that trusts another CA",
            Some(identity(&other_path, Some(&admin_cert))),
        ),
    ];
    for (what, tls) in refused {
        let bad = client(&sc.addrs, tls, Duration::from_secs(1));
        let r = bad.create_volume("intruder", "").await;
        assert!(r.is_err(), "{what}: {r:?}");
        let r = bad.lookup_key("vol1", "bkt1", "k000").await;
        assert!(r.is_err(), "{what}: {r:?}");
    }
    let vols = c.list_volumes("", "", 100).await.unwrap();
    assert!(
        vols.volumes.iter().all(|v| v.name != "intruder"),
        "a refused client changed nothing"
    );
    assert_eq!(c.get_bucket("vol1", "bkt1").await.unwrap().key_count, 20);
    sc.shutdown().await;
}

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

/// A request that must have been refused: by a status, or by its
/// connection being closed.
fn refused<T>(r: Result<tonic::Response<T>, tonic::Status>) {
    let s = r.err().expect("an outsider's request was served");
    assert!(
        matches!(
            s.code(),
            tonic::Code::PermissionDenied
                | tonic::Code::Unauthenticated
                | tonic::Code::Unavailable
                | tonic::Code::Unknown
                | tonic::Code::Cancelled
        ),
        "{s:?}"
    );
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

/// The certificate a server presents to a new connection.
async fn presented(addr: &str, tls: &ClientTls) -> Vec<u8> {
    match om_tls::connect(addr, Some(tls)).await.unwrap() {
        om_tls::MaybeTls::Tls(s) => s.get_ref().1.peer_certificates().unwrap()[0].to_vec(),
        om_tls::MaybeTls::Plain(_) => unreachable!(),
    }
}

/// Replacing the certificate files takes effect for new connections without
/// a restart; connections opened before keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_replaced_without_a_restart() {
    let sc = secure_cluster(1).await;
    let a = &sc.addrs[0];
    let first = std::fs::read(sc.dir.path().join("node1.crt")).unwrap();
    let first = om_tls::rustls::pki_types::CertificateDer::pem_slice_iter(&first)
        .next()
        .unwrap()
        .unwrap()
        .to_vec();
    assert_eq!(presented(&a.grpc, &sc.admin).await, first);
    let c = client(&sc.addrs, Some(sc.admin.clone()), Duration::from_secs(20));
    c.create_volume("before", "").await.unwrap();

    let renewed = sc
        .ca
        .issue_member(sc.dir.path(), "node1", &["127.0.0.1", "localhost"]);
    assert_ne!(renewed.der, first);
    for addr in [&a.grpc, &a.raft] {
        wait_for(Duration::from_secs(10), "the renewed certificate", || {
            let (addr, tls, want) = (addr.clone(), sc.admin.clone(), renewed.der.clone());
            async move { (presented(&addr, &tls).await == want).then_some(()) }
        })
        .await;
    }
    // The client's channel opened before the change still works.
    c.create_volume("after", "").await.unwrap();

    // A file that does not parse leaves the current certificate in place.
    std::fs::write(sc.dir.path().join("node1.key"), "garbage").unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(presented(&a.grpc, &sc.admin).await, renewed.der);
    sc.shutdown().await;
}

/// Starts a single node with `tweak`'s settings on an empty directory.
async fn single(tweak: impl FnOnce(&mut om::config::Args)) -> (TestNode, MemberAddrs) {
    single_with(NodeOptions::default(), tweak).await
}

/// `single`, rereading its certificate and token files every 100 ms.
async fn single_rereading(tweak: impl FnOnce(&mut om::config::Args)) -> (TestNode, MemberAddrs) {
    let opts = NodeOptions {
        tls_reload_interval: Some(Duration::from_millis(100)),
        ..NodeOptions::default()
    };
    single_with(opts, tweak).await
}

async fn single_with(
    opts: NodeOptions,
    tweak: impl FnOnce(&mut om::config::Args),
) -> (TestNode, MemberAddrs) {
    let addrs = cluster_addrs(1);
    let a = addrs[0].clone();
    let n =
        TestNode::start_member_opts(tempfile::tempdir().unwrap(), &a, &addrs, opts, tweak).await;
    (n, a)
}

fn token_client(a: &MemberAddrs, tls: Option<Arc<ClientTls>>, token: Option<&str>) -> OmClient {
    OmClient::new(
        std::slice::from_ref(&a.grpc),
        ClientOptions {
            deadline: Duration::from_secs(10),
            tls,
            token: token.map(str::to_string),
            ..Default::default()
        },
    )
    .unwrap()
}

/// With a token file, the public port takes a client certificate or a
/// bearer token; an absent or forged token is UNAUTHENTICATED with a stable
/// reason, and changes nothing. Without TLS (loopback) tokens work alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_or_certificates_authenticate_the_public_port() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "# operators\n{}\n",
            om::grpc::auth::token_line("alice", ALICE_TOKEN, b"0123456789abcdef")
        ),
    )
    .unwrap();
    let ca = TestCa::new("om test CA");
    let ca_path = ca.write(dir.path(), "ca");
    let node = ca.issue_member(dir.path(), "node", &["127.0.0.1"]);
    let admin = ca.issue(dir.path(), "admin", &["admin.example"]);
    let (tls_node, ta) = {
        let (tokens, ca_path) = (tokens.clone(), ca_path.clone());
        single(move |a| {
            a.tls_cert = Some(node.cert);
            a.tls_key = Some(node.key);
            a.tls_ca = Some(ca_path);
            a.token_file = Some(tokens);
            a.admins = Some("alice,admin.example".to_string());
        })
        .await
    };
    let (plain_node, pa) = {
        let tokens = tokens.clone();
        single(move |a| {
            a.token_file = Some(tokens);
            a.insecure = true;
            a.admins = Some("alice".to_string());
        })
        .await
    };
    let ca_only = identity(&ca_path, None);
    for (a, tls, with_cert) in [
        (
            &ta,
            Some(ca_only.clone()),
            Some(identity(&ca_path, Some(&admin))),
        ),
        (&pa, None, None),
    ] {
        if let Some(cert) = with_cert {
            token_client(a, Some(cert), None)
                .create_volume("by-cert", "")
                .await
                .unwrap();
        }
        let alice = token_client(a, tls.clone(), Some(ALICE_TOKEN));
        alice.create_volume("by-token", "").await.unwrap();
        let before = alice.list_volumes("", "", 100).await.unwrap();
        // Trailing space; the id right but not the secret; the secret but
        // another id.
        let spaced = format!("{ALICE_TOKEN} ");
        let wrong_secret = ALICE_TOKEN.replace("_al", "_xl");
        let wrong_id = ALICE_TOKEN.replace("0a1_", "0a2_");
        for (token, reason) in [
            (None, "CREDENTIALS_REQUIRED"),
            (Some("forged"), "INVALID_TOKEN"),
            (Some(spaced.as_str()), "INVALID_TOKEN"),
            (Some(wrong_secret.as_str()), "INVALID_TOKEN"),
            (Some(wrong_id.as_str()), "INVALID_TOKEN"),
        ] {
            let e = token_client(a, tls.clone(), token)
                .create_volume("intruder", "")
                .await
                .unwrap_err();
            assert_eq!(e.reason(), reason, "{e}");
            assert!(
                matches!(&e, om_client::ClientError::Api { code, .. } if *code == tonic::Code::Unauthenticated),
                "{e}"
            );
        }
        assert_eq!(alice.list_volumes("", "", 100).await.unwrap(), before);
        // The cluster's membership and addresses are not for strangers either.
        let e = token_client(a, tls.clone(), None)
            .cluster_status()
            .await
            .unwrap_err();
        assert_eq!(e.reason(), "CREDENTIALS_REQUIRED", "{e}");
        assert!(alice.cluster_status().await.is_ok());
    }
    tls_node.node.shutdown().await;
    plain_node.node.shutdown().await;
}

/// `omctl token new` makes a token and appends its line to the token file;
/// `omctl token hash` makes the line of a token it is given; the server
/// accepts both through `OM_TOKEN`, rereads the file while serving (a new
/// token works, a removed line is refused) and refuses tokens of another
/// form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_makes_tokens_the_server_rereads() {
    use std::io::Write;
    let omctl = om_tests::binary("omctl");
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    let new_token = |who: &str| {
        let out = std::process::Command::new(&omctl)
            .args(["token", "new", who, "--groups", "ops"])
            .arg("--append-to")
            .arg(&tokens)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let gw = new_token("gateway");
    assert!(gw.starts_with("omt_") && gw.len() == 85, "{gw}");
    let file = std::fs::read_to_string(&tokens).unwrap();
    assert!(
        file.starts_with("gateway omt_") && !file.contains(&gw[21..]),
        "{file}"
    );
    // A token made elsewhere, in the same form.
    let own = "omt_1234567890abcdef_0123456789abcdef0123456789abcdef";
    let mut child = std::process::Command::new(&omctl)
        .args(["token", "hash", "ci"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{own}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let ci_line = String::from_utf8(out.stdout).unwrap();
    assert!(ci_line.starts_with("ci omt_1234567890abcdef "), "{ci_line}");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&tokens)
        .unwrap()
        .write_all(ci_line.as_bytes())
        .unwrap();
    let bad = std::process::Command::new(&omctl)
        .args(["token", "hash", "ci"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    bad.stdin
        .as_ref()
        .unwrap()
        .write_all(b"gw-t0ken\n")
        .unwrap();
    let bad = bad.wait_with_output().unwrap();
    assert!(!bad.status.success(), "a token without an id is refused");
    let (n, a) = {
        let tokens = tokens.clone();
        single_rereading(move |args| {
            args.token_file = Some(tokens);
            args.insecure = true;
            args.admins = Some("gateway,ci,late".to_string());
        })
        .await
    };
    let run = |token: &str, volume: &str| {
        std::process::Command::new(&omctl)
            .args([
                "--endpoint",
                &a.grpc,
                "--timeout",
                "5",
                "volume",
                "create",
                volume,
            ])
            .env("OM_TOKEN", token)
            .output()
            .unwrap()
    };
    let denied = run(
        "omt_1234567890abcdef_wrongwrongwrongwrongwrongwrongwrong",
        "v-denied",
    );
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("INVALID_TOKEN"));
    assert!(run(&gw, "v-gateway").status.success());
    assert!(run(own, "v-ci").status.success());
    // Added while serving: accepted within the reload interval.
    let late = new_token("late");
    wait_for(Duration::from_secs(10), "the new token", || async {
        run(&late, "v-late").status.success().then_some(())
    })
    .await;
    // The gateway's line removed: its token is refused from then on.
    let kept: String = std::fs::read_to_string(&tokens)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("gateway "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&tokens, kept).unwrap();
    wait_for(Duration::from_secs(10), "the revocation", || async {
        let out = run(&gw, "v-revoked");
        (!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("INVALID_TOKEN"))
            .then_some(())
    })
    .await;
    n.node.shutdown().await;
}

/// With `--tls-crl`, a certificate the CA revoked is refused in the
/// handshake once the list names it (the file is reread while serving);
/// others still connect. A certificate whose name is not a valid principal
/// (here one that would read as two names in a grant) is refused as
/// INVALID_CERTIFICATE_NAME, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_and_misnamed_certificates_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("om test CA");
    let ca_path = ca.write(dir.path(), "ca");
    let crl = ca.write_crl(dir.path(), "ca", &[]);
    let node = ca.issue_member(dir.path(), "node", &["127.0.0.1"]);
    let admin = ca.issue(dir.path(), "admin", &["admin.example"]);
    let carol = ca.issue(dir.path(), "carol", &["carol.example"]);
    let misnamed = ca.issue(dir.path(), "misnamed", &["admin.example,carol.example"]);
    let (n, a) = {
        let ca_path = ca_path.clone();
        let crl = crl.clone();
        single_rereading(move |args| {
            args.tls_cert = Some(node.cert);
            args.tls_key = Some(node.key);
            args.tls_ca = Some(ca_path);
            args.tls_crl = Some(crl);
            args.admins = Some("admin.example,carol.example".to_string());
        })
        .await
    };
    let as_ = |who: &Issued| {
        client(
            std::slice::from_ref(&a),
            Some(identity(&ca_path, Some(who))),
            Duration::from_secs(5),
        )
    };
    as_(&admin).create_volume("before", "").await.unwrap();
    let before = as_(&carol).list_volumes("", "", 100).await.unwrap();
    let e = as_(&misnamed)
        .create_volume("misnamed", "")
        .await
        .unwrap_err();
    assert_eq!(e.reason(), "INVALID_CERTIFICATE_NAME", "{e}");
    // Revoke admin's certificate: new connections with it fail their
    // handshake once the list is reread.
    ca.write_crl(dir.path(), "ca", &[&admin]);
    wait_for(Duration::from_secs(10), "the revocation", || async {
        as_(&admin)
            .list_volumes("", "", 1)
            .await
            .is_err()
            .then_some(())
    })
    .await;
    // Never served: the handshake fails, so no answer of om's comes back.
    let e = as_(&admin).create_volume("revoked", "").await.unwrap_err();
    assert!(matches!(e, om_client::ClientError::Unavailable(_)), "{e}");
    assert_eq!(as_(&carol).list_volumes("", "", 100).await.unwrap(), before);
    n.node.shutdown().await;
}

/// Answers every call of service `NAME` with NOT_LEADER naming `leader`:
/// a node (or anything on a client's endpoint list) pointing the client
/// elsewhere.
#[derive(Clone)]
struct Hinting<const N: usize> {
    leader: String,
}

const HINTED_SERVICES: [&str; 2] = ["om.v1.OzoneManager", "om.v1.Cluster"];

impl<const N: usize> tonic::server::NamedService for Hinting<N> {
    const NAME: &'static str = HINTED_SERVICES[N];
}

impl<const N: usize, B> tonic::codegen::Service<tonic::codegen::http::Request<B>> for Hinting<N> {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: tonic::codegen::http::Request<B>) -> Self::Future {
        let mut s = tonic::Status::failed_precondition("not the leader");
        s.metadata_mut()
            .insert("om-reason", "NOT_LEADER".parse().unwrap());
        s.metadata_mut()
            .insert("om-leader", self.leader.parse().unwrap());
        std::future::ready(Ok(s.into_http()))
    }
}

/// The client library follows a leader hint only to an address it was
/// given or to a member in the hinting node's membership: a node that
/// points at a stranger never gets the client to connect there (and send
/// its token), while a hint to an address of its own list is followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_hints_lead_only_to_known_members() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The stranger counts every connection it gets.
    let stranger = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stranger_addr = stranger.local_addr().unwrap().to_string();
    let hits = Arc::new(AtomicUsize::new(0));
    {
        let hits = hits.clone();
        tokio::spawn(async move {
            while let Ok((s, _)) = stranger.accept().await {
                hits.fetch_add(1, Ordering::SeqCst);
                drop(s);
            }
        });
    }
    let hinting = |leader: String| async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(Hinting::<0> {
                    leader: leader.clone(),
                })
                .add_service(Hinting::<1> { leader })
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(l)),
        );
        addr
    };
    let liar = hinting(stranger_addr.clone()).await;
    let token = "omt_00000000000000a1_alice-s3cret-alice-s3cret-alice-s3cret";
    let c = OmClient::new(
        std::slice::from_ref(&liar),
        ClientOptions {
            deadline: Duration::from_secs(2),
            attempt_timeout: Duration::from_millis(500),
            token: Some(token.to_string()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(c.create_volume("vol", "").await.is_err());
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the stranger was contacted");

    // A hint to an endpoint the client was given is followed: a real node.
    let (n, a) = single(|_| {}).await;
    let pointer = hinting(a.grpc.clone()).await;
    let c = OmClient::new(
        &[pointer, a.grpc.clone()],
        ClientOptions {
            deadline: Duration::from_secs(10),
            ..Default::default()
        },
    )
    .unwrap();
    c.create_volume("followed", "").await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    n.node.shutdown().await;
}
