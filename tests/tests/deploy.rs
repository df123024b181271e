//! `deploy/`: every Kubernetes manifest parsed strictly against Kubernetes'
//! types (unknown fields refused), their cross-references checked, the
//! StatefulSet run as processes through a rolling update under write load,
//! and gRPC health and reflection answered to real clients.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{CSIVolumeSource, ConfigMap, Container, Namespace, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use om_client::{ClientOptions, OmClient};
use om_tests::certs::TestCa;
use serde::Deserialize;
use serde::de::DeserializeOwned;

fn kube_dir() -> PathBuf {
    om_tests::repo_root().join("deploy/kubernetes")
}

/// Files of the folder the kustomization leaves out on purpose: they need
/// more installed than the base does (approver-policy.yaml), or are no
/// Kubernetes objects (alert-tests/, promtool's tests of the alerts).
const OPTIONAL: &[&str] = &["approver-policy.yaml", "alert-tests"];

/// cert-manager's CSI driver, which also prefixes its volume attributes.
const CSI_DRIVER: &str = "csi.cert-manager.io";

/// The YAML documents of `file`.
fn documents(file: &Path) -> Vec<serde_norway::Value> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde_norway::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `v` as `T`, refusing any field `T` does not know.
fn strict<T: DeserializeOwned>(v: &serde_norway::Value, what: &str) -> T {
    let mut unknown = Vec::new();
    let t = serde_ignored::deserialize(v.clone(), |path| unknown.push(path.to_string()))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(unknown.is_empty(), "{what}: unknown fields {unknown:?}");
    t
}

// The custom resources the manifests use, as their CRDs define the fields
// used here; anything else is refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Custom<S> {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServiceMonitorSpec {
    selector: LabelSelector,
    endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Endpoint {
    port: String,
    path: String,
    interval: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrometheusRuleSpec {
    groups: Vec<RuleGroup>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleGroup {
    #[allow(dead_code)]
    name: String,
    rules: Vec<Rule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    alert: String,
    expr: String,
    #[serde(rename = "for")]
    #[allow(dead_code)]
    for_: Option<String>,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct IssuerSpec {
    self_signed: Option<BTreeMap<String, String>>,
    ca: Option<CaIssuer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CaIssuer {
    #[allow(dead_code)]
    secret_name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct CertificateSpec {
    #[serde(rename = "isCA")]
    is_ca: Option<bool>,
    common_name: Option<String>,
    secret_name: String,
    duration: Option<String>,
    renew_before: Option<String>,
    dns_names: Option<Vec<String>>,
    uris: Option<Vec<String>>,
    usages: Option<Vec<String>>,
    private_key: Option<PrivateKey>,
    issuer_ref: IssuerRef,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PrivateKey {
    algorithm: String,
    size: u32,
    rotation_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IssuerRef {
    name: String,
    kind: String,
}

// approver-policy's CertificateRequestPolicy (policy.cert-manager.io/v1alpha1),
// the fields approver-policy.yaml uses.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PolicySpec {
    allowed: Option<PolicyAllowed>,
    constraints: Option<PolicyConstraints>,
    selector: PolicySelector,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PolicyAllowed {
    common_name: Option<AllowedString>,
    dns_names: Option<AllowedStrings>,
    uris: Option<AllowedStrings>,
    #[serde(rename = "isCA")]
    is_ca: Option<bool>,
    usages: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct AllowedString {
    value: Option<String>,
    required: Option<bool>,
    validations: Option<Vec<ValidationRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct AllowedStrings {
    values: Option<Vec<String>>,
    required: Option<bool>,
    validations: Option<Vec<ValidationRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct ValidationRule {
    rule: String,
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PolicyConstraints {
    min_duration: Option<String>,
    max_duration: Option<String>,
    private_key: Option<KeyConstraints>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct KeyConstraints {
    algorithm: Option<String>,
    min_size: Option<u32>,
    max_size: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PolicySelector {
    issuer_ref: Option<PolicyIssuerRef>,
    namespace: Option<PolicyNamespace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PolicyIssuerRef {
    name: Option<String>,
    kind: Option<String>,
    group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct PolicyNamespace {
    match_names: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Kustomization {
    #[allow(dead_code)]
    api_version: String,
    #[allow(dead_code)]
    kind: String,
    namespace: String,
    resources: Vec<String>,
    config_map_generator: Vec<Generator>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Generator {
    #[allow(dead_code)]
    name: String,
    files: Vec<String>,
    #[allow(dead_code)]
    options: serde_norway::Value,
}

/// Every object of the base, by kind.
#[derive(Default)]
struct Manifests {
    namespace: Option<Namespace>,
    config: Option<ConfigMap>,
    services: Vec<Service>,
    statefulset: Option<StatefulSet>,
    pdb: Option<PodDisruptionBudget>,
    rules: Vec<Rule>,
    monitors: Vec<ServiceMonitorSpec>,
    certificates: Vec<(String, CertificateSpec)>,
    issuers: Vec<(String, IssuerSpec)>,
}

fn load() -> (Kustomization, Manifests) {
    let dir = kube_dir();
    let k: Kustomization = strict(
        &documents(&dir.join("kustomization.yaml"))[0],
        "kustomization.yaml",
    );
    let mut m = Manifests::default();
    for file in &k.resources {
        for (i, doc) in documents(&dir.join(file)).iter().enumerate() {
            let what = format!("{file} #{i}");
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            match kind.as_str() {
                "Namespace" => m.namespace = Some(strict(doc, &what)),
                "ConfigMap" => m.config = Some(strict(doc, &what)),
                "Service" => m.services.push(strict(doc, &what)),
                "StatefulSet" => m.statefulset = Some(strict(doc, &what)),
                "PodDisruptionBudget" => m.pdb = Some(strict(doc, &what)),
                "ServiceMonitor" => {
                    let c: Custom<ServiceMonitorSpec> = strict(doc, &what);
                    assert_eq!(c.api_version, "monitoring.coreos.com/v1");
                    m.monitors.push(c.spec);
                }
                "PrometheusRule" => {
                    let c: Custom<PrometheusRuleSpec> = strict(doc, &what);
                    assert_eq!(c.api_version, "monitoring.coreos.com/v1");
                    m.rules
                        .extend(c.spec.groups.into_iter().flat_map(|g| g.rules));
                }
                "Certificate" => {
                    let c: Custom<CertificateSpec> = strict(doc, &what);
                    assert_eq!(
                        (c.api_version.as_str(), c.kind.as_str()),
                        ("cert-manager.io/v1", "Certificate")
                    );
                    m.certificates.push((c.metadata.name.unwrap(), c.spec));
                }
                "Issuer" => {
                    let c: Custom<IssuerSpec> = strict(doc, &what);
                    assert_eq!(c.api_version, "cert-manager.io/v1");
                    m.issuers.push((c.metadata.name.unwrap(), c.spec));
                }
                other => panic!("{what}: unexpected kind {other:?}"),
            }
        }
    }
    (k, m)
}

fn om_container(sts: &StatefulSet) -> &Container {
    let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.containers
        .iter()
        .find(|c| c.name == "om")
        .expect("an om container")
}

fn om_toml(m: &Manifests) -> toml::Table {
    let data = m.config.as_ref().unwrap().data.as_ref().unwrap();
    toml::from_str(&data["om.toml"]).unwrap()
}

/// The StatefulSet's volume `name`, served by cert-manager's CSI driver.
fn csi_volume<'a>(sts: &'a StatefulSet, name: &str) -> &'a CSIVolumeSource {
    let pod = sts.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let volume = pod
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name}"));
    let csi = volume
        .csi
        .as_ref()
        .unwrap_or_else(|| panic!("volume {name} is not a CSI volume"));
    assert_eq!(csi.driver, CSI_DRIVER);
    csi
}

/// The CSI driver's attribute `key` of `csi`.
fn csi_attribute<'a>(csi: &'a CSIVolumeSource, key: &str) -> &'a str {
    csi.volume_attributes
        .as_ref()
        .and_then(|a| a.get(&format!("{CSI_DRIVER}/{key}")))
        .unwrap_or_else(|| panic!("no {CSI_DRIVER}/{key}"))
}

/// A comma-separated attribute, split as the CSI driver splits it.
fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(|x| x.trim().to_string()).collect()
}

/// The DNS names the CSI driver puts in pod `pod`'s certificate: its
/// `dns-names` attribute with the pod's variables expanded.
fn csi_dns_names(csi: &CSIVolumeSource, pod: &str, ns: &str) -> Vec<String> {
    let template = csi_attribute(csi, "dns-names");
    let names = template
        .replace("${POD_NAME}", pod)
        .replace("${POD_NAMESPACE}", ns);
    assert!(
        !names.contains('$'),
        "{template}: a variable other than POD_NAME and POD_NAMESPACE"
    );
    split_list(&names)
}

/// approver-policy's wildcard match: `*` stands for any string, dots
/// included.
fn wildcard(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => s.strip_prefix(head).is_some_and(|rest| {
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && wildcard(tail, &rest[i..]))
        }),
    }
}

/// Every `"om_…"` metric name om's sources register.
fn metric_catalog() -> BTreeSet<String> {
    let root = om_tests::repo_root();
    let mut out = BTreeSet::new();
    let mut stack = vec![
        root.join("om/src"),
        root.join("raft-store/src"),
        root.join("tls/src"),
    ];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.extend(metric_names(&text));
            }
        }
    }
    out
}

fn metric_names(text: &str) -> Vec<String> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("om_") {
        let start = i + at;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end] == b'_') {
            end += 1;
        }
        let before = start.checked_sub(1).map(|j| b[j]);
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
            out.push(text[start..end].to_string());
        }
        i = end.max(start + 3);
    }
    out
}

/// Every manifest parses strictly against Kubernetes' (or the CRD's)
/// types, the kustomization lists every file, and the pieces fit: service
/// names, ports, probes, mounts, the config om loads, certificate names,
/// the grace period against the handover, and metric names in alerts and
/// the dashboard.
#[test]
fn manifests_are_strict_kubernetes_objects_that_fit_together() {
    let (k, m) = load();
    let dir = kube_dir();
    // Every file of the folder is used.
    let mut listed: BTreeSet<String> = k.resources.iter().cloned().collect();
    listed.extend(k.config_map_generator.iter().flat_map(|g| g.files.clone()));
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
    let ns = m.namespace.as_ref().unwrap().metadata.name.clone().unwrap();
    assert_eq!(ns, k.namespace);

    let sts = m.statefulset.as_ref().unwrap();
    let spec = sts.spec.as_ref().unwrap();
    let name = sts.metadata.name.clone().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    assert!(
        spec.volume_claim_templates
            .as_ref()
            .is_some_and(|v| !v.is_empty())
    );
    let peers = m
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some(spec.service_name.as_deref().unwrap()))
        .expect("the StatefulSet's service");
    let ps = peers.spec.as_ref().unwrap();
    assert_eq!(ps.cluster_ip.as_deref(), Some("None"));
    assert_eq!(ps.publish_not_ready_addresses, Some(true));
    let pdb = m.pdb.as_ref().unwrap().spec.as_ref().unwrap();
    assert_eq!(
        pdb.min_available,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
    );
    assert_eq!(pdb.selector, Some(spec.selector.clone()));

    let pod = spec.template.spec.as_ref().unwrap();
    let grace = pod.termination_grace_period_seconds.unwrap() as u64;
    assert!(
        grace >= om::server::HANDOVER_TIMEOUT.as_secs() + 10,
        "the grace period must cover the handover and the shutdown"
    );
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    let c = om_container(sts);
    let csc = c.security_context.as_ref().unwrap();
    assert_eq!(csc.read_only_root_filesystem, Some(true));
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert!(c.resources.as_ref().unwrap().requests.is_some());
    let port = |n: &str| {
        c.ports
            .as_ref()
            .unwrap()
            .iter()
            .find(|p| p.name.as_deref() == Some(n))
            .unwrap()
            .container_port
    };
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

    // The config om reads: ports match the container's, files are mounted,
    // the initial cluster names every pod through the peer service.
    let cfg = om_toml(&m);
    for (key, p) in [
        ("grpc_addr", "grpc"),
        ("raft_addr", "raft"),
        ("http_addr", "http"),
    ] {
        let addr: std::net::SocketAddr = cfg[key].as_str().unwrap().parse().unwrap();
        assert_eq!(i32::from(addr.port()), port(p), "{key}");
    }
    let args = c.args.as_ref().unwrap();
    let config_path = &args[args.iter().position(|a| a == "--config").unwrap() + 1];
    let mounts = c.volume_mounts.as_ref().unwrap();
    let mounted = |path: &str| {
        mounts
            .iter()
            .any(|v| path == v.mount_path || path.starts_with(&format!("{}/", v.mount_path)))
    };
    for path in [
        config_path.as_str(),
        cfg["tls_cert"].as_str().unwrap(),
        cfg["tls_ca"].as_str().unwrap(),
        cfg["data_dir"].as_str().unwrap(),
        cfg["audit_log"].as_str().unwrap(),
    ] {
        assert!(mounted(path), "{path} is not on a mounted volume");
    }
    let peer_svc = spec.service_name.clone().unwrap();
    let members =
        om::config::parse_initial_cluster(cfg["initial_cluster"].as_str().unwrap()).unwrap();
    assert_eq!(members.len(), 3);
    // Each pod's member certificate comes from cert-manager's CSI driver,
    // as the volume holding om's certificate files: issued by the CA
    // Issuer of certificates.yaml, with the member marker, for both ends of
    // a connection, renewed before it expires, its files where om reads
    // them, readable by om's group.
    let tls_cert = cfg["tls_cert"].as_str().unwrap();
    let tls_mount = mounts
        .iter()
        .find(|v| tls_cert.starts_with(&format!("{}/", v.mount_path)))
        .expect("the certificate's volume");
    let tls = csi_volume(sts, &tls_mount.name);
    let attr = |key: &str| csi_attribute(tls, key);
    assert_eq!(tls.read_only, Some(true), "the CSI driver mounts read-only");
    assert_eq!(attr("issuer-kind"), "Issuer");
    let issuer = attr("issuer-name");
    assert!(
        m.issuers.iter().any(|(n, s)| n == issuer && s.ca.is_some()),
        "{issuer} is a CA Issuer of certificates.yaml"
    );
    // The Raft port admits only certificates with the member marker.
    assert_eq!(
        split_list(attr("uri-sans")),
        vec![om::grpc::peer::MEMBER_MARKER.to_string()]
    );
    let usages = split_list(attr("key-usages"));
    for u in ["server auth", "client auth"] {
        assert!(usages.iter().any(|x| x == u), "{usages:?} lacks {u}");
    }
    assert_eq!(attr("key-algorithm"), "ECDSA");
    assert_eq!(attr("key-size"), "256");
    let hours = |key: &str| -> u64 {
        attr(key)
            .strip_suffix('h')
            .and_then(|h| h.parse().ok())
            .unwrap_or_else(|| panic!("{key}: whole hours expected"))
    };
    assert!(
        hours("renew-before") < hours("duration"),
        "renewed before it expires"
    );
    let tls_dir = format!("{}/", tls_mount.mount_path);
    for (key, file) in [
        ("certificate-file", "tls_cert"),
        ("privatekey-file", "tls_key"),
        ("ca-file", "tls_ca"),
    ] {
        assert_eq!(
            cfg[file].as_str().unwrap().strip_prefix(&tls_dir),
            Some(attr(key)),
            "{file}"
        );
    }
    assert_eq!(
        Some(attr("fs-group").parse::<i64>().unwrap()),
        psc.fs_group,
        "the key is readable by om's group only"
    );
    // Pod NAME-i's certificate names member i's Raft host and no other
    // member's (om binds a request to the members whose hosts the
    // certificate names: checked with om's own matching), no wildcard, and
    // the client service, which clients verify.
    let client_svc = m
        .services
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .find(|n| *n != peer_svc)
        .expect("the client service");
    let ca = TestCa::new("om cluster CA");
    let issued = tempfile::tempdir().unwrap();
    for (i, mem) in members.iter().enumerate() {
        let host = format!("{name}-{i}.{peer_svc}.{ns}.svc.cluster.local");
        assert_eq!(mem.id, i as u64 + 1);
        assert_eq!(om_tls::host_of(&mem.raft_addr), host);
        assert_eq!(om_tls::host_of(&mem.grpc_addr), host);
        assert_eq!(
            om::config::node_id_of_host(&format!("{name}-{i}")).unwrap(),
            mem.id
        );
        let names = csi_dns_names(tls, &format!("{name}-{i}"), &ns);
        assert!(names.iter().all(|n| !n.contains('*')), "{names:?}");
        assert!(names.contains(&host), "{names:?} lacks {host}");
        for svc in [
            format!("{client_svc}.{ns}.svc"),
            format!("{client_svc}.{ns}.svc.cluster.local"),
        ] {
            assert!(names.contains(&svc), "{names:?} lacks {svc}");
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let cert = ca.issue_member(issued.path(), &format!("{name}-{i}"), &refs);
        let der = om_tls::rustls::pki_types::CertificateDer::from(cert.der);
        for (j, other) in members.iter().enumerate() {
            assert_eq!(
                om_tls::names_any_host(&der, [other.raft_addr.as_str()]),
                i == j,
                "{name}-{i}'s certificate and member {}",
                other.id
            );
        }
    }
    // Issuers exist. A Certificate's Secret is readable by whoever reads the
    // namespace's Secrets: none carries the member marker or a wildcard.
    for (n, cert) in &m.certificates {
        assert!(
            m.issuers.iter().any(|(i, _)| *i == cert.issuer_ref.name),
            "{}",
            cert.issuer_ref.name
        );
        assert_eq!(cert.issuer_ref.kind, "Issuer");
        assert!(
            cert.uris
                .iter()
                .flatten()
                .all(|u| u != om::grpc::peer::MEMBER_MARKER),
            "{n}"
        );
        assert!(
            cert.dns_names.iter().flatten().all(|d| !d.contains('*')),
            "{n}"
        );
    }
    assert!(m.issuers.iter().any(|(_, s)| s.self_signed.is_some()));
    assert!(m.issuers.iter().any(|(_, s)| s.ca.is_some()));
    let admins = cfg["admins"].as_str().unwrap();
    assert!(
        m.certificates
            .iter()
            .any(|(_, c)| c.common_name.as_deref() == Some(admins))
    );

    // om loads that file, and a pod's name gives its node id.
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("om.toml");
    std::fs::write(
        &f,
        &m.config.as_ref().unwrap().data.as_ref().unwrap()["om.toml"],
    )
    .unwrap();
    let loaded = om::config::Config::load(om::config::Args {
        config: Some(f),
        node_id: Some(2),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(loaded.initial_cluster, members);

    // Metrics in alerts, the scrape port and the dashboard exist.
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
    let mut exprs: Vec<String> = m.rules.iter().map(|r| r.expr.clone()).collect();
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
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
    for mon in &m.monitors {
        assert_eq!(mon.endpoints[0].path, "/metrics");
        assert_eq!(port(&mon.endpoints[0].port), i32::from(9874u16));
        assert_eq!(Some(mon.selector.clone()), Some(spec.selector.clone()));
        let _ = &mon.endpoints[0].interval;
    }
}

/// `approver-policy.yaml`, optional (it needs cert-manager's
/// approver-policy): strict CertificateRequestPolicy and RBAC objects. The
/// member policy allows what every pod's CSI volume asks om-ca for, and only
/// the CSI driver may use it; every Certificate of certificates.yaml is
/// allowed by a policy of its own that admits no member marker, used only
/// by cert-manager's controller.
#[test]
fn the_optional_approver_policy_fits_the_manifests() {
    let (k, m) = load();
    let sts = m.statefulset.as_ref().unwrap();
    let sts_name = sts.metadata.name.clone().unwrap();
    let replicas = sts.spec.as_ref().unwrap().replicas.unwrap();
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
                assert_eq!(r.metadata.namespace.as_deref(), Some(k.namespace.as_str()));
                roles.push((r.metadata.name.unwrap(), r.rules.unwrap_or_default()));
            }
            "ClusterRole" => {
                let r: ClusterRole = strict(doc, &what);
                roles.push((r.metadata.name.unwrap(), r.rules.unwrap_or_default()));
            }
            "RoleBinding" => {
                let b: RoleBinding = strict(doc, &what);
                assert_eq!(b.metadata.namespace.as_deref(), Some(k.namespace.as_str()));
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
    let tls = csi_volume(sts, "tls");
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
        for n in csi_dns_names(tls, &format!("{sts_name}-{i}"), &k.namespace) {
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

/// One pod of the StatefulSet run as a process: the container's command and
/// environment, its host name, the ConfigMap's file with peer DNS names
/// mapped to loopback addresses 127.0.77.N.
struct Pod {
    /// Its address is 127.0.NET.(ordinal+1): each test its own NET.
    net: u8,
    ordinal: usize,
    config: PathBuf,
    command: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Pod {
    fn ip(&self) -> String {
        format!("127.0.{}.{}", self.net, self.ordinal + 1)
    }

    fn start(&mut self) {
        let mut cmd = Command::new(om_tests::binary("om"));
        cmd.args(&self.command[1..]).envs(self.env.iter().cloned());
        cmd.env("HOSTNAME", format!("om-{}", self.ordinal));
        cmd.env("OM_LOG", "warn");
        cmd.stdout(std::process::Stdio::null());
        self.child = Some(cmd.spawn().unwrap());
    }

    fn signal(&mut self, sig: i32) -> Duration {
        let mut child = self.child.take().unwrap();
        let started = Instant::now();
        unsafe { libc::kill(child.id() as i32, sig) };
        child.wait().unwrap();
        started.elapsed()
    }

    async fn ready(&self) -> bool {
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
struct Load {
    acked: std::sync::Mutex<Vec<String>>,
    errors: std::sync::Mutex<Vec<String>>,
    last_ack: std::sync::Mutex<Instant>,
    longest_gap: std::sync::Mutex<Duration>,
    stop: AtomicBool,
}

impl Load {
    fn mark(&self) {
        *self.longest_gap.lock().unwrap() = Duration::ZERO;
    }

    fn gap(&self) -> Duration {
        let since = self.last_ack.lock().unwrap().elapsed();
        (*self.longest_gap.lock().unwrap()).max(since)
    }
}

async fn write_loop(c: Arc<OmClient>, load: Arc<Load>) {
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

async fn wait_ready(pods: &[Pod]) {
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

async fn leader_ordinal(c: &OmClient) -> usize {
    let s = c.cluster_status().await.unwrap();
    s.leader_id as usize - 1
}

/// The StatefulSet's pods as processes, with a test CA standing in for
/// cert-manager and an admin client.
struct Sts {
    _dir: tempfile::TempDir,
    pods: Vec<Pod>,
    client: Arc<OmClient>,
}

/// Ordinals a test may run (0..MAX_PODS); each pod has its own member
/// certificate naming only its own address, as the CSI driver's names only
/// its own host in Kubernetes.
const MAX_PODS: usize = 4;

impl Sts {
    /// Starts `replicas` pods at once (Parallel pod management) on
    /// 127.0.NET.N and waits until each is ready.
    async fn start(net: u8, replicas: usize) -> Sts {
        let (k, m) = load();
        let sts = m.statefulset.as_ref().unwrap();
        let c = om_container(sts);
        let tls_volume = csi_volume(sts, "tls");
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("om cluster CA");
        let ca_path = ca.write(dir.path(), "ca");
        let ips: Vec<String> = (1..=MAX_PODS).map(|n| format!("127.0.{net}.{n}")).collect();
        let admin = ca.issue(dir.path(), "admin", &["om-admin"]);
        let base = m.config.as_ref().unwrap().data.as_ref().unwrap()["om.toml"].clone();
        let mut command: Vec<String> = c.command.clone().unwrap();
        command.extend(c.args.clone().unwrap());
        let env: Vec<(String, String)> = c
            .env
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        let mut pods: Vec<Pod> = (0..MAX_PODS)
            .map(|i| {
                let pod_dir = dir.path().join(format!("om-{i}"));
                std::fs::create_dir_all(&pod_dir).unwrap();
                // The pod's own member certificate, with the names the CSI
                // driver gives om-i, its peer name mapped to its address as
                // in the config below.
                let names: Vec<String> =
                    csi_dns_names(tls_volume, &format!("om-{i}"), &k.namespace)
                        .into_iter()
                        .map(|n| {
                            match (0..MAX_PODS)
                                .find(|j| n == format!("om-{j}.om-peers.om.svc.cluster.local"))
                            {
                                Some(j) => ips[j].clone(),
                                None => n,
                            }
                        })
                        .collect();
                assert_eq!(
                    names.iter().filter(|n| ips.contains(n)).collect::<Vec<_>>(),
                    vec![&ips[i]],
                    "om-{i} names its own address only"
                );
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let member = ca.issue_member(&pod_dir, "member", &refs);
                let mut text = base.clone();
                for (j, ip) in ips.iter().enumerate() {
                    text = text.replace(&format!("om-{j}.om-peers.om.svc.cluster.local"), ip);
                }
                text = text
                    .replace("0.0.0.0", &ips[i])
                    .replace("/var/lib/om", pod_dir.to_str().unwrap())
                    .replace("/etc/om/tls/tls.crt", member.cert.to_str().unwrap())
                    .replace("/etc/om/tls/tls.key", member.key.to_str().unwrap())
                    .replace("/etc/om/tls/ca.crt", ca_path.to_str().unwrap());
                let config = pod_dir.join("om.toml");
                std::fs::write(&config, text).unwrap();
                let mut command = command.clone();
                let at = command.iter().position(|a| a == "--config").unwrap() + 1;
                command[at] = config.to_str().unwrap().to_string();
                Pod {
                    net,
                    ordinal: i,
                    config,
                    command,
                    env: env.clone(),
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
        client.create_volume("vol1", "om-admin").await.unwrap();
        client
            .create_bucket("vol1", "bkt1", om_client::v1::BucketLayout::ObjectStore)
            .await
            .unwrap();
        Sts {
            _dir: dir,
            pods,
            client,
        }
    }
}

/// The StatefulSet as three processes (its command, environment and
/// ConfigMap; mutual TLS with a test CA): a rolling update as Kubernetes
/// does it (highest ordinal first, SIGTERM, wait until ready again) under a
/// steady write load loses no acknowledged write and shows the client no
/// error; then the leader's write unavailability is measured for SIGTERM
/// (handover) and for kill -9 (election), side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_statefulset_survives_a_rolling_update_under_load() {
    let Sts {
        _dir,
        mut pods,
        client,
    } = Sts::start(77, 3).await;
    pods.truncate(3);
    assert!(pods.iter().all(|p| p.config.exists()));
    let load = Arc::new(Load {
        acked: Default::default(),
        errors: Default::default(),
        last_ack: std::sync::Mutex::new(Instant::now()),
        longest_gap: Default::default(),
        stop: AtomicBool::new(false),
    });
    let writer = tokio::spawn(write_loop(client.clone(), load.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The rolling update: om-2, om-1, om-0.
    let mut report = Vec::new();
    for i in (0..3).rev() {
        let was_leader = leader_ordinal(&client).await == i;
        load.mark();
        let stopped = pods[i].signal(libc::SIGTERM);
        assert!(
            stopped < Duration::from_secs(15),
            "om-{i} took {stopped:?} to stop"
        );
        pods[i].start();
        wait_ready(&pods).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        report.push(format!(
            "om-{i}{}: stopped in {stopped:?}, longest write gap {:?}",
            if was_leader { " (leader)" } else { "" },
            load.gap()
        ));
    }
    // The leader alone, SIGTERM then kill -9, measured alike.
    let mut gaps = BTreeMap::new();
    for (name, sig) in [("SIGTERM", libc::SIGTERM), ("SIGKILL", libc::SIGKILL)] {
        let l = leader_ordinal(&client).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        load.mark();
        pods[l].signal(sig);
        // Until writes flow again without it.
        let before = load.acked.lock().unwrap().len();
        let deadline = Instant::now() + Duration::from_secs(20);
        while load.acked.lock().unwrap().len() < before + 20 {
            assert!(
                Instant::now() < deadline,
                "writes did not resume after {name}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        gaps.insert(name, load.gap());
        pods[l].start();
        wait_ready(&pods).await;
    }
    load.stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    for line in &report {
        println!("rolling update: {line}");
    }
    println!(
        "leader write unavailability: SIGTERM {:?}, kill -9 {:?}",
        gaps["SIGTERM"], gaps["SIGKILL"]
    );
    let errors = load.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "client-visible errors: {errors:?}");
    let acked = load.acked.lock().unwrap().clone();
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged",
        acked.len()
    );
    for key in &acked {
        client
            .lookup_key("vol1", "bkt1", key)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {key} lost: {e}"));
    }
}

/// Scaling as the runbook says: pod om-3 starts from the same ConfigMap,
/// finds itself outside the initial cluster and waits; `add-node` makes it
/// a learner, then a voter once caught up, and it serves what was written
/// before it came. Scaling in removes the member first, then the pod; the
/// cluster keeps serving throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scaling_out_and_in_follows_the_runbook() {
    let mut sts = Sts::start(78, 3).await;
    let c = sts.client.clone();
    for i in 0..50 {
        c.put_key("vol1", "bkt1", &format!("before-{i:03}"), 1)
            .await
            .unwrap();
    }
    sts.pods[3].start();
    // Not a member yet: it waits, not ready.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !sts.pods[3].ready().await,
        "a joiner is ready only once added"
    );
    let ip = sts.pods[3].ip();
    let status = c
        .add_node(4, &format!("{ip}:9872"), &format!("{ip}:9862"), false)
        .await
        .unwrap();
    let voters = status.members.iter().filter(|m| m.voter).count();
    assert_eq!(voters, 4, "{status:?}");
    wait_ready(&sts.pods).await;
    // The new member holds what was written before it joined.
    om_tests::wait_for(Duration::from_secs(10), "om-3 to apply the log", || {
        let c = c.clone();
        async move {
            let s = c.cluster_status().await.ok()?;
            let m = s.members.iter().find(|m| m.node_id == 4)?;
            (m.matched_index >= s.committed_index).then_some(())
        }
    })
    .await;
    c.put_key("vol1", "bkt1", "after-join", 1).await.unwrap();
    // Scale in: the member goes first, then the pod.
    let status = c.remove_node(4).await.unwrap();
    assert_eq!(status.members.len(), 3, "{status:?}");
    sts.pods[3].signal(libc::SIGTERM);
    c.put_key("vol1", "bkt1", "after-leave", 1).await.unwrap();
    let listed = c
        .list_keys(om_client::v1::ListKeysRequest {
            volume: "vol1".into(),
            bucket: "bkt1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.keys.len(), 52);
}

/// grpc.health.v1 answers SERVING once the node is ready and NOT_SERVING
/// while it has no leader; reflection lists and describes om's services, as
/// `grpcurl list` and `grpcurl describe` ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_answer_real_clients() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let node = om_tests::TestNode::start().await;
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", node.endpoint()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(ch.clone());
    for service in ["", "om.v1.OzoneManager", "om.v1.Cluster"] {
        let status = om_tests::wait_for(Duration::from_secs(10), "SERVING", || {
            let mut health = health.clone();
            async move {
                let r = health
                    .check(HealthCheckRequest {
                        service: service.into(),
                    })
                    .await
                    .ok()?
                    .into_inner();
                (r.status == ServingStatus::Serving as i32).then_some(r.status)
            }
        })
        .await;
        assert_eq!(status, ServingStatus::Serving as i32);
    }
    assert_eq!(
        health
            .check(HealthCheckRequest {
                service: "no.such.Service".into()
            })
            .await
            .unwrap_err()
            .code(),
        tonic::Code::NotFound
    );

    let mut reflection = ServerReflectionClient::new(ch);
    let ask = |m: MessageRequest| {
        futures::stream::iter(vec![ServerReflectionRequest {
            host: String::new(),
            message_request: Some(m),
        }])
    };
    let mut answers = reflection
        .server_reflection_info(ask(MessageRequest::ListServices(String::new())))
        .await
        .unwrap()
        .into_inner();
    let listed = match answers.message().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(l)) => l
            .service
            .into_iter()
            .map(|s| s.name)
            .collect::<BTreeSet<_>>(),
        other => panic!("{other:?}"),
    };
    for s in ["om.v1.OzoneManager", "om.v1.Cluster"] {
        assert!(listed.contains(s), "{listed:?}");
    }
    let mut answers = reflection
        .server_reflection_info(ask(MessageRequest::FileContainingSymbol(
            "om.v1.OzoneManager".into(),
        )))
        .await
        .unwrap()
        .into_inner();
    match answers.message().await.unwrap().unwrap().message_response {
        Some(MessageResponse::FileDescriptorResponse(f)) => {
            // The encoded FileDescriptorProto of om.proto: its package, the
            // service and its methods are there by name.
            let file = f.file_descriptor_proto.concat();
            let has = |s: &str| file.windows(s.len()).any(|w| w == s.as_bytes());
            assert!(has("om/v1/om.proto") && has("om.v1"));
            assert!(has("OzoneManager") && has("ListKeys") && has("ListKeysRequest"));
        }
        other => panic!("{other:?}"),
    }
    node.stop().await;

    // A member whose peers never start has no leader: NOT_SERVING.
    let addrs = om_tests::cluster_addrs(3);
    let lonely = om_tests::TestNode::start_member(&addrs[0], &addrs).await;
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", addrs[0].grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let r = HealthClient::new(ch)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status, ServingStatus::NotServing as i32);
    lonely.node.shutdown().await;
}

/// The Prometheus rule file the alert tests name (`rule_files:`), written
/// next to them: the PrometheusRule's `spec` (its `groups:`).
const PROMTOOL_RULES: &str = "om-rules.yaml";

/// Runs promtool with `args` in `dir` and returns its output; panics with
/// that output unless it succeeds, and when promtool is missing.
fn promtool<I, S>(dir: &Path, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool (Debian's prometheus package; scripts/setup.sh installs it): {e}")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool failed ({}):\n{text}",
        out.status
    );
    text
}

/// prometheusrule.yaml's rules, taken out of the custom resource, pass
/// `promtool check rules`, and `promtool test rules` fires and clears every
/// alert on the series of `alert-tests/`. Without promtool this fails:
/// `make test` runs scripts/setup.sh, which installs it.
#[test]
fn alerts_fire_and_clear_in_promtool() {
    let dir = kube_dir();
    let rule = documents(&dir.join("prometheusrule.yaml"))
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("PrometheusRule"))
        .expect("prometheusrule.yaml holds a PrometheusRule");
    let spec = &rule["spec"];
    let alerts: BTreeSet<String> = spec["groups"]
        .as_sequence()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules of a group").iter())
        .map(|r| r["alert"].as_str().expect("an alert").to_string())
        .collect();
    assert!(!alerts.is_empty());

    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join(PROMTOOL_RULES),
        serde_norway::to_string(spec).unwrap(),
    )
    .unwrap();
    let mut tests: Vec<std::ffi::OsString> = Vec::new();
    let (mut fired, mut cleared) = (BTreeSet::new(), BTreeSet::new());
    for e in std::fs::read_dir(dir.join("alert-tests")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let docs = documents(&p);
        let doc = &docs[0];
        let files: Vec<&str> = doc["rule_files"]
            .as_sequence()
            .expect("rule_files")
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(files, [PROMTOOL_RULES], "{}", p.display());
        for t in doc["tests"].as_sequence().expect("tests") {
            for a in t["alert_rule_test"].as_sequence().into_iter().flatten() {
                let name = a["alertname"].as_str().expect("alertname").to_string();
                // No (or empty) exp_alerts: the alert must not be firing.
                if a["exp_alerts"].as_sequence().is_some_and(|s| !s.is_empty()) {
                    fired.insert(name);
                } else {
                    cleared.insert(name);
                }
            }
        }
        let name = p.file_name().unwrap().to_os_string();
        std::fs::copy(&p, tmp.path().join(&name)).unwrap();
        tests.push(name);
    }
    tests.sort();
    assert!(!tests.is_empty(), "no promtool tests in alert-tests/");
    let untested: Vec<&String> = alerts
        .iter()
        .filter(|a| !(fired.contains(*a) && cleared.contains(*a)))
        .collect();
    assert!(
        untested.is_empty(),
        "alerts alert-tests/ does not both fire and clear: {untested:?}"
    );
    let unknown: Vec<&String> = fired
        .union(&cleared)
        .filter(|a| !alerts.contains(*a))
        .collect();
    assert!(
        unknown.is_empty(),
        "alert-tests/ tests no such alerts: {unknown:?}"
    );

    let checked = promtool(tmp.path(), ["check", "rules", PROMTOOL_RULES]);
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", alerts.len())),
        "{checked}"
    );
    let mut args: Vec<std::ffi::OsString> = vec!["test".into(), "rules".into()];
    args.extend(tests.iter().cloned());
    let tested = promtool(tmp.path(), args);
    assert_eq!(tested.matches("SUCCESS").count(), tests.len(), "{tested}");
}
