//! The only module that speaks the DynamoDB SDK. Each submodule owns one table: its item <-> type
//! mapping sits beside the conditional writes that use it.
//!
//! Every write on the money path is a single conditional statement. When a condition fails we
//! ask for the old item with `ReturnValuesOnConditionCheckFailure=ALL_OLD` (free on DynamoDB) and
//! fall back to one consistent `GetItem` on servers that ignore it (dynalite).

mod claims;
mod disputes;
mod events;
mod held_claims;
pub mod lean;
mod ledger;
pub mod observe;
mod payment_item;
mod payments;
mod payout_words;
mod payouts;
pub mod regions;
pub mod schema;
mod scopes;
mod tables;

use std::sync::Arc;

use aws_sdk_dynamodb::Client;

/// The attribute plumbing every table module uses: the claim crate's, so claims and the other
/// tables speak DynamoDB one way.
pub(crate) use dynamo_claim::item;
pub use dynamo_claim::StoreClock;
pub use schema::TableNames;

/// Knobs the store needs besides table names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSettings {
    /// How long DONE claims are kept (TTL). Must outlive every provider's retry horizon.
    pub claim_retention_s: i64,
    /// How long delivery-log entries are kept (TTL).
    pub log_retention_s: i64,
    /// A balance read that finds this many entries after a shard's checkpoint rolls it forward.
    /// Only a cost: what a roll may cover never depends on it (tests set it low so that reads
    /// roll all the time).
    pub roll_after_entries: usize,
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            claim_retention_s: 30 * 86_400,
            log_retention_s: 90 * 86_400,
            roll_after_entries: 256,
        }
    }
}

/// DynamoDB-backed implementation of every store capability. Cheap to clone: the SDK client is
/// an `Arc` inside, built once per process.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    tables: Arc<TableNames>,
    settings: StoreSettings,
    /// The stored layout, read once per process for placing new items.
    layout_cache: Arc<tokio::sync::OnceCell<crate::ledger::Layout>>,
    /// DynamoDB's time, learned from its answers: every timestamp the store writes or judges.
    clock: StoreClock,
    /// The multi-Region replication check every claim waits for, when gated
    /// ([`regions`]): run once, off the path to ready.
    gate: Option<Arc<regions::ReplicationGate>>,
}

impl DynamoStore {
    pub fn new(client: Client, tables: TableNames, settings: StoreSettings) -> Self {
        Self::with_clock(client, tables, settings, StoreClock::default())
    }

    /// A store whose timestamps come from `clock`, fed by the `Date` header of every answer
    /// `client` gets (the client is rebuilt once with that interceptor; its HTTP connections
    /// are shared). Tests pass a clock with a skewed local reading to play a wrong machine.
    pub fn with_clock(
        client: Client,
        tables: TableNames,
        settings: StoreSettings,
        clock: StoreClock,
    ) -> Self {
        DynamoStore {
            client: clock.attach(&client),
            tables: Arc::new(tables),
            settings,
            layout_cache: Arc::default(),
            clock,
            gate: None,
        }
    }

    pub fn clock(&self) -> &StoreClock {
        &self.clock
    }

    pub fn tables(&self) -> &TableNames {
        &self.tables
    }

    pub fn settings(&self) -> StoreSettings {
        self.settings
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

impl DynamoStore {
    /// Reads the sparse `open` index of `table`: items whose `open` is `state` (in any shard of
    /// the stored layout, and the unsharded key items written before it had shards) and whose
    /// range key is below `below`, mapped by `map`; the `limit` lowest by range key.
    pub(crate) async fn read_open<T>(
        &self,
        table: &str,
        range_key: &str,
        state: &str,
        below: i64,
        limit: usize,
        map: impl Fn(&item::Item, &str) -> Result<T, crate::store::StoreError>,
    ) -> Result<Vec<T>, crate::store::StoreError> {
        let layout = crate::ledger::Ledger::layout(self).await?;
        let keys = std::iter::once(state.to_owned())
            .chain((0..layout.index_shards).map(|n| format!("{state}#{n}")));
        let mut found: Vec<(i64, T)> = Vec::new();
        for key in keys {
            let mut pages = self
                .client
                .query()
                .table_name(table)
                .index_name("open")
                .key_condition_expression(format!("#open = :state AND {range_key} < :below"))
                .expression_attribute_names("#open", "open")
                .expression_attribute_values(":state", item::s(key))
                .expression_attribute_values(":below", item::n(below))
                .into_paginator()
                .items()
                .send();
            let mut taken = 0;
            // Each shard is sorted by the range key: its first `limit` are all it can add.
            while let Some(got) = pages.next().await {
                let got = got.map_err(|e| item::unavailable("Query", table, e))?;
                let at = item::Reader::new(&got, table).num(range_key)?;
                found.push((at, map(&got, table)?));
                taken += 1;
                if taken >= limit {
                    break;
                }
            }
        }
        found.sort_by_key(|(at, _)| *at);
        Ok(found.into_iter().take(limit).map(|(_, t)| t).collect())
    }

    /// Reads `keys` of `table` with `BatchGetItem`, 100 a request, keeping `projection` (its
    /// `#name` placeholders in `names`) of each item. Keys DynamoDB leaves unprocessed
    /// (throttling) are asked again up to `rounds` times, with a growing pause; the items read
    /// and the keys still unread are returned, and the caller says what unread means.
    pub(crate) async fn batch_get(
        &self,
        table: &str,
        keys: Vec<item::Item>,
        read: BatchRead<'_>,
    ) -> Result<(Vec<item::Item>, Vec<item::Item>), crate::store::StoreError> {
        use aws_sdk_dynamodb::types::KeysAndAttributes;
        let mut items = Vec::new();
        let mut unread = Vec::new();
        let mut keys = keys;
        while !keys.is_empty() {
            let rest = keys.split_off(keys.len().min(100));
            let mut asked = std::mem::replace(&mut keys, rest);
            for round in 0..read.rounds.max(1) {
                if asked.is_empty() {
                    break;
                }
                if round > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(20 << round)).await;
                }
                let mut request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut asked)))
                    .set_projection_expression(
                        (!read.projection.is_empty()).then(|| read.projection.to_owned()),
                    )
                    .consistent_read(read.consistent);
                for (placeholder, name) in read.names {
                    request = request.expression_attribute_names(*placeholder, *name);
                }
                let request = request
                    .build()
                    .map_err(|e| item::unavailable("BatchGetItem", table, e))?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(table, request)
                    .send()
                    .await
                    .map_err(|e| item::unavailable("BatchGetItem", table, e))?;
                items.extend(
                    out.responses
                        .and_then(|mut r| r.remove(table))
                        .unwrap_or_default(),
                );
                asked = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
            unread.extend(asked);
        }
        Ok((items, unread))
    }
}

/// How [`DynamoStore::batch_get`] reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchRead<'a> {
    /// Empty: the whole item.
    pub projection: &'a str,
    pub names: &'a [(&'a str, &'a str)],
    pub consistent: bool,
    /// Requests per 100 keys at most (the first and the re-asks of unprocessed keys).
    pub rounds: u64,
}
