//! The idempotency table, through the claim crate's [`ClaimTable`]: payhook adds only what is its
//! own: the multi-Region refusal before the first write, the `open` index's shards from the
//! stored layout, and the reads its console and reconciliation make.

use dynamo_claim::{record_of, ClaimTable, DONE, IN_PROGRESS};

use super::item::{s, unavailable, Reader};
use super::DynamoStore;
use crate::domain::{Fingerprint, IdempotencyKey};
use crate::idempotency::{
    ClaimOutcome, ClaimRecord, Claims, FinalizeOutcome, OwnerToken, StoredResponse,
};
use crate::store::StoreError;

impl DynamoStore {
    /// The claim table, its `open` index spread over the stored layout's index shards (read
    /// once per process; a layout only grows, and a claim's shard is read back from its item).
    async fn claim_table(&self) -> Result<ClaimTable, StoreError> {
        let layout = crate::ledger::Ledger::placement_layout(self).await?;
        Ok(self
            .claim_table_unsharded()
            .open_shards(layout.index_shards))
    }

    fn claim_table_unsharded(&self) -> ClaimTable {
        ClaimTable::with_clock(
            self.client.clone(),
            self.tables.idempotency.clone(),
            self.clock.clone(),
        )
        .retention_s(self.settings.claim_retention_s)
    }
}

impl Claims for DynamoStore {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        // The first write of every money movement: never on tables that cannot referee it.
        self.replication_allows().await?;
        let table = self.claim_table().await?;
        table.claim(key.as_str(), fingerprint, lease_ms).await
    }

    async fn finalize(
        &self,
        key: &IdempotencyKey,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        let table = self.claim_table_unsharded();
        table.finalize(key.as_str(), token, response).await
    }

    async fn release(&self, key: &IdempotencyKey, token: &OwnerToken) -> Result<bool, StoreError> {
        self.claim_table_unsharded()
            .release(key.as_str(), token)
            .await
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn get_claim(&self, key: &IdempotencyKey) -> Result<Option<ClaimRecord>, StoreError> {
        self.claim_table_unsharded().get(key.as_str()).await
    }

    async fn done_among(
        &self,
        keys: &[IdempotencyKey],
    ) -> Result<std::collections::HashSet<IdempotencyKey>, StoreError> {
        let table = &self.tables.idempotency;
        let mut unique: Vec<&IdempotencyKey> = keys.iter().collect();
        unique.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        unique.dedup();
        let keys = unique
            .iter()
            .map(|k| std::collections::HashMap::from([("pk".to_owned(), s(k.as_str()))]))
            .collect();
        let read = super::BatchRead {
            projection: "pk, #s",
            names: &[("#s", "status")],
            consistent: true,
            rounds: 8,
        };
        let (items, unread) = self.batch_get(table, keys, read).await?;
        // A key not read is not known to be done: the page would list it as waiting when it
        // may not be, so the read fails instead (retryable).
        if !unread.is_empty() {
            return Err(StoreError::Contended {
                table: table.clone(),
                key: "BatchGetItem unprocessed keys".into(),
            });
        }
        let mut done = std::collections::HashSet::new();
        for item in &items {
            let r = Reader::new(item, table);
            if r.str("status")? == DONE {
                done.insert(IdempotencyKey::from_stored(r.str("pk")?.to_owned()));
            }
        }
        Ok(done)
    }

    /// IN_PROGRESS claims whose lease expired before `now_ms`, oldest first, from the sparse
    /// `open` index (eventually consistent: reconciliation re-judges each under a condition).
    async fn stuck_claims(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        let table = self.tables.idempotency.clone();
        self.read_open(
            &table,
            "lease_expires_at_ms",
            IN_PROGRESS,
            now_ms,
            limit,
            record_of,
        )
        .await
    }
}

impl DynamoStore {
    /// When the oldest claim still IN_PROGRESS was taken (from the sparse `open` index, every
    /// shard), if any. Every movement not yet in the ledger belongs to such a claim and is timed
    /// after it was taken, so a ledger checkpoint may roll up everything before this instant.
    pub(crate) async fn oldest_claim_created_ms(&self) -> Result<Option<i64>, StoreError> {
        let table = self.tables.idempotency.clone();
        let layout = crate::ledger::Ledger::layout(self).await?;
        let keys = std::iter::once(IN_PROGRESS.to_owned())
            .chain((0..layout.index_shards).map(|n| format!("{IN_PROGRESS}#{n}")));
        let reads = keys.map(|key| {
            let table = table.clone();
            async move {
                let mut pages = self
                    .client
                    .query()
                    .table_name(&table)
                    .index_name("open")
                    .key_condition_expression("#open = :k")
                    .expression_attribute_names("#open", "open")
                    .expression_attribute_values(":k", s(key))
                    .into_paginator()
                    .items()
                    .send();
                let mut oldest: Option<i64> = None;
                while let Some(item) = pages.next().await {
                    let item = item.map_err(|e| unavailable("Query", &table, e))?;
                    // Claims taken before `created_at_ms` was projected count as taken at 0.
                    let at = Reader::new(&item, &table)
                        .opt_num("created_at_ms")?
                        .unwrap_or(0);
                    oldest = Some(oldest.map_or(at, |o| o.min(at)));
                }
                Ok::<_, StoreError>(oldest)
            }
        });
        let per_shard = futures::future::try_join_all(reads).await?;
        Ok(per_shard.into_iter().flatten().min())
    }
}
