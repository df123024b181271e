//! TLS on the public gRPC port and mutual TLS on the Raft port: a cluster
//! that serves and replicates over it, clients and outsiders it refuses
//! (with every replica unchanged), and certificates replaced while serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use om::server::NodeOptions;
use om_client::v1::BucketLayout;
use om_client::{ClientOptions, OmClient};
use om_tests::certs::{Issued, TestCa};
use om_tests::{MemberAddrs, TestNode, cluster_addrs, wait_for};
use om_tls::rustls::pki_types::pem::PemObject;
use om_tls::{ClientTls, TlsFiles};
use tonic::transport::{Channel, Endpoint};

mod raft_port;
mod tokens;

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
