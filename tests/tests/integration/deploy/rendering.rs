//! The base and both overlays rendered and checked, with what outlives
//! them; the optional components restore, log-archive and approver-policy
//! against the manifests (the policies' checks in `certificates`).

use std::collections::BTreeSet;

use super::certificates::check_approver_policy;
use super::checks::*;
use super::helpers::*;
use super::render::*;

/// The base: every file of its folder is used, every object parses
/// strictly against Kubernetes' (or the CRD's) types and the pieces fit
/// (`check_rendering`); the namespace and the backups' claim are applied
/// on their own (namespace/, backup-volume/) and fit it; the members do not
/// mount the backups; the image is the placeholder an overlay replaces;
/// metric names in alerts and the dashboard exist, and every dashboard
/// query is scoped by the cluster and namespace variables.
#[test]
pub(crate) fn manifests_are_strict_kubernetes_objects_that_fit_together() {
    let dir = kube_dir();
    let k: Kustomization = strict(
        &documents(&dir.join("kustomization.yaml"))[0],
        "kustomization.yaml",
    );
    let mut listed: BTreeSet<String> = k.resources.iter().cloned().collect();
    listed.extend(k.config_map_generator.iter().flat_map(|g| g.files.clone()));
    listed.extend(k.transformers.iter().cloned());
    for f in OPTIONAL {
        assert!(!listed.contains(*f), "{f} is optional, not in the base");
        listed.insert(f.to_string());
    }
    listed.insert("kustomization.yaml".into());
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(listed, present);

    let m = render(&dir);
    check_rendering(
        &m,
        &Expect {
            tls: true,
            strict_zones: true,
            monitoring: true,
        },
    );
    assert_eq!(m.om().image.as_deref(), Some("REGISTRY/om:TAG"));
    check_persistent(
        &m,
        &[dir.join("namespace"), dir.join("backup-volume")],
        "ReadWriteMany",
    );
    // Without components/restore no member mounts a claim but its own (a
    // volume claim template): the backups' storage cannot keep one from
    // starting.
    assert!(
        m.pod()
            .volumes
            .iter()
            .flatten()
            .all(|v| v.persistent_volume_claim.is_none()),
        "the base's members mount {}",
        m.backups_claim()
    );

    // Metrics in alerts and the dashboard exist; the dashboard's queries
    // are scoped by its cluster and namespace variables; it shows the
    // start-up phases.
    let catalog = metric_catalog();
    let known = |name: &str| {
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        catalog.contains(base)
    };
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("om-dashboard.json")).unwrap())
            .unwrap();
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for v in ["datasource", "cluster", "namespace"] {
        assert!(variables.contains(&v), "the dashboard has no variable {v}");
    }
    let mut queries: Vec<String> = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            queries.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    for q in &queries {
        let metrics = metric_selectors(q);
        assert!(!metrics.is_empty(), "{q}");
        for (name, selector) in metrics {
            let selector = selector.unwrap_or_default();
            for scope in [r#"cluster=~"$cluster""#, r#"namespace=~"$namespace""#] {
                assert!(selector.contains(scope), "{name} in {q:?} lacks {scope}");
            }
        }
    }
    assert!(
        queries.iter().any(|q| q.contains("om_startup_seconds")),
        "a start-up panel"
    );
    let mut exprs: Vec<String> = m.rules.iter().map(|r| r.expr.clone()).collect();
    exprs.extend(queries);
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            exprs.push(q.to_string());
        }
    }
    for e in &exprs {
        for n in metric_names(e) {
            assert!(known(&n), "{n} in {e:?} is not a metric om exports");
        }
    }
    for r in &m.rules {
        assert!(
            r.labels.contains_key("severity") && r.annotations.contains_key("summary"),
            "{}",
            r.alert
        );
    }
}

/// deploy/overlays/example changes the namespace, adds a name prefix (and
/// with it, through wiring, another instance label), runs five members in
/// another cluster domain and sets the image: its rendering fits together
/// as the base's does (peers, Services, serviceName, pod DNS names,
/// certificate names, selectors, the backup job's member), with every one
/// of those changes in it, and the same objects; its persistent/ holds its
/// namespace and backups' claim under the names it uses.
#[test]
pub(crate) fn overlays_keep_every_name_in_step() {
    let base = render(&kube_dir());
    let example = render(&overlay_dir("example"));
    let tls = Expect {
        tls: true,
        strict_zones: true,
        monitoring: true,
    };
    check_rendering(&base, &tls);
    check_rendering(&example, &tls);
    check_persistent(
        &example,
        &[overlay_dir("example").join("persistent")],
        "ReadWriteMany",
    );
    // The overlay exercises every parameter.
    assert_ne!(example.ns(), base.ns());
    let (name, base_name) = (example.sts_name(), base.sts_name());
    assert!(
        name != base_name && name.ends_with(&base_name),
        "a name prefix: {name}"
    );
    assert_ne!(example.replicas(), base.replicas());
    assert_ne!(example.domain(), base.domain());
    assert_ne!(example.selector(), base.selector(), "an instance label");
    let image = example.om().image.clone().unwrap();
    assert!(
        !image.contains("REGISTRY") && !image.contains("TAG"),
        "{image}: the placeholder is replaced"
    );
    // Every object of the base, renamed by the prefix (but the Namespace).
    let objects = |m: &Manifests, prefix: &str| -> BTreeSet<(String, String)> {
        m.objects
            .iter()
            .map(|(kind, name, _)| {
                let name = match kind.as_str() {
                    "Namespace" => String::new(),
                    _ => name.strip_prefix(prefix).unwrap_or(name).to_string(),
                };
                (kind.clone(), name)
            })
            .collect()
    };
    let prefix = name.strip_suffix(&base_name).unwrap();
    assert_eq!(objects(&example, prefix), objects(&base, ""));
    for (kind, n, _) in &example.objects {
        assert!(
            kind == "Namespace" || n.starts_with(prefix),
            "{kind} {n} without the prefix"
        );
    }
    // kube-prometheus-stack's release label on what it loads.
    for (meta, _) in &example.monitors {
        assert!(
            meta.labels
                .as_ref()
                .is_some_and(|l| l.contains_key("release")),
            "the ServiceMonitor has a release label"
        );
    }
}

/// deploy/overlays/dev: no cert-manager and no Prometheus operator objects,
/// plaintext (om with --insecure, omctl without a CA), members that may
/// share a node and a zone; the rest fits together as in the base.
#[test]
pub(crate) fn the_development_overlay_is_plaintext_and_fits_one_node() {
    let dev = render(&overlay_dir("dev"));
    check_rendering(
        &dev,
        &Expect {
            tls: false,
            strict_zones: false,
            monitoring: false,
        },
    );
    assert!(
        [1, 3].contains(&dev.replicas()),
        "{} members",
        dev.replicas()
    );
    // One node: the backups need not be shared between nodes.
    check_persistent(
        &dev,
        &[overlay_dir("dev").join("persistent")],
        "ReadWriteOnce",
    );
    let anti = dev
        .pod()
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .unwrap();
    assert!(
        anti.required_during_scheduling_ignored_during_execution
            .is_none(),
        "members may share a node"
    );
    let image = dev.om().image.clone().unwrap();
    assert!(!image.contains("REGISTRY"), "{image}");
}

/// The components restore and log-archive on the base: the init container
/// mounts the backups read-only (and nothing else does), and each member's
/// own archive claim; om archives there; the ConfigMap keys the runbooks
/// set reach the init container. The rest fits as without them.
#[test]
pub(crate) fn the_restore_and_log_archive_components_fit_the_base() {
    let m = render_with_components("om", &["restore", "log-archive"]);
    check_rendering(
        &m,
        &Expect {
            tls: true,
            strict_zones: true,
            monitoring: true,
        },
    );
    let pod = m.pod();
    let init = m.restore();
    let backups = m.backups_claim();
    let vol = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|p| p.claim_name == backups)
        })
        .expect("components/restore adds the backups' volume");
    assert!(
        init.volume_mounts
            .iter()
            .flatten()
            .any(|v| v.name == vol.name && v.read_only == Some(true)),
        "the init container reads the backups"
    );
    // The archive: a claim template of its own, om's --archive-log on it,
    // the same directory the init container replays by default.
    let templates = m
        .sts()
        .spec
        .as_ref()
        .unwrap()
        .volume_claim_templates
        .clone()
        .unwrap_or_default();
    let names: Vec<String> = templates
        .iter()
        .map(|t| t.metadata.name.clone().unwrap())
        .collect();
    assert!(
        names.contains(&"data".to_string()) && names.len() == 2,
        "{names:?}"
    );
    let archive = names.iter().find(|n| *n != "data").unwrap();
    let env = container_env(m.om(), &format!("{}-0", m.sts_name()), &m.ns(), m.config());
    let dir = env_value(&env, "OM_ARCHIVE_LOG").expect("om archives its log");
    let om_mount = m
        .om()
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| v.name == *archive)
        .expect("om mounts the archive");
    assert_eq!(dir, om_mount.mount_path);
    let init_env = container_env(init, &format!("{}-0", m.sts_name()), &m.ns(), m.config());
    assert_eq!(env_value(&init_env, "ARCHIVE_LOG"), Some(dir.clone()));
    assert!(
        init.volume_mounts
            .iter()
            .flatten()
            .any(|v| v.name == *archive && v.mount_path == dir && v.read_only == Some(true)),
        "the init container reads its member's archive"
    );
}

/// The restore init container's script, run with a stand-in `om` that
/// prints its arguments: the ConfigMap's keys become `om restore`'s flags
/// (a point in time with the member's own archive or restore_archive_log),
/// and wrong settings stop it with a message, before anything is written.
#[test]
pub(crate) fn the_restore_script_turns_the_configmap_into_om_restore_flags() {
    use std::os::unix::fs::PermissionsExt;
    let m = render_with_components("om", &["restore", "log-archive"]);
    let init = m.restore();
    let pod = format!("{}-1", m.sts_name());
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Host directories for the container's paths.
    let data = root.join("lib");
    let backups = root.join("backups");
    let archive = root.join("archive");
    let config = root.join("config");
    let bin = root.join("bin");
    for d in [&data, &backups, &archive, &config, &bin] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::create_dir_all(backups.join("B1")).unwrap();
    std::fs::write(backups.join("B1/manifest.json"), "{}").unwrap();
    std::fs::write(config.join("members.sh"), &m.config().1["members.sh"]).unwrap();
    // om restore --data-dir D ...: records its arguments, makes D.
    let om = bin.join("om");
    std::fs::write(
        &om,
        "#!/bin/sh\nprintf '%s\\n' \"$*\" > \"$OM_ARGS\"\n\
         while [ $# -gt 0 ]; do [ \"$1\" = --data-dir ] && mkdir -p \"$2\"; shift; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&om, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mounts = |path: &str| -> String {
        let mut out = path.to_string();
        for (from, to) in [
            ("/var/lib/om-archive", &archive),
            ("/var/lib/om", &data),
            ("/etc/om/config", &config),
            ("/backups", &backups),
        ] {
            out = out.replace(from, to.to_str().unwrap());
        }
        out
    };
    let script = mounts(&script_of(init));
    // The pod's volume, empty.
    let fresh = || {
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
    };
    let run = |settings: &[(&str, &str)]| {
        let mut data_map = m.config().1.clone();
        for (k, v) in settings {
            data_map.insert(k.to_string(), v.to_string());
        }
        let args = root.join("om-args");
        let _ = std::fs::remove_file(&args);
        let env = container_env(init, &pod, &m.ns(), (m.config().0, &data_map));
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&script)
            .env_clear()
            .envs(env.into_iter().map(|(k, v)| (k, mounts(&v))))
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("OM_ARGS", &args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let argv = std::fs::read_to_string(&args).unwrap_or_default();
        (out.status.success(), argv, stderr)
    };

    // Nothing to restore.
    fresh();
    let (ok, argv, _) = run(&[]);
    assert!(ok && argv.is_empty());
    // A backup.
    fresh();
    let (ok, argv, err) = run(&[("restore_from", "B1")]);
    assert!(ok, "{err}");
    assert!(argv.starts_with("restore --from "), "{argv}");
    assert!(
        argv.contains("/backups/B1") && argv.contains("--node-id 2"),
        "{argv}"
    );
    assert!(!argv.contains("--archive-log"), "{argv}");
    assert!(
        data.join("data").is_dir(),
        "the store is renamed into place"
    );
    // To an index, from the member's own archive.
    fresh();
    let (ok, argv, err) = run(&[("restore_from", "B1"), ("restore_to_index", "1234")]);
    assert!(ok, "{err}");
    assert!(
        argv.contains(&format!(
            "--archive-log {} --to-index 1234",
            archive.display()
        )),
        "{argv}"
    );
    // To a time, from an archive copied onto the backups.
    std::fs::create_dir_all(backups.join("archive-om-0")).unwrap();
    fresh();
    let (ok, argv, err) = run(&[
        ("restore_from", "B1"),
        ("restore_to_time", "2026-12-02T10:00:00Z"),
        ("restore_archive_log", "/backups/archive-om-0"),
    ]);
    assert!(ok, "{err}");
    assert!(
        argv.contains(&format!(
            "--archive-log {} --to-time 2026-12-02T10:00:00Z",
            backups.join("archive-om-0").display()
        )),
        "{argv}"
    );
    // Refused: both targets; an archive that is not there; not one backup.
    for (settings, says) in [
        (
            vec![
                ("restore_from", "B1"),
                ("restore_to_index", "1"),
                ("restore_to_time", "1"),
            ],
            "both set",
        ),
        (
            vec![
                ("restore_from", "B1"),
                ("restore_to_index", "1"),
                ("restore_archive_log", "/backups/none"),
            ],
            "need a log archive",
        ),
        (vec![("restore_from", "B2")], "is not one backup"),
    ] {
        fresh();
        let (ok, argv, err) = run(&settings);
        assert!(!ok && argv.is_empty(), "{settings:?}: {argv}");
        assert!(err.contains(says), "{settings:?}: {err}");
    }
    // A member whose data directory holds a store is left alone.
    fresh();
    std::fs::create_dir_all(data.join("data")).unwrap();
    std::fs::write(data.join("data/CURRENT"), "MANIFEST-000001\n").unwrap();
    let (ok, argv, err) = run(&[("restore_from", "B1"), ("restore_to_index", "1234")]);
    assert!(ok && argv.is_empty(), "{argv}{err}");
    assert!(data.join("data/CURRENT").is_file());
}

/// The restore init container without components/restore: a restore_from
/// it cannot read stops it with the component to add.
#[test]
pub(crate) fn a_restore_without_the_restore_component_says_what_is_missing() {
    let m = render(&kube_dir());
    let script = script_of(m.restore());
    assert!(
        script.contains("deploy/components/restore"),
        "the message names the component"
    );
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let script = script
        .replace("/var/lib/om", tmp.path().to_str().unwrap())
        .replace(
            "/backups",
            &tmp.path().join("no-backups").display().to_string(),
        );
    let mut config = m.config().1.clone();
    config.insert("restore_from".into(), "B1".into());
    let env = container_env(
        m.restore(),
        &format!("{}-0", m.sts_name()),
        &m.ns(),
        (m.config().0, &config),
    );
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .envs(env)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("deploy/components/restore"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!data.exists(), "nothing written");
}

/// components/approver-policy, optional (it needs cert-manager's
/// approver-policy), on the base in two namespaces: strict
/// CertificateRequestPolicy and RBAC objects that fit the manifests
/// (`check_approver_policy`), whose cluster-scoped names differ from one
/// namespace to the other; the base alone has none of them.
#[test]
pub(crate) fn the_optional_approver_policy_fits_the_manifests() {
    let tls = Expect {
        tls: true,
        strict_zones: true,
        monitoring: true,
    };
    let m = render_with_components("om", &["approver-policy"]);
    check_rendering(&m, &tls);
    check_approver_policy(&m);
    let other = render_with_components("om-other", &["approver-policy"]);
    check_rendering(&other, &tls);
    check_approver_policy(&other);
    let cluster_scoped = |m: &Manifests| -> BTreeSet<String> {
        m.objects
            .iter()
            .filter(|(kind, _, _)| CLUSTER_SCOPED.contains(&kind.as_str()))
            .map(|(kind, name, _)| format!("{kind} {name}"))
            .collect()
    };
    assert!(!cluster_scoped(&m).is_empty());
    assert!(
        cluster_scoped(&m).is_disjoint(&cluster_scoped(&other)),
        "{:?} and {:?}",
        cluster_scoped(&m),
        cluster_scoped(&other)
    );
    let base = render(&kube_dir());
    assert!(base.policies.is_empty() && base.cluster_roles.is_empty());
}
