//! The append-only delivery log: every accepted delivery, with its raw body and what we answered,
//! so a duplicate is visible and stored events can be replayed through the same pipeline.

use std::future::Future;

use serde::Serialize;

use crate::domain::{AccountId, IdempotencyKey, Money, ProviderId, Reference};
use crate::store::StoreError;

/// What became of a delivery. Stored as the lower-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Applied,
    Replayed,
    InFlight,
    Conflict,
    Stale,
    Ignored,
    /// Accepted but not applicable yet (a refund before its payment): the provider redelivers.
    Parked,
    /// Processing failed (store unavailable): retryable, reconciliation looks at these.
    Failed,
    /// A resumed or re-driven attempt found every step already done by an earlier attempt under
    /// the same key: nothing moved now (the answer is still the applied one).
    AlreadyApplied,
    /// A payment success naming no account, with no registered or default account: acknowledged,
    /// nothing moved; applicable later by `payhook replay --outcome unassigned` once it has one.
    Unassigned,
}

impl Outcome {
    pub const ALL: [Outcome; 10] = [
        Outcome::Applied,
        Outcome::Replayed,
        Outcome::InFlight,
        Outcome::Conflict,
        Outcome::Stale,
        Outcome::Ignored,
        Outcome::Parked,
        Outcome::Failed,
        Outcome::AlreadyApplied,
        Outcome::Unassigned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Replayed => "replayed",
            Outcome::InFlight => "in_flight",
            Outcome::Conflict => "conflict",
            Outcome::Stale => "stale",
            Outcome::Ignored => "ignored",
            Outcome::Parked => "parked",
            Outcome::Failed => "failed",
            Outcome::AlreadyApplied => "already_applied",
            Outcome::Unassigned => "unassigned",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == text)
    }

    /// Outcomes someone (reconciliation, an operator) must act on: only these are in the sparse
    /// outcome index, so the bulk of traffic (applied, replayed) writes no entry there.
    pub fn needs_attention(self) -> bool {
        matches!(
            self,
            Outcome::Failed | Outcome::Parked | Outcome::Unassigned | Outcome::Conflict
        )
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A delivery's id in the log: `{epoch ms:013}-{uuid}`, unique per delivery and sorting by
/// arrival, so it is also the log's sort key and the cursor of a walk through it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct DeliveryId(String);

impl DeliveryId {
    /// A fresh id for a delivery received at `received_at_ms`.
    pub fn new(received_at_ms: i64) -> Self {
        DeliveryId(format!(
            "{:013}-{}",
            received_at_ms.max(0),
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// An id read back from the store or given by an operator.
    pub fn from_stored(text: String) -> Self {
        DeliveryId(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One delivery as logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delivery {
    /// Unique per delivery; sorts by arrival time.
    pub id: DeliveryId,
    pub provider: ProviderId,
    pub event_id: String,
    pub event_type: String,
    pub key: Option<IdempotencyKey>,
    pub reference: Option<Reference>,
    pub outcome: Outcome,
    pub http_status: u16,
    pub received_at_ms: i64,
    /// The body exactly as received (verified on arrival), for replay. `None` when the delivery
    /// was listed from an index (indexes never carry bodies): [`EventLog::with_body`] reads it.
    pub raw_body: Option<String>,
    /// Set when this delivery is a replay of a stored one: that delivery's id.
    pub replay_of: Option<DeliveryId>,
    /// Who started a replay (operator, Lambda invocation).
    pub started_by: Option<String>,
    /// Set once reconciliation re-drove this delivery: the outcome of that re-drive. The log is
    /// append-only in content; this mark is the one attribute added later, so no pass repeats
    /// finished work.
    pub redriven: Option<Outcome>,
    /// What it was about and what it was told, for an operator ([`Details`]).
    pub details: Details,
}

/// What a delivery was about and what it was told: kept so an operator reads a row without
/// opening its body, finds a payment by the merchant's order id, and sees the answer and the
/// headers that were verified. Empty on deliveries logged before these were kept, and on rows
/// listed from an index that does not carry them ([`EventLog::fill_details`] reads them).
/// Nothing about money reads these: they are a record, not an input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Details {
    /// The money the event names (a transfer's settlement may name none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub money: Option<Money>,
    /// The account the movement was for: from the answer (the payment's account, whoever
    /// registered it) or else the event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<AccountId>,
    /// The merchant's order id, from the metadata key configured for the provider
    /// ([`crate::providers::orders`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    /// The body answered, as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// The headers the signature check read, secret values masked
    /// ([`crate::providers::masked_headers`]); none for replays and EventBridge events.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
}

impl Details {
    /// Whether anything is known (rows listed from the time and outcome indexes know nothing).
    pub fn is_empty(&self) -> bool {
        self == &Details::default()
    }
}

impl Delivery {
    /// A time-ordered id: 13-digit epoch ms, then randomness, so ids sort by arrival.
    pub fn new_id(received_at_ms: i64) -> DeliveryId {
        DeliveryId::new(received_at_ms)
    }
}

/// Which deliveries a query wants. Empty filter = everything, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFilter {
    pub provider: Option<ProviderId>,
    pub reference: Option<Reference>,
    pub event_id: Option<String>,
    /// A merchant order id (`order_id` of [`Details`]), with `provider`.
    pub order_id: Option<String>,
    pub outcome: Option<Outcome>,
    /// Inclusive lower bound, epoch ms.
    pub since_ms: Option<i64>,
    /// Exclusive upper bound, epoch ms.
    pub until_ms: Option<i64>,
}

/// One page of a query, newest first; pass `next` back as the cursor for the next page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogPage {
    pub deliveries: Vec<Delivery>,
    pub next: Option<String>,
}

/// The log capability.
pub trait EventLog: Sync {
    fn append(&self, delivery: &Delivery) -> impl Future<Output = Result<(), StoreError>> + Send;
    fn query(
        &self,
        filter: &LogFilter,
        limit: usize,
        cursor: Option<&str>,
    ) -> impl Future<Output = Result<LogPage, StoreError>> + Send;
    /// Up to `limit` deliveries matching `filter` (an outcome or time filter) whose id is after
    /// `after`, oldest first: a backlog walked from a cursor.
    fn query_oldest_first(
        &self,
        filter: &LogFilter,
        limit: usize,
        after: &str,
    ) -> impl Future<Output = Result<Vec<Delivery>, StoreError>> + Send;
    /// Marks `delivery` as re-driven with `outcome`, once (a second mark is a no-op).
    fn mark_redriven(
        &self,
        delivery: &Delivery,
        outcome: Outcome,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A named cursor kept between passes (a delivery id), if set.
    fn cursor(&self, name: &str)
        -> impl Future<Output = Result<Option<String>, StoreError>> + Send;
    /// Moves a named cursor forward to `to` (never back).
    fn save_cursor(
        &self,
        name: &str,
        to: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Fills the [`Details`] of deliveries listed without them (a page of rows: one batched
    /// read, projecting only the details, never a body).
    fn fill_details(
        &self,
        deliveries: &mut [Delivery],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// `delivery` with its body, read from the table if it was listed without it.
    fn with_body(
        &self,
        delivery: &Delivery,
    ) -> impl Future<Output = Result<Delivery, StoreError>> + Send;
    /// The stored counts of closed minutes starting in `[from_ms, to_ms)`: minute start ->
    /// (`{provider}#{outcome}` -> deliveries). See [`crate::read::tally`].
    fn rollups(
        &self,
        kind: RollupKind,
        from_ms: i64,
        to_ms: i64,
    ) -> impl Future<Output = Result<Rollups, StoreError>> + Send;
    /// Stores a closed minute's counts once (another store of that minute changes nothing:
    /// a closed minute's deliveries never change, so every computation of it is the same).
    fn put_rollup(
        &self,
        kind: RollupKind,
        minute_ms: i64,
        counts: &MinuteCounts,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The stored totals of whole closed UTC days (each day's start, epoch ms) among `days`:
    /// one batched read. See [`crate::read::day_totals`].
    fn day_rollups(
        &self,
        kind: RollupKind,
        days: &[i64],
    ) -> impl Future<Output = Result<Rollups, StoreError>> + Send;
    /// Stores a whole closed day's totals once (the sum of its 1,440 stored minutes).
    fn put_day_rollup(
        &self,
        kind: RollupKind,
        day_ms: i64,
        counts: &MinuteCounts,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// What a minute's rollup counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollupKind {
    /// Deliveries: `{provider}#{outcome}` -> how many.
    Deliveries,
    /// Money the applied deliveries moved: `{currency}#in` / `{currency}#out` -> minor units.
    Money,
}

impl RollupKind {
    /// The partition prefix of its items (`{prefix}#{UTC day}`).
    pub fn prefix(self) -> &'static str {
        match self {
            RollupKind::Deliveries => "rollup",
            // `money2`: since payouts count (a transfer paid out, a reversal back in); minutes
            // stored under `money` by a release that did not count them are never read as
            // complete, and are counted again.
            RollupKind::Money => "money2",
        }
    }
}

/// One minute's deliveries: `{provider}#{outcome}` -> how many.
pub type MinuteCounts = std::collections::BTreeMap<String, u64>;
/// Minutes (their start, epoch ms) and their counts.
pub type Rollups = std::collections::BTreeMap<i64, MinuteCounts>;

/// UTC calendar day `YYYY-MM-DD` of an epoch-ms instant, used to bucket the time index.
pub fn utc_day(epoch_ms: i64) -> String {
    let (y, m, d) = crate::domain::civil_from_days(epoch_ms.div_euclid(86_400_000));
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_days_match_known_dates() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(1_764_670_000_000), "2025-12-02");
        assert_eq!(utc_day(951_782_400_000), "2000-02-29");
        assert_eq!(utc_day(-1), "1969-12-31");
    }

    #[test]
    fn outcomes_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
    }

    #[test]
    fn delivery_ids_sort_by_time() {
        assert!(Delivery::new_id(9) < Delivery::new_id(10));
        assert!(Delivery::new_id(1_000) < Delivery::new_id(999_999_999_999));
    }
}
