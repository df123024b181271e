//! What every rendering must satisfy: names, ports, peers, certificates,
//! volumes, probes, policies and alerts that fit together.

use std::collections::BTreeSet;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, PodSpec, Service};
use k8s_openapi::api::networking::v1::NetworkPolicyIngressRule;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::backup_tools::check_tools;
use super::certificates::check_certificates;
use super::helpers::*;
use super::render::*;

/// One rendering's objects fit together: every object in the namespace,
/// which the instance does not own, nor the backups' claim; Services,
/// PodDisruptionBudget, NetworkPolicy, anti-affinity and zone spread
/// select the members (and not the backup job nor backup-tools) by their
/// name and instance label (the StatefulSet's name); the initial cluster
/// members.sh computes names every member through the peer Service, the
/// namespace and the cluster domain, with the container's ports; om loads
/// its settings; each pod's certificate names its own address and the
/// client Service; the backup job reaches member 0 by the name its
/// certificate carries, as an admin, and writes the backups' claim, which
/// the members mount only for a restore (components/restore), read-only in
/// the restore init container; backup-tools mounts it read-only and reaches
/// the client Service as om-admin; one image everywhere; /metrics only on
/// the monitored Service.
pub(crate) fn check_rendering(m: &Manifests, e: &Expect) {
    let what = m.what.as_str();
    let ns = m.ns();
    for (kind, name, namespace) in &m.objects {
        if !CLUSTER_SCOPED.contains(&kind.as_str()) {
            assert_eq!(
                namespace.as_deref(),
                Some(ns.as_str()),
                "{what}: {kind} {name}"
            );
        }
    }
    // Deleting the instance (kubectl delete -k) deletes what it renders:
    // never the namespace nor the backups.
    assert!(
        m.namespace.is_none(),
        "{what}: the Namespace is applied on its own (deploy/kubernetes/namespace)"
    );
    let backups = m.backups_claim();
    assert!(
        m.claims
            .iter()
            .all(|c| c.metadata.name.as_deref() != Some(backups.as_str())),
        "{what}: the claim {backups} is applied on its own (deploy/kubernetes/backup-volume)"
    );

    // The StatefulSet, its peer Service and the selectors.
    let sts = m.sts();
    let spec = sts.spec.as_ref().unwrap();
    let name = m.sts_name();
    let replicas = m.replicas();
    assert!(
        replicas % 2 == 1,
        "{what}: an odd number of members, not {replicas}"
    );
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    assert!(
        spec.volume_claim_templates
            .as_ref()
            .is_some_and(|v| !v.is_empty())
    );
    let selector = m.selector();
    assert_eq!(
        selector.get(INSTANCE),
        Some(&name),
        "{what}: the instance label is the StatefulSet's name (wiring/names)"
    );
    let peer_svc = m.peer_service();
    let ps = m.service(&peer_svc).spec.as_ref().unwrap();
    assert_eq!(ps.cluster_ip.as_deref(), Some("None"));
    assert_eq!(ps.publish_not_ready_addresses, Some(true));
    for s in &m.services {
        assert_eq!(
            s.spec.as_ref().unwrap().selector.as_ref(),
            Some(&selector),
            "{what}: Service {:?} selects the members",
            s.metadata.name
        );
        assert_eq!(
            s.metadata.labels.as_ref().and_then(|l| l.get(INSTANCE)),
            Some(&name),
            "{what}: Service {:?} carries the instance label",
            s.metadata.name
        );
    }
    let pdb = m.pdb.as_ref().unwrap().spec.as_ref().unwrap();
    assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(pdb.min_available, None);
    assert_eq!(pdb.selector, Some(spec.selector.clone()));

    // The pod: grace period, security, placement.
    let pod = m.pod();
    let grace = pod.termination_grace_period_seconds.unwrap() as u64;
    assert!(
        grace >= om::service::HANDOVER_TIMEOUT.as_secs() + 10,
        "the grace period must cover the handover and the shutdown"
    );
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(
        psc.fs_group_change_policy.as_deref(),
        Some("OnRootMismatch")
    );
    let anti = pod
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .expect("pod anti-affinity");
    let terms: Vec<&LabelSelector> = anti
        .required_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .filter_map(|t| t.label_selector.as_ref())
        .chain(
            anti.preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .filter_map(|w| w.pod_affinity_term.label_selector.as_ref()),
        )
        .collect();
    assert!(!terms.is_empty());
    for t in terms {
        assert_eq!(t.match_labels.as_ref(), Some(&selector), "{what}");
    }
    let zone = pod
        .topology_spread_constraints
        .iter()
        .flatten()
        .find(|c| c.topology_key == "topology.kubernetes.io/zone")
        .expect("a spread over zones");
    assert_eq!(
        zone.label_selector
            .as_ref()
            .and_then(|l| l.match_labels.as_ref()),
        Some(&selector)
    );
    if e.strict_zones {
        assert_eq!(zone.when_unsatisfiable, "DoNotSchedule", "{what}");
        assert!(
            zone.min_domains.is_some_and(|d| d >= 3),
            "{what}: minDomains 3 or more"
        );
    } else {
        assert_eq!(zone.when_unsatisfiable, "ScheduleAnyway", "{what}");
        assert_eq!(
            zone.min_domains, None,
            "{what}: minDomains goes with DoNotSchedule only"
        );
    }

    // The containers: om, the restore init container, the backup job's.
    let c = m.om();
    let init = m.restore();
    let job = m.job_pod();
    let b = m.backup();
    let image = c.image.clone().unwrap();
    for other in [init, b] {
        assert_eq!(other.image.as_ref(), Some(&image), "{what}: {}", other.name);
        let csc = other.security_context.as_ref().unwrap();
        assert_eq!(csc.read_only_root_filesystem, Some(true));
        assert_eq!(csc.allow_privilege_escalation, Some(false));
    }
    let csc = c.security_context.as_ref().unwrap();
    assert_eq!(csc.read_only_root_filesystem, Some(true));
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert!(c.resources.as_ref().unwrap().requests.is_some());
    let probe_path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(probe_path(&c.readiness_probe), "/readyz");
    assert_eq!(probe_path(&c.liveness_probe), "/healthz");
    assert_eq!(probe_path(&c.startup_probe), "/healthz");

    // The settings om reads: ports match the container's, files are on
    // mounted volumes.
    let config = m.config();
    let data = config.1;
    let cfg: toml::Table = toml::from_str(&data["om.toml"]).unwrap();
    for (key, p) in [
        ("grpc_addr", "grpc"),
        ("raft_addr", "raft"),
        ("http_addr", "http"),
    ] {
        let addr: std::net::SocketAddr = cfg[key].as_str().unwrap().parse().unwrap();
        assert_eq!(i32::from(addr.port()), port(c, p), "{key}");
    }
    let script = script_of(c);
    let config_path = word_after(&script, "--config");
    let env = container_env(c, &format!("{name}-0"), &ns, config);
    let mounted = |c: &Container, path: &str| {
        c.volume_mounts
            .iter()
            .flatten()
            .find(|v| path == v.mount_path || path.starts_with(&format!("{}/", v.mount_path)))
            .cloned()
    };
    let data_dir = cfg["data_dir"].as_str().unwrap().to_string();
    let mut paths = vec![
        config_path.clone(),
        data_dir.clone(),
        cfg["audit_log"].as_str().unwrap().to_string(),
    ];
    paths.extend(
        ["OM_TLS_CERT", "OM_TLS_KEY", "OM_TLS_CA"]
            .iter()
            .filter_map(|k| env_value(&env, k)),
    );
    for path in &paths {
        assert!(
            mounted(c, path).is_some(),
            "{what}: {path} is not on a mounted volume"
        );
    }
    let config_mount = mounted(c, &config_path).unwrap();
    assert_eq!(config_mount.name, "config");
    let members_sh = format!("{}/members.sh", config_mount.mount_path);
    assert!(script.contains(&format!(". {members_sh}")), "{script}");

    // The initial cluster members.sh computes: every member through the
    // peer Service, the namespace and the cluster domain, with the
    // container's ports; the same for every pod, and in the restore
    // container.
    let initial = initial_cluster_of(&data["members.sh"], &env);
    let members = om::config::parse_initial_cluster(&initial).unwrap();
    assert_eq!(members.len(), replicas, "{what}: {initial}");
    for (i, mem) in members.iter().enumerate() {
        let host = m.peer_host(i);
        assert_eq!(mem.id, i as u64 + 1);
        assert_eq!(mem.raft_addr, format!("{host}:{}", port(c, "raft")));
        assert_eq!(mem.grpc_addr, format!("{host}:{}", port(c, "grpc")));
        assert_eq!(
            om::config::node_id_of_host(&format!("{name}-{i}")).unwrap(),
            mem.id
        );
    }
    let last = format!("{name}-{}", replicas - 1);
    assert_eq!(
        initial_cluster_of(&data["members.sh"], &container_env(c, &last, &ns, config)),
        initial
    );
    assert_eq!(
        initial_cluster_of(
            &data["members.sh"],
            &container_env(init, &last, &ns, config)
        ),
        initial
    );

    // om loads that file with that environment: the settings given as
    // OM_* variables are these.
    for (k, _) in &env {
        assert!(
            !k.starts_with("OM_")
                || [
                    "OM_LOG_FORMAT",
                    "OM_TLS_CERT",
                    "OM_TLS_KEY",
                    "OM_TLS_CA",
                    "OM_INSECURE",
                    "OM_ARCHIVE_LOG",
                ]
                .contains(&k.as_str()),
            "{what}: {k} is not checked here"
        );
    }
    if let Some(archive) = env_value(&env, "OM_ARCHIVE_LOG") {
        assert!(
            mounted(c, &archive).is_some_and(|mt| mt.name != "data"),
            "{what}: the log archive {archive} is on a volume of its own"
        );
    }
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("om.toml");
    std::fs::write(&f, &data["om.toml"]).unwrap();
    let loaded = om::config::Config::load(om::config::Args {
        config: Some(f),
        node_id: Some(2),
        initial_cluster: Some(initial.clone()),
        tls_cert: env_value(&env, "OM_TLS_CERT").map(PathBuf::from),
        tls_key: env_value(&env, "OM_TLS_KEY").map(PathBuf::from),
        tls_ca: env_value(&env, "OM_TLS_CA").map(PathBuf::from),
        insecure: env_value(&env, "OM_INSECURE").as_deref() == Some("true"),
        log_format: env_value(&env, "OM_LOG_FORMAT"),
        archive_log: env_value(&env, "OM_ARCHIVE_LOG").map(PathBuf::from),
        ..Default::default()
    })
    .unwrap_or_else(|err| panic!("{what}: om does not load its settings: {err}"));
    assert_eq!(loaded.initial_cluster, members);

    // The restore init container: same data and config mounts as om,
    // restore_from and the point-in-time target from the ConfigMap (empty:
    // no restore), om restore with the node id and the initial cluster into
    // om's data directory.
    let restore = script_of(init);
    for needle in [
        "om restore",
        "--from",
        "--data-dir",
        "--node-id",
        "--initial-cluster",
        "$OM_INITIAL_CLUSTER",
        "--archive-log",
        "--to-index",
        "--to-time",
    ] {
        assert!(
            restore.contains(needle),
            "{what}: the restore script lacks {needle}"
        );
    }
    assert!(restore.contains(&format!(". {members_sh}")), "{restore}");
    assert!(
        restore.contains(&format!("data={data_dir}\n")),
        "{what}: the restore script writes om's data_dir {data_dir}"
    );
    for v in [&data_dir, &config_path] {
        assert_eq!(
            mounted(init, v).map(|mt| (mt.name, mt.mount_path)),
            mounted(c, v).map(|mt| (mt.name, mt.mount_path)),
            "{what}: {v}"
        );
    }
    // Each ConfigMap key the init container reads, by its variable; all
    // empty by default: no restore.
    let from_config = |key: &str| {
        init.env
            .iter()
            .flatten()
            .find_map(|v| {
                v.value_from
                    .as_ref()
                    .and_then(|f| f.config_map_key_ref.as_ref())
                    .filter(|k| k.key == key)
                    .map(|_| v.name.clone())
            })
            .unwrap_or_else(|| panic!("{what}: {key} from the ConfigMap"))
    };
    for key in [
        "restore_from",
        "restore_to_index",
        "restore_to_time",
        "restore_archive_log",
    ] {
        let var = from_config(key);
        assert!(
            restore.contains(&format!("${var}")) || restore.contains(&format!("${{{var}")),
            "{what}: {key}: {restore}"
        );
        assert_eq!(data[key], "", "{what}: {key} is empty by default");
    }
    let restore_from = from_config("restore_from");
    assert_eq!(data["force_new_cluster"], "", "{what}: no forced start");

    // The backup volume: the claim the job writes, which no member mounts
    // unless for a restore (components/restore), and then only the restore
    // container, read-only, where restore_from is read.
    let claim_of = |pod: &PodSpec, name: &str| {
        volume(pod, name)
            .persistent_volume_claim
            .clone()
            .unwrap_or_else(|| panic!("{what}: volume {name} is a claim"))
    };
    let job_script = script_of(b);
    let dest = word_after(&job_script, "backup create")
        .trim_end_matches(')')
        .to_string();
    let job_mount = mounted(b, &dest).expect("the backup destination is mounted");
    let claim = claim_of(job, &job_mount.name);
    assert_eq!(claim.claim_name, backups);
    assert_ne!(job_mount.read_only, Some(true));
    let members_backups = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|p| p.claim_name == claim.claim_name)
        })
        .map(|v| v.name.clone());
    assert!(
        c.volume_mounts
            .iter()
            .flatten()
            .all(|v| Some(&v.name) != members_backups.as_ref()),
        "{what}: om itself does not mount the backups"
    );
    match &members_backups {
        None => assert!(
            init.volume_mounts.iter().flatten().all(|v| {
                pod.volumes
                    .iter()
                    .flatten()
                    .find(|x| x.name == v.name)
                    .is_none_or(|x| x.persistent_volume_claim.is_none())
            }),
            "{what}: the members mount no claim but their own"
        ),
        Some(vol) => {
            let init_mount = init
                .volume_mounts
                .iter()
                .flatten()
                .find(|v| v.name == *vol)
                .expect("the restore container mounts the backups");
            assert_eq!(init_mount.read_only, Some(true));
            assert_eq!(claim_of(pod, vol).read_only, Some(true));
            assert!(
                restore.contains(&format!("from={}/${restore_from}", init_mount.mount_path)),
                "{what}: restore_from is a path on the backup volume"
            );
            assert!(
                restore.contains(&format!("[ ! -d {} ]", init_mount.mount_path)),
                "{what}: the restore script says when the backups are not mounted"
            );
        }
    }

    // The backup job: one at a time, create then prune with a retention,
    // from member 0 by the name its certificate carries (backups of one
    // member share their files), as non-root; its pods are no members.
    let cj = m.cronjob.as_ref().unwrap().spec.as_ref().unwrap();
    assert_eq!(cj.concurrency_policy.as_deref(), Some("Forbid"));
    for needle in ["omctl", "backup create", "backup prune", "--keep"] {
        assert!(
            job_script.contains(needle),
            "{what}: the backup job lacks {needle}"
        );
    }
    assert!(
        job_script.find("backup create") < job_script.find("backup prune"),
        "{what}: prune after create"
    );
    let job_env = container_env(b, "om-backup-0", &ns, config);
    let keep = word_after(&job_script, "--keep").replace(['"', '$'], "");
    let keep: u32 = env_value(&job_env, &keep)
        .unwrap_or(keep)
        .parse()
        .expect("a number of backups to keep");
    assert!(keep >= 1);
    let client = m.client_service();
    let client_grpc = client
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("grpc"))
        .expect("the client Service's gRPC port")
        .port;
    assert_eq!(
        env_value(&job_env, "OM_ENDPOINT"),
        Some(format!("{}:{}", m.peer_host(0), port(c, "grpc"))),
        "{what}: the backup job's endpoint is member 0"
    );
    let jsc = job.security_context.as_ref().unwrap();
    assert_eq!(jsc.run_as_non_root, Some(true));
    assert_eq!(jsc.fs_group, psc.fs_group, "the backups are om's group's");
    let job_labels = m.job_labels();
    assert!(
        !selects(&selector, &job_labels),
        "{what}: the backup job's pods would be taken for members"
    );
    assert_eq!(job_labels.get(INSTANCE), Some(&name), "{what}");

    check_tools(m, e, &backups, client_grpc);

    // Ports: /metrics is not on the client Service; the monitored Service
    // has it.
    let client_name = client.metadata.name.clone().unwrap();
    assert!(
        client
            .spec
            .as_ref()
            .unwrap()
            .ports
            .iter()
            .flatten()
            .all(|p| p.name.as_deref() == Some("grpc")
                && p.target_port == Some(IntOrString::String("grpc".into()))),
        "{what}: the client Service serves gRPC only"
    );
    let metrics: Vec<&Service> = m
        .services
        .iter()
        .filter(|s| {
            s.spec.as_ref().unwrap().ports.iter().flatten().any(|p| {
                p.target_port == Some(IntOrString::String("http".into()))
                    || p.port == port(c, "http")
            })
        })
        .collect();
    assert_eq!(metrics.len(), 1, "{what}: one Service has the HTTP port");
    let metrics = metrics[0];
    assert_ne!(metrics.metadata.name.as_ref(), Some(&client_name));
    assert_eq!(
        metrics.spec.as_ref().unwrap().cluster_ip.as_deref(),
        Some("None"),
        "{what}: the metrics Service is headless"
    );
    if e.monitoring {
        assert_eq!(m.monitors.len(), 1);
        let (_, mon) = &m.monitors[0];
        let wanted = mon.selector.match_labels.clone().unwrap_or_default();
        let selected: Vec<String> = m
            .services
            .iter()
            .filter(|s| selects(&wanted, s.metadata.labels.as_ref().unwrap()))
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(
            selected,
            vec![metrics.metadata.name.clone().unwrap()],
            "{what}: the ServiceMonitor selects the metrics Service alone"
        );
        let ep = &mon.endpoints[0];
        assert_eq!(ep.path, "/metrics");
        let _ = &ep.interval;
        assert!(
            metrics
                .spec
                .as_ref()
                .unwrap()
                .ports
                .iter()
                .flatten()
                .any(|p| p.name.as_deref() == Some(ep.port.as_str())
                    && p.target_port == Some(IntOrString::String("http".into())))
        );
        // The alerts' job is the value of the monitor's jobLabel on the
        // Service, whatever the prefix.
        let job_label = mon.job_label.as_deref().expect("a jobLabel");
        let job_name = &metrics.metadata.labels.as_ref().unwrap()[job_label];
        for r in &m.rules {
            for (at, _) in r.expr.match_indices("job=\"") {
                let rest = &r.expr[at + 5..];
                let value = &rest[..rest.find('"').unwrap()];
                assert_eq!(value, job_name, "{what}: {}", r.alert);
            }
        }
    } else {
        assert!(m.monitors.is_empty() && m.rules.is_empty(), "{what}");
    }

    // The NetworkPolicy: Raft from the members, gRPC from every pod of the
    // cluster, HTTP from a labelled namespace; every port by one rule.
    let np = m.network_policy.as_ref().unwrap().spec.as_ref().unwrap();
    assert_eq!(
        np.pod_selector
            .as_ref()
            .and_then(|s| s.match_labels.as_ref()),
        Some(&selector)
    );
    assert_eq!(np.policy_types, Some(vec!["Ingress".to_string()]));
    let rules = np.ingress.as_ref().unwrap();
    for r in rules {
        assert!(
            r.ports.as_ref().is_some_and(|p| !p.is_empty()),
            "{what}: a rule for every port"
        );
    }
    let rule_for = |p: &str| {
        let matching: Vec<&NetworkPolicyIngressRule> = rules
            .iter()
            .filter(|r| {
                r.ports
                    .iter()
                    .flatten()
                    .any(|x| x.port == Some(IntOrString::String(p.to_string())))
            })
            .collect();
        assert_eq!(matching.len(), 1, "{what}: one rule for port {p}");
        matching[0]
    };
    for p in c.ports.iter().flatten() {
        rule_for(p.name.as_deref().unwrap());
    }
    let from = |p: &str| rule_for(p).from.clone().unwrap_or_default();
    let raft = from("raft");
    assert_eq!(raft.len(), 1);
    assert!(raft[0].namespace_selector.is_none() && raft[0].ip_block.is_none());
    assert_eq!(
        raft[0]
            .pod_selector
            .as_ref()
            .and_then(|s| s.match_labels.as_ref()),
        Some(&selector),
        "{what}: Raft from the members only"
    );
    let grpc = from("grpc");
    assert_eq!(grpc.len(), 1);
    assert_eq!(
        grpc[0].namespace_selector,
        Some(LabelSelector::default()),
        "{what}: gRPC from every namespace"
    );
    assert!(grpc[0].pod_selector.is_none() && grpc[0].ip_block.is_none());
    let http = from("http");
    assert!(!http.is_empty());
    for peer in &http {
        assert!(
            peer.ip_block.is_none()
                && peer
                    .namespace_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.as_ref())
                    .is_some_and(|l| !l.is_empty()),
            "{what}: HTTP from a labelled namespace only"
        );
    }

    // Certificates.
    let admins: BTreeSet<String> = cfg["admins"]
        .as_str()
        .unwrap()
        .split(',')
        .map(|a| a.trim().to_string())
        .collect();
    if e.tls {
        check_certificates(m, c, &env, &members, &admins);
    } else {
        assert!(
            m.certificates.is_empty() && m.issuers.is_empty(),
            "{what}: no cert-manager objects"
        );
        for p in [pod, job] {
            assert!(
                p.volumes.iter().flatten().all(|v| v.csi.is_none()),
                "{what}: no certificate volumes"
            );
        }
        assert_eq!(env_value(&env, "OM_INSECURE").as_deref(), Some("true"));
        for k in ["OM_CACERT", "OM_CERT", "OM_KEY"] {
            assert_eq!(env_value(&job_env, k), None, "{what}: {k}");
        }
    }
}

/// What outlives the instance `m`, rendered from `dirs` (applied on their
/// own: deploy/kubernetes/namespace and backup-volume, or a site's
/// persistent/): nothing but a Namespace and claims, in the instance's
/// namespace; the claim the backup job writes (by the name kustomize gave
/// the instance's references to it), with access mode `access`; the
/// Namespace, if there, the instance's.
pub(crate) fn check_persistent(m: &Manifests, dirs: &[PathBuf], access: &str) {
    let what = m.what.as_str();
    let ns = m.ns();
    let mut claims = Vec::new();
    let mut namespaces = Vec::new();
    for d in dirs {
        let p = render(d);
        for (kind, name, namespace) in &p.objects {
            assert!(
                kind == "Namespace" || kind == "PersistentVolumeClaim",
                "{}: {kind} {name} belongs to the instance",
                p.what
            );
            if kind != "Namespace" {
                assert_eq!(
                    namespace.as_deref(),
                    Some(ns.as_str()),
                    "{}: {name}",
                    p.what
                );
            }
        }
        claims.extend(p.claims);
        namespaces.extend(p.namespace);
    }
    let backups = m.backups_claim();
    let claim = claims
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(backups.as_str()))
        .unwrap_or_else(|| panic!("{what}: {dirs:?} hold no claim {backups}"));
    assert_eq!(
        claim.spec.as_ref().and_then(|s| s.access_modes.clone()),
        Some(vec![access.to_string()]),
        "{what}: {backups}"
    );
    for n in &namespaces {
        assert_eq!(n.metadata.name.as_deref(), Some(ns.as_str()), "{what}");
        assert_eq!(
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("pod-security.kubernetes.io/enforce"))
                .map(String::as_str),
            Some("restricted"),
            "{what}: the namespace enforces the restricted Pod Security level"
        );
    }
}
