//! Fault injection for the transport: partitions, delays and dropped messages between nodes,
//! shared by every node of a test cluster in one process.

use std::collections::HashSet;
use std::time::Duration;

use parking_lot::RwLock;
use rand::Rng;

use crate::types::NodeId;

#[derive(Debug, Default)]
struct Rules {
    /// Directed links that deliver nothing.
    blocked: HashSet<(NodeId, NodeId)>,
    /// Added to every message.
    delay: Duration,
    /// Probability of losing a request before delivery, and (separately) its reply after.
    drop: f64,
}

/// What happens to one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Delivered (after the delay).
    Deliver,
    /// Lost before reaching the target.
    DropRequest,
    /// Delivered, but the reply is lost.
    DropReply,
}

/// Fault rules for messages between nodes. The default delivers everything.
#[derive(Debug, Default)]
pub struct Faults {
    rules: RwLock<Rules>,
}

impl Faults {
    /// No faults.
    pub fn new() -> Faults {
        Faults::default()
    }

    /// Cuts every link between a node of `a` and a node of `b`, both ways.
    pub fn partition(&self, a: &[NodeId], b: &[NodeId]) {
        let mut r = self.rules.write();
        for &x in a {
            for &y in b {
                r.blocked.insert((x, y));
                r.blocked.insert((y, x));
            }
        }
    }

    /// Cuts `node` off from every node in `others`.
    pub fn isolate(&self, node: NodeId, others: &[NodeId]) {
        self.partition(&[node], others);
    }

    /// Restores every link and removes delays and drops.
    pub fn heal(&self) {
        *self.rules.write() = Rules::default();
    }

    /// Delays every message by `d`.
    pub fn set_delay(&self, d: Duration) {
        self.rules.write().delay = d;
    }

    /// Loses requests, and replies, with probability `p` each.
    pub fn set_drop(&self, p: f64) {
        self.rules.write().drop = p.clamp(0.0, 1.0);
    }

    /// True if `from` cannot reach `to`.
    pub fn blocked(&self, from: NodeId, to: NodeId) -> bool {
        self.rules.read().blocked.contains(&(from, to))
    }

    /// Decides the fate of one message from `from` to `to`, and how long it is delayed.
    pub fn fate(&self, from: NodeId, to: NodeId) -> (Fate, Duration) {
        let r = self.rules.read();
        if r.blocked.contains(&(from, to)) {
            return (Fate::DropRequest, r.delay);
        }
        if r.drop > 0.0 {
            let mut rng = rand::thread_rng();
            if rng.gen_bool(r.drop) {
                return (Fate::DropRequest, r.delay);
            }
            if rng.gen_bool(r.drop) {
                return (Fate::DropReply, r.delay);
            }
        }
        (Fate::Deliver, r.delay)
    }
}
