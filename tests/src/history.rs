//! Clients that put, get and delete a handful of keys concurrently and
//! record every operation for `linearizability::check`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use om_client::{ClientError, ClientOptions, OmClient};
use rand::Rng;

use crate::linearizability::{Input, Op, Output};

/// The keys the clients work on, in bucket `vol1/bkt1`.
pub const KEYS: [&str; 3] = ["x", "y", "z"];

fn outcome(r: &Result<(), ClientError>, not_found: Output) -> Option<Output> {
    match r {
        Ok(()) => Some(Output::Ok),
        Err(e) if e.reason() == "KEY_NOT_FOUND" => Some(not_found),
        Err(_) => None,
    }
}

/// A recording of concurrent register operations.
pub struct Recorder {
    pub history: Arc<Mutex<Vec<Op>>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    t0: Instant,
}

impl Recorder {
    /// Starts `n` clients on `eps` (every other one reads under the
    /// leader's lease when `lease` is set); values are unique per put.
    pub fn start(eps: &[String], n: u64, lease: bool) -> Recorder {
        let t0 = Instant::now();
        let history: Arc<Mutex<Vec<Op>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for w in 0..n {
            let (history, stop, eps) = (history.clone(), stop.clone(), eps.to_vec());
            workers.push(tokio::spawn(async move {
                let c = OmClient::new(
                    &eps,
                    ClientOptions {
                        deadline: Duration::from_secs(2),
                        attempt_timeout: Duration::from_millis(700),
                        lease_reads: lease && w % 2 == 1,
                        ..crate::client_options()
                    },
                )
                .unwrap();
                let now = move || t0.elapsed().as_micros() as u64;
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let (key, roll) = {
                        let mut rng = rand::rng();
                        (
                            KEYS[rng.random_range(0..KEYS.len())],
                            rng.random_range(0..10),
                        )
                    };
                    let call = now();
                    let (input, output) = if roll < 4 {
                        i += 1;
                        let v = w * 1_000_000_000 + i;
                        let r = c.put_key("vol1", "bkt1", key, v).await.map(|_| ());
                        (Input::Put(v), outcome(&r, Output::NotFound))
                    } else if roll < 8 {
                        let out = match c.lookup_key("vol1", "bkt1", key).await {
                            Ok(k) => Some(Output::Value(Some(k.size))),
                            Err(e) if e.reason() == "KEY_NOT_FOUND" => Some(Output::Value(None)),
                            Err(_) => None,
                        };
                        (Input::Get, out)
                    } else {
                        let r = c.delete_key("vol1", "bkt1", key).await;
                        (Input::Delete, outcome(&r, Output::NotFound))
                    };
                    history.lock().unwrap().push(Op {
                        key: key.to_string(),
                        input,
                        output,
                        call,
                        ret: now(),
                    });
                }
            }));
        }
        Recorder {
            history,
            stop,
            workers,
            t0,
        }
    }

    /// Microseconds since the recording started (the history's clock).
    pub fn now(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    /// Operations with a known outcome so far.
    pub fn known(&self) -> usize {
        self.history
            .lock()
            .unwrap()
            .iter()
            .filter(|o| o.output.is_some())
            .count()
    }

    /// Stops the clients and returns the history.
    pub async fn finish(self) -> Vec<Op> {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.await.unwrap();
        }
        self.history.lock().unwrap().clone()
    }
}

/// Checks `history`, and that the checker would have refused it with one
/// impossible read appended (so the check could fail).
pub fn check_linearizable(history: &[Op], end: u64) {
    use crate::linearizability::{MAX_STATES, Verdict, check_within};
    match check_within(history, MAX_STATES) {
        Verdict::Linearizable => {}
        Verdict::Violation(e) => panic!("{e}"),
        // Bounded so a pathological history cannot exhaust the machine's
        // memory; replicas are still compared record by record after.
        Verdict::Inconclusive(why) => {
            eprintln!("linearizability not decided within the search budget: {why}")
        }
    }
    // The checker can fail: the known outcomes of the first operations, then
    // a read of a value never written.
    let mut tampered: Vec<Op> = history
        .iter()
        .filter(|o| o.output.is_some())
        .take(300)
        .cloned()
        .collect();
    let end = tampered.iter().map(|o| o.ret).max().unwrap_or(end).max(end);
    tampered.push(Op {
        key: KEYS[0].into(),
        input: Input::Get,
        output: Some(Output::Value(Some(u64::MAX))),
        call: end,
        ret: end + 1,
    });
    assert!(crate::linearizability::check(&tampered).is_err());
}
