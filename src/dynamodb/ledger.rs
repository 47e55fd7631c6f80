//! The ledger table: one entry per money movement, keyed by its idempotency key.
//!
//! Item: `pk` = `{account}#{shard}`, `sk` = `{movement time:013}#{idempotency key}` (the time
//! recorded on the payment when the movement was made, so a retry writes the same key; entries
//! made before times were recorded keep the bare key, which sorts after every timed one),
//! `currency`, `amount_minor` (signed), `reference`, `posted_at_ms`, and for the change events `key`
//! and `operation` (`payment`, `refund`, `refund_reversal`).
//!
//! Balances read O(shards + recent entries), not O(history): each shard has a checkpoint item
//! (`sk` = `#checkpoint`, sorting before every entry) holding the totals of every entry up to its
//! `through` sort key. A read sums the checkpoint and the entries after it; a read that finds
//! many entries after it rolls the checkpoint forward, with a conditional write on the
//! checkpoint's version, so of two rolls one wins.
//!
//! **The checkpoint rule.** A checkpoint may only cover entries that can no longer appear below
//! it. An entry's time is the movement's time, recorded on the payment in the write that made
//! the movement, *in the store's clock* ([`super::clock`]: DynamoDB's `Date`, never a process's
//! wall clock), after the movement's claim was taken (its `created_at_ms`, same clock), and the
//! entry is posted before that claim is finalized. So an entry not yet posted belongs to a claim
//! still IN_PROGRESS and is timed after that claim was created, and a roll goes through at most
//! `min(store time, oldest open claim) - margin`. A reader that has not learnt the store's time
//! reads without rolling. Entries of payments paid before movement times were recorded keep the
//! bare key, which sorts after every timed one: they are never rolled, always read.
//!
//! The shard of a payment's entries is decided once, when it is paid, and recorded on the
//! payment ([`crate::ledger::Posting::shard`]), so one busy account's writes spread over the
//! layout's partitions and a retry always finds the entry it may have written.
//!
//! The stored layout (ledger and index shard counts) is one item of this table: `pk` = `sk` =
//! `#layout`, `ledger_shards`, `index_shards`. No account key can equal it: an account's keys end
//! in `#{digits}`.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::domain::{AccountId, Currency, IdempotencyKey, Reference};
use crate::ledger::{Balance, Layout, Ledger, PostOutcome, Posting};
use crate::store::StoreError;

const LAYOUT_KEY: &str = "#layout";

const CHECKPOINT: &str = "#checkpoint";
/// Checkpoints stay this far behind the store's time and the oldest open claim. It covers the
/// store clock's own error (about a second: the `Date` header has whole seconds), the lag of the
/// claim index a roll consults (well under a second) and a movement recorded by a writer whose
/// estimate of the server's time is a little behind the roller's.
const ROLL_MARGIN_MS: i64 = 60_000;

/// The sort key of an entry: timed, or the bare key for an untimed (older) movement.
fn entry_sk(at_ms: Option<i64>, key: &IdempotencyKey) -> String {
    match at_ms {
        Some(t) => format!("{:013}#{key}", t.max(0)),
        None => key.to_string(),
    }
}

/// The time and key of an entry's sort key.
fn parse_sk(sk: &str) -> (Option<i64>, IdempotencyKey) {
    match sk.split_once('#') {
        Some((t, key)) if t.len() == 13 && t.bytes().all(|b| b.is_ascii_digit()) => {
            (t.parse().ok(), IdempotencyKey::from_stored(key.to_owned()))
        }
        _ => (None, IdempotencyKey::from_stored(sk.to_owned())),
    }
}

/// A shard's checkpoint: totals of every entry whose sort key is at most `through`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Checkpoint {
    through: Option<String>,
    totals: BTreeMap<Currency, i64>,
    entries: u64,
    version: i64,
}

fn to_checkpoint(item: &Item, table: &str) -> Result<Checkpoint, StoreError> {
    let r = Reader::new(item, table);
    let mut totals = BTreeMap::new();
    if let Some(AttributeValue::M(m)) = item.get("totals") {
        for (code, v) in m {
            let c = Currency::parse(code).map_err(|_| r.corrupt("totals currency"))?;
            let amount = v
                .as_n()
                .ok()
                .and_then(|n| n.parse::<i64>().ok())
                .ok_or_else(|| r.corrupt("totals amount"))?;
            totals.insert(c, amount);
        }
    }
    Ok(Checkpoint {
        through: r.opt_str("through").map(str::to_owned),
        totals,
        entries: u64::try_from(r.opt_num("entries")?.unwrap_or(0))
            .map_err(|_| r.corrupt("entries"))?,
        version: r.opt_num("version")?.unwrap_or(0),
    })
}

fn to_posting(item: &Item, table: &str) -> Result<Posting, StoreError> {
    let r = Reader::new(item, table);
    let pk = r.str("pk")?;
    let shard = pk
        .rsplit_once('#')
        .and_then(|(_, shard)| shard.parse().ok())
        .ok_or_else(|| r.corrupt("pk has no shard"))?;
    let (at_ms, key) = parse_sk(r.str("sk")?);
    Ok(Posting {
        key,
        account: r.parsed("account", AccountId::parse)?,
        shard,
        at_ms,
        currency: r.parsed("currency", Currency::parse)?,
        amount_minor: r.num("amount_minor")?,
        reference: r.parsed("reference", Reference::parse)?,
        posted_at_ms: r.num("posted_at_ms")?,
    })
}

fn to_layout(item: &Item, table: &str) -> Result<Layout, StoreError> {
    let r = Reader::new(item, table);
    let count = |name: &str, default: u32| -> Result<u32, StoreError> {
        r.opt_num(name)?.map_or(Ok(default), |n| {
            u32::try_from(n).map_err(|_| r.corrupt(format!("{name} out of range")))
        })
    };
    Ok(Layout {
        ledger_shards: count("ledger_shards", Layout::DEFAULT_LEDGER_SHARDS)?,
        index_shards: count("index_shards", Layout::DEFAULT_INDEX_SHARDS)?,
    })
}

impl DynamoStore {
    /// The stored layout item (consistent read), if one was ever written.
    async fn stored_layout(&self) -> Result<Option<Layout>, StoreError> {
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
        out.item.map(|i| to_layout(&i, table)).transpose()
    }
}

fn ledger_pk(account: &AccountId, shard: u32) -> String {
    format!("{account}#{shard}")
}

impl Ledger for DynamoStore {
    async fn post(&self, posting: &Posting) -> Result<PostOutcome, StoreError> {
        let table = &self.tables.ledger;
        let put = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(ledger_pk(&posting.account, posting.shard)))
            .item("sk", s(entry_sk(posting.at_ms, &posting.key)))
            .item("account", s(posting.account.as_str()))
            .item("currency", s(posting.currency.as_str()))
            .item("amount_minor", n(posting.amount_minor))
            .item("reference", s(posting.reference.as_str()))
            .item("posted_at_ms", n(posting.posted_at_ms))
            // For the change events (the table's stream, filtered by an EventBridge Pipe): the
            // key is the event's id, the operation its type. Both follow from the key, so a
            // retry writes the same item.
            .item("key", s(posting.key.as_str()))
            .condition_expression("attribute_not_exists(sk)");
        let put = match posting.key.operation() {
            Some(op) => put.item("operation", s(op.as_str())),
            None => put,
        };
        let result = put.send().await;
        match result {
            Ok(_) => Ok(PostOutcome::Posted),
            // The entry exists: an earlier attempt under this key posted it.
            Err(e) => condition_failed(e, "PutItem", table).map(|_| PostOutcome::AlreadyPosted),
        }
    }

    async fn posted(&self, posting: &Posting) -> Result<bool, StoreError> {
        let table = &self.tables.ledger;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(ledger_pk(&posting.account, posting.shard)))
            .key("sk", s(entry_sk(posting.at_ms, &posting.key)))
            .projection_expression("sk")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        Ok(out.item.is_some())
    }

    async fn layout(&self) -> Result<Layout, StoreError> {
        Ok(self.stored_layout().await?.unwrap_or_default())
    }

    async fn placement_layout(&self) -> Result<Layout, StoreError> {
        self.layout_cache
            .get_or_try_init(|| self.layout())
            .await
            .copied()
    }

    async fn grow_layout(&self, want: Layout) -> Result<Layout, StoreError> {
        let table = &self.tables.ledger;
        // Optimistic: grow from the layout read, conditioned on it being still the stored one.
        for _ in 0..8 {
            let stored = self.stored_layout().await?;
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
        let layout = self.layout().await?;
        let mut postings = Vec::new();
        for shard in 0..layout.ledger_shards.max(1) {
            postings.extend(self.entries_after(account, shard, CHECKPOINT, None).await?);
        }
        postings.sort_by(|a, b| (a.posted_at_ms, &a.key).cmp(&(b.posted_at_ms, &b.key)));
        Ok(postings)
    }

    async fn balance(&self, account: &AccountId) -> Result<Balance, StoreError> {
        let layout = self.layout().await?;
        let shards =
            (0..layout.ledger_shards.max(1)).map(|shard| self.shard_balance(account, shard));
        let mut balance = Balance {
            account: account.clone(),
            balances: BTreeMap::new(),
            entries: 0,
        };
        for (totals, entries) in futures::future::try_join_all(shards).await? {
            for (currency, amount) in totals {
                let sum = balance.balances.entry(currency).or_insert(0);
                *sum = sum.checked_add(amount).ok_or_else(|| StoreError::Corrupt {
                    table: self.tables.ledger.clone(),
                    key: account.to_string(),
                    reason: format!("the {currency} balance overflows"),
                })?;
            }
            balance.entries += entries;
        }
        Ok(balance)
    }
}

impl DynamoStore {
    /// Entries of one shard with a sort key after `after` (and at most `through`), in order.
    async fn entries_after(
        &self,
        account: &AccountId,
        shard: u32,
        after: &str,
        through: Option<&str>,
    ) -> Result<Vec<Posting>, StoreError> {
        let table = &self.tables.ledger;
        let query = self
            .client
            .query()
            .table_name(table)
            .expression_attribute_values(":pk", s(ledger_pk(account, shard)))
            .expression_attribute_values(":after", s(after))
            .consistent_read(true);
        let query = match through {
            Some(t) => query
                .key_condition_expression("pk = :pk AND sk BETWEEN :after AND :through")
                .expression_attribute_values(":through", s(t)),
            None => query.key_condition_expression("pk = :pk AND sk > :after"),
        };
        let mut pages = query.into_paginator().items().send();
        let mut postings = Vec::new();
        while let Some(item) = pages.next().await {
            let item = item.map_err(|e| unavailable("Query", table, e))?;
            // BETWEEN includes `after`: the checkpoint's own bound was counted already.
            if Reader::new(&item, table).opt_str("sk") == Some(after) {
                continue;
            }
            postings.push(to_posting(&item, table)?);
        }
        Ok(postings)
    }

    async fn checkpoint(&self, account: &AccountId, shard: u32) -> Result<Checkpoint, StoreError> {
        let table = &self.tables.ledger;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(ledger_pk(account, shard)))
            .key("sk", s(CHECKPOINT))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        out.item
            .map_or(Ok(Checkpoint::default()), |i| to_checkpoint(&i, table))
    }

    /// One shard's totals and entry count: its checkpoint plus the entries after it. Rolls the
    /// checkpoint forward when many entries follow it (best effort: a failed roll only means
    /// the next read does it).
    async fn shard_balance(
        &self,
        account: &AccountId,
        shard: u32,
    ) -> Result<(BTreeMap<Currency, i64>, u64), StoreError> {
        let cp = self.checkpoint(account, shard).await?;
        let recent = self
            .entries_after(
                account,
                shard,
                cp.through.as_deref().unwrap_or(CHECKPOINT),
                None,
            )
            .await?;
        let mut totals = cp.totals.clone();
        for p in &recent {
            let sum = totals.entry(p.currency).or_insert(0);
            *sum = sum
                .checked_add(p.amount_minor)
                .ok_or_else(|| StoreError::Corrupt {
                    table: self.tables.ledger.clone(),
                    key: ledger_pk(account, shard),
                    reason: "a balance overflows".into(),
                })?;
        }
        if recent.len() >= self.settings.roll_after_entries.max(1) {
            if let Err(e) = self.roll_checkpoint(account, shard, &cp).await {
                tracing::warn!(account = %account, shard, error = %e, "ledger checkpoint not rolled; the next read tries again");
            }
        }
        Ok((totals, cp.entries + recent.len() as u64))
    }

    /// Rolls a shard's checkpoint forward, from `cp` as read, through the instant before which
    /// no entry can still appear (see [`ledger`](self)'s rule): a margin before the store's time
    /// and before the oldest claim still in progress. The write is conditioned on the
    /// checkpoint's version, so of two concurrent rolls one wins and no entry is counted twice.
    async fn roll_checkpoint(
        &self,
        account: &AccountId,
        shard: u32,
        cp: &Checkpoint,
    ) -> Result<bool, StoreError> {
        let table = &self.tables.ledger;
        // Never this process's own clock: a reader that cannot tell the server's time (no
        // answer has carried a `Date` yet) reads without rolling.
        let Some(server_now_ms) = self.clock.server_now_ms() else {
            return Ok(false);
        };
        let mut watermark = server_now_ms - ROLL_MARGIN_MS;
        if let Some(oldest) = self.oldest_claim_created_ms().await? {
            watermark = watermark.min(oldest - ROLL_MARGIN_MS);
        }
        // `$` sorts right after `#`: every entry timed at or before the watermark is below it.
        let through = format!("{:013}$", watermark.max(0));
        let after = cp.through.clone().unwrap_or_else(|| CHECKPOINT.to_owned());
        if through <= after {
            return Ok(false);
        }
        let rolled = self
            .entries_after(account, shard, &after, Some(&through))
            .await?;
        let mut totals = cp.totals.clone();
        for p in &rolled {
            let sum = totals.entry(p.currency).or_insert(0);
            *sum = sum
                .checked_add(p.amount_minor)
                .ok_or_else(|| StoreError::Corrupt {
                    table: table.clone(),
                    key: ledger_pk(account, shard),
                    reason: "a balance overflows".into(),
                })?;
        }
        let totals_value =
            AttributeValue::M(totals.iter().map(|(c, a)| (c.to_string(), n(*a))).collect());
        let update = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(ledger_pk(account, shard)))
            .key("sk", s(CHECKPOINT))
            .update_expression("SET through = :t, totals = :m, entries = :n, version = :v1")
            .expression_attribute_values(":t", s(through))
            .expression_attribute_values(":m", totals_value)
            .expression_attribute_values(
                ":n",
                n(i64::try_from(cp.entries + rolled.len() as u64).unwrap_or(i64::MAX)),
            )
            .expression_attribute_values(":v1", n(cp.version + 1));
        let update = if cp.version == 0 {
            update.condition_expression("attribute_not_exists(version)")
        } else {
            update
                .condition_expression("version = :v0")
                .expression_attribute_values(":v0", n(cp.version))
        };
        match update.send().await {
            Ok(_) => Ok(true),
            // Another read rolled it first: its checkpoint stands.
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| false),
        }
    }
}
