//! Harness for om's integration tests: in-process nodes on ephemeral ports
//! (`node`), real `om` processes that can be killed with SIGKILL (`process`),
//! clusters of either that find the leader their members agree on
//! (`cluster`), and condition waits with deadlines (never fixed sleeps).
//! Everything is re-exported here, as `om_tests::TestCluster` and so on.

pub mod certs;
pub mod history;
pub mod lazyfs;
pub mod linearizability;
pub mod mutate;
pub mod netns;
pub mod replicas;
pub mod tmpfs;
pub mod writes;

mod cluster;
mod node;
mod process;

pub use cluster::*;
pub use node::*;
pub use process::*;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use om_client::{ClientOptions, OmClient};
pub use om_raft_store::network::Faults;

/// Polls `f` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The certificates of a harness run with mutual TLS on (`OM_TEST_MTLS=1`):
/// one CA, one member certificate naming 127.0.0.1 (every test member's Raft
/// host) that every in-process node presents, and a client certificate.
pub struct Pki {
    _dir: tempfile::TempDir,
    pub ca_path: PathBuf,
    pub member: certs::Issued,
    pub client: Arc<om_tls::ClientTls>,
}

/// The name in the harness's client certificate; nodes started with mutual
/// TLS take it as their admin (`--admins`).
pub const MTLS_CLIENT: &str = "test-client";

/// The harness's certificates when `OM_TEST_MTLS=1`: then every node started
/// through `TestNode` serves mutual TLS on both gRPC ports, and clients built
/// from `client_options()` present the client certificate. `make test` runs
/// the cluster and linearizability tests again this way.
pub fn mtls() -> Option<&'static Pki> {
    static PKI: std::sync::OnceLock<Option<Pki>> = std::sync::OnceLock::new();
    PKI.get_or_init(|| {
        if std::env::var("OM_TEST_MTLS").as_deref() != Ok("1") {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = certs::TestCa::new("om test CA");
        let ca_path = ca.write(dir.path(), "ca");
        let member = ca.issue_member(dir.path(), "member", &["127.0.0.1", "localhost"]);
        let client_cert = ca.issue(dir.path(), "client", &[MTLS_CLIENT]);
        let client = om_tls::ClientTls::load(
            MTLS_CLIENT,
            om_tls::TlsFiles {
                cert: Some(client_cert.cert),
                key: Some(client_cert.key),
                ca: Some(ca_path.clone()),
                crl: None,
            },
        )
        .expect("client TLS");
        Some(Pki {
            _dir: dir,
            ca_path,
            member,
            client,
        })
    })
    .as_ref()
}

/// TLS presenting the harness's member certificate (to speak to a Raft port
/// as a member) when `OM_TEST_MTLS=1`, else none.
pub fn mtls_member() -> Option<Arc<om_tls::ClientTls>> {
    mtls().map(|p| {
        om_tls::ClientTls::load(
            "member",
            om_tls::TlsFiles {
                cert: Some(p.member.cert.clone()),
                key: Some(p.member.key.clone()),
                ca: Some(p.ca_path.clone()),
                crl: None,
            },
        )
        .expect("member TLS")
    })
}

/// Default client options, with the harness's client certificate when
/// `OM_TEST_MTLS=1`.
pub fn client_options() -> ClientOptions {
    ClientOptions {
        tls: mtls().map(|p| p.client.clone()),
        ..ClientOptions::default()
    }
}

/// Runs omctl against `endpoint` with a deadline of `timeout_s` seconds.
pub fn omctl(endpoint: &str, timeout_s: u64, args: &[&str]) -> std::process::Output {
    Command::new(binary("omctl"))
        .args(["--endpoint", endpoint, "--timeout", &timeout_s.to_string()])
        .args(args)
        .output()
        .expect("run omctl")
}

/// A token file at `dir/tokens` holding `(principal, token, groups)` (groups
/// space-separated, may be empty), each token salted with
/// `salt-for-PRINCIPAL` (at least the 8 bytes a token file needs).
pub fn token_file(dir: &Path, tokens: &[(&str, &str, &str)]) -> PathBuf {
    let p = dir.join("tokens");
    let lines: String = tokens
        .iter()
        .map(|(who, token, groups)| {
            let line = om::grpc::auth::token_line(who, token, format!("salt-for-{who}").as_bytes());
            match *groups {
                "" => format!("{line}\n"),
                g => format!("{line} {g}\n"),
            }
        })
        .collect();
    std::fs::write(&p, lines).expect("token file");
    p
}

/// The secrets key test nodes seal S3 secrets under unless a test gives
/// another: `test-key`, all bytes 0x5a.
pub const TEST_SECRETS_KEY: &str =
    "test-key 5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

/// A file holding `TEST_SECRETS_KEY`, written once per test process.
pub fn test_secrets_key_file() -> PathBuf {
    static FILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("om-test-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("secrets key dir");
        let p = dir.join("secrets.key");
        std::fs::write(&p, format!("{TEST_SECRETS_KEY}\n")).expect("secrets key file");
        p
    })
    .clone()
}

/// A loopback port for a test server, taken from below the kernel's ephemeral
/// range (which starts at 32768 on Linux), so no outgoing connection of this or
/// another test can grab it between the choice and the bind. Each test process
/// starts at its own offset and hands out each port once.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 12_000;
    const HIGH: u32 = 32_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let _ = NEXT.compare_exchange(
        0,
        LOW + (std::process::id() % 200) * 100,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    loop {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let port = (LOW + (n - LOW) % (HIGH - LOW)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The repository's root directory. Cargo sets `CARGO_MANIFEST_DIR` when it
/// runs a test, and that is preferred to the path compiled in: a target
/// directory shared between clones at different paths keeps test binaries
/// built in another clone, whose compiled-in path may not exist here.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("..")
}

/// Asserts that `r` is the API error `code` with `reason` on `field`.
pub fn assert_err(
    r: Result<impl std::fmt::Debug, om_client::ClientError>,
    code: tonic::Code,
    reason: &str,
    field: &str,
) {
    match r {
        Err(om_client::ClientError::Api {
            code: c,
            reason: re,
            field: f,
            ..
        }) => {
            assert_eq!(c, code, "code for {re}");
            assert_eq!(re, reason);
            assert_eq!(f, field, "field for {re}");
        }
        other => panic!("expected {code:?} {reason}, got {other:?}"),
    }
}

/// Runs `f`, expects the given error, and checks that no table of `node` changed.
pub async fn rejected<T: std::fmt::Debug>(
    node: &TestNode,
    f: impl std::future::Future<Output = Result<T, om_client::ClientError>>,
    code: tonic::Code,
    reason: &str,
    field: &str,
) {
    let before = node.dump();
    assert_err(f.await, code, reason, field);
    assert_eq!(
        before,
        node.dump(),
        "{reason}: a rejected request changed the tables"
    );
}

/// Every block id in the deleted-blocks table, oldest entry first, read in
/// small pages so the listing's continuation is exercised too.
pub async fn deleted_block_ids(c: &OmClient) -> Vec<u64> {
    let mut out = Vec::new();
    let mut after = String::new();
    loop {
        let page = c
            .list_deleted_blocks(om_client::v1::ListDeletedBlocksRequest {
                after: after.clone(),
                max_entries: 2,
                ..Default::default()
            })
            .await
            .expect("list deleted blocks");
        out.extend(
            page.entries
                .iter()
                .flat_map(|e| e.blocks.iter().map(|b| b.block_id)),
        );
        if !page.truncated {
            return out;
        }
        after = page.next_after;
    }
}

/// `http_get`, or `None` while nothing listens at `addr` (a process still
/// starting).
pub async fn try_http_get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}

/// The body-and-headers text of an HTTP/1.1 GET to `addr` (for /metrics,
/// /healthz, /readyz).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
    try_http_get(addr, path)
        .await
        .unwrap_or_else(|| panic!("GET {path} from {addr} failed"))
}

/// Every entry of every replicated table of a stopped node's data directory
/// (the retry cache included), by (table, key): what replicas must hold alike.
pub fn dump_data_dir(data_dir: &Path) -> om::store::TableDump {
    let store = om_raft_store::open(
        data_dir,
        om::store::table_descriptors(),
        std::sync::Arc::new(om::apply::OmApplier::default()),
    )
    .expect("open a stopped node's store");
    let mut out = om::store::TableDump::new();
    for &cf in om::store::keys::TABLE_CFS {
        out.extend(om::store::dump_table(&store.db, cf).expect("dump"));
    }
    out
}

/// The first entry where two dumps differ, for a readable failure.
pub fn first_difference(
    a: &om::store::TableDump,
    b: &om::store::TableDump,
) -> Option<(String, Option<usize>, Option<usize>)> {
    let keys: std::collections::BTreeSet<_> = a.keys().chain(b.keys()).collect();
    keys.into_iter().find_map(|k| {
        let (x, y) = (a.get(k), b.get(k));
        (x != y).then(|| {
            (
                format!("{}/{}", k.0, String::from_utf8_lossy(&k.1).escape_debug()),
                x.map(Vec::len),
                y.map(Vec::len),
            )
        })
    })
}
