//! Where delete requests stand, per replica and overall: the rows of `system.deletions`, on a
//! single node and (gathered from every node) in a cluster.
//!
//! A request is *persisted* on a replica once its ledger says none of its deletes' data is left
//! there; it is *late* if that happened after the deadline or the deadline passed first; it is
//! *at risk* while pending in the last quarter of the time it was given. Overall, a request is
//! persisted when every replica of every shard it reached is, late when any replica is, at risk
//! when any replica is at risk or did not answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::db::Database;
use crate::error::{QueryError, Result};

/// One request as one replica recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaDeletion {
    /// Request id.
    pub id: u64,
    /// `delete`, `erase`, `drop`, `retention`.
    pub kind: String,
    /// What it deletes, as stated.
    pub target: String,
    /// Who issued it (user, protocol, client address); empty: not recorded.
    pub issued_by: String,
    /// Rows it hid on this replica's shard (`None`: not counted, as for a table drop or a
    /// retention purge).
    pub rows: Option<u64>,
    /// When it was issued (ms).
    pub issued_at_ms: u64,
    /// Its deadline (ms), if it has one.
    pub deadline_ms: Option<u64>,
    /// The shard (0 on a single node).
    pub shard: u64,
    /// The node holding the replica (0 on a single node).
    pub node: u64,
    /// When this replica applied it (`None`: the replica did not answer).
    pub applied_at_ms: Option<u64>,
    /// When its data was gone from this replica (`None`: not yet).
    pub persisted_at_ms: Option<u64>,
    /// Engine deletes it consists of here.
    pub deletes: u64,
    /// Of those, not yet persisted.
    pub pending: u64,
    /// True for a shard that has not applied the request yet while the cluster still drives
    /// it there (an open intent): pending, not at risk.
    pub awaiting: bool,
    /// The backup set this copy is (its id); `None` for a shard replica.
    pub backup: Option<String>,
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeletionState {
    /// Physically gone, by the deadline.
    Persisted,
    /// Hidden from reads; data may remain; time remains.
    Pending,
    /// Pending with less than a quarter of its time left (or a replica did not answer).
    AtRisk,
    /// Gone after its deadline, or still pending past it.
    Late,
}

impl DeletionState {
    /// As shown in `system.deletions`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletionState::Persisted => "persisted",
            DeletionState::Pending => "pending",
            DeletionState::AtRisk => "at risk",
            DeletionState::Late => "late",
        }
    }
}

impl ReplicaDeletion {
    /// This replica's state at `now_ms`.
    pub fn state(&self, now_ms: u64) -> DeletionState {
        let within = |t: u64| self.deadline_ms.is_none_or(|d| t <= d);
        match (self.applied_at_ms, self.persisted_at_ms) {
            (_, Some(t)) if within(t) => DeletionState::Persisted,
            (_, Some(_)) => DeletionState::Late,
            _ if !within(now_ms) => DeletionState::Late,
            (None, None) if self.awaiting => DeletionState::Pending,
            (None, None) => DeletionState::AtRisk,
            (Some(_), None) => match self.deadline_ms {
                Some(d) if now_ms >= d - d.saturating_sub(self.issued_at_ms) / 4 => {
                    DeletionState::AtRisk
                }
                _ => DeletionState::Pending,
            },
        }
    }
}

/// The overall state of each request among `rows`, by id.
pub fn overall(rows: &[ReplicaDeletion], now_ms: u64) -> BTreeMap<u64, DeletionState> {
    let mut out: BTreeMap<u64, DeletionState> = BTreeMap::new();
    for r in rows {
        let s = r.state(now_ms);
        out.entry(r.id).and_modify(|o| *o = (*o).max(s)).or_insert(s);
    }
    out
}

/// Gives copies of a request that lack what only its replicas know (a backup set's copy, from
/// a journal entry or a purge record: its statement, issuer and the deadline the shards set)
/// those of a replica row of the same request.
pub fn fill_from_replicas(rows: &mut [ReplicaDeletion]) {
    let known: BTreeMap<u64, ReplicaDeletion> =
        rows.iter().filter(|r| r.backup.is_none()).map(|r| (r.id, r.clone())).collect();
    for r in rows.iter_mut().filter(|r| r.backup.is_some()) {
        if let Some(k) = known.get(&r.id) {
            if r.kind.is_empty() {
                r.kind = k.kind.clone();
            }
            if r.target.is_empty() {
                r.target = k.target.clone();
            }
            if r.issued_by.is_empty() {
                r.issued_by = k.issued_by.clone();
            }
            r.deadline_ms = r.deadline_ms.or(k.deadline_ms);
            if r.issued_at_ms == 0 {
                r.issued_at_ms = k.issued_at_ms;
            }
        }
    }
}

/// Every request `db`'s ledger holds, as the replica of `shard` on `node`.
pub fn local_deletions(db: &Database, shard: u64, node: u64) -> Vec<ReplicaDeletion> {
    db.engine()
        .delete_requests()
        .into_iter()
        .map(|r| ReplicaDeletion {
            id: r.request.id,
            kind: r.request.kind,
            target: r.request.text,
            issued_by: r.request.issued_by,
            rows: r.request.rows,
            issued_at_ms: r.issued_at_ms,
            deadline_ms: r.deadline_ms.ms(),
            shard,
            node,
            applied_at_ms: Some(r.applied_at_ms),
            persisted_at_ms: r.persisted_at_ms,
            deletes: r.deletes,
            pending: r.pending,
            awaiting: false,
            backup: None,
        })
        .collect()
}

/// A nanosecond timestamp column.
pub(crate) fn ts_field(name: &str, nullable: bool) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Nanosecond, None), nullable)
}

/// The schema of `system.deletions`.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("target", DataType::Utf8, false),
        Field::new("issued_by", DataType::Utf8, true),
        Field::new("rows", DataType::UInt64, true),
        ts_field("issued_at", false),
        ts_field("deadline", true),
        Field::new("shard", DataType::UInt64, false),
        Field::new("node", DataType::UInt64, false),
        Field::new("copy", DataType::Utf8, false),
        ts_field("applied_at", true),
        ts_field("persisted_at", true),
        Field::new("deletes", DataType::UInt64, false),
        Field::new("replica_status", DataType::Utf8, false),
        Field::new("status", DataType::Utf8, false),
    ]))
}

/// Milliseconds since the epoch as an Arrow nanosecond timestamp (saturating).
pub(crate) fn ms_to_ns(ms: u64) -> i64 {
    (ms.min(i64::MAX as u64 / 1_000_000) * 1_000_000) as i64
}

/// `rows` as a batch of `system.deletions` at `now_ms`, ordered by id, shard and node.
pub fn batch(rows: &[ReplicaDeletion], now_ms: u64) -> Result<RecordBatch> {
    let mut rows: Vec<&ReplicaDeletion> = rows.iter().collect();
    rows.sort_by_key(|r| (r.id, r.backup.is_some(), r.shard, r.node));
    let states = overall(&rows.iter().map(|r| (*r).clone()).collect::<Vec<_>>(), now_ms);
    let u = |f: &dyn Fn(&ReplicaDeletion) -> u64| -> ArrayRef {
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| f(r))))
    };
    let s = |f: &dyn Fn(&ReplicaDeletion) -> String| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| f(r))))
    };
    let t = |f: &dyn Fn(&ReplicaDeletion) -> Option<u64>| -> ArrayRef {
        Arc::new(TimestampNanosecondArray::from(
            rows.iter().map(|r| f(r).map(ms_to_ns)).collect::<Vec<_>>(),
        ))
    };
    let cols = vec![
        u(&|r| r.id),
        s(&|r| r.kind.clone()),
        s(&|r| r.target.clone()),
        Arc::new(StringArray::from(
            rows.iter()
                .map(|r| (!r.issued_by.is_empty()).then_some(r.issued_by.as_str()))
                .collect::<Vec<_>>(),
        )),
        Arc::new(UInt64Array::from(rows.iter().map(|r| r.rows).collect::<Vec<_>>())),
        t(&|r| Some(r.issued_at_ms)),
        t(&|r| r.deadline_ms),
        u(&|r| r.shard),
        u(&|r| r.node),
        s(&|r| r.backup.as_ref().map_or_else(|| "replica".to_string(), |b| format!("backup {b}"))),
        t(&|r| r.applied_at_ms),
        t(&|r| r.persisted_at_ms),
        u(&|r| r.deletes),
        s(&|r| r.state(now_ms).as_str().to_string()),
        s(&|r| states.get(&r.id).map_or("pending", |s| s.as_str()).to_string()),
    ];
    RecordBatch::try_new(schema(), cols).map_err(|e| QueryError::Internal(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(node: u64, persisted: Option<u64>, applied: Option<u64>) -> ReplicaDeletion {
        ReplicaDeletion {
            id: 1,
            kind: "erase".into(),
            target: "x".into(),
            issued_by: "tester".into(),
            rows: Some(3),
            issued_at_ms: 1_000,
            deadline_ms: Some(2_000),
            shard: 1,
            node,
            applied_at_ms: applied,
            persisted_at_ms: persisted,
            deletes: 1,
            pending: u64::from(persisted.is_none()),
            awaiting: false,
            backup: None,
        }
    }

    #[test]
    fn states_follow_the_deadline_and_combine_to_the_worst() {
        let pending = row(1, None, Some(1_000));
        assert_eq!(pending.state(1_500), DeletionState::Pending);
        assert_eq!(pending.state(1_750), DeletionState::AtRisk, "a quarter of the time left");
        assert_eq!(pending.state(2_001), DeletionState::Late);
        assert_eq!(row(1, Some(2_000), Some(1_000)).state(9_000), DeletionState::Persisted);
        assert_eq!(row(1, Some(2_001), Some(1_000)).state(2_001), DeletionState::Late);
        assert_eq!(row(1, None, None).state(1_100), DeletionState::AtRisk, "did not answer");
        let awaiting = ReplicaDeletion { awaiting: true, ..row(0, None, None) };
        assert_eq!(awaiting.state(1_100), DeletionState::Pending, "an open intent");
        assert_eq!(awaiting.state(2_001), DeletionState::Late);
        let open = [row(1, Some(1_200), Some(1_000)), awaiting];
        assert_eq!(overall(&open, 1_300)[&1], DeletionState::Pending, "pending until every shard");
        let rows = [row(1, Some(1_200), Some(1_000)), row(2, None, Some(1_000))];
        assert_eq!(overall(&rows, 1_100)[&1], DeletionState::Pending);
        assert_eq!(overall(&rows, 1_900)[&1], DeletionState::AtRisk);
        let rows = [row(1, Some(1_200), Some(1_000)), row(2, Some(1_300), Some(1_000))];
        assert_eq!(overall(&rows, 5_000)[&1], DeletionState::Persisted);
        let b = batch(&rows, 5_000).unwrap();
        assert_eq!(b.num_rows(), 2);
        assert_eq!(b.schema(), schema());
    }
}
