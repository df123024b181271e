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
    let ch = channel(target, Some(outsider.clone())).await.unwrap();
    let mut raft = RaftServiceClient::new(ch.clone());
    let high = before[0].0 + 100;
    let denied = tonic::Code::PermissionDenied;
    let v = raft
        .vote(pb::VoteRequest {
            vote: Some(vote(high, 9)),
            last_log_id: None,
            leadership_transfer: false,
        })
        .await;
    assert_eq!(code(v), denied);
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
    assert_eq!(code(a), denied);
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
    assert_eq!(code(s), denied);
    let t = raft
        .transfer_leader(pb::TransferLeaderRequest {
            from: Some(vote(before[0].0, leader)),
            to: 9,
            last_log_id: None,
        })
        .await;
    assert_eq!(code(t), denied);
    let mut peer = RaftPeerClient::new(ch);
    let p = peer.peer_state(pb::PeerStateRequest { node_id: 9 }).await;
    assert_eq!(code(p), denied);
    let r = peer
        .rejoin(pb::RejoinRequest {
            node_id: 1,
            has_log: false,
            last_log_index: 0,
            stuck: true,
        })
        .await;
    assert_eq!(code(r), denied);

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
    // lacks the member marker.
    let client_only = sc.ca.issue(sc.dir.path(), "client-ip", &["127.0.0.1"]);
    let ch = channel(target, Some(identity(&sc.ca_path, Some(&client_only))))
        .await
        .unwrap();
    let s = RaftServiceClient::new(ch.clone())
        .vote(pb::VoteRequest {
            vote: Some(vote(high, 2)),
            last_log_id: None,
            leadership_transfer: false,
        })
        .await
        .unwrap_err();
    assert_eq!(s.code(), denied, "{s:?}");
    assert!(s.message().contains("member marker"), "{s:?}");
    let p = RaftPeerClient::new(ch)
        .peer_state(pb::PeerStateRequest { node_id: 2 })
        .await;
    assert_eq!(code(p), denied);

    // A member's identity is served (the check refuses outsiders, not all).
    let member = sc.ca.issue_member(sc.dir.path(), "member", &["127.0.0.1"]);
    let ch = channel(target, Some(identity(&sc.ca_path, Some(&member))))
        .await
        .unwrap();
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
            let ch = channel(&target, Some(tls)).await.unwrap();
            RaftServiceClient::new(ch)
                .vote(pb::VoteRequest {
                    vote: Some(vote(7, claims)),
                    last_log_id: None,
                    leadership_transfer: false,
                })
                .await
        }
    };
    // Another host's member certificate; a client certificate of a member's host.
    let stranger = ca.issue_member(dir.path(), "stranger", &["127.0.0.9"]);
    let s = ask(&stranger, 1).await.unwrap_err();
    assert_eq!(s.code(), denied, "{s:?}");
    assert!(s.message().contains("names none"), "{s:?}");
    let client_only = ca.issue(dir.path(), "client", &["127.0.0.2"]);
    let s = ask(&client_only, 1).await.unwrap_err();
    assert_eq!(s.code(), denied, "{s:?}");
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

/// The status code of a request that must have been refused.
fn code<T>(r: Result<tonic::Response<T>, tonic::Status>) -> tonic::Code {
    match r {
        Ok(_) => panic!("an outsider's request was served"),
        Err(s) => s.code(),
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
    let addrs = cluster_addrs(1);
    let a = addrs[0].clone();
    let n = TestNode::start_member_opts(
        tempfile::tempdir().unwrap(),
        &a,
        &addrs,
        NodeOptions::default(),
        tweak,
    )
    .await;
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
            om::grpc::auth::token_line("alice", "alice-s3cret", b"0123456789abcdef")
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
        let alice = token_client(a, tls.clone(), Some("alice-s3cret"));
        alice.create_volume("by-token", "").await.unwrap();
        let before = alice.list_volumes("", "", 100).await.unwrap();
        for (token, reason) in [
            (None, "CREDENTIALS_REQUIRED"),
            (Some("forged"), "INVALID_TOKEN"),
            (Some("alice-s3cret "), "INVALID_TOKEN"),
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
    }
    tls_node.node.shutdown().await;
    plain_node.node.shutdown().await;
}

/// `omctl token hash` prints a line the server accepts for that token, and
/// `omctl --token` (here through OM_TOKEN) authenticates with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn omctl_hashes_tokens_and_presents_them() {
    use std::io::Write;
    let omctl = om_tests::binary("omctl");
    let mut child = std::process::Command::new(&omctl)
        .args(["token", "hash", "gateway"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"gw-t0ken\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(
        line.starts_with("gateway ") && !line.contains("gw-t0ken"),
        "{line}"
    );
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, &line).unwrap();
    let (n, a) = single(move |args| {
        args.token_file = Some(tokens);
        args.insecure = true;
        args.admins = Some("gateway".to_string());
    })
    .await;
    let run = |token: Option<&str>| {
        let mut cmd = std::process::Command::new(&omctl);
        cmd.args([
            "--endpoint",
            &a.grpc,
            "--timeout",
            "5",
            "volume",
            "create",
            "from-omctl",
        ]);
        cmd.env_remove("OM_TOKEN");
        if let Some(t) = token {
            cmd.env("OM_TOKEN", t);
        }
        cmd.output().unwrap()
    };
    let denied = run(Some("wrong"));
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("INVALID_TOKEN"));
    assert!(run(Some("gw-t0ken")).status.success());
    n.node.shutdown().await;
}
