//! Rendering the manifests with `kubectl kustomize`, parsed strictly into
//! Kubernetes' types (the custom resources' in `crds`; helpers that read
//! what they say in `helpers`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PersistentVolumeClaim, PodSpec, Service,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::crds::{
    CertificateSpec, Custom, IssuerSpec, PolicySpec, PrometheusRuleSpec, Rule, ServiceMonitorSpec,
};
use super::helpers::{container, script_of, volume, word_after};

pub(crate) fn deploy_dir() -> PathBuf {
    om_tests::repo_root().join("deploy")
}

/// The kustomize base.
pub(crate) fn kube_dir() -> PathBuf {
    deploy_dir().join("kubernetes")
}

pub(crate) fn overlay_dir(name: &str) -> PathBuf {
    deploy_dir().join("overlays").join(name)
}

/// A kustomization of `tests/fixtures/` (e.g. `two-instances/a`).
pub(crate) fn fixture_dir(name: &str) -> PathBuf {
    om_tests::repo_root().join("tests/fixtures").join(name)
}

/// Entries of the base's folder its kustomization leaves out on purpose:
/// applied on their own, so that deleting an instance leaves them
/// (namespace/), or no Kubernetes objects (alert-tests/, promtool's tests
/// of the alerts).
pub(crate) const OPTIONAL: &[&str] = &["alert-tests", "namespace"];

/// The label every selector of an instance carries, with the StatefulSet's
/// name as its value (wiring/names).
pub(crate) const INSTANCE: &str = "app.kubernetes.io/instance";

/// Kinds without a namespace (kustomize still gives the custom ones one,
/// which kubectl drops).
pub(crate) const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CertificateRequestPolicy",
];

/// cert-manager's CSI driver, which also prefixes its volume attributes.
pub(crate) const CSI_DRIVER: &str = "csi.cert-manager.io";

/// The YAML documents of `file`.
pub(crate) fn documents(file: &Path) -> Vec<serde_norway::Value> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|d| serde_norway::Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `v` as `T`, refusing any field `T` does not know.
pub(crate) fn strict<T: DeserializeOwned>(v: &serde_norway::Value, what: &str) -> T {
    let mut unknown = Vec::new();
    let t = serde_ignored::deserialize(v.clone(), |path| unknown.push(path.to_string()))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(unknown.is_empty(), "{what}: unknown fields {unknown:?}");
    t
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Kustomization {
    #[allow(dead_code)]
    pub(crate) api_version: String,
    #[allow(dead_code)]
    pub(crate) kind: String,
    #[allow(dead_code)]
    pub(crate) namespace: String,
    pub(crate) resources: Vec<String>,
    #[allow(dead_code)]
    pub(crate) patches: Vec<serde_norway::Value>,
    pub(crate) config_map_generator: Vec<Generator>,
    pub(crate) transformers: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Generator {
    #[allow(dead_code)]
    pub(crate) name: String,
    pub(crate) files: Vec<String>,
    #[allow(dead_code)]
    pub(crate) options: serde_norway::Value,
}

/// The YAML documents `kubectl kustomize DIR` renders (`kustomize build
/// DIR` where kubectl is missing).
pub(crate) fn kustomize(dir: &Path) -> Vec<serde_norway::Value> {
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

/// The base with `components` (folders of deploy/components) in namespace
/// `ns`, wired as a site's overlay wires it, rendered from a temporary
/// overlay in deploy/overlays (kustomize takes only relative paths).
pub(crate) fn render_with_components(ns: &str, components: &[&str]) -> Manifests {
    let dir = tempfile::Builder::new()
        .prefix(".render-")
        .tempdir_in(deploy_dir().join("overlays"))
        .unwrap();
    let mut k = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
         namespace: {ns}\nresources:\n  - ../../kubernetes\n"
    );
    if !components.is_empty() {
        k.push_str("components:\n");
    }
    for c in components {
        k.push_str(&format!("  - ../../components/{c}\n"));
    }
    k.push_str("transformers:\n  - ../../kubernetes/wiring\n");
    std::fs::write(dir.path().join("kustomization.yaml"), k).unwrap();
    let mut m = render(dir.path());
    m.what = format!("the base with {}, in namespace {ns}", components.join(", "));
    m
}

/// Every object of one rendering, by kind.
#[derive(Default)]
pub(crate) struct Manifests {
    /// Which rendering (for messages).
    pub(crate) what: String,
    /// Kind, name and namespace of every object.
    pub(crate) objects: Vec<(String, String, Option<String>)>,
    pub(crate) namespace: Option<Namespace>,
    pub(crate) config_maps: Vec<ConfigMap>,
    pub(crate) services: Vec<Service>,
    pub(crate) statefulset: Option<StatefulSet>,
    pub(crate) pdb: Option<PodDisruptionBudget>,
    pub(crate) network_policy: Option<NetworkPolicy>,
    pub(crate) cronjob: Option<CronJob>,
    /// Deployments of the base (backup-tools.yaml).
    pub(crate) deployments: Vec<Deployment>,
    pub(crate) claims: Vec<PersistentVolumeClaim>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) monitors: Vec<(ObjectMeta, ServiceMonitorSpec)>,
    pub(crate) certificates: Vec<(String, CertificateSpec)>,
    pub(crate) issuers: Vec<(String, IssuerSpec)>,
    /// components/approver-policy: the policies and their RBAC.
    pub(crate) policies: Vec<(ObjectMeta, PolicySpec)>,
    pub(crate) roles: Vec<Role>,
    pub(crate) role_bindings: Vec<RoleBinding>,
    pub(crate) cluster_roles: Vec<ClusterRole>,
    pub(crate) cluster_role_bindings: Vec<ClusterRoleBinding>,
    /// components/s3-gateway: its objects (labelled
    /// app.kubernetes.io/name: om-s3) as rendered, parsed by its test.
    pub(crate) gateway: Vec<serde_norway::Value>,
}

/// `dir` rendered by kustomize, each object parsed strictly.
pub(crate) fn render(dir: &Path) -> Manifests {
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
        if doc["metadata"]["labels"]["app.kubernetes.io/name"].as_str() == Some("om-s3") {
            m.gateway.push(doc.clone());
            continue;
        }
        match kind.as_str() {
            "Namespace" => m.namespace = Some(strict(doc, &what)),
            "ConfigMap" => m.config_maps.push(strict(doc, &what)),
            "Service" => m.services.push(strict(doc, &what)),
            "StatefulSet" => m.statefulset = Some(strict(doc, &what)),
            "PodDisruptionBudget" => m.pdb = Some(strict(doc, &what)),
            "NetworkPolicy" => m.network_policy = Some(strict(doc, &what)),
            "CronJob" => m.cronjob = Some(strict(doc, &what)),
            "Deployment" => m.deployments.push(strict(doc, &what)),
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
            "CertificateRequestPolicy" => {
                let c: Custom<PolicySpec> = strict(doc, &what);
                assert_eq!(c.api_version, "policy.cert-manager.io/v1alpha1");
                m.policies.push((c.metadata, c.spec));
            }
            "Role" => m.roles.push(strict(doc, &what)),
            "RoleBinding" => m.role_bindings.push(strict(doc, &what)),
            "ClusterRole" => m.cluster_roles.push(strict(doc, &what)),
            "ClusterRoleBinding" => m.cluster_role_bindings.push(strict(doc, &what)),
            other => panic!("{what}: unexpected kind {other:?}"),
        }
    }
    m
}

impl Manifests {
    /// The instance's namespace: the StatefulSet's (the Namespace itself is
    /// applied on its own, deploy/kubernetes/namespace).
    pub(crate) fn ns(&self) -> String {
        self.sts()
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| panic!("{}: the StatefulSet has no namespace", self.what))
    }

    pub(crate) fn sts(&self) -> &StatefulSet {
        self.statefulset
            .as_ref()
            .unwrap_or_else(|| panic!("{}: no StatefulSet", self.what))
    }

    pub(crate) fn sts_name(&self) -> String {
        self.sts().metadata.name.clone().unwrap()
    }

    pub(crate) fn replicas(&self) -> usize {
        self.sts().spec.as_ref().unwrap().replicas.unwrap() as usize
    }

    /// The peer Service's name: the StatefulSet's serviceName.
    pub(crate) fn peer_service(&self) -> String {
        self.sts()
            .spec
            .as_ref()
            .unwrap()
            .service_name
            .clone()
            .unwrap()
    }

    /// The labels the StatefulSet selects its pods by.
    pub(crate) fn selector(&self) -> BTreeMap<String, String> {
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
    pub(crate) fn pod(&self) -> &PodSpec {
        self.sts()
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
    }

    pub(crate) fn om(&self) -> &Container {
        container(&self.pod().containers, "om")
    }

    /// The StatefulSet's init container that restores a backup.
    pub(crate) fn restore(&self) -> &Container {
        container(
            self.pod().init_containers.as_deref().unwrap_or_default(),
            "restore",
        )
    }

    /// The backup CronJob's pod template.
    pub(crate) fn job_pod(&self) -> &PodSpec {
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

    pub(crate) fn backup(&self) -> &Container {
        container(&self.job_pod().containers, "backup")
    }

    /// The backup CronJob's pod labels.
    pub(crate) fn job_labels(&self) -> BTreeMap<String, String> {
        self.cronjob
            .as_ref()
            .and_then(|c| c.spec.as_ref())
            .and_then(|s| s.job_template.spec.as_ref())
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|md| md.labels.clone())
            .unwrap_or_default()
    }

    /// The claim the backup job writes its backups to (its volume mounted
    /// where `omctl backup create` writes).
    pub(crate) fn backups_claim(&self) -> String {
        let script = script_of(self.backup());
        let dest = word_after(&script, "backup create")
            .trim_end_matches(')')
            .to_string();
        let mount = self
            .backup()
            .volume_mounts
            .iter()
            .flatten()
            .find(|v| dest == v.mount_path || dest.starts_with(&format!("{}/", v.mount_path)))
            .unwrap_or_else(|| panic!("{}: {dest} is not mounted in the backup job", self.what));
        volume(self.job_pod(), &mount.name)
            .persistent_volume_claim
            .as_ref()
            .unwrap_or_else(|| panic!("{}: the backups are not on a claim", self.what))
            .claim_name
            .clone()
    }

    /// The backup-tools Deployment (backup-tools.yaml).
    pub(crate) fn tools(&self) -> &Deployment {
        assert_eq!(
            self.deployments.len(),
            1,
            "{}: one Deployment besides the gateway's",
            self.what
        );
        &self.deployments[0]
    }

    /// The backup-tools Deployment's pod template.
    pub(crate) fn tools_pod(&self) -> &PodSpec {
        self.tools()
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
    }

    /// The labels of every kind of pod this rendering makes, by what makes
    /// them: the members, the backup job, backup-tools and the gateway.
    pub(crate) fn pod_labels(&self) -> Vec<(String, BTreeMap<String, String>)> {
        let labels_of = |t: &k8s_openapi::api::core::v1::PodTemplateSpec| {
            t.metadata
                .as_ref()
                .and_then(|md| md.labels.clone())
                .unwrap_or_default()
        };
        let mut out = vec![(
            format!("StatefulSet {}", self.sts_name()),
            labels_of(&self.sts().spec.as_ref().unwrap().template),
        )];
        if self.cronjob.is_some() {
            out.push(("CronJob".to_string(), self.job_labels()));
        }
        for d in &self.deployments {
            out.push((
                format!("Deployment {}", d.metadata.name.clone().unwrap_or_default()),
                labels_of(&d.spec.as_ref().unwrap().template),
            ));
        }
        for d in self
            .gateway
            .iter()
            .filter(|d| d["kind"].as_str() == Some("Deployment"))
        {
            let dep: Deployment = strict(d, "the gateway's Deployment");
            out.push((
                format!(
                    "Deployment {}",
                    dep.metadata.name.clone().unwrap_or_default()
                ),
                labels_of(&dep.spec.as_ref().unwrap().template),
            ));
        }
        out
    }

    /// Every label selector of this rendering that picks pods, by whose it
    /// is: the Services', the StatefulSet's (its own, anti-affinity and
    /// spread), the PodDisruptionBudget's, the NetworkPolicies' (pods they
    /// apply to and pods they admit), the Deployments' and the gateway's.
    pub(crate) fn pod_selectors(&self) -> Vec<(String, BTreeMap<String, String>)> {
        let mut out: Vec<(String, BTreeMap<String, String>)> = Vec::new();
        let mut add = |what: String, s: Option<&LabelSelector>| {
            if let Some(l) = s.and_then(|s| s.match_labels.clone()) {
                out.push((what, l));
            }
        };
        let spec = self.sts().spec.as_ref().unwrap();
        add(
            format!("StatefulSet {}", self.sts_name()),
            Some(&spec.selector),
        );
        let pod = self.pod();
        if let Some(a) = pod
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
        {
            for t in a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                add("anti-affinity".to_string(), t.label_selector.as_ref());
            }
            for w in a
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                add(
                    "anti-affinity".to_string(),
                    w.pod_affinity_term.label_selector.as_ref(),
                );
            }
        }
        for t in pod.topology_spread_constraints.iter().flatten() {
            add("zone spread".to_string(), t.label_selector.as_ref());
        }
        if let Some(pdb) = &self.pdb {
            add(
                "PodDisruptionBudget".to_string(),
                pdb.spec.as_ref().and_then(|s| s.selector.as_ref()),
            );
        }
        let policies: Vec<NetworkPolicy> = self
            .network_policy
            .iter()
            .cloned()
            .chain(
                self.gateway
                    .iter()
                    .filter(|d| d["kind"].as_str() == Some("NetworkPolicy"))
                    .map(|d| strict(d, "the gateway's NetworkPolicy")),
            )
            .collect();
        for np in &policies {
            let name = np.metadata.name.clone().unwrap_or_default();
            let spec = np.spec.as_ref().unwrap();
            add(format!("NetworkPolicy {name}"), spec.pod_selector.as_ref());
            for r in spec.ingress.iter().flatten() {
                for peer in r.from.iter().flatten() {
                    add(
                        format!("NetworkPolicy {name}: from"),
                        peer.pod_selector.as_ref(),
                    );
                }
            }
        }
        let services: Vec<Service> = self
            .services
            .iter()
            .cloned()
            .chain(
                self.gateway
                    .iter()
                    .filter(|d| d["kind"].as_str() == Some("Service"))
                    .map(|d| strict(d, "the gateway's Service")),
            )
            .collect();
        // Services select by a map, not a LabelSelector: added at the end.
        let by_services: Vec<(String, BTreeMap<String, String>)> = services
            .iter()
            .filter_map(|s| {
                let sel = s.spec.as_ref().and_then(|sp| sp.selector.clone())?;
                Some((
                    format!("Service {}", s.metadata.name.clone().unwrap_or_default()),
                    sel,
                ))
            })
            .collect();
        let deployments: Vec<Deployment> = self
            .deployments
            .iter()
            .cloned()
            .chain(
                self.gateway
                    .iter()
                    .filter(|d| d["kind"].as_str() == Some("Deployment"))
                    .map(|d| strict(d, "the gateway's Deployment")),
            )
            .collect();
        for d in &deployments {
            let name = d.metadata.name.clone().unwrap_or_default();
            let spec = d.spec.as_ref().unwrap();
            add(format!("Deployment {name}"), Some(&spec.selector));
            let affinity = spec
                .template
                .spec
                .as_ref()
                .and_then(|p| p.affinity.as_ref())
                .and_then(|a| a.pod_anti_affinity.as_ref());
            for w in affinity
                .and_then(|a| {
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .into_iter()
                .flatten()
            {
                add(
                    format!("Deployment {name}: anti-affinity"),
                    w.pod_affinity_term.label_selector.as_ref(),
                );
            }
        }
        out.extend(by_services);
        out
    }

    /// The ConfigMap the StatefulSet mounts as `config`: its name and data.
    pub(crate) fn config(&self) -> (&str, &BTreeMap<String, String>) {
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
    pub(crate) fn domain(&self) -> String {
        self.config().1["cluster_domain"].clone()
    }

    pub(crate) fn service(&self, name: &str) -> &Service {
        self.services
            .iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{}: no Service {name}", self.what))
    }

    /// The Service clients use: the one with a virtual IP.
    pub(crate) fn client_service(&self) -> &Service {
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
    pub(crate) fn peer_host(&self, ordinal: usize) -> String {
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
    pub(crate) fn client_names(&self) -> [String; 2] {
        let client = self.client_service().metadata.name.clone().unwrap();
        let ns = self.ns();
        [
            format!("{client}.{ns}.svc.{}", self.domain()),
            format!("{client}.{ns}.svc"),
        ]
    }
}

/// What a rendering is meant to be, beyond fitting together.
pub(crate) struct Expect {
    /// Mutual TLS with cert-manager (the base, overlays/example), or
    /// plaintext without it (overlays/dev).
    pub(crate) tls: bool,
    /// Members spread over zones strictly (DoNotSchedule with minDomains),
    /// or as a preference.
    pub(crate) strict_zones: bool,
    /// The Prometheus operator's objects are there.
    pub(crate) monitoring: bool,
}
