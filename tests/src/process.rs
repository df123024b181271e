//! Real `om` processes on loopback ports, which a test can kill with
//! SIGKILL, pause and restart on the same data directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use om_client::{ClientOptions, OmClient};

use crate::{MemberAddrs, free_port, initial_cluster, wait_for};

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

    /// Waits (up to 30 s) until the process exits by itself; its status.
    /// Panics, naming `what`, if it runs on.
    pub async fn exits(&mut self, what: &str) -> std::process::ExitStatus {
        let t = std::time::Instant::now();
        loop {
            if let Some(s) = self.exited() {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{what}: went on running"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How the process ended, if it exited by itself (it is then no longer
    /// running, and `restart` starts it again).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
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
