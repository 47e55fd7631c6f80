//! The tables' replication, checked before a process serves money: payhook's exactly-once rests
//! on DynamoDB evaluating each conditional write against the one authoritative copy of the item.
//!
//! - A table with no replicas: that holds.
//! - A global table with multi-Region **eventual** consistency (MREC, the default): a write is
//!   checked against the local Region's replica only and concurrent writes in two Regions are
//!   resolved last writer wins, so two Regions could each win the same claim and both move the
//!   money. payhook refuses to start on such a table and says why.
//! - A global table with multi-Region **strong** consistency (MRSC): conditions are evaluated
//!   against the latest write across Regions, so the protocol holds; a write that conflicts with
//!   one in progress elsewhere fails with a retryable error, answered 5xx like any unavailable
//!   store. MRSC has no TTL: DONE claims and log items then never expire (docs/deploy.md).
//!
//! Read by `DescribeTable` (the table's `Replicas` and `MultiRegionConsistency`), **off the
//! path to ready**: a process starts the check at start-up ([`DynamoStore::start_replication_check`])
//! and serves at once; the first claim (the first write of every money movement: a credit, a
//! refund, a payout, a settlement word) waits for the verdict if it is not in yet, and every
//! claim after it reads it from memory. So no cold start pays four `DescribeTable` round trips,
//! a DynamoDB unreachable at start cannot stretch init, and still no money moves on a table
//! with eventually consistent replicas: its claims fail (503, retryable) with the reason, and
//! `payhook serve` exits with it. `payhook doctor` runs the same check on demand.

use aws_sdk_dynamodb::types::{MultiRegionConsistency, TableDescription};

use super::item::unavailable;
use super::DynamoStore;
use crate::store::StoreError;

/// What a table's replication allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// One Region: every conditional write is decided against one copy.
    Single,
    /// Replicas with multi-Region strong consistency.
    Strong { regions: Vec<String> },
}

/// A table payhook must not move money on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "table {table} is a global table with multi-Region eventual consistency (replicas in {regions:?}): \
     a conditional write there is checked against this Region's copy only and conflicts resolve \
     last writer wins, so two Regions could each win the same claim. Run payhook on a table with \
     no replicas (active/passive, docs/deploy.md) or with multi-Region strong consistency"
)]
pub struct EventualReplicas {
    pub table: String,
    pub regions: Vec<String>,
}

/// The verdict on one table's description.
pub fn replication(table: &str, desc: &TableDescription) -> Result<Replication, EventualReplicas> {
    let regions: Vec<String> = desc
        .replicas()
        .iter()
        .filter_map(|r| r.region_name().map(str::to_owned))
        .collect();
    if regions.is_empty() {
        return Ok(Replication::Single);
    }
    match desc.multi_region_consistency() {
        Some(MultiRegionConsistency::Strong) => Ok(Replication::Strong { regions }),
        // Eventual, absent (replicas created before the setting existed are eventual) or a
        // value this build does not know: not proven strong.
        _ => Err(EventualReplicas {
            table: table.to_owned(),
            regions,
        }),
    }
}

/// The check, run once per process and awaited by the first claim. `None`: money may move
/// (one Region, strong replicas, or a check that could not run: a store that does not answer
/// DescribeTable will not answer the claim either).
#[derive(Debug, Default)]
pub struct ReplicationGate {
    verdict: tokio::sync::OnceCell<Option<EventualReplicas>>,
}

/// Why a process must not start, or could not tell.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationCheck {
    #[error(transparent)]
    Eventual(#[from] EventualReplicas),
    #[error("could not describe the tables")]
    Store(#[from] StoreError),
}

impl DynamoStore {
    /// The same store, its claims gated by the replication check (what every process that
    /// moves money uses; tests and tools that build a store on tables they made need no gate).
    pub fn with_replication_gate(mut self) -> Self {
        self.gate = Some(std::sync::Arc::new(ReplicationGate::default()));
        self
    }

    /// Starts the replication check in the background, if this store is gated: the process
    /// is ready before it answers.
    pub fn start_replication_check(&self) {
        if self.gate.is_some() {
            let store = self.clone();
            tokio::spawn(async move {
                let _ = store.replication_verdict().await;
            });
        }
    }

    /// The verdict, run once (whoever asks first runs it; the others wait for it).
    pub async fn replication_verdict(&self) -> Option<EventualReplicas> {
        let gate = self.gate.as_ref()?;
        gate.verdict
            .get_or_init(|| async {
                match self.check_replication().await {
                    Ok(_) => None,
                    Err(ReplicationCheck::Eventual(e)) => {
                        tracing::error!(error = %e, "refusing to move money on these tables");
                        Some(e)
                    }
                    Err(ReplicationCheck::Store(e)) => {
                        tracing::warn!(error = %e, "could not check the tables' replication; not refusing");
                        None
                    }
                }
            })
            .await
            .clone()
    }

    /// Before a claim: `Err` when the tables must not move money.
    pub(crate) async fn replication_allows(&self) -> Result<(), StoreError> {
        match self.replication_verdict().await {
            None => Ok(()),
            Some(e) => Err(StoreError::Unavailable {
                operation: "a claim (refused: eventually consistent replicas)",
                table: e.table.clone(),
                source: Box::new(e),
            }),
        }
    }

    /// Describes the four tables and refuses any with eventually consistent replicas.
    pub async fn check_replication(&self) -> Result<Vec<Replication>, ReplicationCheck> {
        let t = &self.tables;
        let names = [&t.idempotency, &t.payments, &t.ledger, &t.events];
        let reads = names.iter().map(|name| async move {
            let out = self
                .client
                .describe_table()
                .table_name(name.as_str())
                .send()
                .await
                .map_err(|e| unavailable("DescribeTable", name, e))?;
            Ok::<_, StoreError>(out.table.map(|desc| replication(name, &desc)))
        });
        let mut verdicts = Vec::new();
        for verdict in futures::future::try_join_all(reads)
            .await?
            .into_iter()
            .flatten()
        {
            verdicts.push(verdict?);
        }
        Ok(verdicts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::ReplicaDescription;

    fn described(
        regions: &[&str],
        consistency: Option<MultiRegionConsistency>,
    ) -> TableDescription {
        let mut b = TableDescription::builder().table_name("t");
        for r in regions {
            b = b.replicas(ReplicaDescription::builder().region_name(*r).build());
        }
        if let Some(c) = consistency {
            b = b.multi_region_consistency(c);
        }
        b.build()
    }

    #[test]
    fn eventual_replicas_are_refused_strong_ones_and_single_tables_allowed() {
        assert_eq!(
            replication("t", &described(&[], None)),
            Ok(Replication::Single)
        );
        let two = ["eu-west-1", "us-east-1"];
        for eventual in [None, Some(MultiRegionConsistency::Eventual)] {
            let refused = replication("t", &described(&two, eventual));
            assert!(
                matches!(&refused, Err(e) if e.regions.len() == 2 && e.to_string().contains("last writer wins")),
                "{refused:?}"
            );
        }
        let three = ["us-east-1", "us-east-2", "us-west-2"];
        assert_eq!(
            replication(
                "t",
                &described(&three, Some(MultiRegionConsistency::Strong))
            ),
            Ok(Replication::Strong {
                regions: three.iter().map(|r| (*r).to_owned()).collect()
            })
        );
    }
}
