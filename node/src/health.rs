//! Liveness and readiness.
//!
//! `/health` answers while the process runs (liveness: restart it if not). `/ready` answers
//! 200 only while the node can do its share of the work (readiness: send it traffic, and let
//! a rolling upgrade go on to the next node), else 503 with every reason, one per line. It is
//! not ready while:
//!
//! - a storage engine is poisoned (a failed fsync; it needs a restart),
//! - the data volume's free space is below the reserve (writes are refused),
//! - in a cluster: the node has not joined or received the metadata, the metadata group has no
//!   leader, or one of its shard replicas has no leader, or has applied more than
//!   [`MAX_LAG`] entries fewer than its leader holds (catching up after a restart, or
//!   receiving a snapshot), or its leader did not answer how far its log reaches (nothing
//!   then shows the replica caught up).
//!
//! The checks run every second in the background ([`run`]); `/ready`, `system.nodes` and
//! other nodes read the last result.

use std::future::Future;
use std::time::Duration;

use parking_lot::RwLock;

/// How many log entries a replica may trail its leader's log and still count as caught up.
pub const MAX_LAG: u64 = 1000;

/// The outcome of the readiness checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Why the node is not ready; empty when it is.
    pub reasons: Vec<String>,
}

impl Readiness {
    /// Ready.
    pub fn ready() -> Readiness {
        Readiness { reasons: Vec::new() }
    }

    /// True if no check failed.
    pub fn is_ready(&self) -> bool {
        self.reasons.is_empty()
    }

    /// Notes a failed check.
    pub fn fail(&mut self, why: impl Into<String>) {
        self.reasons.push(why.into());
    }
}

/// The node's last readiness, shared by whoever reports it.
#[derive(Debug)]
pub struct Health {
    current: RwLock<Readiness>,
}

impl Default for Health {
    fn default() -> Self {
        Health { current: RwLock::new(Readiness { reasons: vec!["starting".into()] }) }
    }
}

impl Health {
    /// The last result.
    pub fn get(&self) -> Readiness {
        self.current.read().clone()
    }

    /// Records a result (logging when readiness changes).
    pub fn set(&self, r: Readiness) {
        let mut cur = self.current.write();
        if cur.is_ready() != r.is_ready() {
            if r.is_ready() {
                tracing::info!("node ready");
            } else {
                tracing::warn!(reasons = ?r.reasons, "node not ready");
            }
        }
        *cur = r;
    }
}

/// The checks every node makes: engines not poisoned, free space above the reserve.
pub fn check_storage<'a>(
    engines: impl IntoIterator<Item = (String, &'a ebb_storage::Engine)>,
    reserve: &ebb_storage::disk::Reserve,
    out: &mut Readiness,
) {
    for (name, e) in engines {
        if let Some(why) = e.poisoned() {
            out.fail(format!("{name}: storage engine poisoned ({why}); restart the node"));
        }
    }
    // `/ready` needs no credentials: the reason leaves out the data directory's path.
    if let Err(e) = reserve.check() {
        out.fail(format!(
            "disk full: {} bytes free, below the reserve of {} bytes",
            e.available, e.reserve
        ));
    }
}

/// Runs `check` every second into `health` until `stop` resolves.
pub async fn run<F, Fut>(health: std::sync::Arc<Health>, check: F, stop: impl Future<Output = ()>)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Readiness>,
{
    let work = async {
        loop {
            health.set(check().await);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    };
    tokio::select! {
        () = work => {}
        () = stop => {}
    }
}
