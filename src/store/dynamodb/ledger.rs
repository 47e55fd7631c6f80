//! The ledger table: one entry per money movement, keyed by its idempotency key.
//!
//! Item: `pk` = `{account}#{shard}`, `sk` = idempotency key, `currency`, `amount_minor` (signed),
//! `reference`, `posted_at_ms`. The shard is chosen by hashing the key, so one busy account's
//! writes spread over `ledger_shards` partitions; a balance sums the shards' entries.

use super::item::{condition_failed, fnv1a, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::domain::{AccountId, Currency, IdempotencyKey, Reference};
use crate::ledger::{Ledger, PostOutcome, Posting};
use crate::store::StoreError;

fn to_posting(item: &Item, table: &str) -> Result<Posting, StoreError> {
    let r = Reader::new(item, table);
    Ok(Posting {
        key: IdempotencyKey::from_stored(r.str("sk")?.to_owned()),
        account: r.parsed("account", AccountId::parse)?,
        currency: r.parsed("currency", Currency::parse)?,
        amount_minor: r.num("amount_minor")?,
        reference: r.parsed("reference", Reference::parse)?,
        posted_at_ms: r.num("posted_at_ms")?,
    })
}

impl DynamoStore {
    fn ledger_pk(&self, account: &AccountId, shard: u64) -> String {
        format!("{account}#{shard}")
    }

    fn shard_of(&self, key: &IdempotencyKey) -> u64 {
        fnv1a(key.as_str()) % u64::from(self.settings.ledger_shards.max(1))
    }
}

impl Ledger for DynamoStore {
    async fn post(&self, posting: &Posting) -> Result<PostOutcome, StoreError> {
        let table = &self.tables.ledger;
        let result = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(self.ledger_pk(&posting.account, self.shard_of(&posting.key))))
            .item("sk", s(posting.key.as_str()))
            .item("account", s(posting.account.as_str()))
            .item("currency", s(posting.currency.as_str()))
            .item("amount_minor", n(posting.amount_minor))
            .item("reference", s(posting.reference.as_str()))
            .item("posted_at_ms", n(posting.posted_at_ms))
            .condition_expression("attribute_not_exists(sk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(PostOutcome::Posted),
            // The entry exists: an earlier attempt under this key posted it.
            Err(e) => condition_failed(e, "PutItem", table).map(|_| PostOutcome::AlreadyPosted),
        }
    }

    async fn entries(&self, account: &AccountId) -> Result<Vec<Posting>, StoreError> {
        let table = &self.tables.ledger;
        let mut postings = Vec::new();
        for shard in 0..u64::from(self.settings.ledger_shards.max(1)) {
            let mut pages = self
                .client
                .query()
                .table_name(table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(self.ledger_pk(account, shard)))
                .consistent_read(true)
                .into_paginator()
                .items()
                .send();
            while let Some(item) = pages.next().await {
                let item = item.map_err(|e| unavailable("Query", table, e))?;
                postings.push(to_posting(&item, table)?);
            }
        }
        postings.sort_by(|a, b| (a.posted_at_ms, &a.key).cmp(&(b.posted_at_ms, &b.key)));
        Ok(postings)
    }
}
