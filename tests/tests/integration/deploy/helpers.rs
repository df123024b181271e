//! Helpers that read what the rendered manifests say: containers, volumes,
//! ports, environments, the CSI driver's attributes, selectors and metric
//! names.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use k8s_openapi::api::core::v1::{CSIVolumeSource, Container, PodSpec, Volume};

use super::render::CSI_DRIVER;

pub(crate) fn container<'a>(containers: &'a [Container], name: &str) -> &'a Container {
    containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

pub(crate) fn volume<'a>(pod: &'a PodSpec, name: &str) -> &'a Volume {
    pod.volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// A container's command and arguments.
pub(crate) fn argv_of(c: &Container) -> Vec<String> {
    let mut argv = c.command.clone().unwrap_or_default();
    argv.extend(c.args.clone().unwrap_or_default());
    argv
}

/// The script of a container whose command is `/bin/sh -c SCRIPT` (POSIX
/// sh: the image's /bin/sh is dash).
pub(crate) fn script_of(c: &Container) -> String {
    let argv = argv_of(c);
    assert!(
        argv.len() == 3 && argv[0] == "/bin/sh" && argv[1] == "-c",
        "{}: /bin/sh -c SCRIPT, not {argv:?}",
        c.name
    );
    argv[2].clone()
}

/// The word after the first `key` in `text`.
pub(crate) fn word_after(text: &str, key: &str) -> String {
    let (_, rest) = text
        .split_once(key)
        .unwrap_or_else(|| panic!("no {key:?} in {text:?}"));
    rest.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The container port named `name`.
pub(crate) fn port(c: &Container, name: &str) -> i32 {
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
pub(crate) fn container_env(
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
pub(crate) fn expand(value: &str, env: &[(String, String)]) -> String {
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

pub(crate) fn env_value(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// The initial cluster members.sh (the ConfigMap's) exports, run as the
/// containers run it (sourced by /bin/sh) with environment `env`.
pub(crate) fn initial_cluster_of(members_sh: &str, env: &[(String, String)]) -> String {
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
pub(crate) fn selects(
    selector: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The StatefulSet's (or the job's) volume `name`, served by cert-manager's
/// CSI driver.
pub(crate) fn csi_volume<'a>(pod: &'a PodSpec, name: &str) -> &'a CSIVolumeSource {
    let csi = volume(pod, name)
        .csi
        .as_ref()
        .unwrap_or_else(|| panic!("volume {name} is not a CSI volume"));
    assert_eq!(csi.driver, CSI_DRIVER);
    csi
}

/// The CSI driver's attribute `key` of `csi`.
pub(crate) fn csi_attribute<'a>(csi: &'a CSIVolumeSource, key: &str) -> &'a str {
    csi.volume_attributes
        .as_ref()
        .and_then(|a| a.get(&format!("{CSI_DRIVER}/{key}")))
        .unwrap_or_else(|| panic!("no {CSI_DRIVER}/{key}"))
}

/// A comma-separated attribute, split as the CSI driver splits it.
pub(crate) fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(|x| x.trim().to_string()).collect()
}

/// The DNS names the CSI driver puts in pod `pod`'s certificate: its
/// `dns-names` attribute with the pod's variables expanded.
pub(crate) fn csi_dns_names(csi: &CSIVolumeSource, pod: &str, ns: &str) -> Vec<String> {
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
pub(crate) fn wildcard(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => s.strip_prefix(head).is_some_and(|rest| {
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && wildcard(tail, &rest[i..]))
        }),
    }
}

/// Every `"om_…"` metric name om's sources register.
pub(crate) fn metric_catalog() -> BTreeSet<String> {
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

pub(crate) fn metric_names(text: &str) -> Vec<String> {
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
pub(crate) fn metric_selectors(expr: &str) -> Vec<(String, Option<String>)> {
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
