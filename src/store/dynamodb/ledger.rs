//! The ledger table: one entry per money movement, keyed by its idempotency key.
//!
//! Item: `pk` = `{account}#{shard}`, `sk` = idempotency key, `currency`, `amount_minor` (signed),
//! `reference`, `posted_at_ms`. The shard of a payment's entries is decided once, when it is paid,
//! and recorded on the payment ([`crate::ledger::Posting::shard`]), so one busy account's writes
//! spread over the layout's partitions and a retry always finds the entry it may have written.
//!
//! The layout (how many shards readers must sum) is one item of this table: `pk` = `sk` =
//! `#layout`, `shards`. No account key can equal it: an account's keys end in `#{digits}`.

use aws_sdk_dynamodb::types::ReturnValue;

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::domain::{AccountId, Currency, IdempotencyKey, Reference};
use crate::ledger::{Ledger, LedgerLayout, PostOutcome, Posting};
use crate::store::StoreError;

const LAYOUT_KEY: &str = "#layout";

fn to_posting(item: &Item, table: &str) -> Result<Posting, StoreError> {
    let r = Reader::new(item, table);
    let pk = r.str("pk")?;
    let shard = pk
        .rsplit_once('#')
        .and_then(|(_, shard)| shard.parse().ok())
        .ok_or_else(|| r.corrupt("pk has no shard"))?;
    Ok(Posting {
        key: IdempotencyKey::from_stored(r.str("sk")?.to_owned()),
        account: r.parsed("account", AccountId::parse)?,
        shard,
        currency: r.parsed("currency", Currency::parse)?,
        amount_minor: r.num("amount_minor")?,
        reference: r.parsed("reference", Reference::parse)?,
        posted_at_ms: r.num("posted_at_ms")?,
    })
}

fn to_layout(item: &Item, table: &str) -> Result<LedgerLayout, StoreError> {
    let r = Reader::new(item, table);
    let shards = u32::try_from(r.num("shards")?).map_err(|_| r.corrupt("shards out of range"))?;
    Ok(LedgerLayout { shards })
}

fn ledger_pk(account: &AccountId, shard: u32) -> String {
    format!("{account}#{shard}")
}

impl Ledger for DynamoStore {
    async fn post(&self, posting: &Posting) -> Result<PostOutcome, StoreError> {
        let table = &self.tables.ledger;
        let result = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(ledger_pk(&posting.account, posting.shard)))
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

    async fn layout(&self) -> Result<LedgerLayout, StoreError> {
        let table = &self.tables.ledger;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(LAYOUT_KEY))
            .key("sk", s(LAYOUT_KEY))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        out.item.map_or(Ok(LedgerLayout::default()), |i| to_layout(&i, table))
    }

    async fn grow_layout(&self, shards: u32) -> Result<LedgerLayout, StoreError> {
        let table = &self.tables.ledger;
        // Below the default is a shrink of a table that never stored a layout.
        let shards = shards.clamp(LedgerLayout::DEFAULT_SHARDS, LedgerLayout::MAX_SHARDS);
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(LAYOUT_KEY))
            .key("sk", s(LAYOUT_KEY))
            .update_expression("SET shards = :n")
            // Only ever grow: a reader of the old count would miss the entries of the new shards.
            .condition_expression("attribute_not_exists(shards) OR shards < :n")
            .expression_attribute_values(":n", n(i64::from(shards)))
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match result {
            Ok(out) => out.attributes.map_or(Ok(LedgerLayout { shards }), |i| to_layout(&i, table)),
            // Already at or above `shards`: the stored layout stands.
            Err(e) => {
                condition_failed(e, "UpdateItem", table)?;
                self.layout().await
            }
        }
    }

    async fn entries(&self, account: &AccountId) -> Result<Vec<Posting>, StoreError> {
        let table = &self.tables.ledger;
        let layout = self.layout().await?;
        let mut postings = Vec::new();
        for shard in 0..layout.shards.max(1) {
            let mut pages = self
                .client
                .query()
                .table_name(table)
                .key_condition_expression("pk = :pk")
                .expression_attribute_values(":pk", s(ledger_pk(account, shard)))
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
