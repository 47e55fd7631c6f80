//! The ledger table: one entry per money movement, keyed by its idempotency key.
//!
//! Item: `pk` = `{account}#{shard}`, `sk` = idempotency key, `currency`, `amount_minor` (signed),
//! `reference`, `posted_at_ms`. The shard of a payment's entries is decided once, when it is paid,
//! and recorded on the payment ([`crate::ledger::Posting::shard`]), so one busy account's writes
//! spread over the layout's partitions and a retry always finds the entry it may have written.
//!
//! The stored layout (ledger and index shard counts) is one item of this table: `pk` = `sk` =
//! `#layout`, `ledger_shards`, `index_shards`. No account key can equal it: an account's keys end
//! in `#{digits}`.

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::domain::{AccountId, Currency, IdempotencyKey, Reference};
use crate::ledger::{Ledger, Layout, PostOutcome, Posting};
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

fn to_layout(item: &Item, table: &str) -> Result<Layout, StoreError> {
    let r = Reader::new(item, table);
    let count = |name: &str, default: u32| -> Result<u32, StoreError> {
        r.opt_num(name)?.map_or(Ok(default), |n| u32::try_from(n).map_err(|_| r.corrupt(format!("{name} out of range"))))
    };
    Ok(Layout {
        ledger_shards: count("ledger_shards", Layout::DEFAULT_LEDGER_SHARDS)?,
        index_shards: count("index_shards", Layout::DEFAULT_INDEX_SHARDS)?,
    })
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

    async fn layout(&self) -> Result<Layout, StoreError> {
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
        out.item.map_or(Ok(Layout::default()), |i| to_layout(&i, table))
    }

    async fn placement_layout(&self) -> Result<Layout, StoreError> {
        self.layout_cache.get_or_try_init(|| self.layout()).await.copied()
    }

    async fn grow_layout(&self, want: Layout) -> Result<Layout, StoreError> {
        let table = &self.tables.ledger;
        // Optimistic: grow from the layout read, conditioned on it being still the stored one.
        for _ in 0..8 {
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
            let stored = out.item.as_ref().map(|i| to_layout(i, table)).transpose()?;
            let current = stored.unwrap_or_default();
            let grown = current.grown_to(want);
            if stored.is_some() && grown == current {
                return Ok(current);
            }
            let update = self
                .client
                .update_item()
                .table_name(table)
                .key("pk", s(LAYOUT_KEY))
                .key("sk", s(LAYOUT_KEY))
                .update_expression("SET ledger_shards = :l, index_shards = :i")
                .expression_attribute_values(":l", n(i64::from(grown.ledger_shards)))
                .expression_attribute_values(":i", n(i64::from(grown.index_shards)));
            let update = match stored {
                None => update.condition_expression("attribute_not_exists(pk)"),
                Some(old) => update
                    .condition_expression("ledger_shards = :ol AND index_shards = :oi")
                    .expression_attribute_values(":ol", n(i64::from(old.ledger_shards)))
                    .expression_attribute_values(":oi", n(i64::from(old.index_shards))),
            };
            match update.send().await {
                Ok(_) => return Ok(grown),
                // Someone else changed it first: read again.
                Err(e) => {
                    condition_failed(e, "UpdateItem", table)?;
                }
            }
        }
        self.layout().await
    }

    async fn entries(&self, account: &AccountId) -> Result<Vec<Posting>, StoreError> {
        let table = &self.tables.ledger;
        let layout = self.layout().await?;
        let mut postings = Vec::new();
        for shard in 0..layout.ledger_shards.max(1) {
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
