//! Cluster versions: what lets nodes of two releases run one cluster during a rolling upgrade,
//! and lets an upgrade be rolled back until it is finalized.
//!
//! - A **cluster version** is a number. Each release's binary reads and writes every format and
//!   speaks every protocol of a range of them ([`VersionRange::BUILD`]); release 0.1.0, which
//!   knows nothing of versions, is cluster version 1 ([`VersionRange::LEGACY`]).
//! - The cluster's **active** version is a record of the metadata group
//!   (`meta/cluster-version`; absent: 1). A node writes only what the active version allows
//!   ([`Versions::enabled`]), so while it is below a new binary's newest, every member, the
//!   previous release included, reads what every other writes, and a node can be rolled back.
//! - **Finalizing** raises the active version to the newest every member's binary supports
//!   (`ALTER CLUSTER FINALIZE UPGRADE`, or by itself once every member has run such a binary
//!   for the cluster's auto-finalize delay). It is refused while a member's binary is older or
//!   does not answer. After it, a rollback is no longer possible.
//! - Every request between nodes carries the sender's binary and range ([`VERSION_HEADER`]); a
//!   request from a node whose binary does not reach the active version is refused (a request
//!   without the header comes from release 0.1.0), and so is a join; a node whose stored
//!   metadata says the cluster runs above its binary's range refuses to start.
//!
//! This is CockroachDB's cluster version with its finalization, and etcd's cluster version
//! kept in the replicated membership store; the gates are TiKV's feature gates.

use std::sync::atomic::{AtomicU32, Ordering};

use serde::{Deserialize, Serialize};

/// A cluster version.
pub type ClusterVersion = u32;

/// The gRPC metadata key carrying the sender's binary version and cluster-version range on
/// every request between nodes: `0.2.0;1-2`.
pub const VERSION_HEADER: &str = "x-ebb-version";

/// The cluster versions a binary supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionRange {
    /// The oldest cluster version it can run in (it reads everything that version writes).
    pub min: ClusterVersion,
    /// The newest.
    pub max: ClusterVersion,
}

impl VersionRange {
    /// This binary's range.
    pub const BUILD: VersionRange = VersionRange { min: 1, max: 2 };
    /// The range of a node that does not say (release 0.1.0).
    pub const LEGACY: VersionRange = VersionRange { min: 1, max: 1 };

    /// True if a binary of this range can run in a cluster at `active`.
    pub fn runs_at(&self, active: ClusterVersion) -> bool {
        (self.min..=self.max).contains(&active)
    }
}

impl std::fmt::Display for VersionRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

/// What turns on at a cluster version: nothing behind a gate is written or asked of another
/// node before the cluster is finalized at its version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Gate {
    /// Joining needs a token an admin minted (`CREATE JOIN TOKEN`).
    JoinTokens,
}

impl Gate {
    /// The cluster version it turns on at.
    pub fn since(self) -> ClusterVersion {
        match self {
            Gate::JoinTokens => 2,
        }
    }
}

/// A binary as another node describes it: its release and its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerVersion {
    /// Its release (`0.2.0`), `None` from a node that does not say (release 0.1.0).
    pub binary: Option<String>,
    /// Its cluster versions.
    pub range: VersionRange,
}

impl PeerVersion {
    /// The version a request's [`VERSION_HEADER`] describes (`None`: no header, release
    /// 0.1.0); `None` if the header does not parse.
    pub fn from_header(header: Option<&[u8]>) -> Option<PeerVersion> {
        let (binary, range) = parse_header(header)?;
        Some(PeerVersion { binary: binary.map(str::to_string), range })
    }

    /// `ebb 0.2.0 (cluster versions 1-2)`.
    pub fn describe(&self) -> String {
        let binary = self.binary.as_deref().unwrap_or("0.1.0 or older");
        format!("ebb {binary} (cluster versions {})", self.range)
    }
}

/// The release and range a request's [`VERSION_HEADER`] gives, borrowed from it (checked on
/// every request between nodes, so nothing is allocated): `(None, LEGACY)` without a header
/// (release 0.1.0), `None` if it does not parse.
pub fn parse_header(header: Option<&[u8]>) -> Option<(Option<&str>, VersionRange)> {
    let Some(h) = header else {
        return Some((None, VersionRange::LEGACY));
    };
    let (binary, range) = std::str::from_utf8(h).ok()?.split_once(';')?;
    let (min, max) = range.split_once('-')?;
    let range = VersionRange { min: min.parse().ok()?, max: max.parse().ok()? };
    (range.min <= range.max && !binary.is_empty() && binary.len() <= 64)
        .then_some((Some(binary), range))
}

/// This node's versions: its binary's range and the cluster's active version as this node last
/// applied it. Read on every request between nodes, so lock-free.
#[derive(Debug)]
pub struct Versions {
    range: VersionRange,
    active: AtomicU32,
}

impl Versions {
    /// A node whose binary runs cluster versions `range` (a test pins a node to an older range
    /// to behave as the previous release), before it has read the metadata.
    pub fn new(range: VersionRange) -> Versions {
        Versions { range, active: AtomicU32::new(range.min) }
    }

    /// The binary's range.
    pub fn range(&self) -> VersionRange {
        self.range
    }

    /// The cluster's active version as this node last applied it.
    pub fn active(&self) -> ClusterVersion {
        self.active.load(Ordering::Acquire)
    }

    /// Records the active version the metadata holds (it only moves forward).
    pub fn set_active(&self, v: ClusterVersion) {
        self.active.fetch_max(v, Ordering::AcqRel);
    }

    /// True once the cluster runs at `gate`'s version.
    pub fn enabled(&self, gate: Gate) -> bool {
        self.active() >= gate.since()
    }

    /// This node as it describes itself to the others.
    pub fn me(&self) -> PeerVersion {
        PeerVersion { binary: Some(crate::VERSION.to_string()), range: self.range }
    }

    /// The value of [`VERSION_HEADER`] this node sends.
    pub fn header(&self) -> String {
        format!("{};{}", crate::VERSION, self.range)
    }

    /// Why a request from `peer` is refused in a cluster at this node's active version, or
    /// `None` to serve it.
    pub fn refusal(&self, peer: &PeerVersion) -> Option<String> {
        let active = self.active();
        (!peer.range.runs_at(active)).then(|| {
            format!(
                "the sender runs {}, and this cluster runs at cluster version {active}: \
                 it needs a binary that supports {active}",
                peer.describe()
            )
        })
    }

    /// Why this node must not serve in a cluster at `active`, or `None`.
    pub fn unfit(&self, active: ClusterVersion) -> Option<String> {
        (!self.range.runs_at(active)).then(|| {
            format!(
                "this node runs {}, and its cluster runs at cluster version {active}: \
                 start it with a binary that supports cluster version {active}",
                self.me().describe()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_describe_the_sender_and_a_missing_one_is_the_previous_release() {
        let v = Versions::new(VersionRange::BUILD);
        let me = PeerVersion::from_header(Some(v.header().as_bytes())).expect("parses");
        assert_eq!(me, v.me());
        let legacy = PeerVersion::from_header(None).expect("legacy");
        assert_eq!(legacy.range, VersionRange::LEGACY);
        assert_eq!(legacy.describe(), "ebb 0.1.0 or older (cluster versions 1-1)");
        for bad in ["", "0.2.0", "0.2.0;2-1", ";1-2", "0.2.0;1-x"] {
            assert_eq!(PeerVersion::from_header(Some(bad.as_bytes())), None, "{bad}");
        }
    }

    #[test]
    fn the_active_version_decides_who_is_served_and_what_is_on() {
        let v = Versions::new(VersionRange::BUILD);
        let legacy = PeerVersion::from_header(None).expect("legacy");
        assert_eq!(v.active(), 1);
        assert!(!v.enabled(Gate::JoinTokens));
        assert_eq!(v.refusal(&legacy), None, "before finalizing, the previous release is served");
        v.set_active(2);
        v.set_active(1);
        assert_eq!(v.active(), 2, "the active version never goes back");
        assert!(v.enabled(Gate::JoinTokens));
        let why = v.refusal(&legacy).expect("refused after finalizing");
        assert!(why.contains("cluster versions 1-1") && why.contains("cluster version 2"), "{why}");
        assert_eq!(v.refusal(&v.me()), None);
        let pinned = Versions::new(VersionRange::LEGACY);
        assert!(pinned.unfit(2).expect("unfit").contains("cluster versions 1-1"));
        assert_eq!(pinned.unfit(1), None);
    }
}
