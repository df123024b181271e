//! Two instances of om in one namespace, as tests/fixtures/two-instances
//! renders them (a-: every optional component; b-: five members, the S3
//! gateway and the approver policies): each fits together as a site's
//! overlay does; no selector of one takes in a pod of the other (members,
//! backup job, backup-tools, gateway), nor its ServiceMonitor the other's
//! Services, nor its approver policies the other's names; no name is used
//! twice; each has its own backups' claim, and its backup job backs up its
//! own member 0.

use std::collections::BTreeSet;

use super::certificates::check_approver_policy;
use super::checks::*;
use super::helpers::*;
use super::render::*;

fn instances() -> [Manifests; 2] {
    [
        render(&fixture_dir("two-instances/a")),
        render(&fixture_dir("two-instances/b")),
    ]
}

#[test]
fn two_prefixed_instances_in_one_namespace_select_only_their_own_pods() {
    let [a, b] = instances();
    let tls = Expect {
        tls: true,
        strict_zones: true,
        monitoring: true,
    };
    for m in [&a, &b] {
        check_rendering(m, &tls);
        check_approver_policy(m);
        assert!(!m.gateway.is_empty(), "{}: the S3 gateway", m.what);
    }
    assert_eq!(a.ns(), b.ns(), "one namespace");
    assert_ne!(a.selector().get(INSTANCE), b.selector().get(INSTANCE));
    for (one, other) in [(&a, &b), (&b, &a)] {
        let selectors = one.pod_selectors();
        // Services (3 and the gateway's), the StatefulSet's own, its
        // anti-affinity and spread, the PDB, the NetworkPolicies' (and the
        // Raft rule's), backup-tools' and the gateway's Deployment.
        assert!(selectors.len() >= 13, "{}: {selectors:#?}", one.what);
        let own = one.pod_labels();
        let theirs = other.pod_labels();
        assert_eq!(theirs.len(), 4, "{}: {theirs:#?}", other.what);
        for (whose, sel) in &selectors {
            assert_eq!(
                sel.get(INSTANCE),
                Some(&one.sts_name()),
                "{}: {whose} selects by its instance",
                one.what
            );
            assert!(
                own.iter().any(|(_, labels)| selects(sel, labels)),
                "{}: {whose} selects none of its own pods",
                one.what
            );
            for (pods, labels) in &theirs {
                assert!(
                    !selects(sel, labels),
                    "{}: {whose} selects {}'s {pods}",
                    one.what,
                    other.what
                );
            }
        }
        // Prometheus scrapes each instance's members as its own.
        for (_, mon) in &one.monitors {
            let wanted = mon.selector.match_labels.clone().unwrap_or_default();
            for s in &other.services {
                assert!(
                    !selects(&wanted, s.metadata.labels.as_ref().unwrap()),
                    "{}: the ServiceMonitor selects {}'s Service {:?}",
                    one.what,
                    other.what,
                    s.metadata.name
                );
            }
        }
        // The approver policies: for this instance's Issuers, admitting
        // none of the other's member names.
        let issuers: BTreeSet<String> = other.issuers.iter().map(|(n, _)| n.clone()).collect();
        for (md, p) in &one.policies {
            let issuer = p
                .selector
                .issuer_ref
                .as_ref()
                .and_then(|r| r.name.clone())
                .unwrap_or_default();
            assert!(
                !issuers.contains(&issuer),
                "{}: {:?} selects {}'s Issuer {issuer}",
                one.what,
                md.name,
                other.what
            );
        }
        let allowed: Vec<String> = one
            .policies
            .iter()
            .filter_map(|(_, p)| p.allowed.as_ref())
            .filter(|x| x.uris.is_some())
            .flat_map(|x| {
                x.dns_names
                    .as_ref()
                    .and_then(|d| d.values.clone())
                    .unwrap_or_default()
            })
            .collect();
        assert!(!allowed.is_empty(), "{}", one.what);
        let their_tls = csi_volume(other.pod(), "tls");
        for i in 0..other.replicas() {
            for n in csi_dns_names(their_tls, &format!("{}-{i}", other.sts_name()), &other.ns()) {
                assert!(
                    !allowed.iter().any(|v| wildcard(v, &n)),
                    "{}'s member policy admits {}'s {n}",
                    one.what,
                    other.what
                );
            }
        }
    }
}

#[test]
fn two_prefixed_instances_in_one_namespace_use_no_name_twice() {
    let [a, b] = instances();
    // Rendered together, as applied together: every object once.
    let together = kustomize(&fixture_dir("two-instances"));
    let keys: Vec<(String, String, String)> = together
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap_or_default().to_string(),
                d["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                d["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    let unique: BTreeSet<&(String, String, String)> = keys.iter().collect();
    assert_eq!(unique.len(), keys.len(), "{keys:#?}");
    assert_eq!(keys.len(), a.objects.len() + b.objects.len());
    // Each instance's names carry its prefix, cluster-scoped ones its
    // namespace too.
    for (m, prefix) in [(&a, "a-"), (&b, "b-")] {
        for (kind, name, _) in &m.objects {
            assert!(name.starts_with(prefix), "{}: {kind} {name}", m.what);
            if CLUSTER_SCOPED.contains(&kind.as_str()) {
                assert!(
                    name.ends_with(&format!(".{}", m.ns())),
                    "{}: {kind} {name}",
                    m.what
                );
            }
        }
    }
    let names = |m: &Manifests| -> BTreeSet<(String, String)> {
        m.objects
            .iter()
            .map(|(kind, name, _)| (kind.clone(), name.clone()))
            .collect()
    };
    assert!(names(&a).is_disjoint(&names(&b)));
    // Claims: each instance's backups, and what its members and gateway
    // keep, are its own.
    assert_ne!(a.backups_claim(), b.backups_claim());
    check_persistent(
        &a,
        &[fixture_dir("two-instances/a/persistent")],
        "ReadWriteMany",
    );
    check_persistent(
        &b,
        &[fixture_dir("two-instances/b/persistent")],
        "ReadWriteMany",
    );
    // Each backup job backs up member 0 of its own instance.
    for m in [&a, &b] {
        let env = container_env(m.backup(), "om-backup-0", &m.ns(), m.config());
        let endpoint = env_value(&env, "OM_ENDPOINT").unwrap();
        assert!(
            endpoint.starts_with(&format!("{}-0.{}.", m.sts_name(), m.peer_service())),
            "{}: {endpoint}",
            m.what
        );
    }
}
