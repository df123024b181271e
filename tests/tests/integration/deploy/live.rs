//! The alert rules and the dashboard against live series: a real Prometheus
//! (Debian's `prometheus`, which scripts/setup.sh installs with promtool)
//! scrapes three real `om` processes every second and evaluates
//! prometheusrule.yaml's rules. Every alert and panel expression must
//! evaluate, every `om_*` metric one names must be exported by a fresh
//! cluster (an alert on a series that never exists stays silent forever),
//! nothing fires on a healthy cluster, and a killed member raises
//! OmMemberDown.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use om_tests::{MemberAddrs, OmProcess, cluster_addrs, free_port, wait_for};

use super::alerts::PROMTOOL_RULES;
use super::render::*;

/// Labels the ServiceMonitor's scrape gives each member, and the
/// dashboard's variables select.
const NAMESPACE: &str = "om";
const CLUSTER: &str = "live-test";

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `%`-encodes a query parameter.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Prometheus' answer to an instant query (HTTP/1.0: no chunked body).
async fn query(addr: &str, expr: &str) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "GET /api/v1/query?query={} HTTP/1.0\r\nHost: {addr}\r\n\r\n",
            encode(expr)
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{expr}: {e}: {text}"))
}

/// The series an expression answers now; panics unless it evaluates.
async fn series(addr: &str, expr: &str) -> Vec<serde_json::Value> {
    let r = query(addr, expr).await;
    assert_eq!(r["status"], "success", "{expr}: {r}");
    r["data"]["result"].as_array().cloned().unwrap_or_default()
}

fn start_prometheus(dir: &Path, members: &[MemberAddrs], listen: &str) -> Prometheus {
    // The rules as the PrometheusRule carries them.
    let rule = documents(&kube_dir().join("prometheusrule.yaml"))
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("PrometheusRule"))
        .expect("prometheusrule.yaml holds a PrometheusRule");
    std::fs::write(
        dir.join(PROMTOOL_RULES),
        serde_norway::to_string(&rule["spec"]).unwrap(),
    )
    .unwrap();
    let targets: String = members
        .iter()
        .map(|m| {
            format!(
                "      - targets: ['{}']\n        labels: {{pod: om-{}, namespace: {NAMESPACE}, cluster: {CLUSTER}}}\n",
                m.http,
                m.id - 1
            )
        })
        .collect();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files: ['{PROMTOOL_RULES}']\n\
             scrape_configs:\n  - job_name: om\n    static_configs:\n{targets}"
        ),
    )
    .unwrap();
    let child = Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={listen}"))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("prometheus (Debian's prometheus package; scripts/setup.sh installs it): {e}")
        });
    Prometheus(child)
}

/// Every expression of the rules and of the dashboard's panels, with the
/// dashboard's variables set to the scrape's labels.
fn expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let rule = documents(&kube_dir().join("prometheusrule.yaml"))
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("PrometheusRule"))
        .unwrap();
    for g in rule["spec"]["groups"].as_sequence().unwrap() {
        for r in g["rules"].as_sequence().unwrap() {
            let name = r["alert"].as_str().or(r["record"].as_str()).unwrap();
            out.push((name.to_string(), r["expr"].as_str().unwrap().to_string()));
        }
    }
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(kube_dir().join("om-dashboard.json")).unwrap(),
    )
    .unwrap();
    fn panels(p: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for x in p.as_array().into_iter().flatten() {
            for t in x["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    let title = x["title"].as_str().unwrap_or("panel");
                    out.push((
                        format!("panel {title:?}"),
                        e.replace("$cluster", CLUSTER)
                            .replace("$namespace", NAMESPACE),
                    ));
                }
            }
            panels(&x["panels"], out);
        }
    }
    panels(&dash["panels"], &mut out);
    out
}

/// Metrics a member exports only when it serves TLS.
const ONLY_WITH_TLS: &[&str] = &["om_tls_certificate_expiry_timestamp_seconds"];

/// The `om_*` metric names an expression reads.
fn om_metrics(expr: &str) -> BTreeSet<String> {
    let b = expr.as_bytes();
    let mut out = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = expr[i..].find("om_") {
        let start = i + at;
        let word_start =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_alphanumeric() || b[end] == b'_') {
            end += 1;
        }
        if word_start {
            out.insert(expr[start..end].to_string());
        }
        i = end.max(start + 1);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_and_dashboard_evaluate_on_live_series() {
    let dir = tempfile::tempdir().unwrap();
    let addrs = cluster_addrs(3);
    let mut members: Vec<OmProcess> = addrs
        .iter()
        .map(|a| {
            let d = dir.path().join(format!("m{}", a.id));
            std::fs::create_dir_all(&d).unwrap();
            // Replica comparisons (whose metrics two alerts read) every
            // second, not every 10 s, so they are exported by the check.
            OmProcess::spawn_member_args(&d, a, &addrs, &["--divergence-check-interval-ms", "1000"])
        })
        .collect();
    let prom_addr = format!("127.0.0.1:{}", free_port());
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let _prom = start_prometheus(&prom_dir, &addrs, &prom_addr);

    // A cluster with a leader and some writes behind it.
    let c = om_tests::members_client(&addrs);
    wait_for(Duration::from_secs(60), "a leader", || {
        let c = &c;
        async move { c.cluster_status().await.ok().filter(|s| s.has_leader) }
    })
    .await;
    c.create_volume("vol", "").await.unwrap();
    c.create_bucket("vol", "bkt", om_client::v1::BucketLayout::ObjectStore)
        .await
        .unwrap();
    for i in 0..20 {
        c.put_key("vol", "bkt", &format!("k{i}"), 10).await.unwrap();
    }
    let _ = c.lookup_key("vol", "bkt", "missing").await;

    // Every member scraped, and rules evaluated a few times since.
    wait_for(Duration::from_secs(60), "three members up", || {
        let a = prom_addr.clone();
        async move {
            let up = series(&a, "sum(up{job=\"om\"})").await;
            (up.first()?["value"][1] == "3").then_some(())
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    let mut missing = Vec::new();
    for (name, expr) in expressions() {
        series(&prom_addr, &expr).await;
        for m in om_metrics(&expr) {
            // Exported only by members with TLS, which this cluster has
            // not: `tls::raft_port` reads them from a TLS member's /metrics.
            if ONLY_WITH_TLS.contains(&m.as_str()) {
                continue;
            }
            if series(&prom_addr, &format!("count({m})")).await.is_empty() {
                missing.push(format!("{m} (read by {name})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "metrics an alert or panel reads that a live cluster does not export:\n{}",
        missing.join("\n")
    );

    // Nothing fires on a healthy cluster.
    let firing = series(&prom_addr, "ALERTS{alertstate=\"firing\"}").await;
    assert!(firing.is_empty(), "{firing:?}");

    // A member killed: its scrape fails and OmMemberDown is pending (it
    // fires after its `for`).
    members[2].kill9();
    wait_for(Duration::from_secs(30), "OmMemberDown pending", || {
        let a = prom_addr.clone();
        async move {
            let s = series(&a, "ALERTS{alertname=\"OmMemberDown\"}").await;
            s.iter().any(|x| x["metric"]["pod"] == "om-2").then_some(())
        }
    })
    .await;
    drop(members);
}
