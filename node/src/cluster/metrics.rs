//! Cluster figures for `/metrics`: shard replicas held and led here, and snapshot traffic.

use std::fmt::Write;

use super::router::Router;

fn line(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
}

/// Appends the cluster metrics of the node `router` belongs to.
pub fn render(router: &Router, out: &mut String) {
    let me = router.meta().node();
    let shards = router.shards().all();
    let led = shards
        .iter()
        .filter(|s| s.group.raft.metrics().borrow().current_leader == Some(me))
        .count();
    line(out, "ebb_cluster_node_id", "gauge", "This node's id.", me);
    line(
        out,
        "ebb_shard_replicas",
        "gauge",
        "Shard replicas held on this node.",
        shards.len() as u64,
    );
    line(out, "ebb_shard_leaders", "gauge", "Shards whose leader is this node.", led as u64);
    let sent = router.conns().snapshots_sent();
    let received = router.groups().snapshots_received();
    line(
        out,
        "ebb_raft_snapshots_sent_total",
        "counter",
        "Raft snapshots sent and installed by the receiver.",
        sent.count(),
    );
    line(
        out,
        "ebb_raft_snapshot_bytes_sent_total",
        "counter",
        "Bytes of the Raft snapshots sent.",
        sent.bytes(),
    );
    let appends = router.groups().appends_received();
    line(
        out,
        "ebb_raft_appends_received_total",
        "counter",
        "Raft AppendEntries requests received (entries and heartbeats).",
        appends.count(),
    );
    line(
        out,
        "ebb_raft_append_bytes_received_total",
        "counter",
        "Bytes of the Raft AppendEntries requests received.",
        appends.bytes(),
    );
    line(
        out,
        "ebb_raft_snapshots_received_total",
        "counter",
        "Raft snapshots received and validated.",
        received.count(),
    );
    line(
        out,
        "ebb_raft_snapshot_bytes_received_total",
        "counter",
        "Bytes of the Raft snapshots received.",
        received.bytes(),
    );
}
