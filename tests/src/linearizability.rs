//! A linearizability checker for a key-value register history, after Wing &
//! Gong with Lowe's memoization (the algorithm Porcupine implements).
//!
//! Each key is checked on its own (linearizability is compositional). Within a
//! key, the search walks the history's call and return events in time order,
//! tentatively linearizing each call whose result the model accepts, and
//! backtracking when it meets the return of an operation it has not yet
//! linearized. `(linearized set, state)` pairs already explored are cached.
//!
//! Operations whose outcome is unknown (the client timed out) get a return
//! time after everything else and accept any output: they may take effect at
//! any point after their call, or never (taking effect last is
//! indistinguishable from never). Reads with an unknown outcome are dropped.

use std::collections::{BTreeMap, HashSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    Put(u64),
    Get,
    Delete,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// A put or a delete that found the key.
    Ok,
    /// A delete that found no key.
    NotFound,
    /// What a get returned.
    Value(Option<u64>),
}

#[derive(Debug, Clone)]
pub struct Op {
    pub key: String,
    pub input: Input,
    /// `None` when the outcome is unknown.
    pub output: Option<Output>,
    /// Invocation time (any monotonic unit).
    pub call: u64,
    /// Response time; ignored when `output` is `None`.
    pub ret: u64,
}

/// The register's sequential specification: the new state if `output` is
/// what `input` would return in `state`.
fn step(state: Option<u64>, input: Input, output: Option<Output>) -> Option<Option<u64>> {
    match (input, output) {
        (Input::Put(v), None | Some(Output::Ok)) => Some(Some(v)),
        (Input::Delete, None) => Some(None),
        (Input::Delete, Some(Output::Ok)) if state.is_some() => Some(None),
        (Input::Delete, Some(Output::NotFound)) if state.is_none() => Some(None),
        (Input::Get, Some(Output::Value(v))) if v == state => Some(state),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy)]
struct Event {
    op: usize,
    is_call: bool,
    time: u64,
}

/// Distinct `(linearized set, state)` pairs one key's search may cache
/// before `check_within` gives up on it (a few hundred bytes each): a
/// history with many operations of unknown outcome on one key can need
/// exponentially many.
pub const MAX_STATES: usize = 1_000_000;

/// What `check_within` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Linearizable,
    /// The key whose history is not linearizable.
    Violation(String),
    /// The key whose search exceeded its budget, and how many of its
    /// operations had unknown outcomes.
    Inconclusive(String),
}

/// Checks a whole history; on failure (or a search past `MAX_STATES`),
/// names the key.
pub fn check(history: &[Op]) -> Result<(), String> {
    match check_within(history, MAX_STATES) {
        Verdict::Linearizable => Ok(()),
        Verdict::Violation(e) | Verdict::Inconclusive(e) => Err(e),
    }
}

/// Checks a whole history, each key's search within `max_states`.
pub fn check_within(history: &[Op], max_states: usize) -> Verdict {
    let mut by_key: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in history {
        if op.output.is_none() && op.input == Input::Get {
            continue;
        }
        by_key.entry(&op.key).or_default().push(op);
    }
    for (key, ops) in by_key {
        match check_key(&ops, max_states) {
            Some(true) => {}
            Some(false) => {
                return Verdict::Violation(format!("history of key {key:?} is not linearizable"));
            }
            None => {
                let unknown = ops.iter().filter(|o| o.output.is_none()).count();
                return Verdict::Inconclusive(format!(
                    "key {key:?}: {} operations, {unknown} of unknown outcome, need more than \
                     {max_states} search states",
                    ops.len()
                ));
            }
        }
    }
    Verdict::Linearizable
}

/// Whether one key's history is linearizable; `None` past `max_states`.
fn check_key(ops: &[&Op], max_states: usize) -> Option<bool> {
    let end = ops.iter().map(|o| o.ret.max(o.call)).max().unwrap_or(0) + 1;
    let mut events: Vec<Event> = Vec::with_capacity(ops.len() * 2);
    for (i, o) in ops.iter().enumerate() {
        events.push(Event {
            op: i,
            is_call: true,
            time: o.call,
        });
        events.push(Event {
            op: i,
            is_call: false,
            time: if o.output.is_some() { o.ret } else { end },
        });
    }
    // Calls before returns at equal times: such operations overlap.
    events.sort_by_key(|e| (e.time, !e.is_call));
    // A doubly linked list over `events`, with a sentinel head at index n.
    let n = events.len();
    let mut next: Vec<usize> = (1..=n).collect();
    let mut prev: Vec<usize> = Vec::with_capacity(n + 1);
    prev.push(n);
    prev.extend(0..n - 1);
    next.push(0); // the sentinel's next
    prev.push(n); // unused
    let head = n;
    let nil = n;
    if n == 0 {
        return Some(true);
    }
    next[n - 1] = nil;
    let mut ret_of = vec![0usize; ops.len()];
    for (idx, e) in events.iter().enumerate() {
        if !e.is_call {
            ret_of[e.op] = idx;
        }
    }
    let unlink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, i: usize| {
        let (p, nx) = (prev[i], next[i]);
        next[p] = nx;
        if nx != nil {
            prev[nx] = p;
        }
    };
    let relink = |next: &mut Vec<usize>, prev: &mut Vec<usize>, i: usize| {
        let (p, nx) = (prev[i], next[i]);
        next[p] = i;
        if nx != nil {
            prev[nx] = i;
        }
    };
    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, Option<u64>)> = HashSet::new();
    let mut stack: Vec<(usize, Option<u64>)> = Vec::new();
    let mut state: Option<u64> = None;
    let mut cur = next[head];
    while next[head] != nil {
        if cur == nil {
            // Cannot happen: the list always ends with a return event.
            return Some(false);
        }
        let e = events[cur];
        if e.is_call {
            let op = ops[e.op];
            if let Some(new_state) = step(state, op.input, op.output) {
                let mut lin = linearized.clone();
                lin[e.op / 64] |= 1 << (e.op % 64);
                if cache.len() >= max_states {
                    return None;
                }
                if cache.insert((lin.clone(), new_state)) {
                    stack.push((cur, state));
                    state = new_state;
                    linearized = lin;
                    unlink(&mut next, &mut prev, cur);
                    unlink(&mut next, &mut prev, ret_of[e.op]);
                    cur = next[head];
                    continue;
                }
            }
            cur = next[cur];
        } else {
            // The return of an operation not yet linearized: backtrack.
            let Some((call, old_state)) = stack.pop() else {
                return Some(false);
            };
            let op = events[call].op;
            relink(&mut next, &mut prev, ret_of[op]);
            relink(&mut next, &mut prev, call);
            linearized[op / 64] &= !(1 << (op % 64));
            state = old_state;
            cur = next[call];
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(input: Input, output: Option<Output>, call: u64, ret: u64) -> Op {
        Op {
            key: "k".into(),
            input,
            output,
            call,
            ret,
        }
    }

    #[test]
    fn sequential_history_passes() {
        let h = vec![
            op(Input::Get, Some(Output::Value(None)), 0, 1),
            op(Input::Put(1), Some(Output::Ok), 2, 3),
            op(Input::Get, Some(Output::Value(Some(1))), 4, 5),
            op(Input::Delete, Some(Output::Ok), 6, 7),
            op(Input::Delete, Some(Output::NotFound), 8, 9),
        ];
        assert!(check(&h).is_ok());
    }

    #[test]
    fn a_stale_read_after_a_completed_write_fails() {
        let h = vec![
            op(Input::Put(1), Some(Output::Ok), 0, 10),
            op(Input::Put(2), Some(Output::Ok), 20, 30),
            op(Input::Get, Some(Output::Value(Some(1))), 40, 50),
        ];
        assert!(check(&h).is_err());
    }

    #[test]
    fn a_read_of_a_value_never_written_fails() {
        let h = vec![op(Input::Get, Some(Output::Value(Some(7))), 0, 1)];
        assert!(check(&h).is_err());
    }

    #[test]
    fn reads_that_disagree_about_order_fail() {
        // Two concurrent writes; one reader sees 1 then 2, another 2 then 1
        // after both reads of the first finished: no single order explains it.
        let h = vec![
            op(Input::Put(1), Some(Output::Ok), 0, 100),
            op(Input::Put(2), Some(Output::Ok), 0, 100),
            op(Input::Get, Some(Output::Value(Some(1))), 10, 20),
            op(Input::Get, Some(Output::Value(Some(2))), 30, 40),
            op(Input::Get, Some(Output::Value(Some(1))), 50, 60),
        ];
        assert!(check(&h).is_err());
    }

    #[test]
    fn concurrent_operations_may_take_either_order() {
        let h = vec![
            op(Input::Put(1), Some(Output::Ok), 0, 100),
            op(Input::Put(2), Some(Output::Ok), 0, 100),
            op(Input::Get, Some(Output::Value(Some(2))), 10, 20),
            op(Input::Get, Some(Output::Value(Some(1))), 110, 120),
        ];
        assert!(check(&h).is_ok());
    }

    #[test]
    fn an_unknown_write_may_or_may_not_take_effect() {
        let took = vec![
            op(Input::Put(1), None, 0, 0),
            op(Input::Get, Some(Output::Value(Some(1))), 10, 20),
        ];
        assert!(check(&took).is_ok());
        let never = vec![
            op(Input::Put(1), None, 0, 0),
            op(Input::Get, Some(Output::Value(None)), 10, 20),
        ];
        assert!(check(&never).is_ok());
        // But once seen, it cannot be unseen.
        let flicker = vec![
            op(Input::Put(1), None, 0, 0),
            op(Input::Get, Some(Output::Value(Some(1))), 10, 20),
            op(Input::Get, Some(Output::Value(None)), 30, 40),
        ];
        assert!(check(&flicker).is_err());
    }

    #[test]
    fn keys_are_checked_independently() {
        let mut h = vec![op(Input::Put(1), Some(Output::Ok), 0, 1)];
        h.push(Op {
            key: "other".into(),
            input: Input::Get,
            output: Some(Output::Value(Some(1))),
            call: 2,
            ret: 3,
        });
        assert!(check(&h).unwrap_err().contains("other"));
    }

    /// A search past its budget says so rather than answer (or exhaust
    /// memory): unknown puts, then a read of a value none of them wrote.
    #[test]
    fn a_search_past_its_budget_is_inconclusive() {
        let mut h: Vec<Op> = (0..20).map(|i| op(Input::Put(i), None, i * 2, 0)).collect();
        h.push(op(Input::Get, Some(Output::Value(Some(99))), 100, 101));
        match check_within(&h, 1000) {
            Verdict::Inconclusive(why) => assert!(why.contains("20 of unknown outcome"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(check_within(&h[..3], 1000), Verdict::Linearizable));
    }
}
