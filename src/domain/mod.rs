//! The vocabulary of payhook, free of HTTP and DynamoDB: money, keys, normalised events and the
//! payment state machine.

mod event;
mod money;
mod payment;
pub mod time;

pub use event::{
    AccountId, ClaimedFacts, DisputeFacts, DisputeMovement, EventKind, Fingerprint, IdempotencyKey,
    NormalisedEvent, Operation, PaymentFacts, ProviderId, Recipient, Reference, RefundFacts,
    StateFacts, TextError, TransferFacts, TransferState, UnpricedDispute, UnpricedRefund,
};
pub use money::{decimal_units, Currency, MinorUnits, Money, MoneyError, MAX_AMOUNT_MINOR};
pub use payment::PaymentStatus;

/// The largest body accepted, well under DynamoDB's 400 KB item limit so the raw body fits in
/// the delivery log untruncated.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// Milliseconds since the Unix epoch, from this process's clock: only for what is this
/// process's own (durations, local logs). What the store writes and judges is in the store's
/// time ([`dynamo_claim::StoreClock`]). DynamoDB's TTL wants seconds, see [`expires_at_s`].
pub use dynamo_claim::local_now_ms as now_ms;

/// Epoch seconds `retention_s` after `now_ms`: the value DynamoDB's TTL attribute wants.
pub use dynamo_claim::expires_at_s;

/// The proleptic Gregorian date (year, month, day) of a day counted from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`): the delivery log's day buckets and the command line's dates,
/// without a date library.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
