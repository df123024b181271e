//! The StatefulSet as processes, for `statefulset`'s tests: each pod's
//! containers as `Proc`s with host directories for their volumes and the
//! CSI driver's files, a write load, and `Sts`, the whole set with an admin
//! client.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{CSIVolumeSource, Container, PersistentVolumeClaim, PodSpec};
use om_client::{ClientOptions, OmClient};
use om_tests::certs::TestCa;

use super::helpers::*;
use super::render::*;

/// One container of a pod run as a process: its command and environment as
/// Kubernetes gives them, the paths of the pod's volumes replaced by the
/// host directories standing for them, and the image's programs on PATH.
#[derive(Clone)]
pub(crate) struct Proc {
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
}

impl Proc {
    /// Container `c` of pod `pod`: `dirs` maps each of the pod's volumes, by
    /// name, to a host directory; `bin` holds `om` and `omctl`.
    pub(crate) fn of(
        c: &Container,
        pod: &str,
        m: &Manifests,
        dirs: &BTreeMap<String, PathBuf>,
        bin: &Path,
    ) -> Proc {
        let mounts = mounts_of(c, dirs);
        let argv = argv_of(c).iter().map(|a| host_paths(a, &mounts)).collect();
        let mut env: Vec<(String, String)> = container_env(c, pod, &m.ns(), m.config())
            .into_iter()
            .map(|(k, v)| (k, host_paths(&v, &mounts)))
            .collect();
        env.push(("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())));
        env.push(("HOSTNAME".into(), pod.into()));
        env.push(("OM_LOG".into(), "warn".into()));
        Proc { argv, env }
    }

    /// The process, with nothing of the test's own environment.
    pub(crate) fn command(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().cloned());
        cmd
    }
}

/// A container's mount paths and the host directories standing for their
/// volumes, longest path first.
pub(crate) fn mounts_of(c: &Container, dirs: &BTreeMap<String, PathBuf>) -> Vec<(String, PathBuf)> {
    let mut mounts: Vec<(String, PathBuf)> = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|v| {
            assert!(v.sub_path.is_none(), "{}: a subPath mount", v.name);
            let dir = dirs
                .get(&v.name)
                .unwrap_or_else(|| panic!("no directory for volume {}", v.name));
            (v.mount_path.clone(), dir.clone())
        })
        .collect();
    mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    mounts
}

/// `s` with every path under a mount replaced by the host directory
/// standing for the mounted volume, in one pass (a replacement is not
/// looked at again).
pub(crate) fn host_paths(s: &str, mounts: &[(String, PathBuf)]) -> String {
    let path_char = |c: char| c.is_ascii_alphanumeric() || "-_./".contains(c);
    let mut out = String::new();
    let mut i = 0;
    'scan: while i < s.len() {
        let starts_path = !s[..i].chars().next_back().is_some_and(path_char);
        if starts_path {
            for (from, to) in mounts {
                let end = i + from.len();
                if s[i..].starts_with(from.as_str())
                    && !s[end..]
                        .chars()
                        .next()
                        .is_some_and(|c| path_char(c) && c != '/')
                {
                    out.push_str(to.to_str().unwrap());
                    i = end;
                    continue 'scan;
                }
            }
        }
        let c = s[i..].chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Writes `om` and `omctl` into `bin`, as the containers find them on
/// their PATH: the real programs behind the cluster's DNS, which this test
/// stands in for. Each name of `names` in their arguments, in
/// OM_INITIAL_CLUSTER and in OM_ENDPOINT becomes its address.
pub(crate) fn write_programs(bin: &Path, names: &[(String, String)]) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(bin).unwrap();
    let mut names = names.to_vec();
    names.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    let seds: String = names
        .iter()
        .map(|(n, ip)| format!(" -e 's/{}/{ip}/g'", n.replace('.', "\\.")))
        .collect();
    for program in ["om", "omctl"] {
        let real = om_tests::binary(program);
        let text = format!(
            r#"#!/bin/sh
map() {{ printf '%s' "$1" | sed{seds}; }}
for a; do
  shift
  set -- "$@" "$(map "$a")"
done
if [ -n "${{OM_INITIAL_CLUSTER:-}}" ]; then OM_INITIAL_CLUSTER=$(map "$OM_INITIAL_CLUSTER"); export OM_INITIAL_CLUSTER; fi
if [ -n "${{OM_ENDPOINT:-}}" ]; then OM_ENDPOINT=$(map "$OM_ENDPOINT"); export OM_ENDPOINT; fi
exec '{}' "$@"
"#,
            real.display()
        );
        let p = bin.join(program);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Writes into `dir` what cert-manager's CSI driver puts in volume `csi`:
/// the CA and a certificate for `names` with its key, the files named as
/// the volume's attributes say; a member's certificate (with the member
/// marker) where the volume asks for it.
pub(crate) fn write_csi_files(dir: &Path, csi: &CSIVolumeSource, ca: &TestCa, names: &[String]) {
    let stem = |key: &str, ext: &str| {
        csi_attribute(csi, key)
            .strip_suffix(ext)
            .unwrap_or_else(|| panic!("{key}: a {ext} file"))
            .to_string()
    };
    let cert = stem("certificate-file", ".crt");
    assert_eq!(
        stem("privatekey-file", ".key"),
        cert,
        "the key is named after the certificate"
    );
    ca.write(dir, &stem("ca-file", ".crt"));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let member = csi
        .volume_attributes
        .as_ref()
        .and_then(|a| a.get(&format!("{CSI_DRIVER}/uri-sans")))
        .is_some_and(|u| {
            split_list(u)
                .iter()
                .any(|x| x == om::grpc::peer::MEMBER_MARKER)
        });
    if member {
        ca.issue_member(dir, &cert, &refs);
    } else {
        ca.issue(dir, &cert, &refs);
    }
}

/// Host directories for a pod's volumes: the claim (the backup volume,
/// the only claim a pod mounts, with components/restore) is `claim`,
/// shared; every other volume,
/// and each volume claim template of the StatefulSet, a directory of
/// `pod_dir` of its own.
pub(crate) fn volume_dirs(
    pod: &PodSpec,
    templates: &[PersistentVolumeClaim],
    pod_dir: &Path,
    claim: &Path,
) -> BTreeMap<String, PathBuf> {
    let mut dirs = BTreeMap::new();
    for v in pod.volumes.iter().flatten() {
        let dir = if v.persistent_volume_claim.is_some() {
            claim.to_path_buf()
        } else {
            pod_dir.join(&v.name)
        };
        dirs.insert(v.name.clone(), dir);
    }
    for t in templates {
        let name = t.metadata.name.clone().unwrap();
        dirs.insert(name.clone(), pod_dir.join(name));
    }
    for d in dirs.values() {
        std::fs::create_dir_all(d).unwrap();
    }
    dirs
}

/// One pod of the StatefulSet run as processes: its init container, then
/// its om container, as `Proc`s. Its address is 127.0.NET.(ordinal+1),
/// each test its own NET.
pub(crate) struct Pod {
    pub(crate) net: u8,
    pub(crate) ordinal: usize,
    /// Its om.toml.
    pub(crate) config: PathBuf,
    pub(crate) init: Proc,
    pub(crate) main: Proc,
    pub(crate) child: Option<Child>,
}

impl Pod {
    pub(crate) fn ip(&self) -> String {
        format!("127.0.{}.{}", self.net, self.ordinal + 1)
    }

    /// Runs the init container to completion, then starts om.
    pub(crate) fn start(&mut self) {
        let out = self.init.command().output().unwrap();
        assert!(
            out.status.success(),
            "pod {}: the init container failed ({}):\n{}{}",
            self.ordinal,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let mut cmd = self.main.command();
        cmd.stdout(std::process::Stdio::null());
        self.child = Some(cmd.spawn().unwrap());
    }

    pub(crate) fn signal(&mut self, sig: i32) -> Duration {
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        unsafe { libc::kill(child.id() as i32, sig) };
        child.wait().unwrap();
        started.elapsed()
    }

    pub(crate) async fn ready(&self) -> bool {
        let addr: std::net::SocketAddr = format!("{}:9874", self.ip()).parse().unwrap();
        match tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(_)) => om_tests::http_get(addr, "/readyz")
                .await
                .starts_with("HTTP/1.1 200"),
            _ => false,
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes keys as fast as acknowledgements come back, recording each
/// acknowledged key, every client-visible error, and the longest stretch
/// without an acknowledgement since `mark`.
pub(crate) struct Load {
    pub(crate) acked: std::sync::Mutex<Vec<String>>,
    pub(crate) errors: std::sync::Mutex<Vec<String>>,
    pub(crate) last_ack: std::sync::Mutex<Instant>,
    pub(crate) longest_gap: std::sync::Mutex<Duration>,
    pub(crate) stop: AtomicBool,
}

impl Load {
    pub(crate) fn mark(&self) {
        *self.longest_gap.lock().unwrap() = Duration::ZERO;
    }

    pub(crate) fn gap(&self) -> Duration {
        let since = self.last_ack.lock().unwrap().elapsed();
        (*self.longest_gap.lock().unwrap()).max(since)
    }
}

pub(crate) async fn write_loop(c: Arc<OmClient>, load: Arc<Load>) {
    let mut i = 0u64;
    while !load.stop.load(Ordering::Relaxed) {
        let key = format!("k{i:08}");
        match c.put_key("vol1", "bkt1", &key, 1).await {
            Ok(_) => {
                let now = Instant::now();
                let mut last = load.last_ack.lock().unwrap();
                let gap = now - *last;
                *last = now;
                let mut longest = load.longest_gap.lock().unwrap();
                *longest = (*longest).max(gap);
                load.acked.lock().unwrap().push(key);
            }
            Err(e) => load.errors.lock().unwrap().push(format!("{key}: {e}")),
        }
        i += 1;
    }
}

pub(crate) async fn wait_ready(pods: &[Pod]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for p in pods {
        while !p.ready().await {
            assert!(
                Instant::now() < deadline,
                "om-{} never became ready",
                p.ordinal
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub(crate) async fn leader_ordinal(c: &OmClient) -> usize {
    let s = c.cluster_status().await.unwrap();
    s.leader_id as usize - 1
}

/// The base's StatefulSet as processes, with a test CA standing in for
/// cert-manager, loopback addresses for the cluster's DNS, a directory for
/// the backup volume, and an admin client.
pub(crate) struct Sts {
    pub(crate) dir: tempfile::TempDir,
    /// The rendering the pods run, with the test's restore_from.
    pub(crate) m: Manifests,
    pub(crate) ca: TestCa,
    /// `om` and `omctl` (write_programs).
    pub(crate) bin: PathBuf,
    /// The backup volume.
    pub(crate) backups: PathBuf,
    pub(crate) pods: Vec<Pod>,
    pub(crate) client: Arc<OmClient>,
}

/// Ordinals a test may run (0..MAX_PODS); each pod has its own member
/// certificate naming only its own address, as the CSI driver's names only
/// its own host in Kubernetes.
pub(crate) const MAX_PODS: usize = 4;

impl Sts {
    /// Starts `replicas` pods at once (Parallel pod management) on
    /// 127.0.NET.N, waits until each is ready, and creates vol1/bkt1.
    pub(crate) async fn start(net: u8, replicas: usize) -> Sts {
        Sts::start_with(net, replicas, None, "").await
    }

    /// `start` with the backup volume at `backups` (a fresh directory
    /// without) and the ConfigMap's restore_from; a cluster restored from a
    /// backup (the base with components/restore, which mounts the backups
    /// in the init container) already holds vol1/bkt1.
    pub(crate) async fn start_with(
        net: u8,
        replicas: usize,
        backups: Option<&Path>,
        restore_from: &str,
    ) -> Sts {
        let mut m = if restore_from.is_empty() {
            render(&kube_dir())
        } else {
            render_with_components("om", &["restore"])
        };
        let config_name = m.config().0.to_string();
        m.config_maps
            .iter_mut()
            .find(|c| c.metadata.name.as_deref() == Some(config_name.as_str()))
            .and_then(|c| c.data.as_mut())
            .unwrap()
            .insert("restore_from".into(), restore_from.into());
        let dir = tempfile::tempdir().unwrap();
        let backups = backups
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.path().join("backups"));
        std::fs::create_dir_all(&backups).unwrap();
        let ca = TestCa::new("om cluster CA");
        let ca_path = ca.write(dir.path(), "ca");
        let admin = ca.issue(dir.path(), "admin", &["om-admin"]);
        let ips: Vec<String> = (1..=MAX_PODS).map(|n| format!("127.0.{net}.{n}")).collect();
        // The cluster's DNS: each pod's peer name is its address, the
        // client Service's names the first pod's.
        let hosts: Vec<String> = (0..MAX_PODS).map(|i| m.peer_host(i)).collect();
        let mut names: Vec<(String, String)> = hosts.iter().cloned().zip(ips.clone()).collect();
        for n in m.client_names() {
            names.push((n, ips[0].clone()));
        }
        let bin = dir.path().join("bin");
        write_programs(&bin, &names);

        let (ns, sts_name) = (m.ns(), m.sts_name());
        let templates = m
            .sts()
            .spec
            .as_ref()
            .unwrap()
            .volume_claim_templates
            .clone()
            .unwrap_or_default();
        let tls = csi_volume(m.pod(), "tls");
        let mut pods: Vec<Pod> = (0..MAX_PODS)
            .map(|i| {
                let pod = format!("{sts_name}-{i}");
                let dirs = volume_dirs(m.pod(), &templates, &dir.path().join(&pod), &backups);
                // The member certificate the CSI driver would write, with
                // the names it gives the pod, its peer name mapped to its
                // address as the programs map it.
                let names: Vec<String> = csi_dns_names(tls, &pod, &ns)
                    .into_iter()
                    .map(|n| match hosts.iter().position(|h| *h == n) {
                        Some(j) => ips[j].clone(),
                        None => n,
                    })
                    .collect();
                assert_eq!(
                    names.iter().filter(|n| ips.contains(n)).collect::<Vec<_>>(),
                    vec![&ips[i]],
                    "{pod} names its own address only"
                );
                write_csi_files(&dirs["tls"], tls, &ca, &names);
                // The ConfigMap's files; om listens on the pod's address.
                let mounts = mounts_of(m.om(), &dirs);
                for (key, value) in m.config().1 {
                    let text = match key.as_str() {
                        "om.toml" => host_paths(&value.replace("0.0.0.0", &ips[i]), &mounts),
                        _ => value.clone(),
                    };
                    std::fs::write(dirs["config"].join(key), text).unwrap();
                }
                Pod {
                    net,
                    ordinal: i,
                    config: dirs["config"].join("om.toml"),
                    init: Proc::of(m.restore(), &pod, &m, &dirs, &bin),
                    main: Proc::of(m.om(), &pod, &m, &dirs, &bin),
                    child: None,
                }
            })
            .collect();
        for p in pods[..replicas].iter_mut().rev() {
            p.start();
        }
        wait_ready(&pods[..replicas]).await;
        let tls = om_tls::ClientTls::load(
            "om-admin",
            om_tls::TlsFiles {
                cert: Some(admin.cert.clone()),
                key: Some(admin.key.clone()),
                ca: Some(ca_path.clone()),
                crl: None,
            },
        )
        .unwrap();
        let endpoints: Vec<String> = ips[..replicas]
            .iter()
            .map(|ip| format!("{ip}:9862"))
            .collect();
        let client = Arc::new(
            OmClient::new(
                &endpoints,
                ClientOptions {
                    tls: Some(tls),
                    deadline: Duration::from_secs(30),
                    attempt_timeout: Duration::from_secs(2),
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        if restore_from.is_empty() {
            client.create_volume("vol1", "om-admin").await.unwrap();
            client
                .create_bucket("vol1", "bkt1", om_client::v1::BucketLayout::ObjectStore)
                .await
                .unwrap();
        }
        Sts {
            dir,
            m,
            ca,
            bin,
            backups,
            pods,
            client,
        }
    }

    /// The backup CronJob's container run once, as its Job runs it: its
    /// client certificate from the test CA with the names its CSI volume
    /// asks for, the backup volume shared with the pods. Returns what it
    /// printed; panics unless it succeeds.
    pub(crate) fn run_backup_job(&self) -> String {
        let m = &self.m;
        let job = m.job_pod();
        let pod = format!(
            "{}-manual",
            m.cronjob.as_ref().unwrap().metadata.name.as_ref().unwrap()
        );
        let dirs = volume_dirs(job, &[], &self.dir.path().join(&pod), &self.backups);
        let tls = csi_volume(job, "tls");
        write_csi_files(
            &dirs["tls"],
            tls,
            &self.ca,
            &split_list(csi_attribute(tls, "dns-names")),
        );
        let out = Proc::of(m.backup(), &pod, m, &dirs, &self.bin)
            .command()
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "the backup job failed ({}):\n{text}",
            out.status
        );
        text
    }
}

/// The backups in backup directory `dest`: the directories holding a
/// manifest.
pub(crate) fn backup_ids(dest: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dest)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}
