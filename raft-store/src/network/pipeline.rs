//! What the requests in flight on one replication stream are, and when an
//! acknowledgement may be handed to openraft.
//!
//! openraft stamps each request with the time it is pulled from its request
//! stream and queues it; when the stream yields `Ok(m)`, it removes *every*
//! queued request whose range ends at or before `m` (and counts one that `m`
//! reaches into) and credits the follower with the newest of their send
//! times. That time is what ReadIndex and the leader lease trust: a
//! follower is taken to have acknowledged this leader at it. Requests that
//! only carry a new commit index have the same last log id as the request
//! before them, so a late answer to that earlier request would credit the
//! later, unanswered one: a leader deposed long ago, receiving old answers
//! after a partition heals, would take them as a fresh quorum and serve a
//! stale "linearizable" read.
//!
//! Two rules keep every credited time that of an answered request:
//! - `Ok(m)` is handed over only when no request still in flight would be
//!   removed or counted by `m`; until then the answer is held back (a later
//!   answer supersedes it, an error replaces it, the end of the stream
//!   drops it, and openraft sends again);
//! - from handing an `Ok` over until openraft polls the stream again (which
//!   it does after crediting it), no request is pulled from openraft, so
//!   none can join its queue in between.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

use futures::{Stream, StreamExt};

use super::InFlight;
use crate::LogId;

#[derive(Default)]
pub(super) struct Pipeline {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The (prev, last] ranges of the requests sent and not yet answered.
    in_flight: VecDeque<InFlight>,
    /// When each of them was sent (round trips).
    sent: VecDeque<std::time::Instant>,
    /// An `Ok` was handed to openraft, which has not polled for the next
    /// answer yet.
    handed_over: bool,
    /// The request side, waiting for `handed_over` to clear.
    waiting: Option<Waker>,
}

impl Pipeline {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Pulls the next request from openraft's stream (which stamps and
    /// queues it), recording its range; waits while an `Ok` handed over is
    /// not yet credited.
    pub(super) fn poll_request<S, R>(
        &self,
        input: &mut S,
        range: impl Fn(&R) -> InFlight,
        cx: &mut Context<'_>,
    ) -> Poll<Option<R>>
    where
        S: Stream<Item = R> + Unpin,
    {
        let mut s = self.state();
        if s.handed_over {
            s.waiting = Some(cx.waker().clone());
            return Poll::Pending;
        }
        // Pulled under the lock: `hand_over` sees every request openraft
        // has queued.
        match input.poll_next_unpin(cx) {
            Poll::Ready(Some(req)) => {
                s.in_flight.push_back(range(&req));
                s.sent.push_back(std::time::Instant::now());
                Poll::Ready(Some(req))
            }
            other => other,
        }
    }

    /// openraft polled for the next answer: it has credited the last one.
    pub(super) fn resumed(&self) {
        let mut s = self.state();
        if s.handed_over {
            s.handed_over = false;
            if let Some(w) = s.waiting.take() {
                w.wake();
            }
        }
    }

    /// The range of the oldest request in flight, which the answer just
    /// received is for (answers come in request order).
    #[cfg(test)]
    pub(super) fn answered(&self) -> Option<InFlight> {
        self.answered_sent().map(|(r, _)| r)
    }

    /// `answered`, with when that request was sent.
    pub(super) fn answered_sent(&self) -> Option<(InFlight, std::time::Instant)> {
        let mut s = self.state();
        let r = s.in_flight.pop_front()?;
        let at = s.sent.pop_front().unwrap_or_else(std::time::Instant::now);
        Some((r, at))
    }

    /// Whether `Ok(matching)` may be handed to openraft now: no request in
    /// flight ends at or before `matching` or starts before it. If so, no
    /// request is pulled until openraft polls again.
    pub(super) fn hand_over(&self, matching: &Option<LogId>) -> bool {
        let mut s = self.state();
        let covered = s
            .in_flight
            .iter()
            .any(|(prev, last)| last <= matching || prev < matching);
        if !covered {
            s.handed_over = true;
        }
        !covered
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Wake;

    use openraft::vote::leader_id_adv::LeaderId;
    use proptest::prelude::*;

    use super::*;

    fn log_id(index: u64) -> Option<LogId> {
        Some(LogId::new(
            LeaderId {
                term: 1,
                node_id: 1,
            },
            index,
        ))
    }

    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }

    /// openraft's side, as it behaves: a request is stamped with the time it
    /// is pulled; an `Ok(m)` removes every queued request ending at or
    /// before `m`, counts one `m` reaches into, and credits the newest of
    /// their stamps.
    #[derive(Default)]
    struct Openraft {
        queue: VecDeque<(InFlight, u64)>,
        credited: Option<u64>,
    }

    impl Openraft {
        fn drain(&mut self, m: &Option<LogId>) {
            while let Some(((prev, last), t)) = self.queue.front().cloned() {
                if m >= &last {
                    self.credited = Some(t);
                    self.queue.pop_front();
                } else {
                    if m > &prev {
                        self.credited = Some(t);
                    }
                    break;
                }
            }
        }
    }

    /// A request as openraft sends it: entries (prev, last] or a commit-only
    /// one whose range is empty.
    fn requests(shape: &[bool]) -> Vec<InFlight> {
        let mut at = 0;
        shape
            .iter()
            .map(|entries| {
                let prev = log_id(at);
                if *entries {
                    at += 1;
                }
                (prev, log_id(at))
            })
            .collect()
    }

    proptest! {
        /// Whatever the order of pulls, answers and openraft's polls, the
        /// time credited for a follower is the stamp of a request it has
        /// answered, never of one still in flight.
        #[test]
        fn only_answered_requests_are_credited(
            shape in proptest::collection::vec(any::<bool>(), 1..40),
            steps in proptest::collection::vec(0u8..3, 1..200),
        ) {
            let reqs = requests(&shape);
            let pipeline = Pipeline::default();
            let mut openraft = Openraft::default();
            let mut input = futures::stream::iter(reqs.clone());
            let waker = Waker::from(Arc::new(Noop));
            let mut cx = Context::from_waker(&waker);
            let mut clock = 0u64;
            // The stamps of requests sent, in order, and how many the
            // follower answered so far.
            let mut sent: Vec<u64> = Vec::new();
            let mut answered = 0usize;
            let mut pending_answers = 0usize;
            for step in steps {
                clock += 1;
                match step {
                    // The transport pulls a request to send.
                    0 => {
                        if let Poll::Ready(Some(r)) =
                            pipeline.poll_request(&mut input, |r: &InFlight| *r, &mut cx)
                        {
                            openraft.queue.push_back((r, clock));
                            sent.push(clock);
                            pending_answers += 1;
                        }
                    }
                    // An answer (Success) arrives; openraft is waiting for it.
                    _ => {
                        if pending_answers == 0 {
                            continue;
                        }
                        pending_answers -= 1;
                        answered += 1;
                        pipeline.resumed();
                        let (_, last) = pipeline.answered().unwrap();
                        if pipeline.hand_over(&last) {
                            openraft.drain(&last);
                            if let Some(t) = openraft.credited {
                                prop_assert!(
                                    t <= sent[answered - 1],
                                    "credited {t}, newest answered stamp {}",
                                    sent[answered - 1]
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The case from a partition: an answer to entries, then a commit-only
    /// request with the same last log id still in flight. The answer is held
    /// until the commit-only request is answered too.
    #[test]
    fn an_answer_waits_for_requests_it_would_credit() {
        let p = Pipeline::default();
        let mut input = futures::stream::iter(vec![(log_id(0), log_id(1)), (log_id(1), log_id(1))]);
        let waker = Waker::from(Arc::new(Noop));
        let mut cx = Context::from_waker(&waker);
        for _ in 0..2 {
            assert!(
                p.poll_request(&mut input, |r: &InFlight| *r, &mut cx)
                    .is_ready()
            );
        }
        let (_, last) = p.answered().unwrap();
        assert!(
            !p.hand_over(&last),
            "the commit-only request would be credited"
        );
        let (_, last) = p.answered().unwrap();
        assert!(p.hand_over(&last));
        // Until openraft polls again, nothing is pulled.
        let mut more = futures::stream::iter(vec![(log_id(1), log_id(2))]);
        assert!(
            p.poll_request(&mut more, |r: &InFlight| *r, &mut cx)
                .is_pending()
        );
        p.resumed();
        assert!(
            p.poll_request(&mut more, |r: &InFlight| *r, &mut cx)
                .is_ready()
        );
    }
}
