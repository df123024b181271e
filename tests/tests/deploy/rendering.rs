//! The base and both overlays rendered and checked; the optional approver
//! policy against the manifests.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};

use super::checks::*;
use super::render::*;

/// The base: every file of its folder is used, every object parses
/// strictly against Kubernetes' (or the CRD's) types and the pieces fit
/// (`check_rendering`); the image is the placeholder an overlay replaces;
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

/// deploy/overlays/example changes the namespace, adds a name prefix and an
/// instance label, runs five members in another cluster domain and sets the
/// image: its rendering fits together as the base's does (peers, Services,
/// serviceName, pod DNS names, certificate names, selectors), with every
/// one of those changes in it, and the same objects.
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

/// `approver-policy.yaml`, optional (it needs cert-manager's
/// approver-policy): strict CertificateRequestPolicy and RBAC objects. The
/// member policy allows what every pod's CSI volume asks om-ca for, and only
/// the CSI driver may use it; the backup job's CSI volume is allowed by a
/// policy of its own admitting no member marker, also for the CSI driver
/// only; every Certificate of certificates.yaml is allowed by a policy of
/// its own that admits no member marker, used only by cert-manager's
/// controller. It names the base's namespace and names.
#[test]
pub(crate) fn the_optional_approver_policy_fits_the_manifests() {
    let m = render(&kube_dir());
    let ns = m.ns();
    let sts_name = m.sts_name();
    let replicas = m.replicas();
    let mut policies: Vec<(String, PolicySpec)> = Vec::new();
    // Roles and ClusterRoles by name; bindings as (role name, subjects).
    let mut roles: Vec<(String, Vec<PolicyRule>)> = Vec::new();
    let mut bindings: Vec<(String, Vec<Subject>)> = Vec::new();
    for (i, doc) in documents(&kube_dir().join("approver-policy.yaml"))
        .iter()
        .enumerate()
    {
        let what = format!("approver-policy.yaml #{i}");
        match doc["kind"].as_str().unwrap_or_default() {
            "CertificateRequestPolicy" => {
                let c: Custom<PolicySpec> = strict(doc, &what);
                assert_eq!(c.api_version, "policy.cert-manager.io/v1alpha1");
                policies.push((c.metadata.name.unwrap(), c.spec));
            }
            "Role" => {
                let r: Role = strict(doc, &what);
                assert_eq!(r.metadata.namespace.as_deref(), Some(ns.as_str()));
                roles.push((r.metadata.name.unwrap(), r.rules.unwrap_or_default()));
            }
            "ClusterRole" => {
                let r: ClusterRole = strict(doc, &what);
                roles.push((r.metadata.name.unwrap(), r.rules.unwrap_or_default()));
            }
            "RoleBinding" => {
                let b: RoleBinding = strict(doc, &what);
                assert_eq!(b.metadata.namespace.as_deref(), Some(ns.as_str()));
                bindings.push((b.role_ref.name, b.subjects.unwrap_or_default()));
            }
            "ClusterRoleBinding" => {
                let b: ClusterRoleBinding = strict(doc, &what);
                bindings.push((b.role_ref.name, b.subjects.unwrap_or_default()));
            }
            other => panic!("{what}: unexpected kind {other:?}"),
        }
    }
    // Who may use policy `name`: the subjects bound to a role granting
    // `use` on it.
    let users = |name: &str| -> Vec<String> {
        let granting: Vec<&str> = roles
            .iter()
            .filter(|(_, rules)| {
                rules.iter().any(|r| {
                    r.verbs.iter().any(|v| v == "use")
                        && r.resources
                            .iter()
                            .flatten()
                            .any(|x| x == "certificaterequestpolicies")
                        && r.resource_names
                            .as_ref()
                            .is_none_or(|names| names.iter().any(|x| x == name))
                })
            })
            .map(|(role, _)| role.as_str())
            .collect();
        bindings
            .iter()
            .filter(|(role, _)| granting.contains(&role.as_str()))
            .flat_map(|(_, subjects)| subjects.iter().map(|s| format!("{}:{}", s.kind, s.name)))
            .collect()
    };
    let selected_issuer =
        |p: &PolicySpec| p.selector.issuer_ref.as_ref().and_then(|r| r.name.clone());

    // The member policy: for the CSI volume's issuer, the member marker
    // required, every name and usage a pod's volume asks for allowed, the
    // key it makes.
    let tls = csi_volume(m.pod(), "tls");
    let issuer = csi_attribute(tls, "issuer-name");
    let (member_name, member) = policies
        .iter()
        .find(|(_, p)| {
            selected_issuer(p).as_deref() == Some(issuer)
                && p.allowed.as_ref().is_some_and(|a| a.uris.is_some())
        })
        .expect("a policy for the members' certificates");
    let allowed = member.allowed.as_ref().unwrap();
    let uris = allowed.uris.as_ref().unwrap();
    assert_eq!(
        uris.values.as_deref(),
        Some(&[om::grpc::peer::MEMBER_MARKER.to_string()][..])
    );
    assert_eq!(uris.required, Some(true), "{member_name}");
    let dns = allowed
        .dns_names
        .as_ref()
        .and_then(|d| d.values.clone())
        .unwrap_or_default();
    for i in 0..replicas {
        for n in csi_dns_names(tls, &format!("{sts_name}-{i}"), &ns) {
            assert!(
                dns.iter().any(|p| wildcard(p, &n)),
                "{member_name} refuses {n}"
            );
        }
    }
    let usages = allowed.usages.clone().unwrap_or_default();
    for u in split_list(csi_attribute(tls, "key-usages")) {
        assert!(usages.contains(&u), "{member_name} refuses usage {u}");
    }
    let key = member
        .constraints
        .as_ref()
        .and_then(|c| c.private_key.as_ref())
        .expect("a key constraint");
    assert_eq!(
        key.algorithm.as_deref(),
        Some(csi_attribute(tls, "key-algorithm"))
    );
    assert_eq!(
        users(member_name.as_str()),
        vec!["ServiceAccount:cert-manager-csi-driver".to_string()]
    );

    // The backup job's client certificate: a policy of its own for the
    // same issuer, allowing its name, names and usages and no URI (so no
    // member marker), used only by the CSI driver.
    let job_tls = csi_volume(m.job_pod(), "tls");
    let principal = csi_attribute(job_tls, "common-name");
    let (backup_name, backup) = policies
        .iter()
        .find(|(_, p)| {
            selected_issuer(p).as_deref() == Some(csi_attribute(job_tls, "issuer-name"))
                && p.allowed
                    .as_ref()
                    .and_then(|a| a.common_name.as_ref())
                    .and_then(|c| c.value.as_deref())
                    == Some(principal)
        })
        .expect("a policy for the backup job's certificate");
    assert_ne!(backup_name, member_name);
    let a = backup.allowed.as_ref().unwrap();
    assert!(a.uris.is_none(), "{backup_name} allows URIs");
    let names = a
        .dns_names
        .as_ref()
        .and_then(|d| d.values.clone())
        .unwrap_or_default();
    for n in split_list(csi_attribute(job_tls, "dns-names")) {
        assert!(
            names.iter().any(|p| wildcard(p, &n)),
            "{backup_name} refuses {n}"
        );
    }
    let usages = a.usages.clone().unwrap_or_default();
    for u in split_list(csi_attribute(job_tls, "key-usages")) {
        assert!(usages.contains(&u), "{backup_name} refuses usage {u}");
    }
    assert_eq!(
        users(backup_name.as_str()),
        vec!["ServiceAccount:cert-manager-csi-driver".to_string()]
    );

    // Each Certificate: a policy for its issuer and common name, not the
    // member policy, allowing no URI (so no member marker), used only by
    // cert-manager's controller.
    for (n, cert) in &m.certificates {
        let (policy_name, policy) = policies
            .iter()
            .find(|(_, p)| {
                selected_issuer(p).as_deref() == Some(cert.issuer_ref.name.as_str())
                    && p.allowed
                        .as_ref()
                        .and_then(|a| a.common_name.as_ref())
                        .and_then(|c| c.value.as_deref())
                        == cert.common_name.as_deref()
            })
            .unwrap_or_else(|| panic!("no policy allows Certificate {n}"));
        assert_ne!(policy_name, member_name);
        let a = policy.allowed.as_ref().unwrap();
        assert!(a.uris.is_none(), "{policy_name} allows URIs");
        assert_eq!(a.is_ca.unwrap_or(false), cert.is_ca.unwrap_or(false));
        let who = users(policy_name.as_str());
        assert!(
            !who.is_empty() && who.iter().all(|u| u == "ServiceAccount:cert-manager"),
            "{policy_name}: {who:?}"
        );
    }
}
