//! Writes a follower takes: forwarded to the leader in batches, answered as
//! the leader would answer them (results, refusals, retries), authorized by
//! the leader against its state, and named back to the client (`om-leader`)
//! so a client that follows the leader goes there next. Without TLS on the
//! Raft port a forwarded principal is not believed (`tls::raft_port` covers
//! forwarding with TLS).

use std::time::Duration;

use om_client::v1::ozone_manager_client::OzoneManagerClient;
use om_client::v1::{BucketLayout, PutKeyRequest};
use om_client::{ClientError, ClientOptions, OmClient};
use om_proto::raft::raft_peer_client::RaftPeerClient;
use om_proto::raft::{ForwardWritesRequest, ForwardedPrincipal, ForwardedWrite, forwarded_outcome};
use om_proto::store::{Command, command::Op, command_result};
use om_tests::{ClusterOptions, MemberAddrs, TestCluster, TestNode, token_file, wait_for};
use tonic::transport::Channel;

async fn raw(endpoint: &str) -> OzoneManagerClient<Channel> {
    OzoneManagerClient::connect(format!("http://{endpoint}"))
        .await
        .unwrap()
}

fn put(header: om_client::v1::WriteHeader, bucket: &str, key: &str) -> PutKeyRequest {
    PutKeyRequest {
        header: Some(header),
        volume: "vol1".into(),
        bucket: bucket.into(),
        key: key.into(),
        size: 7,
        ..Default::default()
    }
}

/// A client of `addr` alone that stays there (it never follows the leader).
fn pinned(addr: &MemberAddrs, token: Option<&str>) -> OmClient {
    OmClient::new(
        std::slice::from_ref(&addr.grpc),
        ClientOptions {
            spread: true,
            deadline: Duration::from_secs(20),
            token: token.map(str::to_string),
            ..ClientOptions::default()
        },
    )
    .unwrap()
}

/// Asks `addr`'s Raft port, as a member would, to propose `writes`.
async fn forward(
    addr: &MemberAddrs,
    writes: Vec<ForwardedWrite>,
) -> Result<Vec<forwarded_outcome::Outcome>, tonic::Status> {
    let mut peer = RaftPeerClient::connect(format!("http://{}", addr.raft))
        .await
        .unwrap();
    let r = peer
        .forward_writes(ForwardWritesRequest { node_id: 9, writes })
        .await?;
    Ok(r.into_inner()
        .outcomes
        .into_iter()
        .map(|o| o.outcome.expect("an outcome"))
        .collect())
}

/// The reason of a forwarded write's refusal.
fn refusal(o: &forwarded_outcome::Outcome) -> &str {
    match o {
        forwarded_outcome::Outcome::Result(r) => match &r.result {
            Some(command_result::Result::Rejected(r)) => &r.reason,
            other => panic!("expected a refusal, got {other:?}"),
        },
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A forwarded PutKey of vol1/bkt1/`key`.
fn forwarded_put(key: &str, seq: u64) -> ForwardedWrite {
    ForwardedWrite {
        command: Some(Command {
            client_id: "forwarded-test".into(),
            seq,
            op: Some(Op::PutKey(om_proto::store::PutKey {
                volume: "vol1".into(),
                bucket: "bkt1".into(),
                key: key.into(),
                ..Default::default()
            })),
            ..Default::default()
        }),
        principal: None,
    }
}

/// Waits until every replica holds the same tables, and returns them.
async fn settled(cluster: &TestCluster) -> Vec<om::store::TableDump> {
    wait_for(Duration::from_secs(10), "replicas to converge", || {
        let d: Vec<_> = cluster.running().map(TestNode::dump).collect();
        async move { d.windows(2).all(|w| w[0] == w[1]).then_some(d) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_forward_writes_and_answer_as_the_leader() {
    // Started, the cluster is named (InitCluster) on every replica: the
    // dumps compared below hold only this test's writes.
    let cluster = TestCluster::start(3).await;
    let addrs = cluster.addrs();
    let leader = cluster.leader().await;
    let followers: Vec<&MemberAddrs> = addrs.iter().filter(|a| a.id != leader).collect();
    let leader_addr = &addrs[leader as usize - 1];

    // Namespace made through a follower, by a client that stays there.
    let f0 = pinned(followers[0], None);
    f0.create_volume("vol1", "").await.unwrap();
    f0.create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();

    // A write on a follower is applied, and the answer names the leader.
    let header = f0.next_header();
    let mut on_f0 = raw(&followers[0].grpc).await;
    let first = on_f0
        .put_key(put(header.clone(), "bkt1", "k"))
        .await
        .unwrap();
    assert_eq!(
        first
            .metadata()
            .get("om-leader")
            .and_then(|v| v.to_str().ok()),
        Some(leader_addr.grpc.as_str()),
        "a forwarded write names the leader"
    );
    let first = first.into_inner();
    let on_leader = pinned(leader_addr, None);
    let info = on_leader.lookup_key("vol1", "bkt1", "k").await.unwrap();
    assert_eq!(info.size, 7);
    // The leader's own answers name no leader.
    let direct = raw(&leader_addr.grpc)
        .await
        .put_key(put(f0.next_header(), "bkt1", "direct"))
        .await
        .unwrap();
    assert!(direct.metadata().get("om-leader").is_none());

    // A retry through the other follower, and on the leader, is answered
    // from the retry cache: the same answer, no second key version.
    let before = settled(&cluster).await;
    let mut on_f1 = raw(&followers[1].grpc).await;
    let again = on_f1
        .put_key(put(header.clone(), "bkt1", "k"))
        .await
        .unwrap();
    assert_eq!(again.into_inner(), first);
    let again = raw(&leader_addr.grpc)
        .await
        .put_key(put(header.clone(), "bkt1", "k"))
        .await
        .unwrap();
    assert_eq!(again.into_inner(), first);
    // The same (client id, seq) for another request is refused as on the leader.
    let e = on_f1
        .put_key(put(header.clone(), "bkt1", "other"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert_eq!(
        e.metadata().get("om-reason").and_then(|v| v.to_str().ok()),
        Some("RETRY_MISMATCH")
    );
    // A refusal decided at apply comes back with its code and reason.
    let e = on_f1
        .put_key(put(f0.next_header(), "nosuch", "k"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    assert_eq!(
        e.metadata().get("om-reason").and_then(|v| v.to_str().ok()),
        Some("BUCKET_NOT_FOUND")
    );
    // Nothing changed (the dumps leave out the retry cache, which records
    // the refused requests' answers on purpose).
    assert_eq!(settled(&cluster).await, before);

    // The leader's Raft port refuses a batch past its limit, and a write
    // without a command, and changes nothing.
    let too_many = vec![ForwardedWrite::default(); om::service::MAX_FORWARD_WRITES + 1];
    let e = forward(leader_addr, too_many).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let got = forward(leader_addr, vec![ForwardedWrite::default()])
        .await
        .unwrap();
    assert_eq!(refusal(&got[0]), "EMPTY_COMMAND");
    assert_eq!(settled(&cluster).await, before);

    // Many writes at once through both followers: every one applied, once.
    let clients: Vec<OmClient> = followers.iter().map(|f| pinned(f, None)).collect();
    let writes = (0..300).map(|i| {
        let c = &clients[i % clients.len()];
        async move { c.put_key("vol1", "bkt1", &format!("many/{i:03}"), 1).await }
    });
    for r in futures::future::join_all(writes).await {
        r.unwrap();
    }
    let bucket = on_leader.get_bucket("vol1", "bkt1").await.unwrap();
    assert_eq!(bucket.used_namespace, 302);
    settled(&cluster).await;
    cluster.shutdown().await;
}

const OPS: &str = "omt_000000000000000a_ops-secret-ops-secret-ops-secret-ops";
const ALICE: &str = "omt_000000000000000b_alice-secret-alice-secret-alice-secret";
const BOB: &str = "omt_000000000000000c_bob-secret-bob-secret-bob-secret-bob";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_writes_are_authorized_by_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        &[("ops", OPS, ""), ("alice", ALICE, ""), ("bob", BOB, "")],
    );
    let audit_dir = dir.path().to_path_buf();
    let options = ClusterOptions::default().tweak(move |id, args| {
        args.token_file = Some(tokens.clone());
        // Tokens over plaintext on loopback: for tests only.
        args.insecure = true;
        args.admins = Some("ops".to_string());
        args.audit_log = Some(audit_dir.join(format!("audit-{id}.log")));
    });
    let cluster = TestCluster::start_with(3, options).await;
    let addrs = cluster.addrs();
    let leader = cluster.leader().await;
    let follower = addrs.iter().find(|a| a.id != leader).unwrap();
    let (ops, alice, bob) = (
        pinned(follower, Some(OPS)),
        pinned(follower, Some(ALICE)),
        pinned(follower, Some(BOB)),
    );
    wait_for(Duration::from_secs(20), "the cluster id", || {
        let ops = &ops;
        async move {
            ops.cluster_status()
                .await
                .ok()
                .filter(|s| !s.cluster_id.is_empty())
        }
    })
    .await;
    ops.create_volume("vol1", "alice").await.unwrap();
    alice
        .create_bucket("vol1", "bkt1", BucketLayout::ObjectStore)
        .await
        .unwrap();
    alice.put_key("vol1", "bkt1", "mine", 1).await.unwrap();

    // Bob has no right on Alice's bucket, whichever member he asks.
    let before = settled(&cluster).await;
    match bob.put_key("vol1", "bkt1", "his", 1).await {
        Err(ClientError::Api { code, reason, .. }) => {
            assert_eq!(code, tonic::Code::PermissionDenied);
            assert_eq!(reason, "ACCESS_DENIED");
        }
        other => panic!("expected ACCESS_DENIED, got {other:?}"),
    }
    // Acting for Alice needs IMPERSONATE, which Bob lacks.
    let bob_as_alice = OmClient::new(
        std::slice::from_ref(&follower.grpc),
        ClientOptions {
            spread: true,
            token: Some(BOB.to_string()),
            impersonate: Some("alice".to_string()),
            ..ClientOptions::default()
        },
    )
    .unwrap();
    let e = bob_as_alice
        .put_key("vol1", "bkt1", "as-alice", 1)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e}");
    // A member forwarding a write without its client's identity is refused
    // by a leader that authorizes.
    let leader_addr = &addrs[leader as usize - 1];
    let got = forward(leader_addr, vec![forwarded_put("anon", 1)])
        .await
        .unwrap();
    assert_eq!(refusal(&got[0]), "ACCESS_DENIED");
    // Named like any refusal: the right the write needs, and where.
    match &got[0] {
        forwarded_outcome::Outcome::Result(r) => match &r.result {
            Some(command_result::Result::Rejected(r)) => {
                assert_eq!(
                    (r.right.as_str(), r.resource.as_str()),
                    ("WRITE", "/vol1/bkt1"),
                    "{r:?}"
                )
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    // Without TLS nobody on the Raft port proves membership, so a principal
    // it names is not believed: a forged admin's volume is refused too.
    let forged = ForwardedWrite {
        command: Some(Command {
            client_id: "forger".into(),
            seq: 1,
            op: Some(Op::CreateVolume(om_proto::store::CreateVolume {
                name: "stolen".into(),
                owner: "ops".into(),
                ..Default::default()
            })),
            ..Default::default()
        }),
        principal: Some(ForwardedPrincipal {
            name: "ops".into(),
            ..Default::default()
        }),
    };
    let got = forward(leader_addr, vec![forged]).await.unwrap();
    assert_eq!(refusal(&got[0]), "ACCESS_DENIED");
    assert_eq!(settled(&cluster).await, before, "nothing written");
    // The leader audits what it was forwarded, naming the forwarding node
    // (refusals go to the refusals file).
    let path = om::audit::refusals_path(&dir.path().join(format!("audit-{leader}.log")));
    wait_for(
        Duration::from_secs(10),
        "the forwarded refusal audited",
        || {
            let audit = std::fs::read_to_string(&path).unwrap_or_default();
            let found = audit.lines().any(|l| {
                l.contains("\"via\":\"forwarded\"")
                    && l.contains("\"operation\":\"CreateVolume\"")
                    && l.contains("\"result\":\"ACCESS_DENIED\"")
                    && l.contains("forwarded by node 9 (unproven")
            });
            async move { found.then_some(()) }
        },
    )
    .await;
    cluster.shutdown().await;
}
