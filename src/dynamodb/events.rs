//! The delivery log table, append-only.
//!
//! Item: `pk` = `ref#{provider}#{reference}` (or `evt#{provider}#{event id}` for events without a
//! reference), `sk` = delivery id (`{epoch ms:013}-{uuid}`, so it sorts by arrival), the body as
//! `raw_body` (text) or, when deflate makes it smaller, `body_z` (binary). Indexes, all sorted by
//! `sk` and projecting the listing fields (never the body): `by_event` (`{provider}#{event id}`),
//! `by_time` (`{UTC day}#{shard}`) and the sparse `by_outcome` (`{outcome}#{day}#{shard}`, only
//! outcomes someone must act on). The shard comes from the delivery id, over the stored layout's
//! index shards, so no index key takes every delivery of a day; readers query every shard of a
//! day (and the unsharded key of deliveries logged before shards) and merge newest first.

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{condition_failed, n, s, unavailable, Item, Reader};
use super::DynamoStore;
use crate::domain::{
    expires_at_s, now_ms, AccountId, Currency, IdempotencyKey, Money, ProviderId, Reference,
};
use crate::eventlog::{
    utc_day, Delivery, DeliveryId, Details, EventLog, LogFilter, LogPage, MinuteCounts, Outcome,
    RollupKind, Rollups,
};
use crate::store::StoreError;

/// Greater than any delivery id (ids start with digits).
const TOP: &str = "~";
const DAY_MS: i64 = 86_400_000;

fn partition_of(d: &Delivery) -> String {
    match &d.reference {
        Some(r) => format!("ref#{}#{r}", d.provider),
        None => format!("evt#{}#{}", d.provider, d.event_id),
    }
}

/// Bodies at least this long are deflated when that saves a tenth: webhook JSON shrinks to about
/// a third, and every KB saved is a write unit saved.
const COMPRESS_FROM_BYTES: usize = 512;

/// A redelivery whose deflated body is at least this long points at an earlier delivery of
/// the same event holding the same bytes, instead of storing them again: below it, the two
/// small reads that find the earlier body cost about what they save.
const SHARE_FROM_BYTES: usize = 2_048;

/// The body as stored: deflated bytes when that is worth it, else the text.
enum StoredBody {
    Deflated(Vec<u8>),
    Text(String),
}

impl StoredBody {
    fn of(body: &str) -> Self {
        if body.len() >= COMPRESS_FROM_BYTES {
            let z = miniz_oxide::deflate::compress_to_vec(body.as_bytes(), 6);
            if z.len() * 10 < body.len() * 9 {
                return StoredBody::Deflated(z);
            }
        }
        StoredBody::Text(body.to_owned())
    }

    fn attribute(self) -> (&'static str, AttributeValue) {
        match self {
            StoredBody::Deflated(z) => (
                "body_z",
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(z)),
            ),
            StoredBody::Text(t) => ("raw_body", s(t)),
        }
    }
}

/// The stored body, if the item carries one.
fn body_of(item: &Item, r: &Reader<'_>) -> Result<Option<String>, StoreError> {
    if let Some(text) = r.opt_str("raw_body") {
        return Ok(Some(text.to_owned()));
    }
    let Some(AttributeValue::B(z)) = item.get("body_z") else {
        return Ok(None);
    };
    let bytes = miniz_oxide::inflate::decompress_to_vec_with_limit(
        z.as_ref(),
        crate::domain::MAX_BODY_BYTES,
    )
    .map_err(|_| r.corrupt("body_z does not inflate"))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| r.corrupt("body_z is not UTF-8"))
}

fn to_delivery(item: &Item, table: &str) -> Result<Delivery, StoreError> {
    let r = Reader::new(item, table);
    Ok(Delivery {
        id: DeliveryId::from_stored(r.str("sk")?.to_owned()),
        provider: r.parsed("provider", |t| ProviderId::parse(t).ok_or(()))?,
        event_id: r.str("event_id")?.to_owned(),
        event_type: r.str("event_type")?.to_owned(),
        key: r
            .opt_str("key")
            .map(|k| IdempotencyKey::from_stored(k.to_owned())),
        reference: r
            .opt_str("reference")
            .map(Reference::parse)
            .transpose()
            .map_err(|_| r.corrupt("reference"))?,
        outcome: r.parsed("outcome", |t| Outcome::parse(t).ok_or(()))?,
        http_status: u16::try_from(r.num("http_status")?).map_err(|_| r.corrupt("http_status"))?,
        received_at_ms: r.num("received_at_ms")?,
        raw_body: body_of(item, &r)?,
        replay_of: r
            .opt_str("replay_of")
            .map(|t| DeliveryId::from_stored(t.to_owned())),
        started_by: r.opt_str("started_by").map(str::to_owned),
        redriven: r
            .opt_str("redriven")
            .map(|o| Outcome::parse(o).ok_or_else(|| r.corrupt("redriven")))
            .transpose()?,
        details: details_of(&r)?,
    })
}

/// The details an item (or an index row projecting them) carries; empty when it has none.
fn details_of(r: &Reader<'_>) -> Result<Details, StoreError> {
    let money = match (r.opt_str("currency"), r.opt_num("amount_minor")?) {
        (Some(c), Some(amount)) => {
            let currency = Currency::parse(c).map_err(|_| r.corrupt("currency"))?;
            Some(Money::new(amount, currency).map_err(|_| r.corrupt("amount_minor"))?)
        }
        _ => None,
    };
    Ok(Details {
        money,
        account: r
            .opt_str("account")
            .map(AccountId::parse)
            .transpose()
            .map_err(|_| r.corrupt("account"))?,
        order_id: r.opt_str("order_id").map(str::to_owned),
        answer: r.opt_str("answer").map(str::to_owned),
        headers: r
            .opt_str("headers")
            .map(|text| {
                text.lines()
                    .filter_map(|l| l.split_once(": "))
                    .map(|(n, v)| (n.to_owned(), v.to_owned()))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// The item attributes of `d`'s details (the headers as `name: value` lines).
fn detail_attributes(d: &Delivery) -> Vec<(&'static str, AttributeValue)> {
    let x = &d.details;
    let mut out = Vec::new();
    if let Some(m) = &x.money {
        out.push(("amount_minor", n(m.amount.get())));
        out.push(("currency", s(m.currency.as_str())));
    }
    if let Some(a) = &x.account {
        out.push(("account", s(a.as_str())));
    }
    if let Some(o) = &x.order_id {
        out.push(("order_id", s(o.as_str())));
        out.push(("order_key", s(order_key(d.provider, o))));
    }
    if let Some(a) = &x.answer {
        out.push(("answer", s(a.as_str())));
    }
    if !x.headers.is_empty() {
        let lines: Vec<String> = x.headers.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        out.push(("headers", s(lines.join("\n"))));
    }
    out
}

/// The sort key of a day's totals in its rollup partition: after every minute's (13 digits).
const DAY_SK: &str = "day";

/// A rollup item's counts.
fn counts_of(item: &Item, r: &Reader<'_>) -> Result<MinuteCounts, StoreError> {
    let mut counts = MinuteCounts::new();
    if let Some(AttributeValue::M(m)) = item.get("counts") {
        for (k, v) in m {
            let n = v.as_n().ok().and_then(|n| n.parse::<u64>().ok());
            counts.insert(k.clone(), n.ok_or_else(|| r.corrupt("counts"))?);
        }
    }
    Ok(counts)
}

/// The `by_order` index key of an order id under a provider.
fn order_key(provider: ProviderId, order_id: &str) -> String {
    format!("{provider}#{order_id}")
}

/// The item that holds a named cursor. Its `pk` starts with `cursor#`, which no delivery
/// partition does (`ref#…`, `evt#…`).
fn cursor_key(name: &str) -> (AttributeValue, AttributeValue) {
    (s(format!("cursor#{name}")), s("cursor"))
}

fn matches(d: &Delivery, f: &LogFilter) -> bool {
    f.provider.is_none_or(|p| p == d.provider)
        && f.reference
            .as_ref()
            .is_none_or(|r| d.reference.as_ref() == Some(r))
        && f.event_id.as_ref().is_none_or(|e| *e == d.event_id)
        && f.order_id
            .as_ref()
            .is_none_or(|o| d.details.order_id.as_ref() == Some(o))
        && f.outcome.is_none_or(|o| o == d.outcome)
}

/// One partition to read newest-first: table or index, hash attribute and value.
struct Partition {
    index: Option<&'static str>,
    hash_attr: &'static str,
    hash: String,
}

impl DynamoStore {
    /// Reads `partition` newest first below `upper` (exclusive) down to `lower` (inclusive),
    /// keeping deliveries that match `filter`, until `want` are found.
    async fn read_partition(
        &self,
        p: &Partition,
        upper: &str,
        lower: &str,
        want: usize,
        filter: &LogFilter,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.read_partition_in(p, (lower, upper), want, filter, false)
            .await
    }

    /// Reads `partition` between `bounds` (both exclusive of a cursor: ids equal to either bound
    /// are skipped), newest first or (`forward`) oldest first.
    async fn read_partition_in(
        &self,
        p: &Partition,
        bounds: (&str, &str),
        want: usize,
        filter: &LogFilter,
        forward: bool,
    ) -> Result<Vec<Delivery>, StoreError> {
        let (lower, upper) = bounds;
        let table = &self.tables.events;
        let mut found = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(table)
                .set_index_name(p.index.map(str::to_owned))
                .key_condition_expression("#h = :h AND sk BETWEEN :lo AND :hi")
                .expression_attribute_names("#h", p.hash_attr)
                .expression_attribute_values(":h", s(p.hash.as_str()))
                .expression_attribute_values(":lo", s(lower))
                .expression_attribute_values(":hi", s(upper))
                .scan_index_forward(forward)
                .limit(i32::try_from(want.clamp(1, 500)).unwrap_or(500))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| unavailable("Query", table, e))?;
            for item in out.items() {
                let d = to_delivery(item, table)?;
                // BETWEEN is inclusive; a cursor bound must be exclusive.
                let inside = if forward {
                    d.id.as_str() > lower
                } else {
                    d.id.as_str() < upper
                };
                if inside && matches(&d, filter) {
                    found.push(d);
                }
            }
            start = out.last_evaluated_key;
            if found.len() >= want || start.is_none() {
                return Ok(found);
            }
        }
    }

    /// The newest `want` deliveries matching `filter` across `group`'s partitions, between
    /// `bounds` (`lower` inclusive, `upper` exclusive). A k-way merge: each partition is read
    /// a few items at a time, and read further only while the oldest item read from it is still
    /// newer than the `want`-th newest found so far (whatever it has not returned is older than
    /// that item, so cannot be among the newest). A page of 50 over a day's 33 partitions reads
    /// about a hundred items, not 33 × 51.
    async fn newest_across(
        &self,
        group: &[Partition],
        (lower, upper): (&str, &str),
        want: usize,
        filter: &LogFilter,
    ) -> Result<Vec<Delivery>, StoreError> {
        /// Where a partition's reading stands: the oldest id it returned (its unread items are
        /// all older), and whether it has no more.
        struct Frontier {
            below: String,
            exhausted: bool,
        }
        let mut frontiers: Vec<Frontier> = group
            .iter()
            .map(|_| Frontier {
                below: upper.to_owned(),
                exhausted: false,
            })
            .collect();
        let mut found: Vec<Delivery> = Vec::new();
        let mut step = want.div_ceil(group.len().max(1)) + 1;
        loop {
            found.sort_by(|a, b| b.id.cmp(&a.id));
            found.truncate(want);
            let threshold = (found.len() == want)
                .then(|| found.last().map(|d| d.id.to_string()))
                .flatten();
            let todo: Vec<usize> = (0..group.len())
                .filter(|&i| {
                    let f = &frontiers[i];
                    !f.exhausted && threshold.as_deref().is_none_or(|t| f.below.as_str() > t)
                })
                .collect();
            if todo.is_empty() {
                return Ok(found);
            }
            let reads = todo
                .iter()
                .map(|&i| self.read_partition(&group[i], &frontiers[i].below, lower, step, filter));
            for (&i, part) in todo.iter().zip(futures::future::try_join_all(reads).await?) {
                // Fewer than asked: the partition has nothing more in the bounds.
                frontiers[i].exhausted = part.len() < step;
                if let Some(oldest) = part.last() {
                    frontiers[i].below = oldest.id.to_string();
                }
                found.extend(part);
            }
            step = (step * 2).min(500);
        }
    }

    /// One group per day, newest day first; each group is the day's shards (and its unsharded
    /// key, written before shards existed).
    fn day_partitions(
        &self,
        index: &'static str,
        attr: &'static str,
        prefix: &str,
        since_ms: i64,
        until_ms: i64,
        shards: u32,
    ) -> Vec<Vec<Partition>> {
        let mut days = Vec::new();
        let mut day_ms = until_ms.saturating_sub(1);
        while day_ms >= since_ms.div_euclid(DAY_MS) * DAY_MS {
            let day = format!("{prefix}{}", utc_day(day_ms));
            let keys =
                std::iter::once(day.clone()).chain((0..shards).map(|n| format!("{day}#{n}")));
            days.push(
                keys.map(|hash| Partition {
                    index: Some(index),
                    hash_attr: attr,
                    hash,
                })
                .collect(),
            );
            day_ms -= DAY_MS;
        }
        days
    }

    /// The partitions a filter needs, in groups: day groups are disjoint in time and newest
    /// first, so reading can stop after a group once a page is full; a single group (a
    /// reference's or an event's partitions, one per provider) overlaps in time and is merged.
    async fn plan(&self, f: &LogFilter) -> Result<Vec<Vec<Partition>>, StoreError> {
        let providers: Vec<ProviderId> = f
            .provider
            .map_or_else(|| crate::providers::ids().collect(), |p| vec![p]);
        if let Some(r) = &f.reference {
            let parts = providers
                .iter()
                .map(|p| Partition {
                    index: None,
                    hash_attr: "pk",
                    hash: format!("ref#{p}#{r}"),
                })
                .collect();
            return Ok(vec![parts]);
        }
        if let Some(o) = &f.order_id {
            let parts = providers
                .iter()
                .map(|p| Partition {
                    index: Some("by_order"),
                    hash_attr: "order_key",
                    hash: order_key(*p, o),
                })
                .collect();
            return Ok(vec![parts]);
        }
        if let Some(e) = &f.event_id {
            let parts = providers
                .iter()
                .map(|p| Partition {
                    index: Some("by_event"),
                    hash_attr: "event_key",
                    hash: format!("{p}#{e}"),
                })
                .collect();
            return Ok(vec![parts]);
        }
        let until = f.until_ms.unwrap_or_else(|| now_ms() + DAY_MS);
        // Nothing older than the log's retention is there to read (TTL removed it).
        let oldest = until - self.settings.log_retention_s * 1000 - DAY_MS;
        let since = f.since_ms.map_or(oldest, |s| s.max(oldest));
        let shards = crate::ledger::Ledger::layout(self).await?.index_shards;
        Ok(match f.outcome {
            // Only outcomes that need attention are in the sparse outcome index; the others are
            // read by day and filtered on the projected outcome.
            Some(o) if o.needs_attention() => self.day_partitions(
                "by_outcome",
                "outcome_bucket",
                &format!("{o}#"),
                since,
                until,
                shards,
            ),
            _ => self.day_partitions("by_time", "time_bucket", "", since, until, shards),
        })
    }
}

impl DynamoStore {
    /// An earlier delivery of `d`'s event, in `d`'s partition, whose stored body is `z` byte for
    /// byte, and when it expires. Found through `by_event` (this event's deliveries, oldest
    /// first, listing fields only) and one read of a candidate's body. `None` when none is
    /// visible yet (the index is eventually consistent): the body is then stored again, never
    /// lost.
    async fn same_body(&self, d: &Delivery, z: &[u8]) -> Result<Option<(String, i64)>, StoreError> {
        let table = &self.tables.events;
        let pk = partition_of(d);
        let listed = self
            .client
            .query()
            .table_name(table)
            .index_name("by_event")
            .key_condition_expression("event_key = :e")
            .expression_attribute_values(":e", s(format!("{}#{}", d.provider, d.event_id)))
            .limit(8)
            .send()
            .await
            .map_err(|e| unavailable("Query", table, e))?;
        let candidates = listed
            .items()
            .iter()
            .filter(|i| Reader::new(i, table).opt_str("pk") == Some(pk.as_str()))
            .filter_map(|i| Reader::new(i, table).opt_str("sk").map(str::to_owned));
        // The first candidate holding a body decides: the oldest delivery stored it.
        for sk in candidates.take(2) {
            let out = self
                .client
                .get_item()
                .table_name(table)
                .key("pk", s(pk.as_str()))
                .key("sk", s(sk.as_str()))
                .projection_expression("body_z, expires_at_s")
                .send()
                .await
                .map_err(|e| unavailable("GetItem", table, e))?;
            let Some(item) = out.item else { continue };
            let Some(AttributeValue::B(held)) = item.get("body_z") else {
                continue;
            };
            if held.as_ref() != z {
                return Ok(None);
            }
            let expires_s = Reader::new(&item, table).num("expires_at_s")?;
            return Ok(Some((sk, expires_s)));
        }
        Ok(None)
    }

    /// The log item `sk` in `d`'s partition (a consistent read), if it is still there.
    async fn log_item(&self, d: &Delivery, sk: &str) -> Result<Option<Item>, StoreError> {
        let table = &self.tables.events;
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(partition_of(d)))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        Ok(out.item)
    }
}

impl DynamoStore {
    /// Stores a closed period's counts once under `sk` in its day's rollup partition (another
    /// store of it changes nothing: a closed period's deliveries never change).
    async fn put_counts(
        &self,
        kind: RollupKind,
        at_ms: i64,
        sk: String,
        counts: &MinuteCounts,
    ) -> Result<(), StoreError> {
        let table = &self.tables.events;
        let map = counts
            .iter()
            .map(|(k, v)| (k.clone(), n(i64::try_from(*v).unwrap_or(i64::MAX))))
            .collect();
        let result = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(format!("{}#{}", kind.prefix(), utc_day(at_ms))))
            .item("sk", s(sk))
            .item("day_ms", n(at_ms.div_euclid(DAY_MS) * DAY_MS))
            .item("counts", AttributeValue::M(map))
            .item(
                "expires_at_s",
                n(expires_at_s(at_ms, self.settings.log_retention_s)),
            )
            .condition_expression("attribute_not_exists(sk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Stored already (the same counts: the period is closed).
            Err(e) => condition_failed(e, "PutItem", table).map(|_| ()),
        }
    }
}

impl EventLog for DynamoStore {
    async fn append(&self, d: &Delivery) -> Result<(), StoreError> {
        let table = &self.tables.events;
        let day = utc_day(d.received_at_ms);
        let shard = crate::ledger::Ledger::placement_layout(self)
            .await?
            .index_shard(d.id.as_str());
        let mut put = self
            .client
            .put_item()
            .table_name(table)
            .item("pk", s(partition_of(d)))
            .item("sk", s(d.id.as_str()))
            .item("event_key", s(format!("{}#{}", d.provider, d.event_id)))
            .item("time_bucket", s(format!("{day}#{shard}")))
            .item("provider", s(d.provider.as_str()))
            .item("event_id", s(d.event_id.as_str()))
            .item("event_type", s(d.event_type.as_str()))
            .item("outcome", s(d.outcome.as_str()))
            .item("http_status", n(i64::from(d.http_status)))
            .item("received_at_ms", n(d.received_at_ms))
            // Append-only: a delivery id is written once.
            .condition_expression("attribute_not_exists(sk)");
        if d.outcome.needs_attention() {
            put = put.item("outcome_bucket", s(format!("{}#{day}#{shard}", d.outcome)));
        }
        let mut expires_s = expires_at_s(d.received_at_ms, self.settings.log_retention_s);
        match d.raw_body.as_deref().map(StoredBody::of) {
            // A redelivery of a large body: point at an earlier delivery holding the same bytes,
            // and expire with it, so the pointer never outlives the body.
            Some(StoredBody::Deflated(z))
                if d.outcome == Outcome::Replayed && z.len() >= SHARE_FROM_BYTES =>
            {
                match self.same_body(d, &z).await? {
                    Some((holder, holder_expires_s)) => {
                        put = put.item("body_in", s(holder));
                        expires_s = expires_s.min(holder_expires_s);
                    }
                    None => put = put.item("body_z", StoredBody::Deflated(z).attribute().1),
                }
            }
            Some(body) => {
                let (name, value) = body.attribute();
                put = put.item(name, value);
            }
            None => {}
        }
        put = put.item("expires_at_s", n(expires_s));
        for (name, value) in detail_attributes(d) {
            put = put.item(name, value);
        }
        for (name, value) in [
            ("key", d.key.as_ref().map(|k| k.to_string())),
            ("reference", d.reference.as_ref().map(|r| r.to_string())),
            ("replay_of", d.replay_of.as_ref().map(|i| i.to_string())),
            ("started_by", d.started_by.clone()),
        ] {
            if let Some(v) = value {
                put = put.item(name, s(v));
            }
        }
        match put.send().await {
            Ok(_) => Ok(()),
            // The id is unique per delivery (time + random), so an item already under it is this
            // very append, applied by an earlier try whose reply was lost: it is logged.
            Err(e) => condition_failed(e, "PutItem", table).map(|_| ()),
        }
    }

    async fn query(
        &self,
        filter: &LogFilter,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LogPage, StoreError> {
        let limit = limit.max(1);
        let until_key = filter.until_ms.map(|u| format!("{u:013}"));
        let upper = [cursor, until_key.as_deref()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(TOP)
            .to_owned();
        let lower = filter
            .since_ms
            .map(|s| format!("{s:013}"))
            .unwrap_or_else(|| "0".into());
        let groups = self.plan(filter).await?;
        let mut found = Vec::new();
        for group in &groups {
            let want = limit + 1 - found.len();
            found.extend(
                self.newest_across(group, (&lower, &upper), want, filter)
                    .await?,
            );
            // Day groups are newest first and disjoint: once we hold a page, older days can wait.
            if found.len() > limit {
                break;
            }
        }
        found.sort_by(|a, b| b.id.cmp(&a.id));
        let more = found.len() > limit;
        found.truncate(limit);
        let next = if more {
            found.last().map(|d| d.id.to_string())
        } else {
            None
        };
        Ok(LogPage {
            deliveries: found,
            next,
        })
    }

    async fn query_oldest_first(
        &self,
        filter: &LogFilter,
        limit: usize,
        after: &str,
    ) -> Result<Vec<Delivery>, StoreError> {
        let limit = limit.max(1);
        let since = format!("{:013}", filter.since_ms.unwrap_or(0));
        let lower = if after > since.as_str() {
            after.to_owned()
        } else {
            since
        };
        let upper = filter
            .until_ms
            .map_or_else(|| TOP.to_owned(), |u| format!("{u:013}"));
        let mut groups = self
            .plan(&LogFilter {
                since_ms: id_ms(&lower).or(filter.since_ms),
                ..filter.clone()
            })
            .await?;
        // Day groups come newest first: walk them oldest first.
        groups.reverse();
        let mut found = Vec::new();
        for group in &groups {
            let reads = group
                .iter()
                .map(|p| self.read_partition_in(p, (&lower, &upper), limit, filter, true));
            for part in futures::future::try_join_all(reads).await? {
                found.extend(part);
            }
            if found.len() >= limit {
                break;
            }
        }
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found.truncate(limit);
        Ok(found)
    }

    async fn mark_redriven(&self, d: &Delivery, outcome: Outcome) -> Result<(), StoreError> {
        let table = &self.tables.events;
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", s(partition_of(d)))
            .key("sk", s(d.id.as_str()))
            .update_expression("SET redriven = :o, redriven_at_ms = :now")
            .condition_expression("attribute_exists(sk) AND attribute_not_exists(redriven)")
            .expression_attribute_values(":o", s(outcome.as_str()))
            .expression_attribute_values(":now", n(self.clock.now_ms()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            // Marked already (a concurrent pass), or expired from the log: nothing to do.
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| ()),
        }
    }

    async fn rollups(
        &self,
        kind: RollupKind,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Rollups, StoreError> {
        let table = &self.tables.events;
        let mut out = Rollups::new();
        let mut day_ms = from_ms.div_euclid(DAY_MS) * DAY_MS;
        while day_ms < to_ms {
            let mut start: Option<Item> = None;
            loop {
                let page = self
                    .client
                    .query()
                    .table_name(table)
                    .key_condition_expression("pk = :pk AND sk BETWEEN :a AND :b")
                    .expression_attribute_values(
                        ":pk",
                        s(format!("{}#{}", kind.prefix(), utc_day(day_ms))),
                    )
                    .expression_attribute_values(":a", s(format!("{from_ms:013}")))
                    .expression_attribute_values(":b", s(format!("{:013}", to_ms - 1)))
                    .consistent_read(true)
                    .set_exclusive_start_key(start.take())
                    .send()
                    .await
                    .map_err(|e| unavailable("Query", table, e))?;
                for item in page.items() {
                    let r = Reader::new(item, table);
                    let minute: i64 = r.str("sk")?.parse().map_err(|_| r.corrupt("sk"))?;
                    out.insert(minute, counts_of(item, &r)?);
                }
                match page.last_evaluated_key {
                    Some(k) => start = Some(k),
                    None => break,
                }
            }
            day_ms += DAY_MS;
        }
        Ok(out)
    }

    async fn put_rollup(
        &self,
        kind: RollupKind,
        minute_ms: i64,
        counts: &MinuteCounts,
    ) -> Result<(), StoreError> {
        self.put_counts(kind, minute_ms, format!("{minute_ms:013}"), counts)
            .await
    }

    async fn day_rollups(&self, kind: RollupKind, days: &[i64]) -> Result<Rollups, StoreError> {
        let table = &self.tables.events;
        let keys = days
            .iter()
            .map(|day| {
                std::collections::HashMap::from([
                    (
                        "pk".to_owned(),
                        s(format!("{}#{}", kind.prefix(), utc_day(*day))),
                    ),
                    ("sk".to_owned(), s(DAY_SK)),
                ])
            })
            .collect();
        let read = super::BatchRead {
            projection: "day_ms, #c",
            names: &[("#c", "counts")],
            consistent: true,
            rounds: 1,
        };
        // Days not read (throttling) are simply unknown: their totals are computed again.
        let (items, _unread) = self.batch_get(table, keys, read).await?;
        let mut out = Rollups::new();
        for item in &items {
            let r = Reader::new(item, table);
            out.insert(r.num("day_ms")?, counts_of(item, &r)?);
        }
        Ok(out)
    }

    async fn put_day_rollup(
        &self,
        kind: RollupKind,
        day_ms: i64,
        counts: &MinuteCounts,
    ) -> Result<(), StoreError> {
        self.put_counts(kind, day_ms, DAY_SK.to_owned(), counts)
            .await
    }

    async fn fill_details(&self, deliveries: &mut [Delivery]) -> Result<(), StoreError> {
        let table = &self.tables.events;
        let keys = deliveries
            .iter()
            .filter(|d| d.details.is_empty())
            .map(|d| {
                std::collections::HashMap::from([
                    ("pk".to_owned(), s(partition_of(d))),
                    ("sk".to_owned(), s(d.id.as_str())),
                ])
            })
            .collect();
        let read = super::BatchRead {
            projection: "sk, amount_minor, currency, account, order_id, answer, headers",
            names: &[],
            consistent: false,
            rounds: 4,
        };
        // Rows still unread after the re-asks show no details rather than failing the page.
        let (items, _unread) = self.batch_get(table, keys, read).await?;
        let mut found = std::collections::HashMap::new();
        for item in &items {
            let r = Reader::new(item, table);
            found.insert(r.str("sk")?.to_owned(), details_of(&r)?);
        }
        for d in deliveries.iter_mut().filter(|d| d.details.is_empty()) {
            if let Some(details) = found.remove(d.id.as_str()) {
                d.details = details;
            }
        }
        Ok(())
    }

    async fn with_body(&self, d: &Delivery) -> Result<Delivery, StoreError> {
        if d.raw_body.is_some() {
            return Ok(d.clone());
        }
        let table = &self.tables.events;
        let item = self
            .log_item(d, d.id.as_str())
            .await?
            .ok_or_else(|| StoreError::Corrupt {
                table: table.clone(),
                key: d.id.to_string(),
                reason: "listed in an index but gone from the table (expired?)".into(),
            })?;
        let mut full = to_delivery(&item, table)?;
        if let Some(holder) = Reader::new(&item, table).opt_str("body_in") {
            full.raw_body = match self.log_item(d, holder).await? {
                Some(held) => body_of(&held, &Reader::new(&held, table))?,
                // The holder expired first (TTL deletes lag): the body is gone with it.
                None => None,
            };
        }
        Ok(full)
    }

    async fn cursor(&self, name: &str) -> Result<Option<String>, StoreError> {
        let table = &self.tables.events;
        let (pk, sk) = cursor_key(name);
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key("pk", pk)
            .key("sk", sk)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| unavailable("GetItem", table, e))?;
        Ok(out
            .item
            .and_then(|i| Reader::new(&i, table).opt_str("after").map(str::to_owned)))
    }

    async fn save_cursor(&self, name: &str, to: &str) -> Result<(), StoreError> {
        let table = &self.tables.events;
        let (pk, sk) = cursor_key(name);
        let result = self
            .client
            .update_item()
            .table_name(table)
            .key("pk", pk)
            .key("sk", sk)
            .update_expression("SET #after = :to")
            // Forward only: two overlapping passes never move it back.
            .condition_expression("attribute_not_exists(#after) OR #after < :to")
            .expression_attribute_names("#after", "after")
            .expression_attribute_values(":to", s(to))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => condition_failed(e, "UpdateItem", table).map(|_| ()),
        }
    }
}

/// The epoch ms a delivery id (or cursor) starts with.
fn id_ms(id: &str) -> Option<i64> {
    id.get(..13).and_then(|t| t.parse().ok())
}
