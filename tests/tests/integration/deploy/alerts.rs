//! The alert rules fire and clear in promtool, select om's own series (or
//! om's objects' in other exporters' series), and each names its section
//! of docs/alerts.md.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use super::render::*;

/// The Prometheus rule file the alert tests name (`rule_files:`), written
/// next to them: the PrometheusRule's `spec` (its `groups:`).
pub(crate) const PROMTOOL_RULES: &str = "om-rules.yaml";

/// The PrometheusRule of prometheusrule.yaml.
fn prometheus_rule() -> serde_norway::Value {
    documents(&kube_dir().join("prometheusrule.yaml"))
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("PrometheusRule"))
        .expect("prometheusrule.yaml holds a PrometheusRule")
}

/// Runs promtool with `args` in `dir` and returns its output; panics with
/// that output unless it succeeds, and when promtool is missing.
pub(crate) fn promtool<I, S>(dir: &Path, args: I) -> String
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
pub(crate) fn alerts_fire_and_clear_in_promtool() {
    let dir = kube_dir();
    let rule = prometheus_rule();
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

/// Each series selector of a PromQL expression, outside quoted strings: the
/// metric's name and what its braces hold, if it has braces. Other words
/// (functions, keywords, label names, durations) come out too, without
/// braces.
fn series_selectors(expr: &str) -> Vec<(String, Option<String>)> {
    let b = expr.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += 1;
            }
            i += 1;
        } else if word(b[i]) {
            let start = i;
            while i < b.len() && word(b[i]) {
                i += 1;
            }
            let name = expr[start..i].to_string();
            let selector = expr[i..]
                .strip_prefix('{')
                .and_then(|s| s.split_once('}'))
                .map(|(s, _)| s.to_string());
            if let Some(s) = &selector {
                i += s.len() + 2;
            }
            out.push((name, selector));
        } else {
            i += 1;
        }
    }
    out
}

/// Every rule selects what it is about: om's own series (`om_*` and `up`)
/// by `job="om"`, other exporters' series (kube-state-metrics, the kubelet,
/// cert-manager) by the name of one of om's objects, with any prefix. And
/// every alert's `runbook_url` names its section of docs/alerts.md (GitHub's
/// anchor: the heading in lower case), which has one per alert and no other.
#[test]
pub(crate) fn alerts_select_om_and_have_runbooks() {
    let rule = prometheus_rule();
    let docs = std::fs::read_to_string(om_tests::repo_root().join("docs/alerts.md"))
        .expect("docs/alerts.md");
    let sections: BTreeSet<&str> = docs
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .map(str::trim)
        .collect();
    let mut alerts = BTreeSet::new();
    let mut problems = Vec::new();
    for g in rule["spec"]["groups"].as_sequence().expect("spec.groups") {
        for r in g["rules"].as_sequence().expect("rules of a group") {
            let name = r["alert"].as_str().expect("an alert");
            let expr = r["expr"].as_str().expect("an expr");
            alerts.insert(name.to_string());
            let mut selected = 0;
            for (metric, selector) in series_selectors(expr) {
                let own = metric.starts_with("om_") || metric == "up";
                let other = ["kube_", "kubelet_", "certmanager_"]
                    .iter()
                    .any(|p| metric.starts_with(p));
                let needs = if own {
                    "job=\"om\""
                } else if other {
                    "(.+-)?om-"
                } else {
                    continue;
                };
                if selector.as_deref().is_some_and(|s| s.contains(needs)) {
                    selected += 1;
                } else {
                    problems.push(format!("{name}: {metric} without {needs}"));
                }
            }
            if selected == 0 {
                problems.push(format!("{name}: no series of om's in {expr:?}"));
            }
            let runbook = format!("docs/alerts.md#{}", name.to_lowercase());
            if r["annotations"]["runbook_url"].as_str() != Some(runbook.as_str()) {
                problems.push(format!("{name}: runbook_url is not {runbook}"));
            }
            if !sections.contains(name) {
                problems.push(format!(
                    "{name}: docs/alerts.md has no section \"## {name}\""
                ));
            }
        }
    }
    for s in &sections {
        if s.starts_with("Om") && !alerts.contains(*s) {
            problems.push(format!("docs/alerts.md: section {s} names no alert"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // The scan itself: names with what their braces hold; words in quoted
    // strings and in braces are no names.
    let found = series_selectors(
        r#"sum by (pod) (rate(om_x_total{job="om", a="b"}[5m])) / up or kube_y{n=~"(.+-)?om-z"}"#,
    );
    let with_braces: Vec<(&str, &str)> = found
        .iter()
        .filter_map(|(n, s)| Some((n.as_str(), s.as_deref()?)))
        .collect();
    assert_eq!(
        with_braces,
        [
            ("om_x_total", r#"job="om", a="b""#),
            ("kube_y", r#"n=~"(.+-)?om-z""#)
        ]
    );
    assert!(found.iter().any(|(n, s)| n == "up" && s.is_none()));
}
