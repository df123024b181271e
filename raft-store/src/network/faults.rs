//! Fault injection for tests (`Faults`): cut links, held answers, stalled
//! requests between in-process nodes.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use crate::NodeId;

/// Fault injection for tests: links that are cut. A cut link (from, to) makes
/// every RPC `from` sends to `to` fail as unreachable; cutting both directions
/// partitions two nodes. A link can also lose one direction only, as a
/// network that drops packets one way does: its answers held back (the
/// requests arrive and are answered, the answers wait, in order, and pass
/// as released) or its requests stalled (nothing new is sent). Production
/// nodes never install one.
#[derive(Debug, Default)]
pub struct Faults {
    cut: Mutex<HashSet<(NodeId, NodeId)>>,
    /// (answering node, asking node) → answers still allowed through.
    held: Mutex<HashMap<(NodeId, NodeId), usize>>,
    /// (sender, receiver): the sender sends nothing new.
    stalled: Mutex<HashSet<(NodeId, NodeId)>>,
}

impl Faults {
    /// Cuts every link between `node` and `others`, both ways.
    pub fn isolate(&self, node: NodeId, others: &[NodeId]) {
        let mut cut = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        for o in others.iter().filter(|o| **o != node) {
            cut.insert((node, *o));
            cut.insert((*o, node));
        }
    }

    /// Cuts the link from `from` to `to` (one direction).
    pub fn cut(&self, from: NodeId, to: NodeId) {
        self.cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((from, to));
    }

    /// Restores every link (answers held back are then delivered).
    pub fn heal(&self) {
        self.cut.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.stalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Holds back `from`'s answers to `to`'s replication stream (single
    /// RPCs lose theirs) until released.
    pub fn hold_answers(&self, from: NodeId, to: NodeId) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((from, to), 0);
    }

    /// Lets `n` more held answers from `from` to `to` through, in order.
    pub fn release_answers(&self, from: NodeId, to: NodeId, n: usize) {
        if let Some(left) = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&(from, to))
        {
            *left = left.saturating_add(n);
        }
    }

    /// Whether an answer from `from` to `to` may pass now.
    pub(super) fn answer_may_pass(&self, from: NodeId, to: NodeId) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(from, to))
            .is_none_or(|left| *left > 0)
    }

    /// An answer from `from` to `to` passed: one fewer released.
    pub(super) fn answer_passed(&self, from: NodeId, to: NodeId) {
        if let Some(left) = self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&(from, to))
        {
            *left = left.saturating_sub(1);
        }
    }

    pub(super) fn answers_held(&self, from: NodeId, to: NodeId) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&(from, to))
    }

    /// `from` sends nothing new to `to`: its replication streams pull no
    /// request and its single RPCs fail as unreachable.
    pub fn stall(&self, from: NodeId, to: NodeId) {
        self.stalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((from, to));
    }

    /// Ends `stall`.
    pub fn unstall(&self, from: NodeId, to: NodeId) {
        self.stalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(from, to));
    }

    pub(super) fn is_stalled(&self, from: NodeId, to: NodeId) -> bool {
        self.stalled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(from, to))
    }

    pub fn is_cut(&self, from: NodeId, to: NodeId) -> bool {
        self.cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&(from, to))
    }
}
