//! `deploy/`: the Kubernetes manifests as `kubectl kustomize` renders them
//! (the base, `deploy/overlays/example` with another namespace, a name
//! prefix, five members and another cluster domain, and the plaintext
//! `deploy/overlays/dev`), every object parsed strictly against
//! Kubernetes' types (unknown fields refused) and their cross-references
//! checked in each rendering; the StatefulSet run as processes (its init
//! container, command, environment and ConfigMap) through a rolling update
//! under write load, scaling, and a restore from the backup CronJob's
//! backup; and gRPC health and reflection answered to real clients.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{
    CSIVolumeSource, ConfigMap, Container, Namespace, PersistentVolumeClaim, PodSpec, Service,
    Volume,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyIngressRule};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use om_client::{ClientOptions, OmClient};
use om_tests::certs::TestCa;
use serde::Deserialize;
use serde::de::DeserializeOwned;

fn deploy_dir() -> PathBuf {
    om_tests::repo_root().join("deploy")
}

/// The kustomize base.
fn kube_dir() -> PathBuf {
    deploy_dir().join("kubernetes")
}

fn overlay_dir(name: &str) -> PathBuf {
    deploy_dir().join("overlays").join(name)
}

/// Files of the base's folder the kustomization leaves out on purpose: they
/// need more installed than the base does (approver-policy.yaml), or are no
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
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ServiceMonitorSpec {
    job_label: Option<String>,
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
    #[allow(dead_code)]
    namespace: String,
    resources: Vec<String>,
    config_map_generator: Vec<Generator>,
    transformers: Vec<String>,
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

/// The YAML documents `kubectl kustomize DIR` renders (`kustomize build
/// DIR` where kubectl is missing).
fn kustomize(dir: &Path) -> Vec<serde_norway::Value> {
    let run = |program: &str, verb: &str| Command::new(program).arg(verb).arg(dir).output();
    let out = match run("kubectl", "kustomize") {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => run("kustomize", "build")
            .unwrap_or_else(|e| {
                panic!(
                    "rendering the manifests needs kubectl (kubectl kustomize) or kustomize: {e}"
                )
            }),
        other => other.unwrap(),
    };
    assert!(
        out.status.success(),
        "kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde_norway::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Every object of one rendering, by kind.
#[derive(Default)]
struct Manifests {
    /// Which rendering (for messages).
    what: String,
    /// Kind, name and namespace of every object.
    objects: Vec<(String, String, Option<String>)>,
    namespace: Option<Namespace>,
    config_maps: Vec<ConfigMap>,
    services: Vec<Service>,
    statefulset: Option<StatefulSet>,
    pdb: Option<PodDisruptionBudget>,
    network_policy: Option<NetworkPolicy>,
    cronjob: Option<CronJob>,
    claims: Vec<PersistentVolumeClaim>,
    rules: Vec<Rule>,
    monitors: Vec<(ObjectMeta, ServiceMonitorSpec)>,
    certificates: Vec<(String, CertificateSpec)>,
    issuers: Vec<(String, IssuerSpec)>,
}

/// `dir` rendered by kustomize, each object parsed strictly.
fn render(dir: &Path) -> Manifests {
    let what = dir
        .strip_prefix(om_tests::repo_root())
        .unwrap_or(dir)
        .display()
        .to_string();
    let mut m = Manifests {
        what: what.clone(),
        ..Default::default()
    };
    for (i, doc) in kustomize(dir).iter().enumerate() {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let what = format!("{what}: {kind} {name} (#{i})");
        m.objects.push((
            kind.clone(),
            name,
            doc["metadata"]["namespace"].as_str().map(str::to_string),
        ));
        match kind.as_str() {
            "Namespace" => m.namespace = Some(strict(doc, &what)),
            "ConfigMap" => m.config_maps.push(strict(doc, &what)),
            "Service" => m.services.push(strict(doc, &what)),
            "StatefulSet" => m.statefulset = Some(strict(doc, &what)),
            "PodDisruptionBudget" => m.pdb = Some(strict(doc, &what)),
            "NetworkPolicy" => m.network_policy = Some(strict(doc, &what)),
            "CronJob" => m.cronjob = Some(strict(doc, &what)),
            "PersistentVolumeClaim" => m.claims.push(strict(doc, &what)),
            "ServiceMonitor" => {
                let c: Custom<ServiceMonitorSpec> = strict(doc, &what);
                assert_eq!(c.api_version, "monitoring.coreos.com/v1");
                m.monitors.push((c.metadata, c.spec));
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
    m
}

impl Manifests {
    fn ns(&self) -> String {
        self.namespace
            .as_ref()
            .and_then(|n| n.metadata.name.clone())
            .unwrap_or_else(|| panic!("{}: no Namespace", self.what))
    }

    fn sts(&self) -> &StatefulSet {
        self.statefulset
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no StatefulSet", self.what))
    }

    fn sts_name(&self) -> String {
        self.sts().metadata.name.clone().unwrap()
    }

    fn replicas(&self) -> usize {
        self.sts().spec.as_ref().unwrap().replicas.unwrap() as usize
    }

    /// The peer Service's name: the StatefulSet's serviceName.
    fn peer_service(&self) -> String {
        self.sts()
            .spec
            .as_ref()
            .unwrap()
            .service_name
            .clone()
            .unwrap()
    }

    /// The labels the StatefulSet selects its pods by.
    fn selector(&self) -> BTreeMap<String, String> {
        self.sts()
            .spec
            .as_ref()
            .unwrap()
            .selector
            .match_labels
            .clone()
            .unwrap()
    }

    /// The StatefulSet's pod template.
    fn pod(&self) -> &PodSpec {
        self.sts()
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
    }

    fn om(&self) -> &Container {
        container(&self.pod().containers, "om")
    }

    /// The StatefulSet's init container that restores a backup.
    fn restore(&self) -> &Container {
        container(
            self.pod().init_containers.as_deref().unwrap_or_default(),
            "restore",
        )
    }

    /// The backup CronJob's pod template.
    fn job_pod(&self) -> &PodSpec {
        self.cronjob
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no CronJob", self.what))
            .spec
            .as_ref()
            .unwrap()
            .job_template
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
    }

    fn backup(&self) -> &Container {
        container(&self.job_pod().containers, "backup")
    }

    /// The ConfigMap the StatefulSet mounts as `config`: its name and data.
    fn config(&self) -> (&str, &BTreeMap<String, String>) {
        let name = &volume(self.pod(), "config")
            .config_map
            .as_ref()
            .expect("volume config is a ConfigMap")
            .name;
        let cm = self
            .config_maps
            .iter()
            .find(|c| c.metadata.name.as_ref() == Some(name))
            .unwrap_or_else(|| panic!("{}: no ConfigMap {name}", self.what));
        (name.as_str(), cm.data.as_ref().unwrap())
    }

    /// The cluster's DNS domain (the ConfigMap's cluster_domain).
    fn domain(&self) -> String {
        self.config().1["cluster_domain"].clone()
    }

    fn service(&self, name: &str) -> &Service {
        self.services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{}: no Service {name}", self.what))
    }

    /// The Service clients use: the one with a virtual IP.
    fn client_service(&self) -> &Service {
        let clients: Vec<&Service> = self
            .services
            .iter()
            .filter(|s| s.spec.as_ref().unwrap().cluster_ip.as_deref() != Some("None"))
            .collect();
        assert_eq!(clients.len(), 1, "{}: one client Service", self.what);
        clients[0]
    }

    /// The address member `ordinal` has in the initial cluster and in its
    /// certificate: its pod's name under the peer Service.
    fn peer_host(&self, ordinal: usize) -> String {
        format!(
            "{}-{ordinal}.{}.{}.svc.{}",
            self.sts_name(),
            self.peer_service(),
            self.ns(),
            self.domain()
        )
    }

    /// The client Service's names in the members' certificates, the fully
    /// qualified one first.
    fn client_names(&self) -> [String; 2] {
        let client = self.client_service().metadata.name.clone().unwrap();
        let ns = self.ns();
        [
            format!("{client}.{ns}.svc.{}", self.domain()),
            format!("{client}.{ns}.svc"),
        ]
    }
}

fn container<'a>(containers: &'a [Container], name: &str) -> &'a Container {
    containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn volume<'a>(pod: &'a PodSpec, name: &str) -> &'a Volume {
    pod.volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// A container's command and arguments.
fn argv_of(c: &Container) -> Vec<String> {
    let mut argv = c.command.clone().unwrap_or_default();
    argv.extend(c.args.clone().unwrap_or_default());
    argv
}

/// The script of a container whose command is `/bin/sh -c SCRIPT` (POSIX
/// sh: the image's /bin/sh is dash).
fn script_of(c: &Container) -> String {
    let argv = argv_of(c);
    assert!(
        argv.len() == 3 && argv[0] == "/bin/sh" && argv[1] == "-c",
        "{}: /bin/sh -c SCRIPT, not {argv:?}",
        c.name
    );
    argv[2].clone()
}

/// The word after the first `key` in `text`.
fn word_after(text: &str, key: &str) -> String {
    let (_, rest) = text
        .split_once(key)
        .unwrap_or_else(|| panic!("no {key:?} in {text:?}"));
    rest.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The container port named `name`.
fn port(c: &Container, name: &str) -> i32 {
    c.ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("{}: no port {name}", c.name))
        .container_port
}

/// A container's environment as Kubernetes sets it in pod `pod` of
/// namespace `ns`: `$(VAR)` references to variables defined before
/// expanded, `fieldRef`s to the pod's name and namespace, and
/// `configMapKeyRef`s to the ConfigMap `config` (its name and data).
fn container_env(
    c: &Container,
    pod: &str,
    ns: &str,
    config: (&str, &BTreeMap<String, String>),
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), None) => expand(v, &out),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    match f.field_path.as_str() {
                        "metadata.name" => pod.to_string(),
                        "metadata.namespace" => ns.to_string(),
                        other => panic!("{}: {}: fieldRef {other}", c.name, e.name),
                    }
                } else if let Some(k) = &from.config_map_key_ref {
                    assert_eq!(k.name, config.0, "{}: {}", c.name, e.name);
                    config.1.get(&k.key).cloned().unwrap_or_else(|| {
                        panic!("{}: {}: no key {} in {}", c.name, e.name, k.key, config.0)
                    })
                } else {
                    panic!("{}: {}: an unexpected valueFrom", c.name, e.name)
                }
            }
            (None, None) => String::new(),
            (Some(_), Some(_)) => panic!("{}: {}: value and valueFrom", c.name, e.name),
        };
        out.push((e.name.clone(), value));
    }
    out
}

/// Kubernetes' expansion of `$(VAR)` in an environment value: variables
/// defined before it; a reference to any other stays as written.
fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("$(") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else {
            out.push_str(&rest[at..]);
            return out;
        };
        match env.iter().rev().find(|(n, _)| *n == after[..end]) {
            Some((_, v)) => out.push_str(v),
            None => out.push_str(&rest[at..at + 2 + end + 1]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

fn env_value(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// The initial cluster members.sh (the ConfigMap's) exports, run as the
/// containers run it (sourced by /bin/sh) with environment `env`.
fn initial_cluster_of(members_sh: &str, env: &[(String, String)]) -> String {
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "set -eu\n{members_sh}\nprintf %s \"$OM_INITIAL_CLUSTER\""
        ))
        .env_clear()
        .envs(env.iter().cloned())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "members.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Whether a selector's labels are all among `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The StatefulSet's (or the job's) volume `name`, served by cert-manager's
/// CSI driver.
fn csi_volume<'a>(pod: &'a PodSpec, name: &str) -> &'a CSIVolumeSource {
    let csi = volume(pod, name)
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

/// Each `om_…` metric of a PromQL expression with its label selector (what
/// is between the braces after it), if it has one.
fn metric_selectors(expr: &str) -> Vec<(String, Option<String>)> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(at) = expr[i..].find("om_") {
        let start = i + at;
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end] == b'_') {
            end += 1;
        }
        let before = start.checked_sub(1).map(|j| b[j]);
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
            let selector = expr[end..]
                .strip_prefix('{')
                .and_then(|s| s.split_once('}'))
                .map(|(s, _)| s.to_string());
            out.push((expr[start..end].to_string(), selector));
        }
        i = end.max(start + 3);
    }
    out
}

/// What a rendering is meant to be, beyond fitting together.
struct Expect {
    /// Mutual TLS with cert-manager (the base, overlays/example), or
    /// plaintext without it (overlays/dev).
    tls: bool,
    /// Members spread over zones strictly (DoNotSchedule with minDomains),
    /// or as a preference.
    strict_zones: bool,
    /// The Prometheus operator's objects are there.
    monitoring: bool,
}

/// One rendering's objects fit together: every object in the namespace;
/// Services, PodDisruptionBudget, NetworkPolicy, anti-affinity and zone
/// spread select the members (and not the backup job); the initial
/// cluster members.sh computes names every member through the peer
/// Service, the namespace and the cluster domain, with the container's
/// ports; om loads its settings; each pod's certificate names its own
/// address and the client Service; the backup job reaches the client
/// Service as an admin and writes the volume the restore init container
/// reads; one image everywhere; /metrics only on the monitored Service.
fn check_rendering(m: &Manifests, e: &Expect) {
    let what = m.what.as_str();
    let ns = m.ns();
    for (kind, name, namespace) in &m.objects {
        if kind != "Namespace" {
            assert_eq!(
                namespace.as_deref(),
                Some(ns.as_str()),
                "{what}: {kind} {name}"
            );
        }
    }

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
                    "OM_INSECURE"
                ]
                .contains(&k.as_str()),
            "{what}: {k} is not checked here"
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
        ..Default::default()
    })
    .unwrap_or_else(|err| panic!("{what}: om does not load its settings: {err}"));
    assert_eq!(loaded.initial_cluster, members);

    // The restore init container: same data and config mounts as om, the
    // backup volume read-only, restore_from from the ConfigMap (empty: no
    // restore), om restore with the node id and the initial cluster into
    // om's data directory.
    let restore = script_of(init);
    for needle in [
        "om restore",
        "--from",
        "--data-dir",
        "--node-id",
        "--initial-cluster",
        "$OM_INITIAL_CLUSTER",
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
    let restore_from = init
        .env
        .iter()
        .flatten()
        .find_map(|v| {
            v.value_from
                .as_ref()
                .and_then(|f| f.config_map_key_ref.as_ref())
                .filter(|k| k.key == "restore_from")
                .map(|_| v.name.clone())
        })
        .expect("restore_from from the ConfigMap");
    assert!(restore.contains(&format!("${restore_from}")), "{restore}");
    assert_eq!(data["restore_from"], "", "{what}: no restore by default");

    // The backup volume: one claim, written by the job and read-only in
    // the restore container (not mounted in om's).
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
    assert!(
        m.claims
            .iter()
            .any(|pvc| pvc.metadata.name.as_ref() == Some(&claim.claim_name)),
        "{what}: no claim {}",
        claim.claim_name
    );
    assert_ne!(job_mount.read_only, Some(true));
    let init_mount = init
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| {
            // Mounts of the claim templates (data) are no pod volumes.
            pod.volumes
                .iter()
                .flatten()
                .find(|x| x.name == v.name)
                .and_then(|x| x.persistent_volume_claim.as_ref())
                .is_some_and(|p| p.claim_name == claim.claim_name)
        })
        .expect("the restore container mounts the backups");
    assert_eq!(init_mount.read_only, Some(true));
    assert_eq!(claim_of(pod, &init_mount.name).read_only, Some(true));
    assert!(
        c.volume_mounts
            .iter()
            .flatten()
            .all(|v| v.name != init_mount.name),
        "om itself does not mount the backups"
    );
    assert!(
        restore.contains(&format!("from={}/$", init_mount.mount_path)),
        "{what}: restore_from is a path on the backup volume"
    );

    // The backup job: one at a time, create then prune with a retention,
    // through the client Service by its certificate name, as non-root;
    // its pods are no members.
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
        Some(format!("{}:{client_grpc}", m.client_names()[0])),
        "{what}: the backup job's endpoint"
    );
    let jsc = job.security_context.as_ref().unwrap();
    assert_eq!(jsc.run_as_non_root, Some(true));
    assert_eq!(jsc.fs_group, psc.fs_group, "the backups are om's group's");
    let job_labels = m
        .cronjob
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .job_template
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .and_then(|md| md.labels.clone())
        .unwrap_or_default();
    assert!(
        !selects(&selector, &job_labels),
        "{what}: the backup job's pods would be taken for members"
    );

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

/// The mutual-TLS part of a rendering: each pod's CSI volume asks a CA
/// Issuer of the rendering for a certificate with the member marker that
/// names its own address (and no other member's, as om matches them) and
/// the client Service; om's TLS files are that volume's; the backup job's
/// volume asks the same Issuer for an admin's client certificate, which
/// omctl's TLS files are; the Certificates' Issuers and Secrets follow
/// their names.
fn check_certificates(
    m: &Manifests,
    c: &Container,
    env: &[(String, String)],
    members: &[om::config::InitialMember],
    admins: &BTreeSet<String>,
) {
    let what = m.what.as_str();
    let ns = m.ns();
    let name = m.sts_name();
    let pod = m.pod();
    let tls_cert = env_value(env, "OM_TLS_CERT").expect("OM_TLS_CERT");
    let tls_mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| tls_cert.starts_with(&format!("{}/", v.mount_path)))
        .expect("the certificate's volume");
    let tls = csi_volume(pod, &tls_mount.name);
    let attr = |key: &str| csi_attribute(tls, key);
    assert_eq!(tls.read_only, Some(true), "the CSI driver mounts read-only");
    assert_eq!(attr("issuer-kind"), "Issuer");
    let issuer = attr("issuer-name");
    assert!(
        m.issuers.iter().any(|(n, s)| n == issuer && s.ca.is_some()),
        "{what}: {issuer} is a CA Issuer"
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
    for (key, var) in [
        ("certificate-file", "OM_TLS_CERT"),
        ("privatekey-file", "OM_TLS_KEY"),
        ("ca-file", "OM_TLS_CA"),
    ] {
        assert_eq!(
            env_value(env, var)
                .as_deref()
                .and_then(|p| p.strip_prefix(&tls_dir)),
            Some(attr(key)),
            "{var}"
        );
    }
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(
        Some(attr("fs-group").parse::<i64>().unwrap()),
        psc.fs_group,
        "the key is readable by om's group only"
    );
    // Pod NAME-i's certificate names member i's Raft host and no other
    // member's (om binds a request to the members whose hosts the
    // certificate names: checked with om's own matching), its short peer
    // name, no wildcard, and the client Service, which clients verify.
    let ca = TestCa::new("om cluster CA");
    let issued = tempfile::tempdir().unwrap();
    let [client_fqdn, client_svc] = m.client_names();
    for (i, mem) in members.iter().enumerate() {
        let host = m.peer_host(i);
        assert_eq!(om_tls::host_of(&mem.raft_addr), host);
        assert_eq!(om_tls::host_of(&mem.grpc_addr), host);
        let names = csi_dns_names(tls, &format!("{name}-{i}"), &ns);
        assert!(names.iter().all(|n| !n.contains('*')), "{names:?}");
        for n in [
            host.clone(),
            format!("{name}-{i}.{}.{ns}.svc", m.peer_service()),
            client_fqdn.clone(),
            client_svc.clone(),
        ] {
            assert!(names.contains(&n), "{what}: {names:?} lacks {n}");
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let cert = ca.issue_member(issued.path(), &format!("{name}-{i}"), &refs);
        let der = om_tls::rustls::pki_types::CertificateDer::from(cert.der);
        for (j, other) in members.iter().enumerate() {
            assert_eq!(
                om_tls::names_any_host(&der, [other.raft_addr.as_str()]),
                i == j,
                "{what}: {name}-{i}'s certificate and member {}",
                other.id
            );
        }
    }
    // Issuers exist, referred to by their names; each Certificate's Secret
    // is named after it. A Secret is readable by whoever reads the
    // namespace's Secrets: none carries the member marker or a wildcard.
    for (n, cert) in &m.certificates {
        assert!(
            m.issuers.iter().any(|(i, _)| *i == cert.issuer_ref.name),
            "{what}: {n}: no Issuer {}",
            cert.issuer_ref.name
        );
        assert_eq!(cert.issuer_ref.kind, "Issuer");
        assert_eq!(&cert.secret_name, n, "{what}: {n}'s Secret");
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
    for (n, spec) in &m.issuers {
        if let Some(ca_issuer) = &spec.ca {
            assert!(
                m.certificates
                    .iter()
                    .any(|(_, c)| c.is_ca == Some(true) && c.secret_name == ca_issuer.secret_name),
                "{what}: Issuer {n} signs with the CA Certificate's Secret"
            );
        }
    }
    assert!(m.issuers.iter().any(|(_, s)| s.self_signed.is_some()));
    // The backup job's client certificate: from the same Issuer, an admin
    // (its first DNS name is its principal), no member marker, client
    // auth only; omctl's TLS files are on that volume.
    let job = m.job_pod();
    let b = m.backup();
    let job_env = container_env(b, "om-backup-0", &ns, m.config());
    let cacert = env_value(&job_env, "OM_CACERT").expect("OM_CACERT");
    let job_mount = b
        .volume_mounts
        .iter()
        .flatten()
        .find(|v| cacert.starts_with(&format!("{}/", v.mount_path)))
        .expect("omctl's certificate volume");
    let job_tls = csi_volume(job, &job_mount.name);
    let jattr = |key: &str| csi_attribute(job_tls, key);
    assert_eq!(jattr("issuer-name"), issuer);
    assert_eq!(jattr("issuer-kind"), "Issuer");
    let principal = jattr("common-name");
    assert_eq!(
        split_list(jattr("dns-names")).first().map(String::as_str),
        Some(principal),
        "{what}: the principal is the first DNS name, as om reads it"
    );
    assert!(
        admins.contains(principal),
        "{what}: {principal} is an admin"
    );
    assert!(
        !job_tls
            .volume_attributes
            .as_ref()
            .unwrap()
            .contains_key(&format!("{CSI_DRIVER}/uri-sans")),
        "{what}: the backup job is no member"
    );
    let usages = split_list(jattr("key-usages"));
    assert!(usages.iter().any(|u| u == "client auth"));
    assert!(!usages.iter().any(|u| u == "server auth"));
    let job_dir = format!("{}/", job_mount.mount_path);
    for (key, var) in [
        ("certificate-file", "OM_CERT"),
        ("privatekey-file", "OM_KEY"),
        ("ca-file", "OM_CACERT"),
    ] {
        assert_eq!(
            env_value(&job_env, var)
                .as_deref()
                .and_then(|p| p.strip_prefix(&job_dir)),
            Some(jattr(key)),
            "{var}"
        );
    }
    // Every admin is a Certificate's name or the backup job's.
    for a in admins {
        assert!(
            a == principal
                || m.certificates
                    .iter()
                    .any(|(_, c)| c.common_name.as_deref() == Some(a.as_str())),
            "{what}: admin {a} has no certificate here"
        );
    }
}

/// The base: every file of its folder is used, every object parses
/// strictly against Kubernetes' (or the CRD's) types and the pieces fit
/// (`check_rendering`); the image is the placeholder an overlay replaces;
/// metric names in alerts and the dashboard exist, and every dashboard
/// query is scoped by the cluster and namespace variables.
#[test]
fn manifests_are_strict_kubernetes_objects_that_fit_together() {
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
fn overlays_keep_every_name_in_step() {
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
fn the_development_overlay_is_plaintext_and_fits_one_node() {
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
fn the_optional_approver_policy_fits_the_manifests() {
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

/// One container of a pod run as a process: its command and environment as
/// Kubernetes gives them, the paths of the pod's volumes replaced by the
/// host directories standing for them, and the image's programs on PATH.
#[derive(Clone)]
struct Proc {
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

impl Proc {
    /// Container `c` of pod `pod`: `dirs` maps each of the pod's volumes, by
    /// name, to a host directory; `bin` holds `om` and `omctl`.
    fn of(
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
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.argv[0]);
        cmd.args(&self.argv[1..])
            .env_clear()
            .envs(self.env.iter().cloned());
        cmd
    }
}

/// A container's mount paths and the host directories standing for their
/// volumes, longest path first.
fn mounts_of(c: &Container, dirs: &BTreeMap<String, PathBuf>) -> Vec<(String, PathBuf)> {
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
fn host_paths(s: &str, mounts: &[(String, PathBuf)]) -> String {
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
fn write_programs(bin: &Path, names: &[(String, String)]) {
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
fn write_csi_files(dir: &Path, csi: &CSIVolumeSource, ca: &TestCa, names: &[String]) {
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
/// the only claim a pod mounts) is `claim`, shared; every other volume,
/// and each volume claim template of the StatefulSet, a directory of
/// `pod_dir` of its own.
fn volume_dirs(
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
struct Pod {
    net: u8,
    ordinal: usize,
    /// Its om.toml.
    config: PathBuf,
    init: Proc,
    main: Proc,
    child: Option<Child>,
}

impl Pod {
    fn ip(&self) -> String {
        format!("127.0.{}.{}", self.net, self.ordinal + 1)
    }

    /// Runs the init container to completion, then starts om.
    fn start(&mut self) {
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

/// The base's StatefulSet as processes, with a test CA standing in for
/// cert-manager, loopback addresses for the cluster's DNS, a directory for
/// the backup volume, and an admin client.
struct Sts {
    dir: tempfile::TempDir,
    /// The rendering the pods run, with the test's restore_from.
    m: Manifests,
    ca: TestCa,
    /// `om` and `omctl` (write_programs).
    bin: PathBuf,
    /// The backup volume.
    backups: PathBuf,
    pods: Vec<Pod>,
    client: Arc<OmClient>,
}

/// Ordinals a test may run (0..MAX_PODS); each pod has its own member
/// certificate naming only its own address, as the CSI driver's names only
/// its own host in Kubernetes.
const MAX_PODS: usize = 4;

impl Sts {
    /// Starts `replicas` pods at once (Parallel pod management) on
    /// 127.0.NET.N, waits until each is ready, and creates vol1/bkt1.
    async fn start(net: u8, replicas: usize) -> Sts {
        Sts::start_with(net, replicas, None, "").await
    }

    /// `start` with the backup volume at `backups` (a fresh directory
    /// without) and the ConfigMap's restore_from; a cluster restored from a
    /// backup already holds vol1/bkt1.
    async fn start_with(
        net: u8,
        replicas: usize,
        backups: Option<&Path>,
        restore_from: &str,
    ) -> Sts {
        let mut m = render(&kube_dir());
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
    fn run_backup_job(&self) -> String {
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
fn backup_ids(dest: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(dest)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("manifest.json").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}

/// The StatefulSet as three processes (its init container, command,
/// environment and ConfigMap; mutual TLS with a test CA): a rolling update
/// as Kubernetes does it (highest ordinal first, SIGTERM, wait until ready
/// again) under a steady write load loses no acknowledged write and shows
/// the client no error; then the leader's write unavailability is measured
/// for SIGTERM (handover) and for kill -9 (election), side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_statefulset_survives_a_rolling_update_under_load() {
    let mut sts = Sts::start(77, 3).await;
    sts.pods.truncate(3);
    let (pods, client) = (&mut sts.pods, sts.client.clone());
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

    // The rolling update: the highest ordinal first.
    let mut report = Vec::new();
    for i in (0..3).rev() {
        let was_leader = leader_ordinal(&client).await == i;
        load.mark();
        let stopped = pods[i].signal(libc::SIGTERM);
        assert!(
            stopped < Duration::from_secs(15),
            "pod {i} took {stopped:?} to stop"
        );
        pods[i].start();
        wait_ready(pods).await;
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
        wait_ready(pods).await;
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

/// Disaster recovery as the manifests do it: a 3-member cluster takes
/// writes; the backup CronJob's command (omctl backup create, verify,
/// prune) runs against it and writes one backup to the backup volume; the
/// cluster is gone. A new cluster, its data directories empty, starts with
/// the ConfigMap's restore_from naming that backup: each pod's init
/// container restores its member before om starts, and the cluster serves
/// every key written before the backup and takes writes. A member that
/// restarts keeps its store: the init container leaves it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restore_from_a_backup_through_the_init_container() {
    let backups = tempfile::tempdir().unwrap();
    let mut old = Sts::start_with(79, 3, Some(backups.path()), "").await;
    for i in 0..50 {
        old.client
            .put_key("vol1", "bkt1", &format!("before-{i:03}"), 1)
            .await
            .unwrap();
    }
    let printed = old.run_backup_job();
    let ids = backup_ids(backups.path());
    assert_eq!(ids.len(), 1, "one backup, not {ids:?}:\n{printed}");
    assert!(printed.contains(&ids[0]), "{printed}");
    for p in &mut old.pods[..3] {
        p.signal(libc::SIGTERM);
    }
    drop(old);

    let mut new = Sts::start_with(80, 3, Some(backups.path()), &ids[0]).await;
    let c = new.client.clone();
    for i in 0..50 {
        c.lookup_key("vol1", "bkt1", &format!("before-{i:03}"))
            .await
            .unwrap_or_else(|e| panic!("before-{i:03} was not restored: {e}"));
    }
    c.put_key("vol1", "bkt1", "after-restore", 1).await.unwrap();
    new.pods[0].signal(libc::SIGTERM);
    new.pods[0].start();
    wait_ready(&new.pods[..3]).await;
    c.put_key("vol1", "bkt1", "after-restart", 1).await.unwrap();
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
