//! Clusters for tests: `TestCluster`, members inside the test process, and
//! `ProcessCluster`, members as real `om` processes. Each finds the leader
//! its running members agree on. `agreed_leader_at` and `claimed_leader` ask
//! members by address, for clusters a test puts together itself.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use om::config::Args;
use om::server::NodeOptions;
use om_client::OmClient;

use crate::{
    Faults, MemberAddrs, OmProcess, TestNode, cluster_addrs, members_client, metrics_of, wait_for,
};

/// Settings a test gives member `id`, beyond the harness's.
type Tweak = Arc<dyn Fn(u64, &mut Args) + Send + Sync>;

/// Test hooks of member `id`.
type Hooks = Arc<dyn Fn(u64) -> NodeOptions + Send + Sync>;

/// How the members of a [`TestCluster`] start; by default with the
/// harness's settings alone.
#[derive(Clone, Default)]
pub struct ClusterOptions {
    tweak: Option<Tweak>,
    hooks: Option<Hooks>,
    faults: Option<Arc<Faults>>,
    joiners: u64,
}

impl ClusterOptions {
    /// Settings beyond the harness's, by member id, applied at every start
    /// (restarts included).
    pub fn tweak(mut self, f: impl Fn(u64, &mut Args) + Send + Sync + 'static) -> Self {
        self.tweak = Some(Arc::new(f));
        self
    }

    /// Test hooks (`NodeOptions`) by member id, e.g. a clock offset.
    pub fn hooks(mut self, f: impl Fn(u64) -> NodeOptions + Send + Sync + 'static) -> Self {
        self.hooks = Some(Arc::new(f));
        self
    }

    /// Raft fault injection shared by every member, at every start.
    pub fn faults(mut self, faults: Arc<Faults>) -> Self {
        self.faults = Some(faults);
        self
    }

    /// The last `k` members are not started with the others. Started later
    /// (`start_member`), they run with `--join`, given the first members as
    /// the cluster to join; the test adds them (AddNode).
    pub fn joiners(mut self, k: u64) -> Self {
        self.joiners = k;
        self
    }
}

/// Members 1..=n of a static cluster inside the test process, on fresh
/// loopback ports and data directories. The running members are shut down
/// by `shutdown`, or else when the cluster is dropped.
pub struct TestCluster {
    addrs: Vec<MemberAddrs>,
    options: ClusterOptions,
    /// The running members, by id - 1.
    nodes: Vec<Option<TestNode>>,
    /// The data directories of stopped members, kept for a restart.
    stopped: Vec<Option<tempfile::TempDir>>,
}

impl TestCluster {
    /// `n` members with the harness's settings, ready (see `start_with`).
    pub async fn start(n: u64) -> TestCluster {
        Self::start_with(n, ClusterOptions::default()).await
    }

    /// Starts `n` members with `options` (joiners excepted), then waits up
    /// to 20 s for a leader they all name and up to 30 s for the cluster id
    /// on every one of them: the first leader names the cluster on its own,
    /// and that write must not land in the middle of a test.
    pub async fn start_with(n: u64, options: ClusterOptions) -> TestCluster {
        let mut c = Self::new(n, options);
        for id in 1..=n - c.options.joiners {
            c.start_member(id).await;
        }
        c.leader().await;
        wait_for(
            Duration::from_secs(30),
            "the cluster id on every member",
            || {
                let named = c.running().all(holds_cluster_id);
                async move { named.then_some(()) }
            },
        )
        .await;
        c
    }

    /// `n` members with `options`, none of them started (see `start_member`).
    pub fn new(n: u64, options: ClusterOptions) -> TestCluster {
        assert!(options.joiners < n, "every member would join: none to join");
        TestCluster {
            addrs: cluster_addrs(n),
            options,
            nodes: (0..n).map(|_| None).collect(),
            stopped: (0..n).map(|_| None).collect(),
        }
    }

    /// Starts member `id`, which must not be running, on the data directory
    /// it last used (a fresh one the first time). Waits for nothing.
    pub async fn start_member(&mut self, id: u64) {
        let i = self.index(id);
        assert!(self.nodes[i].is_none(), "member {id} is running");
        let dir = self.stopped[i]
            .take()
            .unwrap_or_else(|| tempfile::tempdir().expect("tempdir"));
        let initial = self.addrs.len() - self.options.joiners as usize;
        let join = i >= initial;
        let mut opts = self
            .options
            .hooks
            .as_ref()
            .map_or_else(NodeOptions::default, |h| h(id));
        if let Some(f) = &self.options.faults {
            opts.faults = Some(f.clone());
        }
        let tweak = self.options.tweak.clone();
        let node =
            TestNode::start_member_opts(dir, &self.addrs[i], &self.addrs[..initial], opts, |a| {
                if join {
                    a.join = true;
                }
                if let Some(t) = &tweak {
                    t(id, a);
                }
            })
            .await;
        self.nodes[i] = Some(node);
    }

    /// Shuts member `id` down, keeping its data directory for a restart.
    pub async fn stop(&mut self, id: u64) {
        let i = self.index(id);
        let n = self.nodes[i]
            .take()
            .unwrap_or_else(|| panic!("member {id} is not running"));
        self.stopped[i] = Some(n.stop().await);
    }

    /// Stops member `id` if it runs, and starts it again on the same data
    /// directory. Waits for nothing.
    pub async fn restart(&mut self, id: u64) {
        if self.is_running(id) {
            self.stop(id).await;
        }
        self.start_member(id).await;
    }

    /// Stops member `id` if it runs, and starts it again with the same id
    /// and addresses on an empty data directory (a replaced disk). Waits
    /// for nothing.
    pub async fn restart_wiped(&mut self, id: u64) {
        if self.is_running(id) {
            self.stop(id).await;
        }
        let i = self.index(id);
        self.stopped[i] = None;
        self.start_member(id).await;
    }

    /// Whether member `id` is running.
    pub fn is_running(&self, id: u64) -> bool {
        self.nodes[self.index(id)].is_some()
    }

    /// Member `id`, which must be running.
    pub fn node(&self, id: u64) -> &TestNode {
        self.nodes[self.index(id)]
            .as_ref()
            .unwrap_or_else(|| panic!("member {id} is not running"))
    }

    /// The running members, by id.
    pub fn running(&self) -> impl Iterator<Item = &TestNode> {
        self.nodes.iter().flatten()
    }

    /// Every member's addresses, by id (running or not).
    pub fn addrs(&self) -> &[MemberAddrs] {
        &self.addrs
    }

    /// Every member's gRPC address, by id.
    pub fn endpoints(&self) -> Vec<String> {
        self.addrs.iter().map(|a| a.grpc.clone()).collect()
    }

    /// A client of every member (`members_client`: 20 s deadline, the
    /// harness's TLS).
    pub fn client(&self) -> OmClient {
        members_client(&self.addrs)
    }

    /// Waits (up to 20 s) until every running member names the same leader,
    /// one of them, and returns it.
    pub async fn leader(&self) -> u64 {
        self.agreed(&self.running_ids(), None).await
    }

    /// `leader`, once that is another member than `id` (which was stopped,
    /// cut off or asked to hand over).
    pub async fn leader_other_than(&self, id: u64) -> u64 {
        self.agreed(&self.running_ids(), Some(id)).await
    }

    /// Waits (up to 20 s) until the members `ids` name the same leader, one
    /// of them, and returns it: the majority side of a partition, whatever
    /// the others believe.
    pub async fn leader_among(&self, ids: &[u64]) -> u64 {
        self.agreed(ids, None).await
    }

    /// Shuts every running member down.
    pub async fn shutdown(mut self) {
        for n in self.nodes.iter_mut().filter_map(Option::take) {
            n.node.shutdown().await;
        }
    }

    fn running_ids(&self) -> Vec<u64> {
        self.addrs
            .iter()
            .map(|a| a.id)
            .filter(|id| self.is_running(*id))
            .collect()
    }

    /// The leader every member in `among` names, one of them and not `not`.
    async fn agreed(&self, among: &[u64], not: Option<u64>) -> u64 {
        assert!(!among.is_empty(), "no running member to ask");
        wait_for(
            Duration::from_secs(20),
            "a leader the members agree on",
            || {
                let named: Vec<Option<u64>> = among
                    .iter()
                    .map(|id| metrics_of(self.node(*id)).current_leader)
                    .collect();
                let agreed = named[0].filter(|l| {
                    among.contains(l) && Some(*l) != not && named.iter().all(|n| *n == Some(*l))
                });
                async move { agreed }
            },
        )
        .await
    }

    fn index(&self, id: u64) -> usize {
        assert!(
            (1..=self.addrs.len() as u64).contains(&id),
            "no member {id}"
        );
        (id - 1) as usize
    }
}

impl Drop for TestCluster {
    /// Shuts down the members still running: on a multi-thread runtime (the
    /// cluster tests' flavor) by blocking this thread until they stopped,
    /// elsewhere by dropping them as they are.
    fn drop(&mut self) {
        let nodes: Vec<TestNode> = self.nodes.iter_mut().filter_map(Option::take).collect();
        if nodes.is_empty() {
            return;
        }
        let multi_thread = tokio::runtime::Handle::try_current().is_ok_and(|h| {
            matches!(
                h.runtime_flavor(),
                tokio::runtime::RuntimeFlavor::MultiThread
            )
        });
        if multi_thread {
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    for n in nodes {
                        n.node.shutdown().await;
                    }
                })
            });
        }
    }
}

/// Whether `n` has applied the entry that names its cluster.
fn holds_cluster_id(n: &TestNode) -> bool {
    om::store::dump_table(n.node.service.db(), om::store::keys::SETTINGS_CF).is_ok_and(|d| {
        d.keys()
            .any(|(_, k)| k.as_slice() == om::store::keys::CLUSTER_ID_KEY)
    })
}

/// Members 1..=n of a static cluster as real `om` processes, on fresh
/// loopback ports and data directories; dropping it kills them (SIGKILL).
pub struct ProcessCluster {
    /// By id - 1; before `dirs`, so the processes go before their directories.
    procs: Vec<OmProcess>,
    addrs: Vec<MemberAddrs>,
    dirs: Vec<tempfile::TempDir>,
}

impl ProcessCluster {
    /// Spawns `n` members with the harness's flags. Waits for nothing.
    pub fn spawn(n: u64) -> ProcessCluster {
        Self::spawn_with(n, &[], |_| Vec::new())
    }

    /// `spawn`, every member with the extra flags `flags` and member `id`
    /// with the environment variables `env(id)` (both kept for restarts).
    pub fn spawn_with(
        n: u64,
        flags: &[&str],
        env: impl Fn(u64) -> Vec<(String, String)>,
    ) -> ProcessCluster {
        let addrs = cluster_addrs(n);
        let dirs: Vec<tempfile::TempDir> = (0..n)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        let procs: Vec<OmProcess> = addrs
            .iter()
            .zip(&dirs)
            .map(|(a, d)| {
                let owned = env(a.id);
                let vars: Vec<(&str, &str)> = owned
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                OmProcess::spawn_member_env(d.path(), a, &addrs, flags, &vars)
            })
            .collect();
        ProcessCluster { procs, addrs, dirs }
    }

    /// Every member's addresses, by id.
    pub fn addrs(&self) -> &[MemberAddrs] {
        &self.addrs
    }

    /// Every member's gRPC address, by id.
    pub fn endpoints(&self) -> Vec<String> {
        self.addrs.iter().map(|a| a.grpc.clone()).collect()
    }

    /// Every member's data directory, by id.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.path().to_path_buf()).collect()
    }

    /// Every member's process, by id - 1.
    pub fn procs(&self) -> &[OmProcess] {
        &self.procs
    }

    /// Every member's process, by id - 1, to signal, stop or restart.
    pub fn procs_mut(&mut self) -> &mut [OmProcess] {
        &mut self.procs
    }

    /// SIGKILL of member `id`: no shutdown path runs.
    pub fn kill9(&mut self, id: u64) {
        self.procs[(id - 1) as usize].kill9();
    }

    /// Starts member `id` again on its data directory, addresses and flags.
    pub fn restart(&mut self, id: u64) {
        self.procs[(id - 1) as usize].restart();
    }

    /// Waits (up to 30 s) until every running member names the same leader
    /// (`agreed_leader_at`), and returns it.
    pub async fn leader(&self) -> u64 {
        agreed_leader_at(&self.running_endpoints(), None).await
    }

    /// `leader`, once that is another member than `id`.
    pub async fn leader_other_than(&self, id: u64) -> u64 {
        agreed_leader_at(&self.running_endpoints(), Some(id)).await
    }

    fn running_endpoints(&self) -> Vec<String> {
        self.procs
            .iter()
            .filter(|p| p.is_running())
            .map(|p| p.grpc.clone())
            .collect()
    }
}

/// Waits (up to 30 s) until every member at `endpoints` answers for itself
/// (`OmClient::node_status`, plaintext) and all name the same leader, other
/// than `not`; returns it.
pub async fn agreed_leader_at(endpoints: &[String], not: Option<u64>) -> u64 {
    assert!(!endpoints.is_empty(), "no member to ask");
    wait_for(
        Duration::from_secs(30),
        "a leader the members agree on",
        || async move {
            let mut named = Vec::new();
            for e in endpoints {
                let s = OmClient::node_status(e).await.ok()?;
                named.push(s.has_leader.then_some(s.leader_id));
            }
            let first = named[0]?;
            (Some(first) != not && named.iter().all(|l| *l == Some(first))).then_some(first)
        },
    )
    .await
}

/// The first member at `endpoints` that calls itself leader, asking each
/// once in order (`OmClient::node_status`, plaintext); `None` if none does.
/// Under faults it may be a leader the others have replaced already, which
/// is what a nemesis aiming at "the leader" wants.
pub async fn claimed_leader(endpoints: &[String]) -> Option<u64> {
    for e in endpoints {
        if let Ok(s) = OmClient::node_status(e).await
            && s.role == "leader"
        {
            return Some(s.node_id);
        }
    }
    None
}
