//! Network partitions against three real `om` processes, each in a network
//! namespace of its own (see `om_tests::netns`), under a concurrent register
//! load in which half the clients read under the leader's lease. Nemeses,
//! drawn from a seed: isolate the leader, one-way loss into the leader (it
//! can still send: the shape of a stale read once served), one-way loss out
//! of it, a bridge (two nodes that cannot talk, both reaching the third),
//! flapping links and delayed links. Afterwards the history must be
//! linearizable (linearizable and lease reads alike), every replica's state
//! digest must agree and the stopped replicas' tables must be identical.
//!
//! Needs root and `ip` (network namespaces); elsewhere it says why and
//! passes without running. `OM_PARTITION_SEEDS=1,2,3` picks the schedules
//! (default `1`) and `OM_PARTITION_SECONDS` how long each runs (default 20).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use om_tests::history::{Recorder, check_linearizable};
use om_tests::netns::Lab;
use om_tests::{MemberAddrs, OmProcess, claimed_leader};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, Copy)]
enum Nemesis {
    /// The leader can neither send to nor hear from the other nodes.
    IsolateLeader,
    /// The followers' packets do not reach the leader; its own do reach them.
    OneWayIn,
    /// The leader's packets do not reach the followers; theirs reach it.
    OneWayOut,
    /// Two nodes (the leader among them) cannot talk; both reach the third.
    Bridge,
    /// Random one-way cuts, each healed or replaced every `period`.
    Flapping { period: Duration },
    /// Every link to and from one node (the leader or not) arrives late.
    Delay { leader: bool, delay: Duration },
}

fn draw(rng: &mut StdRng) -> Nemesis {
    match rng.random_range(0..6) {
        0 => Nemesis::IsolateLeader,
        1 => Nemesis::OneWayIn,
        2 => Nemesis::OneWayOut,
        3 => Nemesis::Bridge,
        4 => Nemesis::Flapping {
            period: Duration::from_millis(rng.random_range(100..600)),
        },
        _ => Nemesis::Delay {
            leader: rng.random_bool(0.5),
            delay: Duration::from_millis(rng.random_range(20..250)),
        },
    }
}

/// The node (1-based, as the lab numbers them) that calls itself leader,
/// asked from the root namespace (clients are never cut).
async fn leader(procs: &[OmProcess]) -> Option<usize> {
    let eps: Vec<String> = procs.iter().map(|p| p.grpc.clone()).collect();
    claimed_leader(&eps).await.map(|id| id as usize)
}

async fn run_schedule(lab: &Lab, seed: u64, seconds: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let addrs: Vec<MemberAddrs> = (1..=3)
        .map(|i| MemberAddrs {
            id: i as u64,
            grpc: format!("{}:9862", lab.addr(i)),
            http: format!("{}:9874", lab.addr(i)),
            raft: format!("{}:9872", lab.addr(i)),
        })
        .collect();
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut procs: Vec<OmProcess> = addrs
        .iter()
        .zip(&dirs)
        .enumerate()
        .map(|(i, (a, d))| {
            OmProcess::spawn_member_wrapped(
                d.path(),
                a,
                &addrs,
                // Plaintext on the namespaces' private addresses.
                &["--divergence-check-interval-ms", "1000", "--insecure"],
                &[],
                lab.exec_in(i + 1),
            )
        })
        .collect();
    let eps: Vec<String> = addrs.iter().map(|a| a.grpc.clone()).collect();
    let c = om_tests::replicas::register_bucket(&eps).await;

    let rec = Recorder::start(&eps, 6, true);
    let started = Instant::now();
    let mut applied = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1200))).await;
        let n = draw(&mut rng);
        let hold = Duration::from_millis(rng.random_range(500..4000));
        let Some(l) = leader(&procs).await else {
            continue;
        };
        let others: Vec<usize> = (1..=3).filter(|i| *i != l).collect();
        eprintln!(
            "seed {seed} at {:?}: {n:?} for {hold:?}, leader {l}",
            started.elapsed()
        );
        match n {
            Nemesis::IsolateLeader => lab.isolate(l),
            Nemesis::OneWayIn => others.iter().for_each(|&f| lab.cut(f, l)),
            Nemesis::OneWayOut => others.iter().for_each(|&f| lab.cut(l, f)),
            Nemesis::Bridge => lab.cut_both(l, others[rng.random_range(0..2)]),
            Nemesis::Flapping { period } => {
                let until = Instant::now() + hold;
                while Instant::now() < until {
                    lab.heal();
                    for _ in 0..rng.random_range(1..4) {
                        let from = rng.random_range(1..=3);
                        lab.cut(from, (from + rng.random_range(0..2)) % 3 + 1);
                    }
                    tokio::time::sleep(period).await;
                }
            }
            Nemesis::Delay { leader, delay } => {
                let x = if leader { l } else { others[0] };
                for y in (1..=3).filter(|y| *y != x) {
                    lab.delay(x, y, delay);
                    lab.delay(y, x, delay);
                }
            }
        }
        if !matches!(n, Nemesis::Flapping { .. }) {
            tokio::time::sleep(hold).await;
        }
        lab.heal();
        applied.push(n);
    }
    // Settle: the last writes are acknowledged and every node applies them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let end = rec.now();
    let history = rec.finish().await;
    om_tests::replicas::wait_settled(&c, &procs).await;
    let known = history.iter().filter(|o| o.output.is_some()).count();
    eprintln!(
        "seed {seed}: {} nemeses, {} operations, {known} with known outcomes, {} packets delayed",
        applied.len(),
        history.len(),
        lab.delayed_packets(),
    );
    assert!(known >= 100, "too few completed operations ({known})");
    check_linearizable(&history, end);
    let dirs: Vec<_> = dirs.iter().map(|d| d.path().to_path_buf()).collect();
    om_tests::replicas::assert_identical(&c, &mut procs, &dirs, &format!("seed {seed}")).await;
    // Only a seed that passed gets here: the line `scripts/soak.sh` sums.
    eprintln!(
        "soak: run=partitions seed={seed} seconds={seconds} operations={known} faults={} anomalies=0",
        applied.len()
    );
}

/// The lab itself: a cut drops exactly one direction between two nodes and
/// leaves the root's (clients') path alone; a delay holds packets.
#[test]
fn the_lab_cuts_one_direction_and_delays() {
    let lab = match Lab::create(2) {
        Ok(l) => l,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    // Node 2 (and the root) listen; connecting needs packets both ways.
    let l2 = lab.in_ns(2, || TcpListener::bind((lab.addr(2).as_str(), 0)).unwrap());
    let to2 = l2.local_addr().unwrap();
    let l1 = lab.in_ns(1, || TcpListener::bind((lab.addr(1).as_str(), 0)).unwrap());
    let to1 = l1.local_addr().unwrap();
    let connect = |from: usize, to: SocketAddr| {
        let t = Instant::now();
        let ok = lab.in_ns(from, || {
            TcpStream::connect_timeout(&to, Duration::from_secs(1)).is_ok()
        });
        ok.then(|| t.elapsed())
    };
    assert!(connect(1, to2).is_some() && connect(2, to1).is_some());
    lab.cut(1, 2);
    assert!(connect(1, to2).is_none(), "1 -> 2 is cut");
    assert!(connect(2, to1).is_none(), "2 -> 1 needs 1 -> 2 to answer");
    // The root (the clients) still reaches both.
    for to in [to1, to2] {
        assert!(TcpStream::connect_timeout(&to, Duration::from_secs(1)).is_ok());
    }
    lab.heal();
    assert!(connect(1, to2).is_some());
    lab.delay(1, 2, Duration::from_millis(300));
    let took = connect(1, to2).expect("a delayed link still connects");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(lab.delayed_packets() >= 1);
    lab.heal();
    let took = connect(1, to2).unwrap();
    assert!(took < Duration::from_millis(300), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_keep_replicas_identical_and_reads_fresh() {
    let lab = match Lab::create(3) {
        Ok(l) => l,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let seeds: Vec<u64> = std::env::var("OM_PARTITION_SEEDS")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1]);
    let seconds: u64 = std::env::var("OM_PARTITION_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    for seed in seeds {
        run_schedule(&lab, seed, seconds).await;
    }
}
