//! The idempotency table, through the claim crate's [`ClaimTable`]: payhook adds only what is its
//! own: the multi-Region refusal before the first write, the `open` index's shards from the
//! stored layout, and the reads its console and reconciliation make.

use dynamo_claim::{record_of, ClaimTable, DONE, IN_PROGRESS};

use super::item::{s, unavailable, Reader};
use super::payment_item::held_claim_attribute;
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
        if let Some(claim) = self.claim_table_unsharded().get(key.as_str()).await? {
            return Ok(Some(claim));
        }
        // A credit's claim may be held on its payment (#32).
        let Some((provider, reference)) = credit_payment(key) else {
            return Ok(None);
        };
        let payment = self.read_payment(provider, &reference).await?;
        Ok(payment
            .filter(|p| p.paid_key.as_ref() == Some(key))
            .and_then(|p| p.claim)
            .map(|c| c.record(key)))
    }

    async fn done_among(
        &self,
        keys: &[(IdempotencyKey, Option<crate::domain::Reference>)],
    ) -> Result<std::collections::HashSet<IdempotencyKey>, StoreError> {
        let table = &self.tables.idempotency;
        let mut unique: Vec<&(IdempotencyKey, Option<crate::domain::Reference>)> =
            keys.iter().collect();
        unique.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        unique.dedup_by(|a, b| a.0 == b.0);
        let batch = unique
            .iter()
            .map(|(k, _)| std::collections::HashMap::from([("pk".to_owned(), s(k.as_str()))]))
            .collect();
        let read = super::BatchRead {
            projection: "pk, #s",
            names: &[("#s", "status")],
            consistent: true,
            rounds: 8,
        };
        let (items, unread) = self.batch_get(table, batch, read).await?;
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
        // Credits, refunds, reversals and dispute movements not done in the claims table may be
        // done on their payment (#32, #44).
        let held: Vec<Held> = unique
            .into_iter()
            .filter(|(k, _)| !done.contains(k))
            .filter_map(|(k, reference)| held_on(k, reference.as_ref()))
            .collect();
        done.extend(self.held_done(&held).await?);
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

/// The payment a credit's key is about (`{provider}:payment:{reference}`), if it is one.
fn credit_payment(
    key: &IdempotencyKey,
) -> Option<(crate::domain::ProviderId, crate::domain::Reference)> {
    if key.operation() != Some(crate::domain::Operation::Payment) {
        return None;
    }
    let provider = key.provider()?;
    let reference = key.as_str().splitn(3, ':').nth(2)?;
    Some((provider, crate::domain::Reference::parse(reference).ok()?))
}

/// A movement whose claim may be held on its item (`pk`): a credit (its payment named by its
/// key), a refund, reversal or dispute movement (its payment the one its delivery was about),
/// or a payout's settlement word (its payout named by its key).
struct Held {
    key: IdempotencyKey,
    pk: String,
    credit: bool,
}

fn held_on(key: &IdempotencyKey, payment: Option<&crate::domain::Reference>) -> Option<Held> {
    if let Some((provider, reference)) = credit_payment(key) {
        return Some(Held {
            key: key.clone(),
            pk: format!("{provider}#{reference}"),
            credit: true,
        });
    }
    use crate::domain::Operation;
    // A payout's settlement word: its payout is the one its key names.
    let words = [
        Operation::PayoutFailed,
        Operation::PayoutPaid,
        Operation::PayoutReversed,
    ];
    if key.operation().is_some_and(|op| words.contains(&op)) {
        let payout = crate::payouts::PayoutId::parse(key.as_str().splitn(3, ':').nth(2)?)?;
        return Some(Held {
            key: key.clone(),
            pk: super::payouts::payout_pk(&payout),
            credit: false,
        });
    }
    let held_here = [
        Operation::Refund,
        Operation::RefundReversal,
        Operation::DisputeWithdrawal,
        Operation::DisputeReinstatement,
        Operation::DisputeDeclined,
    ];
    if !key.operation().is_some_and(|op| held_here.contains(&op)) {
        return None;
    }
    Some(Held {
        key: key.clone(),
        pk: format!("{}#{}", key.provider()?, payment?),
        credit: false,
    })
}

impl DynamoStore {
    /// Of `held`, those whose claim held on their payment is DONE: one batched read of the
    /// payments, projecting the credit's claim and each refund's claim state.
    async fn held_done(&self, held: &[Held]) -> Result<Vec<IdempotencyKey>, StoreError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let table = &self.tables.payments;
        let mut pks: Vec<String> = held.iter().map(|h| h.pk.clone()).collect();
        pks.sort();
        pks.dedup();
        let batch = pks
            .into_iter()
            .map(|pk| std::collections::HashMap::from([("pk".to_owned(), s(pk))]))
            .collect();
        let refunds: Vec<&Held> = held.iter().filter(|h| !h.credit).collect();
        let names: Vec<(String, String)> = refunds
            .iter()
            .enumerate()
            .map(|(i, h)| (format!("#r{i}"), held_claim_attribute(&h.key)))
            .collect();
        let mut projection = "pk, paid_key, claim_state".to_owned();
        for (placeholder, _) in &names {
            projection.push_str(&format!(", {placeholder}.st"));
        }
        let names: Vec<(&str, &str)> = names
            .iter()
            .map(|(p, n)| (p.as_str(), n.as_str()))
            .collect();
        let read = super::BatchRead {
            projection: &projection,
            names: &names,
            consistent: true,
            rounds: 8,
        };
        let (items, unread) = self.batch_get(table, batch, read).await?;
        if !unread.is_empty() {
            return Err(StoreError::Contended {
                table: table.clone(),
                key: "BatchGetItem unprocessed keys".into(),
            });
        }
        let mut done = Vec::new();
        for item in &items {
            let r = Reader::new(item, table);
            let pk = r.str("pk")?;
            for h in held.iter().filter(|h| h.pk == pk) {
                let finished = if h.credit {
                    r.opt_str("claim_state") == Some(DONE)
                        && r.opt_str("paid_key") == Some(h.key.as_str())
                } else {
                    item.get(&held_claim_attribute(&h.key))
                        .and_then(|v| v.as_m().ok())
                        .and_then(|m| m.get("st"))
                        .and_then(|v| v.as_s().ok())
                        .is_some_and(|st| st == DONE)
                };
                if finished {
                    done.push(h.key.clone());
                }
            }
        }
        Ok(done)
    }

    /// When the oldest claim still IN_PROGRESS was taken (from the sparse `open` index, every
    /// shard), if any. Every movement not yet in the ledger belongs to such a claim and is timed
    /// after it was taken, so a ledger checkpoint may roll up everything before this instant.
    pub(crate) async fn oldest_claim_created_ms(&self) -> Result<Option<i64>, StoreError> {
        let claims = self.tables.idempotency.clone();
        let credits = self.tables.payments.clone();
        // A credit whose claim is held on its payment (#32) and not yet DONE is listed under
        // `POSTING`; its payment's creation is before its movement's time, so it bounds too.
        let (claims, credits) = futures::future::try_join(
            self.oldest_open_created_ms(claims, IN_PROGRESS),
            self.oldest_open_created_ms(credits, super::payments::POSTING),
        )
        .await?;
        Ok(claims.into_iter().chain(credits).min())
    }

    /// The oldest `created_at_ms` among `table`'s items listed under `prefix` in its sparse
    /// `open` index (every shard, and the unsharded key).
    async fn oldest_open_created_ms(
        &self,
        table: String,
        prefix: &str,
    ) -> Result<Option<i64>, StoreError> {
        let layout = crate::ledger::Ledger::layout(self).await?;
        let keys = std::iter::once(prefix.to_owned())
            .chain((0..layout.index_shards).map(|n| format!("{prefix}#{n}")));
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
                    // Items listed before `created_at_ms` was projected count as made at 0.
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
