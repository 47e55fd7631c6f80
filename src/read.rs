//! The read side: balances, payments and the delivery log as other services and operators see
//! them. `payhook balance`, `payhook payments show` and `payhook events` print what these
//! functions return, and the HTTP read routes ([`crate::http::read`]) answer with the same
//! values, so a number on the wallet screen and a number an operator prints come from one code
//! path.
//!
//! Nothing here writes money. A balance read may roll a ledger checkpoint forward (see
//! `dynamodb/ledger.rs`): a conditional write of totals that are already true.

use std::collections::BTreeMap;

use base64::Engine;
use serde::Serialize;

use crate::domain::{now_ms, AccountId, Currency, ProviderId, Reference};
use crate::eventlog::{Delivery, Details, EventLog, LogFilter, Outcome};
use crate::ledger::{Ledger, Posting};
use crate::payments::{PaymentRecord, Payments};
use crate::store::StoreError;

/// How many deliveries a payment view lists (newest first); `next_cursor` pages further through
/// [`deliveries`].
pub const PAYMENT_DELIVERIES: usize = 20;
/// Page size of a delivery listing when none is asked for, and the largest page served.
pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 500;

/// Why a read has no answer.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The thing asked for does not exist (a payment never seen, an account without entries).
    #[error("{what} not found")]
    NotFound { what: String },
    /// A parameter that cannot be read (a bad cursor, a page size out of range, …).
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ReadError {
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        ReadError::Invalid {
            field,
            reason: reason.into(),
        }
    }
}

/// An account's balances per currency, as of `as_of_ms`: every entry posted before then is in
/// it (the reads are strongly consistent). `entries` counts the movements summed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BalanceView {
    pub account: AccountId,
    pub balances: BTreeMap<Currency, i64>,
    pub entries: u64,
    pub as_of_ms: i64,
    /// The entries themselves, when asked for (`payhook balance --entries`): this reads the
    /// account's whole history, so the HTTP route never asks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postings: Option<Vec<Posting>>,
}

/// The balance of `account`: its shards' checkpoints plus the entries after them (bounded by
/// shards and recent entries, not by history). An account with no entry at all is unknown.
pub async fn balance<S: Ledger>(
    store: &S,
    account: &AccountId,
    with_postings: bool,
) -> Result<BalanceView, ReadError> {
    let mut as_of_ms = now_ms();
    let mut balance = store.balance(account).await?;
    if balance.entries == 0 {
        return Err(ReadError::NotFound {
            what: format!("account {:?} (no ledger entries)", account.as_str()),
        });
    }
    let postings = if with_postings {
        // The entries and the balance are two reads: read again until they agree (entries are
        // append-only, so the same count is the same entries), so running sums over the list
        // end at the balance shown.
        let mut listed = store.entries(account).await?;
        for _ in 0..3 {
            if u64::try_from(listed.len()).ok() == Some(balance.entries) {
                break;
            }
            as_of_ms = now_ms();
            balance = store.balance(account).await?;
            listed = store.entries(account).await?;
        }
        Some(listed)
    } else {
        None
    };
    Ok(BalanceView {
        account: balance.account,
        balances: balance.balances,
        entries: balance.entries,
        as_of_ms,
        postings,
    })
}

/// One delivery as listed: everything but the body (bodies are provider payloads, read only by
/// replay and by `payhook events --bodies`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryView {
    pub id: String,
    pub provider: ProviderId,
    pub event_id: String,
    pub event_type: String,
    pub key: Option<String>,
    pub reference: Option<Reference>,
    pub outcome: Outcome,
    pub http_status: u16,
    pub received_at_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redriven: Option<Outcome>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_body: Option<String>,
    /// Amount, account and order id; with the body, also the answer and the verified headers.
    #[serde(flatten)]
    pub details: Details,
}

impl DeliveryView {
    fn of(d: Delivery, with_body: bool) -> Self {
        let mut details = d.details;
        if !with_body {
            details.answer = None;
            details.headers = Vec::new();
        }
        DeliveryView {
            id: d.id.to_string(),
            provider: d.provider,
            event_id: d.event_id,
            event_type: d.event_type,
            key: d.key.map(|k| k.as_str().to_owned()),
            reference: d.reference,
            outcome: d.outcome,
            http_status: d.http_status,
            received_at_ms: d.received_at_ms,
            replay_of: d.replay_of.map(|i| i.to_string()),
            started_by: d.started_by,
            redriven: d.redriven,
            raw_body: if with_body { d.raw_body } else { None },
            details,
        }
    }
}

/// A payment: its state, money, refunded total and history as stored, and its latest
/// deliveries (newest first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaymentView {
    pub payment: PaymentRecord,
    pub deliveries: Vec<DeliveryView>,
    /// More deliveries than listed: pass to [`deliveries`] with the payment's reference.
    pub next_cursor: Option<String>,
}

pub async fn payment<S: Payments + EventLog>(
    store: &S,
    provider: ProviderId,
    reference: &Reference,
) -> Result<PaymentView, ReadError> {
    let Some(payment) = store.payment(provider, reference).await? else {
        return Err(ReadError::NotFound {
            what: format!("payment {provider}/{reference}"),
        });
    };
    let filter = LogFilter {
        provider: Some(provider),
        reference: Some(reference.clone()),
        ..LogFilter::default()
    };
    let page = store.query(&filter, PAYMENT_DELIVERIES, None).await?;
    Ok(PaymentView {
        payment,
        deliveries: page
            .deliveries
            .into_iter()
            .map(|d| DeliveryView::of(d, false))
            .collect(),
        next_cursor: page.next.as_deref().map(Cursor::encode),
    })
}

/// One page of the delivery log, newest first. `next_cursor` is opaque: pass it back unchanged
/// with the same filter for the next page; the pages neither repeat nor skip a delivery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveriesPage {
    pub deliveries: Vec<DeliveryView>,
    pub next_cursor: Option<String>,
}

/// What a delivery listing asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryQuery {
    pub filter: LogFilter,
    /// Page size, 1 to [`MAX_PAGE`].
    pub limit: usize,
    /// A `next_cursor` of an earlier page.
    pub cursor: Option<String>,
    /// Include raw bodies where the listing has them (the CLI's `--bodies`; never over HTTP).
    pub with_bodies: bool,
    /// Read each row's amount, account and order id where its index does not carry them
    /// (one batched read per page): for pages a person reads, not for walks that count.
    pub with_details: bool,
}

pub async fn deliveries<S: EventLog>(
    store: &S,
    q: &DeliveryQuery,
) -> Result<DeliveriesPage, ReadError> {
    if q.limit == 0 || q.limit > MAX_PAGE {
        return Err(ReadError::invalid(
            "limit",
            format!("must be 1 to {MAX_PAGE}, got {}", q.limit),
        ));
    }
    if let (Some(since), Some(until)) = (q.filter.since_ms, q.filter.until_ms) {
        if since >= until {
            return Err(ReadError::invalid("since_ms", "must be before until_ms"));
        }
    }
    let after = q.cursor.as_deref().map(Cursor::decode).transpose()?;
    let mut page = store.query(&q.filter, q.limit, after.as_deref()).await?;
    if q.with_details {
        store.fill_details(&mut page.deliveries).await?;
    }
    Ok(DeliveriesPage {
        deliveries: page
            .deliveries
            .into_iter()
            .map(|d| DeliveryView::of(d, q.with_bodies))
            .collect(),
        next_cursor: page.next.as_deref().map(Cursor::encode),
    })
}

/// One delivery by its id, with its body. The id begins with its arrival time (13 digits of
/// epoch ms), so the time index finds it within the millisecond it names: no scan, no second
/// index.
pub async fn delivery<S: EventLog>(store: &S, id: &str) -> Result<DeliveryView, ReadError> {
    let d = find_delivery(store, id).await?;
    Ok(DeliveryView::of(store.with_body(&d).await?, true))
}

/// The stored delivery behind [`delivery`] (what replay re-drives), as listed (no body).
pub async fn find_delivery<S: EventLog>(store: &S, id: &str) -> Result<Delivery, ReadError> {
    let at_ms: i64 = id
        .get(..13)
        .filter(|_| id.as_bytes().get(13) == Some(&b'-'))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| ReadError::invalid("delivery", "is not a delivery id"))?;
    let filter = LogFilter {
        since_ms: Some(at_ms),
        until_ms: Some(at_ms + 1),
        ..LogFilter::default()
    };
    let mut cursor: Option<String> = None;
    loop {
        let page = store.query(&filter, MAX_PAGE, cursor.as_deref()).await?;
        if let Some(d) = page.deliveries.into_iter().find(|d| d.id.as_str() == id) {
            return Ok(d);
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => {
                return Err(ReadError::NotFound {
                    what: format!("delivery {id}"),
                })
            }
        }
    }
}

/// Payments still PENDING or PROCESSING and untouched since `before_ms`, oldest first: the ones
/// reconciliation asks the provider about (at most `limit` of each status).
pub async fn open_payments<S: Payments>(
    store: &S,
    before_ms: i64,
    limit: usize,
) -> Result<Vec<PaymentRecord>, ReadError> {
    let mut open = Vec::new();
    for status in [
        crate::domain::PaymentStatus::Pending,
        crate::domain::PaymentStatus::Processing,
    ] {
        open.extend(store.open_payments(status, before_ms, limit).await?);
    }
    open.sort_by_key(|p| p.updated_at_ms);
    Ok(open)
}

/// An open payout that needs a person, and why ([`crate::payouts::calls::needs_person`]).
#[derive(Debug, Clone, Serialize)]
pub struct UnsettledPayout {
    #[serde(flatten)]
    pub payout: crate::payouts::PayoutRecord,
    pub why: &'static str,
}

/// Open payouts (oldest first, at most `limit`) that need a person at store time `now_ms`: past
/// the horizon, or sent as often as allowed with no transfer shown. Never a guess at how they
/// ended: their money stays reserved until the provider's word.
pub async fn unsettled_payouts<S: crate::payouts::Payouts>(
    store: &S,
    now_ms: i64,
    horizon_ms: i64,
    limit: usize,
) -> Result<Vec<UnsettledPayout>, ReadError> {
    let open = store.open_payouts(i64::MAX, limit).await?;
    Ok(open
        .into_iter()
        .filter_map(|p| {
            crate::payouts::calls::needs_person(&p, now_ms, horizon_ms)
                .map(|why| UnsettledPayout { payout: p, why })
        })
        .collect())
}

const MINUTE_MS: i64 = 60_000;

/// How long after a minute ends its deliveries may still be logged: a delivery is logged with
/// the time it arrived, after it was processed, and processing ends within the function's
/// timeout and the claim lease (minutes at most). A minute this old is closed: its counts never
/// change again, so they are computed once and stored.
pub const CLOSED_AFTER_MS: i64 = 15 * MINUTE_MS;

/// Deliveries one [`tally`] walks at most (the open minutes, and closed ones not stored yet);
/// past it the counts are lower bounds, and the next call goes on from the stored minutes.
pub const TALLY_WALK: usize = 50_000;

/// Deliveries per minute in `[since_ms, until_ms)`, by `{provider}#{outcome}`, exact unless
/// `complete` is false (then lower bounds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub minutes: crate::eventlog::Rollups,
    pub complete: bool,
}

impl Tally {
    /// Deliveries per outcome, of `provider` if given.
    pub fn by_outcome(&self, provider: Option<ProviderId>) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for counts in self.minutes.values() {
            for (key, n) in counts {
                let Some((p, outcome)) = key.split_once('#') else {
                    continue;
                };
                if provider.is_none_or(|want| want.as_str() == p) {
                    *out.entry(outcome.to_owned()).or_default() += n;
                }
            }
        }
        out
    }
}

/// Counts the log's deliveries per minute without walking the whole window: closed minutes
/// (older than [`CLOSED_AFTER_MS`] at store time `now_ms`) are read from stored rollups, and a
/// closed minute not stored yet is counted from the log once and stored; only the open tail and
/// a window's partial first and last minutes are walked on every call.
pub async fn tally<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    since_ms: i64,
    until_ms: i64,
    now_ms: i64,
) -> Result<Tally, ReadError> {
    tally_within(store, since_ms, until_ms, now_ms, TALLY_WALK).await
}

/// [`tally`], walking at most `walk_budget` deliveries.
pub async fn tally_within<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    since_ms: i64,
    until_ms: i64,
    now_ms: i64,
    walk_budget: usize,
) -> Result<Tally, ReadError> {
    let window = (since_ms, until_ms, now_ms);
    rolled_up(store, &Counted::Deliveries, window, walk_budget).await
}

/// What a walk counts per minute.
enum Counted<'a> {
    /// Deliveries by `{provider}#{outcome}`.
    Deliveries,
    /// Money the applied deliveries moved, read from their bodies through the providers' own
    /// mapping: `{currency}#in`, `{currency}#out`.
    Money(&'a crate::providers::Providers),
}

impl Counted<'_> {
    fn kind(&self) -> crate::eventlog::RollupKind {
        match self {
            Counted::Deliveries => crate::eventlog::RollupKind::Deliveries,
            Counted::Money(_) => crate::eventlog::RollupKind::Money,
        }
    }
}

/// Per-minute counts over `(since, until, now)`: stored rollups of closed minutes (computed
/// once when missing), plus a walk of the partial edges and the open tail.
async fn rolled_up<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    what: &Counted<'_>,
    (since_ms, until_ms, now_ms): (i64, i64, i64),
    walk_budget: usize,
) -> Result<Tally, ReadError> {
    let first_full = since_ms.div_euclid(MINUTE_MS) * MINUTE_MS
        + if since_ms.rem_euclid(MINUTE_MS) == 0 {
            0
        } else {
            MINUTE_MS
        };
    let closed_end = (now_ms - CLOSED_AFTER_MS).div_euclid(MINUTE_MS) * MINUTE_MS;
    let full_end = (until_ms.div_euclid(MINUTE_MS) * MINUTE_MS).min(closed_end);
    let mut tally = Tally {
        minutes: crate::eventlog::Rollups::new(),
        complete: true,
    };
    let mut budget = walk_budget;
    if first_full < full_end {
        let stored = store.rollups(what.kind(), first_full, full_end).await?;
        // Walk each run of closed minutes not stored yet, oldest first, and store them.
        let mut m = first_full;
        while m < full_end {
            if stored.contains_key(&m) {
                m += MINUTE_MS;
                continue;
            }
            let mut end = m;
            while end < full_end && !stored.contains_key(&end) {
                end += MINUTE_MS;
            }
            let (walked, reached) = walk(store, what, m, end, &mut budget).await?;
            let mut minute = m;
            while minute < reached {
                let counts = walked.get(&minute).cloned().unwrap_or_default();
                store.put_rollup(what.kind(), minute, &counts).await?;
                tally.minutes.insert(minute, counts);
                minute += MINUTE_MS;
            }
            if reached < end {
                tally.complete = false;
                break;
            }
            m = end;
        }
        tally.minutes.extend(stored);
    }
    // The partial first minute, and everything from the first open (or partial) minute on.
    let head_end = first_full.min(until_ms).max(since_ms);
    let tail_start = full_end.max(head_end);
    for (from, to) in [(since_ms, head_end), (tail_start, until_ms)] {
        if from >= to {
            continue;
        }
        let (walked, reached) = walk(store, what, from, to, &mut budget).await?;
        for (minute, counts) in walked {
            let into = tally.minutes.entry(minute).or_default();
            for (k, n) in counts {
                *into.entry(k).or_default() += n;
            }
        }
        if reached < to {
            tally.complete = false;
        }
    }
    Ok(tally)
}

const DAY_MS: i64 = 86_400_000;

/// Deliveries per `{provider}#{outcome}` of each whole UTC day from `from_ms`'s day until the
/// last day wholly closed at store time `now_ms` (each day's start -> its totals). A day's
/// totals are stored once, as the sum of its 1,440 stored minutes, so a week is one batched
/// read; a day whose minutes are not all stored yet is left out (a reader treats it as unknown,
/// never as empty).
pub async fn day_totals<S: EventLog>(
    store: &S,
    from_ms: i64,
    now_ms: i64,
) -> Result<crate::eventlog::Rollups, ReadError> {
    use crate::eventlog::RollupKind;
    let closed_end = now_ms - CLOSED_AFTER_MS;
    let days: Vec<i64> = std::iter::successors(Some(from_ms.div_euclid(DAY_MS) * DAY_MS), |d| {
        Some(d + DAY_MS)
    })
    .take_while(|d| d + DAY_MS <= closed_end)
    .collect();
    let mut totals = store.day_rollups(RollupKind::Deliveries, &days).await?;
    for day in days {
        if totals.contains_key(&day) {
            continue;
        }
        let minutes = store
            .rollups(RollupKind::Deliveries, day, day + DAY_MS)
            .await?;
        if i64::try_from(minutes.len()).ok() != Some(DAY_MS / MINUTE_MS) {
            continue;
        }
        let mut sum = crate::eventlog::MinuteCounts::new();
        for counts in minutes.into_values() {
            for (k, n) in counts {
                *sum.entry(k).or_default() += n;
            }
        }
        store
            .put_day_rollup(RollupKind::Deliveries, day, &sum)
            .await?;
        totals.insert(day, sum);
    }
    Ok(totals)
}

/// The first instant from which deliveries with `outcome` may exist in `[since_ms, …)`: past
/// every leading whole day whose stored totals hold none (so a page of them reads no empty
/// days). A day without totals ends the skip.
pub fn first_possible(totals: &crate::eventlog::Rollups, outcome: Outcome, since_ms: i64) -> i64 {
    let suffix = format!("#{outcome}");
    let mut from = since_ms;
    let mut day = since_ms.div_euclid(DAY_MS) * DAY_MS;
    while let Some(counts) = totals.get(&day) {
        if counts.iter().any(|(k, n)| *n > 0 && k.ends_with(&suffix)) {
            break;
        }
        day += DAY_MS;
        from = from.max(day);
    }
    from
}

/// Stores the rollups (deliveries and money) of every closed minute of `[since_ms, until_ms)`
/// not stored yet, a walk budget at a time, so the pages that read them later find them all:
/// what the console runs in the background when it starts, so no operator's first page pays
/// for a week of log. True when everything was stored within `max_calls` walks of each kind
/// (else later pages store the rest).
pub async fn warm_rollups<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    providers: &crate::providers::Providers,
    window: (i64, i64, i64),
    max_calls: usize,
) -> Result<bool, ReadError> {
    for what in [Counted::Deliveries, Counted::Money(providers)] {
        let mut complete = false;
        for _ in 0..max_calls {
            if rolled_up(store, &what, window, TALLY_WALK).await?.complete {
                complete = true;
                break;
            }
        }
        if !complete {
            return Ok(false);
        }
    }
    day_totals(store, window.0, window.2).await?;
    Ok(true)
}

/// Counts `[from_ms, to_ms)` oldest first from the log, by minute, spending `budget`
/// deliveries; returns the counts and how far they are complete (`to_ms` when whole; else the
/// start of the minute the budget ran out in, so no partly counted minute is passed on).
async fn walk<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    what: &Counted<'_>,
    from_ms: i64,
    to_ms: i64,
    budget: &mut usize,
) -> Result<(crate::eventlog::Rollups, i64), ReadError> {
    let filter = LogFilter {
        since_ms: Some(from_ms),
        until_ms: Some(to_ms),
        ..LogFilter::default()
    };
    let mut out = crate::eventlog::Rollups::new();
    let mut after = String::new();
    loop {
        let page = store
            .query_oldest_first(&filter, MAX_PAGE.min((*budget).max(1)), &after)
            .await?;
        let Some(last) = page.last() else {
            return Ok((out, to_ms));
        };
        if *budget == 0 {
            let cut = (last.received_at_ms.min(to_ms)).div_euclid(MINUTE_MS) * MINUTE_MS;
            out.retain(|m, _| *m < cut);
            return Ok((out, cut.max(from_ms)));
        }
        after = last.id.to_string();
        let full = page.len() == MAX_PAGE.min(*budget);
        *budget = budget.saturating_sub(page.len());
        match what {
            Counted::Deliveries => {
                for d in &page {
                    let key = format!("{}#{}", d.provider, d.outcome);
                    *out.entry(minute_of(d)).or_default().entry(key).or_default() += 1;
                }
            }
            Counted::Money(providers) => count_money(store, providers, &page, &mut out).await?,
        }
        if !full && *budget > 0 {
            return Ok((out, to_ms));
        }
    }
}

/// Money the webhooks moved, per UTC day and currency: (in, out) in minor units.
pub type MoneyByDay = BTreeMap<(String, String), (i64, i64)>;

/// Money moved by the applied deliveries received in `[since_ms, until_ms)` (at store time
/// `now_ms`), per UTC day and currency: payments, refund reversals, dispute reinstatements and
/// reversed payouts in; refunds, dispute withdrawals and payouts the provider paid out. Closed minutes come from stored money rollups
/// (counted from the bodies once); the open tail is read. At most `max_walk` deliveries are
/// walked; the flag says whether every applied delivery was counted.
pub async fn money_moved<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    providers: &crate::providers::Providers,
    (since_ms, until_ms, now_ms): (i64, i64, i64),
    max_walk: usize,
) -> Result<(MoneyByDay, bool), ReadError> {
    let window = (since_ms, until_ms, now_ms);
    let t = rolled_up(store, &Counted::Money(providers), window, max_walk).await?;
    let mut out = MoneyByDay::new();
    for (minute, sums) in &t.minutes {
        for (key, amount) in sums {
            let Some((currency, way)) = key.split_once('#') else {
                continue;
            };
            let entry = out
                .entry((crate::eventlog::utc_day(*minute), currency.to_owned()))
                .or_default();
            let amount = i64::try_from(*amount).unwrap_or(i64::MAX);
            if way == "in" {
                entry.0 = entry.0.saturating_add(amount);
            } else {
                entry.1 = entry.1.saturating_add(amount);
            }
        }
    }
    Ok((out, t.complete))
}

fn minute_of(d: &Delivery) -> i64 {
    d.received_at_ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

/// Adds the money of the applied deliveries of `page` to their minutes, reading their bodies a
/// batch at once.
async fn count_money<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    providers: &crate::providers::Providers,
    page: &[Delivery],
    out: &mut crate::eventlog::Rollups,
) -> Result<(), ReadError> {
    let applied: Vec<&Delivery> = page
        .iter()
        .filter(|d| d.outcome == Outcome::Applied)
        .collect();
    for batch in applied.chunks(BODY_READS_AT_ONCE) {
        let bodies =
            futures::future::try_join_all(batch.iter().map(|d| store.with_body(d))).await?;
        for d in bodies {
            let Some((money, incoming)) = money_of(store, providers, &d).await? else {
                continue;
            };
            let way = if incoming { "in" } else { "out" };
            let key = format!("{}#{way}", money.currency.as_str());
            let amount = u64::try_from(money.amount.get()).unwrap_or(0);
            let sum = out
                .entry(minute_of(&d))
                .or_default()
                .entry(key)
                .or_default();
            *sum = sum.saturating_add(amount);
        }
    }
    Ok(())
}

/// The money an applied delivery moved, and whether it came in: through the provider's own
/// mapping of its body, or, for a payout's settlement, the payout's own amount (a transfer
/// webhook may name none; payhook's own check of a payout logs no provider body).
async fn money_of<S: EventLog + crate::payouts::Payouts>(
    store: &S,
    providers: &crate::providers::Providers,
    d: &Delivery,
) -> Result<Option<(crate::domain::Money, bool)>, ReadError> {
    use crate::domain::{DisputeMovement, EventKind, TransferState};
    let transfer = if d.event_type == crate::pipeline::PROVIDER_ANSWER {
        provider_answer(d)
    } else {
        let Ok(event) = crate::replay::event_of(providers, d) else {
            return Ok(None);
        };
        match event.kind {
            EventKind::PaymentSucceeded(p) => return Ok(Some((p.money, true))),
            EventKind::RefundSucceeded(r) | EventKind::CancelOrRefund(r) => {
                return Ok(Some((r.money, false)))
            }
            EventKind::RefundReversed(r) => return Ok(Some((r.money, true))),
            EventKind::Dispute { facts, movement } => {
                return Ok(Some((
                    facts.money,
                    movement == DisputeMovement::Reinstatement,
                )))
            }
            EventKind::Transfer(t) => Some((t.reference, t.state, t.money)),
            _ => None,
        }
    };
    // A payout leaves when the provider says it paid it and comes back when it says it
    // reversed it; a failure before payment moved nothing out.
    let Some((reference, state, money)) = transfer else {
        return Ok(None);
    };
    let incoming = match state {
        TransferState::Success => false,
        TransferState::Reversed => true,
        TransferState::Failed | TransferState::Pending => return Ok(None),
    };
    let money = match money {
        Some(m) => Some(m),
        None => match crate::payouts::PayoutId::parse(reference.as_str()) {
            Some(id) => store.payout(&id).await?.and_then(|p| p.money().ok()),
            None => None,
        },
    };
    Ok(money.map(|m| (m, incoming)))
}

/// The reference and word of payhook's own record of a provider's answer about a payout
/// (`{"payout", "state", "provider_status"}`, logged by [`crate::pipeline`]).
fn provider_answer(
    d: &Delivery,
) -> Option<(
    crate::domain::Reference,
    crate::domain::TransferState,
    Option<crate::domain::Money>,
)> {
    use crate::domain::TransferState;
    let body: serde_json::Value = serde_json::from_str(d.raw_body.as_deref()?).ok()?;
    let state = match body["state"].as_str()? {
        "success" => TransferState::Success,
        "reversed" => TransferState::Reversed,
        "failed" => TransferState::Failed,
        _ => return None,
    };
    let reference = crate::domain::Reference::parse(body["payout"].as_str()?).ok()?;
    Some((reference, state, None))
}

/// Body reads in flight at once for the money figures.
const BODY_READS_AT_ONCE: usize = 32;

/// The opaque page cursor: the last delivery id of a page (exclusive bound of the next),
/// base64url-encoded and versioned so its form can change without breaking old pages silently.
pub struct Cursor;

const CURSOR_VERSION: &str = "d1.";

impl Cursor {
    pub fn encode(last_id: &str) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("{CURSOR_VERSION}{}", b64.encode(last_id))
    }

    /// The delivery id inside a cursor; anything that is not one of ours is refused.
    pub fn decode(cursor: &str) -> Result<String, ReadError> {
        let bad = || ReadError::invalid("cursor", "not a cursor this API returned");
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let body = cursor.strip_prefix(CURSOR_VERSION).ok_or_else(bad)?;
        let bytes = b64.decode(body).map_err(|_| bad())?;
        let id = String::from_utf8(bytes).map_err(|_| bad())?;
        // A delivery id: 13 digits of epoch ms, '-', 32 hex digits (`Delivery::new_id`).
        let ok = id.len() == 46
            && id.as_bytes()[13] == b'-'
            && id[..13].bytes().all(|b| b.is_ascii_digit())
            && id[14..].bytes().all(|b| b.is_ascii_hexdigit());
        if ok {
            Ok(id)
        } else {
            Err(bad())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_leading_days_known_to_hold_none_are_skipped() {
        let day = DAY_MS;
        let since = 10 * day + 5_000;
        let counts = |pairs: &[(&str, u64)]| -> crate::eventlog::MinuteCounts {
            pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
        };
        let mut totals = crate::eventlog::Rollups::new();
        totals.insert(10 * day, counts(&[("generic#applied", 40)]));
        totals.insert(
            11 * day,
            counts(&[("stripe#parked", 0), ("generic#applied", 3)]),
        );
        totals.insert(12 * day, counts(&[("stripe#parked", 2)]));
        // Days 10 and 11 hold no parked delivery: start at day 12, which does.
        assert_eq!(first_possible(&totals, Outcome::Parked, since), 12 * day);
        // Nothing known holds a failed one: past every known day, not one day further.
        assert_eq!(first_possible(&totals, Outcome::Failed, since), 13 * day);
        // A day without totals (not stored yet) is never skipped, nor anything after it.
        totals.remove(&(11 * day));
        assert_eq!(first_possible(&totals, Outcome::Parked, since), 11 * day);
        assert_eq!(
            first_possible(&crate::eventlog::Rollups::new(), Outcome::Failed, since),
            since
        );
        // Applied deliveries on day 10: no skip at all.
        assert_eq!(first_possible(&totals, Outcome::Applied, since), since);
    }

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let id = Delivery::new_id(1_764_670_000_000).to_string();
        let c = Cursor::encode(&id);
        assert!(!c.contains(&id), "opaque: {c}");
        assert_eq!(Cursor::decode(&c).unwrap(), id);
        for bad in [
            "",
            "d1.",
            "x",
            &id,
            "d1.!!!",
            &format!(
                "d1.{}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("~")
            ),
        ] {
            assert!(
                matches!(
                    Cursor::decode(bad),
                    Err(ReadError::Invalid {
                        field: "cursor",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
    }
}
