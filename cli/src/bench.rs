//! `omctl bench`: write (CommitKey) and read (LookupKey) throughput of an om
//! cluster at several client concurrencies, and, in the same run, the same
//! load on an etcd cluster through etcd's KV API (Put and linearizable Range).
//! Reports ops/s, p50, p99, and from each server's Prometheus endpoint WAL
//! fsyncs per second and CPU-µs per operation on the leader and on a follower
//! (`process_cpu_seconds_total`, which both om and etcd export).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use om_client::v1::{BucketLayout, PutKeyRequest};
use om_client::{ClientOptions, OmClient};
use om_proto::etcd::kv_client::KvClient;
use om_proto::etcd::{PutRequest, RangeRequest};
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Client concurrencies to measure, comma-separated.
    #[arg(long, default_value = "1,16,64,256", value_delimiter = ',')]
    pub concurrency: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// om HTTP addresses (for `om_raft_log_fsyncs_total` and CPU per
    /// operation), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub om_metrics: Vec<String>,
    /// etcd client endpoints (host:port), comma-separated; omit to skip etcd.
    #[arg(long, value_delimiter = ',')]
    pub etcd: Vec<String>,
    /// Size in bytes of each key's value written to etcd (om stores its own record).
    #[arg(long, default_value_t = 256)]
    pub etcd_value_bytes: usize,
    /// Measure writes only (no read phase), e.g. for a long write soak.
    #[arg(long)]
    pub writes_only: bool,
    /// Spread om's writing clients over the endpoints (client i starts at
    /// endpoint i mod n, as etcd's clients are spread) instead of all
    /// following the leader: followers forward the writes they take to the
    /// leader in batches. A build without forwarding redirects them.
    #[arg(long)]
    pub spread: bool,
    /// Each member's CPU quota in cores, as `scripts/bench-cluster.sh
    /// --cpus-per-node` set it (a cgroup per member, modelling members on
    /// machines of their own): the table then shows the busiest member's use
    /// as a share of its quota, so a member at its quota is the one that
    /// limits.
    #[arg(long)]
    pub cpus_per_node: Option<f64>,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub system: &'static str,
    pub op: &'static str,
    pub concurrency: usize,
    pub ops_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub fsyncs_per_sec: Option<f64>,
    /// CPU-µs per operation on the leader, and on a follower (their mean).
    pub leader_cpu_us: Option<f64>,
    pub follower_cpu_us: Option<f64>,
    /// The member that used the most CPU, and how much: cores, or a share
    /// of its quota when there is one.
    pub busiest: Option<(&'static str, f64)>,
    /// CPU-µs per operation of this load generator (the client).
    pub client_cpu_us: f64,
    pub errors: u64,
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

/// The metrics of one system a cell reads before and after its load.
struct Probe {
    addrs: Vec<String>,
    fsyncs: &'static str,
    is_leader: &'static str,
}

/// Per node: (is leader, CPU seconds, WAL fsyncs).
struct Sample(Vec<(bool, f64, f64)>);

/// `metric`'s value in Prometheus text, summed over its label sets.
fn metric_value(body: &str, metric: &str) -> Option<f64> {
    let mut total = None;
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix(metric)
            && (rest.starts_with(' ') || rest.starts_with('{'))
            && let Some(v) = rest.rsplit(' ').next()
            && let Ok(v) = v.parse::<f64>()
        {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

impl Probe {
    async fn sample(&self) -> Option<Sample> {
        if self.addrs.is_empty() {
            return None;
        }
        let mut nodes = Vec::new();
        for a in &self.addrs {
            let body = http_get(a, "/metrics").await.ok()?;
            nodes.push((
                metric_value(&body, self.is_leader) == Some(1.0),
                metric_value(&body, "process_cpu_seconds_total")?,
                metric_value(&body, self.fsyncs).unwrap_or(0.0),
            ));
        }
        Some(Sample(nodes))
    }
}

/// What the servers did between two samples: fsyncs in all, and CPU seconds
/// of the leader (as it was at the end) and the mean over the followers.
struct Usage {
    fsyncs: f64,
    leader_cpu: Option<f64>,
    follower_cpu: Option<f64>,
    /// The member that used the most CPU seconds: leader or follower.
    busiest: Option<(&'static str, f64)>,
}

fn usage(before: Option<Sample>, after: Option<Sample>) -> Option<Usage> {
    let (Sample(b), Sample(a)) = (before?, after?);
    if a.len() != b.len() {
        return None;
    }
    let (mut leader, mut followers) = (None, Vec::new());
    let mut fsyncs = 0.0;
    let mut busiest: Option<(&'static str, f64)> = None;
    for ((_, cb, fb), (lead, ca, fa)) in b.iter().zip(&a) {
        fsyncs += fa - fb;
        let used = ca - cb;
        if busiest.is_none_or(|(_, most)| used > most) {
            busiest = Some((if *lead { "leader" } else { "follower" }, used));
        }
        if *lead {
            leader = Some(used);
        } else {
            followers.push(used);
        }
    }
    Some(Usage {
        fsyncs,
        leader_cpu: leader,
        follower_cpu: (!followers.is_empty())
            .then(|| followers.iter().sum::<f64>() / followers.len() as f64),
        busiest,
    })
}

async fn http_get(addr: &str, path: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = addr.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await?;
    let text = String::from_utf8_lossy(&out).to_string();
    Ok(text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or(text))
}

/// CPU seconds this process has used (user and system), from
/// `/proc/self/stat` (in USER_HZ ticks, 100 a second on Linux); 0 elsewhere.
fn own_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces, in parentheses):
    // state is field 3, utime 14 and stime 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// What `drive` measured: sorted latencies (µs), errors, the elapsed time
/// and this process's CPU seconds over it.
struct Driven(Vec<u64>, u64, Duration, f64);

/// Runs `op` from `concurrency` tasks for `seconds`.
async fn drive<F, Fut>(concurrency: usize, seconds: u64, op: F) -> Driven
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cpu_before = own_cpu_seconds();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..concurrency {
        let (op, stop, done) = (op.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if op(w, n).await {
                    lat.push(t.elapsed().as_micros() as u64);
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors += 1;
                }
                n += 1;
            }
            (lat, errors)
        }));
    }
    // A live count on a terminal (stderr), once a second.
    let progress = crate::Progress::new(true, "ops");
    let end = started + Duration::from_secs(seconds);
    while Instant::now() < end {
        tokio::time::sleep(
            Duration::from_secs(1).min(end.saturating_duration_since(Instant::now())),
        )
        .await;
        progress.update(done.load(Ordering::Relaxed) as usize);
    }
    progress.done();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        if let Ok((l, e)) = t.await {
            all.extend(l);
            errors += e;
        }
    }
    let elapsed = started.elapsed();
    let cpu = own_cpu_seconds() - cpu_before;
    all.sort_unstable();
    Driven(all, errors, elapsed, cpu)
}

fn row(
    system: &'static str,
    op: &'static str,
    concurrency: usize,
    Driven(lat, errors, elapsed, client_cpu): Driven,
    used: Option<Usage>,
    count_fsyncs: bool,
    quota: Option<f64>,
) -> Row {
    let secs = elapsed.as_secs_f64();
    let per_op = |cpu: f64| cpu * 1e6 / lat.len().max(1) as f64;
    Row {
        system,
        op,
        concurrency,
        ops_per_sec: lat.len() as f64 / secs,
        p50_ms: percentile(&lat, 0.50),
        p99_ms: percentile(&lat, 0.99),
        fsyncs_per_sec: used
            .as_ref()
            .filter(|_| count_fsyncs)
            .map(|u| u.fsyncs / secs),
        leader_cpu_us: used.as_ref().and_then(|u| u.leader_cpu).map(per_op),
        follower_cpu_us: used.as_ref().and_then(|u| u.follower_cpu).map(per_op),
        busiest: used
            .as_ref()
            .and_then(|u| u.busiest)
            .map(|(who, cpu)| (who, cpu / secs / quota.unwrap_or(1.0))),
        client_cpu_us: per_op(client_cpu),
        errors,
    }
}

/// One client per endpoint, client i starting at endpoint i (each still
/// fails over to the others): clients spread over the members.
pub fn spread_clients(endpoints: &[String], opts: &ClientOptions) -> Result<Vec<Arc<OmClient>>> {
    (0..endpoints.len())
        .map(|i| {
            let mut eps = endpoints[i..].to_vec();
            eps.extend_from_slice(&endpoints[..i]);
            let opts = ClientOptions {
                spread: true,
                ..opts.clone()
            };
            Ok(Arc::new(OmClient::new(&eps, opts)?))
        })
        .collect()
}

pub async fn run(
    endpoints: &[String],
    args: &BenchArgs,
    tls: Option<Arc<om_tls::ClientTls>>,
    token: Option<String>,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let om = Arc::new(OmClient::new(
        endpoints,
        ClientOptions {
            tls: tls.clone(),
            token: token.clone(),
            ..ClientOptions::default()
        },
    )?);
    let run_id = format!("{:08x}", rand::random::<u32>());
    let volume = format!("bench-{run_id}");
    om.create_volume(&volume, "bench")
        .await
        .context("creating the bench volume")?;
    om.create_bucket(&volume, "keys", BucketLayout::ObjectStore)
        .await?;
    // Keys for the read phase.
    for i in 0..1000 {
        om.put_key(&volume, "keys", &format!("r/{i:04}"), 1024)
            .await?;
    }
    let etcd: Option<Vec<KvClient<Channel>>> = if args.etcd.is_empty() {
        None
    } else {
        let mut v = Vec::new();
        for e in &args.etcd {
            let ch = Endpoint::from_shared(format!("http://{}", e.trim_start_matches("http://")))?
                .tcp_nodelay(true)
                .connect()
                .await
                .with_context(|| format!("connecting to etcd at {e}"))?;
            v.push(KvClient::new(ch));
        }
        let value = vec![b'x'; args.etcd_value_bytes];
        for i in 0..1000 {
            v[0].clone()
                .put(PutRequest {
                    key: format!("{run_id}/r/{i:04}").into_bytes(),
                    value: value.clone(),
                    ..Default::default()
                })
                .await?;
        }
        Some(v)
    };

    let om_probe = Probe {
        addrs: args.om_metrics.clone(),
        fsyncs: "om_raft_log_fsyncs_total",
        is_leader: "om_raft_is_leader",
    };
    // etcd serves its metrics on the client port.
    let etcd_probe = Probe {
        addrs: args.etcd.clone(),
        fsyncs: "etcd_disk_wal_fsync_duration_seconds_count",
        is_leader: "etcd_server_is_leader",
    };
    // Writers: the one leader-following client, or one client per endpoint,
    // each starting there.
    let writers = Arc::new(if args.spread {
        spread_clients(
            endpoints,
            &ClientOptions {
                tls: tls.clone(),
                token: token.clone(),
                ..ClientOptions::default()
            },
        )?
    } else {
        vec![om.clone()]
    });
    for &c in &args.concurrency {
        // om: CommitKey (create + commit of a new key) through Raft.
        let before = om_probe.sample().await;
        let (ws, v) = (writers.clone(), volume.clone());
        let r = drive(c, args.seconds, move |w, n| {
            let (o, v) = (ws[w % ws.len()].clone(), v.clone());
            async move {
                o.put_key_with(PutKeyRequest {
                    volume: v,
                    bucket: "keys".into(),
                    key: format!("w/{c}/{w}/{n}"),
                    size: 1024,
                    ..Default::default()
                })
                .await
                .is_ok()
            }
        })
        .await;
        let used = usage(before, om_probe.sample().await);
        rows.push(row("om", "CommitKey", c, r, used, true, args.cpus_per_node));

        // om: linearizable LookupKey.
        if !args.writes_only {
            let before = om_probe.sample().await;
            let (o, v) = (om.clone(), volume.clone());
            let r = drive(c, args.seconds, move |w, n| {
                let (o, v) = (o.clone(), v.clone());
                async move {
                    o.lookup_key(
                        &v,
                        "keys",
                        &format!("r/{:04}", (w as u64 * 7919 + n) % 1000),
                    )
                    .await
                    .is_ok()
                }
            })
            .await;
            let used = usage(before, om_probe.sample().await);
            rows.push(row(
                "om",
                "LookupKey",
                c,
                r,
                used,
                false,
                args.cpus_per_node,
            ));
        }

        if let Some(clients) = &etcd {
            let before = etcd_probe.sample().await;
            let (cl, rid, value) = (
                clients.clone(),
                run_id.clone(),
                vec![b'x'; args.etcd_value_bytes],
            );
            let r = drive(c, args.seconds, move |w, n| {
                // Round-robin over members, as etcd's own client balances.
                let mut kv = cl[w % cl.len()].clone();
                let key = format!("{rid}/w/{c}/{w}/{n}").into_bytes();
                let value = value.clone();
                async move {
                    kv.put(PutRequest {
                        key,
                        value,
                        ..Default::default()
                    })
                    .await
                    .is_ok()
                }
            })
            .await;
            let used = usage(before, etcd_probe.sample().await);
            rows.push(row("etcd", "Put", c, r, used, true, args.cpus_per_node));

            if args.writes_only {
                continue;
            }
            let before = etcd_probe.sample().await;
            let (cl, rid) = (clients.clone(), run_id.clone());
            let r = drive(c, args.seconds, move |w, n| {
                let mut kv = cl[w % cl.len()].clone();
                let key = format!("{rid}/r/{:04}", (w as u64 * 7919 + n) % 1000).into_bytes();
                async move {
                    kv.range(RangeRequest {
                        key,
                        serializable: false,
                        ..Default::default()
                    })
                    .await
                    .is_ok_and(|r| r.get_ref().kvs.len() == 1)
                }
            })
            .await;
            let used = usage(before, etcd_probe.sample().await);
            rows.push(row("etcd", "Range", c, r, used, false, args.cpus_per_node));
        }
    }
    Ok(rows)
}

/// Renders rows as a Markdown table; `quota`: the members' CPU quota in
/// cores, if any (the busiest member's use is then a share of it).
pub fn markdown(rows: &[Row], quota: Option<f64>) -> String {
    let busiest = match quota {
        Some(q) => format!("busiest member (of its {q} cores)"),
        None => "busiest member (cores)".to_string(),
    };
    let mut s = format!(
        "| system | operation | clients | ops/s | p50 ms | p99 ms | WAL fsyncs/s | leader CPU µs/op | follower CPU µs/op | {busiest} | client CPU µs/op | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n",
    );
    for r in rows {
        let busiest = r
            .busiest
            .map_or("-".to_string(), |(who, used)| match quota {
                Some(_) => format!("{who} {:.0}%", used * 100.0),
                None => format!("{who} {used:.2}"),
            });
        s.push_str(&format!(
            "| {} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {busiest} | {:.0} | {} |\n",
            r.system,
            r.op,
            r.concurrency,
            r.ops_per_sec,
            r.p50_ms,
            r.p99_ms,
            r.fsyncs_per_sec
                .map_or("-".to_string(), |f| format!("{f:.0}")),
            r.leader_cpu_us
                .map_or("-".to_string(), |f| format!("{f:.0}")),
            r.follower_cpu_us
                .map_or("-".to_string(), |f| format!("{f:.0}")),
            r.client_cpu_us,
            r.errors
        ));
    }
    s
}
