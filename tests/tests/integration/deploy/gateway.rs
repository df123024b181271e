//! `deploy/components/s3-gateway` rendered on top of the base, and under a
//! name prefix: the gateway runs the members' image, reaches its
//! instance's client Service by the name the members' certificates carry,
//! authenticates with its own client certificate from its instance's
//! issuer, keeps blocks on a shared claim, listens and reports where its
//! Service and probes look, and no selector of the members takes in its
//! pods (nor its selector the members).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::helpers::*;
use super::render::*;

fn one<T: serde::de::DeserializeOwned>(docs: &[serde_norway::Value], kind: &str) -> T {
    let found: Vec<&serde_norway::Value> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} in the gateway component");
    strict(found[0], &format!("components/s3-gateway: {kind}"))
}

fn env_port(env: &[(String, String)], name: &str) -> i32 {
    let v = &env.iter().find(|(k, _)| k == name).unwrap().1;
    v.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn the_s3_gateway_component_fits_the_base() {
    check_gateway(&render_with_components("om", &["s3-gateway"]));
}

/// The component in the instances a- and b- of
/// tests/fixtures/two-instances (one namespace): each gateway reaches its
/// own instance's client Service and has its own instance's Issuer sign,
/// both renamed by the prefix (not the base's om and om-ca), and reads its
/// own instance's ConfigMap.
#[test]
fn the_s3_gateway_follows_a_name_prefix() {
    let base = render_with_components("om", &["s3-gateway"]);
    let base_client = base.client_service().metadata.name.clone().unwrap();
    let mut clients = Vec::new();
    for name in ["two-instances/a", "two-instances/b"] {
        let m = render(&fixture_dir(name));
        check_gateway(&m);
        let prefix = m
            .sts_name()
            .strip_suffix(&base.sts_name())
            .unwrap_or_else(|| panic!("{name}: a name prefix"))
            .to_string();
        assert!(!prefix.is_empty(), "{name}: a name prefix");
        let deployment: Deployment = one(&m.gateway, "Deployment");
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        let c = container(&pod.containers, "om-s3");
        let env = container_env(c, "om-s3-0", &m.ns(), m.config());
        let client = env_value(&env, "CLIENT_SERVICE").unwrap();
        assert_eq!(client, format!("{prefix}{base_client}"), "{name}");
        assert_eq!(
            Some(client.clone()),
            m.client_service().metadata.name.clone()
        );
        let tls = volume(&pod, "tls").csi.as_ref().unwrap();
        let issuer = csi_attribute(tls, "issuer-name");
        let (ca, _) = m
            .issuers
            .iter()
            .find(|(_, spec)| spec.ca.is_some())
            .expect("a CA Issuer");
        assert_eq!(issuer, ca.as_str(), "{name}: the members' Issuer");
        assert!(issuer.starts_with(&prefix), "{name}: {issuer}");
        clients.push(client);
    }
    assert_ne!(clients[0], clients[1]);
}

/// One rendering's gateway (`m.gateway`) against the rest of it.
fn check_gateway(m: &Manifests) {
    let base = m;
    let docs = &m.gateway;
    assert_eq!(
        docs.len(),
        4,
        "a claim, a Deployment, a Service, a NetworkPolicy"
    );
    let deployment: Deployment = one(docs, "Deployment");
    let service: Service = one(docs, "Service");
    let claim: PersistentVolumeClaim = one(docs, "PersistentVolumeClaim");
    let policy: NetworkPolicy = one(docs, "NetworkPolicy");
    for d in docs {
        assert_eq!(
            d["metadata"]["namespace"].as_str(),
            Some(base.ns().as_str()),
            "the gateway lives in the members' namespace"
        );
    }

    let spec = deployment.spec.as_ref().unwrap();
    assert!(spec.replicas.unwrap_or(1) >= 2, "stateless: more than one");
    let template = &spec.template;
    let labels: BTreeMap<String, String> =
        template.metadata.as_ref().unwrap().labels.clone().unwrap();
    let pod = template.spec.as_ref().unwrap();
    let c = container(&pod.containers, "om-s3");
    assert_eq!(c.image, base.om().image, "one image");
    assert_eq!(argv_of(c), vec!["/usr/local/bin/om-s3".to_string()]);
    let dockerfile = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("/out/om-s3 /usr/local/bin/"),
        "the image holds om-s3"
    );

    // om's client Service, by the name the members' certificates carry.
    let env = container_env(c, "om-s3-0", &base.ns(), base.config());
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let endpoint = get("OM_ENDPOINT").unwrap();
    let [short, long] = base.client_names();
    assert!(
        endpoint == format!("{long}:{}", port(base.om(), "grpc"))
            || endpoint == format!("{short}:{}", port(base.om(), "grpc")),
        "{endpoint} names the client Service ({long})"
    );
    // Its own client certificate, from the members' issuer.
    let tls = volume(pod, "tls").csi.as_ref().expect("a CSI certificate");
    assert_eq!(tls.driver, CSI_DRIVER);
    let attrs = tls.volume_attributes.clone().unwrap();
    let issuer = &attrs[&format!("{CSI_DRIVER}/issuer-name")];
    assert!(
        base.issuers.iter().any(|(n, _)| n == issuer),
        "issuer {issuer} is the members'"
    );
    assert_eq!(attrs[&format!("{CSI_DRIVER}/common-name")], "om-s3");
    assert!(attrs[&format!("{CSI_DRIVER}/key-usages")].contains("client auth"));
    for (var, file) in [
        ("OM_CACERT", "ca.crt"),
        ("OM_CERT", "tls.crt"),
        ("OM_KEY", "tls.key"),
    ] {
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == "tls")
            .unwrap();
        assert_eq!(get(var), Some(format!("{}/{file}", mount.mount_path)));
    }
    // Blocks on a claim every replica mounts.
    assert_eq!(
        claim.spec.as_ref().unwrap().access_modes,
        Some(vec!["ReadWriteMany".to_string()])
    );
    let blocks = volume(pod, "blocks");
    assert_eq!(
        blocks.persistent_volume_claim.as_ref().unwrap().claim_name,
        claim.metadata.name.clone().unwrap()
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "blocks")
        .unwrap();
    assert!(get("OM_S3_BLOCKS").unwrap().starts_with(&mount.mount_path));
    // Locked down as the members are.
    let psc = pod.security_context.as_ref().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    let csc = c.security_context.as_ref().unwrap();
    assert_eq!(csc.read_only_root_filesystem, Some(true));
    assert_eq!(csc.allow_privilege_escalation, Some(false));

    // Ports: what it listens on is what the Service and the probes use.
    assert_eq!(env_port(&env, "OM_S3_LISTEN"), port(c, "s3"));
    assert_eq!(env_port(&env, "OM_S3_HTTP"), port(c, "http"));
    let live = c
        .liveness_probe
        .as_ref()
        .unwrap()
        .http_get
        .as_ref()
        .unwrap();
    assert_eq!(live.path.as_deref(), Some("/healthz"));
    assert_eq!(live.port, IntOrString::String("http".into()));
    let ss = service.spec.as_ref().unwrap();
    assert_eq!(
        ss.ports.as_ref().unwrap()[0].target_port,
        Some(IntOrString::String("s3".into()))
    );
    // Selectors: the gateway's take in its pods only; the members' none of them.
    let sel = ss.selector.clone().unwrap();
    assert!(selects(&sel, &labels));
    assert_eq!(
        sel.get(INSTANCE),
        Some(&base.sts_name()),
        "the gateway's instance label is its instance's"
    );
    assert_eq!(
        spec.selector.match_labels.as_ref(),
        Some(&sel),
        "the Deployment and its Service select alike"
    );
    let member_labels = base
        .sts()
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert!(
        !selects(&sel, &member_labels),
        "the gateway Service selects no member"
    );
    for s in &base.services {
        let member_sel = s.spec.as_ref().unwrap().selector.clone().unwrap();
        assert!(!selects(&member_sel, &labels), "{:?}", s.metadata.name);
    }
    assert!(
        !selects(&base.selector(), &labels),
        "PDB and policies of the members"
    );
    let gp = policy.spec.as_ref().unwrap();
    assert_eq!(
        gp.pod_selector
            .as_ref()
            .and_then(|p| p.match_labels.clone()),
        Some(sel)
    );
    // The members' policy lets any namespace reach gRPC: the gateway too.
    let members = base.network_policy.as_ref().unwrap().spec.as_ref().unwrap();
    assert!(members.ingress.iter().flatten().any(|r| {
        r.ports
            .iter()
            .flatten()
            .any(|p| p.port == Some(IntOrString::String("grpc".into())))
            && r.from.iter().flatten().any(|f| {
                f.namespace_selector
                    .as_ref()
                    .is_some_and(|n| n.match_labels.is_none())
            })
    }));
}
