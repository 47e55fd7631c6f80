//! The idempotency table: claims, leases, takeover, finalize, release.
//!
//! Item: `pk` = idempotency key, `status` IN_PROGRESS | DONE, `owner`, `lease_expires_at_ms`,
//! `fingerprint`, `response_status` + `response_body` once DONE, `open` (sparse index) while
//! IN_PROGRESS (`IN_PROGRESS#{shard}`), `expires_at_s` for TTL, set once DONE.

use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::domain::{expires_at_s, Fingerprint, IdempotencyKey};
use crate::idempotency::{
    judge_existing, ClaimOutcome, ClaimRecord, ClaimState, Claims, Existing, FinalizeOutcome,
    OwnerToken, StoredResponse,
};
use crate::store::StoreError;

const IN_PROGRESS: &str = "IN_PROGRESS";
const DONE: &str = "DONE";
/// Rounds of put -> judge -> takeover before giving up with "in flight": only reached when other
/// attempts keep changing the item under us, which a retry later settles.
const CLAIM_ROUNDS: usize = 3;

fn to_record(item: &Item, table: &str) -> Result<ClaimRecord, StoreError> {
    let r = Reader::new(item, table);
    let key = IdempotencyKey::from_stored(r.str("pk")?.to_owned());
    let fingerprint = Fingerprint::from_stored(r.str("fingerprint")?.to_owned());
    let state = match r.str("status")? {
        IN_PROGRESS => ClaimState::InProgress {
            owner: OwnerToken::from_stored(r.str("owner")?.to_owned()),
            lease_expires_at_ms: r.num("lease_expires_at_ms")?,
        },
        DONE => {
            let status = u16::try_from(r.num("response_status")?)
                .map_err(|_| r.corrupt("response_status out of range"))?;
            ClaimState::Done(StoredResponse {
                status,
                body: r.str("response_body")?.to_owned(),
            })
        }
        other => return Err(r.corrupt(format!("unknown status {other}"))),
    };
    Ok(ClaimRecord {
        key,
        state,
        fingerprint,
    })
}

impl DynamoStore {
    async fn read_claim(&self, key: &IdempotencyKey) -> Result<Option<Item>, StoreError> {
        let table = &self.tables.idempotency;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(key.as_str()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        Ok(out.item)
    }

    /// The fresh claim: one PutItem that succeeds only if the key was never claimed.
    async fn put_claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<Result<(), Option<Item>>, StoreError> {
        let table = &self.tables.idempotency;
        let layout = crate::ledger::Ledger::placement_layout(self).await?;
        // `IN_PROGRESS#{shard}`: the claim index is sharded by key, so no partition key is
        // written by every claim.
        let open = format!("{IN_PROGRESS}#{}", layout.index_shard(key.as_str()));
        let now = self.clock.now_ms();
        let result = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(key.as_str()))
            .item("status", s(IN_PROGRESS))
            .item("open", s(open))
            .item("owner", s(token.as_str()))
            .item("lease_expires_at_ms", n(now + lease_ms))
            .item("fingerprint", s(fingerprint.as_str()))
            .item("created_at_ms", n(now))
            .item("updated_at_ms", n(now))
            // No TTL until DONE (finalize sets it): a claim stuck IN_PROGRESS stays until
            // reconciliation resumes it, so nothing it holds back (its movement, the ledger
            // checkpoints' watermark) can silently expire.
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Ok(())),
            Err(e) => Ok(Err(condition_failed(e, "PutItem", table)?)),
        }
    }

    /// Takes over an expired lease from `previous`. The condition repeats the facts we judged on
    /// (same owner, still IN_PROGRESS, lease expired by the clock now), so of two takers one wins.
    async fn take_over(
        &self,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.idempotency;
        let now = self.clock.now_ms();
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(key.as_str()))
            .update_expression(
                "SET #owner = :t, lease_expires_at_ms = :lease, updated_at_ms = :now, \
                 takeovers = if_not_exists(takeovers, :zero) + :one",
            )
            .condition_expression(
                "#owner = :prev AND #status = :inprog AND lease_expires_at_ms <= :now",
            )
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":t", s(token.as_str()))
            .expression_attribute_values(":prev", s(previous.as_str()))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
            .expression_attribute_values(":lease", n(now + lease_ms))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| false),
        }
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
        let token = OwnerToken::generate();
        for _ in 0..CLAIM_ROUNDS {
            let existing = match self.put_claim(key, fingerprint, &token, lease_ms).await? {
                Ok(()) => {
                    return Ok(ClaimOutcome::Claimed {
                        token,
                        took_over: false,
                    })
                }
                Err(Some(old)) => Some(old),
                // The server did not return the item that failed our condition: read it.
                Err(None) => self.read_claim(key).await?,
            };
            // Gone between our put and our read: it was released, so claim again.
            let Some(existing) = existing else { continue };
            let record = to_record(&existing, &self.tables.idempotency)?;
            match judge_existing(&record, fingerprint, self.clock.now_ms(), &token) {
                Existing::Decided(outcome) => return Ok(outcome),
                Existing::TakeOver { previous_owner } => {
                    if self
                        .take_over(key, &previous_owner, &token, lease_ms)
                        .await?
                    {
                        return Ok(ClaimOutcome::Claimed {
                            token,
                            took_over: true,
                        });
                    }
                    // Someone else took it over or finished it first: judge again.
                }
            }
        }
        Ok(ClaimOutcome::InFlight {
            retry_after_ms: 1_000,
        })
    }

    async fn finalize(
        &self,
        key: &IdempotencyKey,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        let table = &self.tables.idempotency;
        let now = self.clock.now_ms();
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(key.as_str()))
            .update_expression(
                "SET #status = :done, response_status = :rs, response_body = :rb, \
                 updated_at_ms = :now, expires_at_s = :exp REMOVE #open",
            )
            .condition_expression("#owner = :t AND #status = :inprog")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":t", s(token.as_str()))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
            .expression_attribute_values(":done", s(DONE))
            .expression_attribute_values(":rs", n(i64::from(response.status)))
            .expression_attribute_values(":rb", s(response.body.as_str()))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(
                ":exp",
                n(expires_at_s(now, self.settings.claim_retention_s)),
            )
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let old = match result {
            Ok(_) => return Ok(FinalizeOutcome::Done),
            Err(e) => match condition_failed(e, "UpdateItem", table)? {
                Some(old) => Some(old),
                None => self.read_claim(key).await?,
            },
        };
        // DONE under our own token: the SDK retried our finalize after its reply was lost.
        let ours = old.as_ref().is_some_and(|item| {
            let r = Reader::new(item, table);
            r.opt_str("owner") == Some(token.as_str()) && r.opt_str("status") == Some(DONE)
        });
        if ours {
            return Ok(FinalizeOutcome::Done);
        }
        // Not ours any more: a successor took over. Its answer stands if it finished.
        let stored = match old.map(|item| to_record(&item, table)).transpose()? {
            Some(ClaimRecord {
                state: ClaimState::Done(resp),
                ..
            }) => Some(resp),
            _ => None,
        };
        Ok(FinalizeOutcome::Superseded(stored))
    }

    async fn release(&self, key: &IdempotencyKey, token: &OwnerToken) -> Result<bool, StoreError> {
        let table = &self.tables.idempotency;
        let result = self
            .client
            .delete_item()
            .table_name(table)
            .key("pk", s(key.as_str()))
            .condition_expression("#owner = :t AND #status = :inprog")
            .expression_attribute_names("#owner", "owner")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":t", s(token.as_str()))
            .expression_attribute_values(":inprog", s(IN_PROGRESS))
            .return_values(ReturnValue::None)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(e) => condition_failed(e, "DeleteItem", table).map(|_| false),
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    async fn get_claim(&self, key: &IdempotencyKey) -> Result<Option<ClaimRecord>, StoreError> {
        let item = self.read_claim(key).await?;
        item.map(|i| to_record(&i, &self.tables.idempotency))
            .transpose()
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
            to_record,
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
