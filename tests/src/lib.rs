//! Harness for om's integration tests: in-process nodes on ephemeral ports,
//! real `om` processes that can be killed with SIGKILL, and condition waits
//! with deadlines (never fixed sleeps).

pub mod certs;
pub mod history;
pub mod linearizability;
pub mod mutate;
pub mod netns;
pub mod replicas;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use om::config::{Args, Config};
use std::sync::Arc;

use om::server::{Node, NodeOptions};
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

/// A node running inside the test process.
pub struct TestNode {
    pub node: Node,
    pub dir: tempfile::TempDir,
}

impl TestNode {
    /// A single-node cluster on a fresh data directory, ready to serve.
    pub async fn start() -> TestNode {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Args)) -> TestNode {
        Self::start_in(tempfile::tempdir().expect("tempdir"), tweak).await
    }

    /// Stops the node and starts it again on the same data directory (new
    /// ports: take a fresh `client()`).
    pub async fn restart(self, tweak: impl FnOnce(&mut Args)) -> TestNode {
        let dir = self.stop().await;
        Self::start_in(dir, tweak).await
    }

    /// A single-node cluster on `dir`, initialized on first use.
    pub async fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Args)) -> TestNode {
        Self::start_in_opts(dir, NodeOptions::default(), tweak).await
    }

    /// `start_in` with test hooks.
    pub async fn start_in_opts(
        dir: tempfile::TempDir,
        opts: NodeOptions,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let mut args = Args {
            data_dir: Some(dir.path().to_path_buf()),
            grpc_addr: Some("127.0.0.1:0".parse().unwrap()),
            http_addr: Some("127.0.0.1:0".parse().unwrap()),
            raft_addr: Some("127.0.0.1:0".parse().unwrap()),
            ..Args::default()
        };
        if let Some(p) = mtls() {
            args.tls_cert = Some(p.member.cert.clone());
            args.tls_key = Some(p.member.key.clone());
            args.tls_ca = Some(p.ca_path.clone());
            args.admins = Some(MTLS_CLIENT.to_string());
        }
        tweak(&mut args);
        let node = Node::start_with(Config::load(args).expect("config"), opts)
            .await
            .expect("node starts");
        node.wait_for_leader(Duration::from_secs(10))
            .await
            .expect("leader elected");
        TestNode { node, dir }
    }

    /// Shuts the node down and hands back its data directory for a restart.
    pub async fn stop(self) -> tempfile::TempDir {
        self.node.shutdown().await;
        self.dir
    }

    pub fn endpoint(&self) -> String {
        self.node.grpc_addr.to_string()
    }

    pub fn client(&self) -> OmClient {
        OmClient::new(&[self.endpoint()], ClientOptions::default()).expect("client")
    }

    /// Every metadata-table entry (retry cache excluded), for before/after comparisons.
    pub fn dump(&self) -> om::store::TableDump {
        om::store::dump_tables(self.node.service.db()).expect("dump")
    }
}

/// Addresses of one member of a test cluster.
#[derive(Debug, Clone)]
pub struct MemberAddrs {
    pub id: u64,
    pub grpc: String,
    pub http: String,
    pub raft: String,
}

/// Fresh loopback addresses for `n` members, ids 1..=n.
pub fn cluster_addrs(n: u64) -> Vec<MemberAddrs> {
    (1..=n)
        .map(|id| MemberAddrs {
            id,
            grpc: format!("127.0.0.1:{}", free_port()),
            http: format!("127.0.0.1:{}", free_port()),
            raft: format!("127.0.0.1:{}", free_port()),
        })
        .collect()
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

/// A snapshot of `n`'s Raft metrics.
pub fn metrics_of(n: &TestNode) -> openraft::RaftMetrics<om_raft_store::TypeConfig> {
    let m = n.node.raft.metrics();
    openraft::async_runtime::WatchReceiver::borrow_watched(&m).clone()
}

/// A client of every member in `addrs`, with a 20 s deadline.
pub fn members_client(addrs: &[MemberAddrs]) -> OmClient {
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    OmClient::new(
        &eps,
        ClientOptions {
            deadline: Duration::from_secs(20),
            ..client_options()
        },
    )
    .unwrap()
}

/// A client of one member alone that reads its state as it is (stale
/// reads), giving up after `deadline`.
pub fn local_client(addr: &MemberAddrs, deadline: Duration) -> OmClient {
    OmClient::new(
        std::slice::from_ref(&addr.grpc),
        ClientOptions {
            stale_reads: true,
            deadline,
            attempt_timeout: deadline,
            ..client_options()
        },
    )
    .unwrap()
}

/// Waits (up to 20 s) until every running node names the same leader,
/// other than `not`.
pub async fn agreed_leader(nodes: &[Option<TestNode>], not: Option<u64>) -> u64 {
    wait_for(Duration::from_secs(20), "an agreed leader", || {
        let ls: Vec<Option<u64>> = nodes
            .iter()
            .flatten()
            .map(|n| metrics_of(n).current_leader)
            .collect();
        let first = ls[0];
        let ok = first.is_some() && first != not && ls.iter().all(|l| *l == first);
        async move { if ok { first } else { None } }
    })
    .await
}

/// Runs omctl against `endpoint` with a deadline of `timeout_s` seconds.
pub fn omctl(endpoint: &str, timeout_s: u64, args: &[&str]) -> std::process::Output {
    Command::new(binary("omctl"))
        .args(["--endpoint", endpoint, "--timeout", &timeout_s.to_string()])
        .args(args)
        .output()
        .expect("run omctl")
}

/// The `--initial-cluster` value for `members`.
pub fn initial_cluster(members: &[MemberAddrs]) -> String {
    members
        .iter()
        .map(|m| format!("{}={}/{}", m.id, m.raft, m.grpc))
        .collect::<Vec<_>>()
        .join(",")
}

impl TestNode {
    /// Starts member `me` of a static cluster without waiting for a leader.
    pub async fn start_member(me: &MemberAddrs, all: &[MemberAddrs]) -> TestNode {
        Self::start_member_with(me, all, None, |_| {}).await
    }

    /// `start_member` with Raft fault injection and extra settings.
    pub async fn start_member_with(
        me: &MemberAddrs,
        all: &[MemberAddrs],
        faults: Option<Arc<Faults>>,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_member_in(dir, me, all, faults, tweak).await
    }

    /// Starts member `me` on an existing data directory (a restart).
    pub async fn start_member_in(
        dir: tempfile::TempDir,
        me: &MemberAddrs,
        all: &[MemberAddrs],
        faults: Option<Arc<Faults>>,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let opts = NodeOptions {
            faults,
            ..NodeOptions::default()
        };
        Self::start_member_opts(dir, me, all, opts, tweak).await
    }

    /// `start_member_in` with every test hook of `NodeOptions`.
    pub async fn start_member_opts(
        dir: tempfile::TempDir,
        me: &MemberAddrs,
        all: &[MemberAddrs],
        opts: NodeOptions,
        tweak: impl FnOnce(&mut Args),
    ) -> TestNode {
        let mut args = Args {
            data_dir: Some(dir.path().to_path_buf()),
            grpc_addr: Some(me.grpc.parse().unwrap()),
            http_addr: Some(me.http.parse().unwrap()),
            raft_addr: Some(me.raft.parse().unwrap()),
            node_id: Some(me.id),
            initial_cluster: Some(initial_cluster(all)),
            heartbeat_ms: Some(50),
            election_timeout_ms: Some(300),
            request_timeout_ms: Some(3000),
            ..Args::default()
        };
        if let Some(p) = mtls() {
            args.tls_cert = Some(p.member.cert.clone());
            args.tls_key = Some(p.member.key.clone());
            args.tls_ca = Some(p.ca_path.clone());
            args.admins = Some(MTLS_CLIENT.to_string());
        }
        tweak(&mut args);
        let node = Node::start_with(Config::load(args).expect("config"), opts)
            .await
            .expect("node starts");
        TestNode { node, dir }
    }
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

/// Path of a workspace binary built next to the test executable
/// (`make test` builds them first).
pub fn binary(name: &str) -> PathBuf {
    if let Ok(p) = std::env::var(format!("{}_BIN", name.to_uppercase())) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} not found; build the binaries first (`cargo build --release --bins`, which `make test` does)",
        p.display()
    );
    p
}

/// A real `om` process on loopback ports.
pub struct OmProcess {
    child: Option<Child>,
    pub data_dir: PathBuf,
    pub grpc: String,
    pub http: String,
    pub raft: String,
    /// Flags beyond the addresses, kept for restarts.
    pub extra: Vec<String>,
    /// Environment variables beyond the harness's, kept for restarts.
    pub env: Vec<(String, String)>,
    /// A command that runs `om` (e.g. `ip netns exec NS`), kept for restarts.
    pub wrapper: Vec<String>,
}

impl OmProcess {
    /// Starts `om` on `data_dir` with fresh ports.
    pub fn spawn(data_dir: &Path) -> OmProcess {
        let grpc = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let raft = format!("127.0.0.1:{}", free_port());
        Self::spawn_on(data_dir, grpc, http, raft)
    }

    /// Starts `om` on `data_dir` on fresh ports with extra flags.
    pub fn spawn_args(data_dir: &Path, extra: &[&str]) -> OmProcess {
        let grpc = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let raft = format!("127.0.0.1:{}", free_port());
        let extra = extra.iter().map(|s| s.to_string()).collect();
        Self::spawn_with(data_dir, grpc, http, raft, extra)
    }

    /// Starts `om` on `data_dir` with the given addresses.
    pub fn spawn_on(data_dir: &Path, grpc: String, http: String, raft: String) -> OmProcess {
        Self::spawn_with(data_dir, grpc, http, raft, Vec::new())
    }

    /// Starts member `me` of the static cluster `all` as a real process.
    pub fn spawn_member(data_dir: &Path, me: &MemberAddrs, all: &[MemberAddrs]) -> OmProcess {
        Self::spawn_member_args(data_dir, me, all, &[])
    }

    /// `spawn_member` with extra flags (kept for restarts).
    pub fn spawn_member_args(
        data_dir: &Path,
        me: &MemberAddrs,
        all: &[MemberAddrs],
        more: &[&str],
    ) -> OmProcess {
        let extra = member_flags(me, all, more);
        Self::spawn_with(
            data_dir,
            me.grpc.clone(),
            me.http.clone(),
            me.raft.clone(),
            extra,
        )
    }

    /// `spawn_member_args` with environment variables (both kept for restarts).
    pub fn spawn_member_env(
        data_dir: &Path,
        me: &MemberAddrs,
        all: &[MemberAddrs],
        more: &[&str],
        env: &[(&str, &str)],
    ) -> OmProcess {
        Self::spawn_member_wrapped(data_dir, me, all, more, env, Vec::new())
    }

    /// `spawn_member_env` run through `wrapper` (e.g. `ip netns exec NS`).
    pub fn spawn_member_wrapped(
        data_dir: &Path,
        me: &MemberAddrs,
        all: &[MemberAddrs],
        more: &[&str],
        env: &[(&str, &str)],
        wrapper: Vec<String>,
    ) -> OmProcess {
        let mut p = OmProcess {
            child: None,
            data_dir: data_dir.to_path_buf(),
            grpc: me.grpc.clone(),
            http: me.http.clone(),
            raft: me.raft.clone(),
            extra: member_flags(me, all, more),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            wrapper,
        };
        p.restart();
        p
    }

    fn spawn_with(
        data_dir: &Path,
        grpc: String,
        http: String,
        raft: String,
        extra: Vec<String>,
    ) -> OmProcess {
        let child = start_child(data_dir, &grpc, &http, &raft, &extra, &[], &[]);
        OmProcess {
            child: Some(child),
            data_dir: data_dir.to_path_buf(),
            grpc,
            http,
            raft,
            extra,
            env: Vec::new(),
            wrapper: Vec::new(),
        }
    }

    /// Starts again on the same directory, addresses and flags.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "still running");
        let child = start_child(
            &self.data_dir,
            &self.grpc,
            &self.http,
            &self.raft,
            &self.extra,
            &self.env,
            &self.wrapper,
        );
        self.child = Some(child);
    }

    /// SIGTERM, then waits (at most `timeout`) for the process to exit; a
    /// process still running then is killed. Returns whether it exited by
    /// itself.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        // SAFETY: kill(2) on the pid of a child this handle has not reaped.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = c.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        false
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }
}

/// The flags of member `me` of the static cluster `all`, then `more`.
pub fn member_flags(me: &MemberAddrs, all: &[MemberAddrs], more: &[&str]) -> Vec<String> {
    let mut extra = vec![
        "--node-id".to_string(),
        me.id.to_string(),
        "--initial-cluster".to_string(),
        initial_cluster(all),
        "--heartbeat-ms".to_string(),
        "50".to_string(),
        "--election-timeout-ms".to_string(),
        "300".to_string(),
    ];
    extra.extend(more.iter().map(|s| s.to_string()));
    extra
}

fn start_child(
    data_dir: &Path,
    grpc: &str,
    http: &str,
    raft: &str,
    extra: &[String],
    env: &[(String, String)],
    wrapper: &[String],
) -> Child {
    let mut cmd = match wrapper.split_first() {
        Some((program, args)) => {
            let mut c = Command::new(program);
            c.args(args).arg(binary("om"));
            c
        }
        None => Command::new(binary("om")),
    };
    cmd.arg("--data-dir")
        .arg(data_dir)
        .arg("--grpc-addr")
        .arg(grpc)
        .arg("--http-addr")
        .arg(http)
        .arg("--raft-addr")
        .arg(raft)
        .args(extra)
        .env("OM_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn om")
}

impl OmProcess {
    pub fn client(&self) -> OmClient {
        OmClient::new(
            std::slice::from_ref(&self.grpc),
            ClientOptions {
                deadline: Duration::from_secs(20),
                ..Default::default()
            },
        )
        .expect("client")
    }

    /// Waits until the node answers and is the leader of its one-node cluster.
    pub async fn wait_ready(&self, timeout: Duration) {
        let addr = self.grpc.clone();
        wait_for(timeout, "om to become leader", || {
            let addr = addr.clone();
            async move {
                match OmClient::node_status(&addr).await {
                    Ok(s) if s.role == "leader" => Some(()),
                    _ => None,
                }
            }
        })
        .await
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().expect("SIGKILL");
            let _ = c.wait();
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `sig` (e.g. `libc::SIGSTOP`, `libc::SIGCONT`) to the process.
    pub fn signal(&self, sig: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) on the pid of a child this handle has not reaped.
            unsafe { libc::kill(c.id() as i32, sig) };
        }
    }
}

impl Drop for OmProcess {
    fn drop(&mut self) {
        self.kill9();
    }
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
        std::sync::Arc::new(om::apply::OmApplier),
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
