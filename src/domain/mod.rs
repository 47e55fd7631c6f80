//! The vocabulary of payhook, free of HTTP and DynamoDB: money, keys, normalised events and the
//! payment state machine.

mod event;
mod money;
mod payment;

pub use event::{
    AccountId, ClaimedFacts, EventKind, Fingerprint, IdempotencyKey, NormalisedEvent, Operation,
    PaymentFacts, ProviderId, Reference, RefundFacts, StateFacts, TextError, UnpricedRefund,
};
pub use money::{Currency, MinorUnits, Money, MoneyError, MAX_AMOUNT_MINOR};
pub use payment::PaymentStatus;

/// Milliseconds since the Unix epoch, from the system clock. Leases and logs compare these
/// numbers; DynamoDB's TTL wants seconds, see [`expires_at_s`].
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Epoch seconds `retention_s` after `now_ms`: the value DynamoDB's TTL attribute wants.
pub fn expires_at_s(now_ms: i64, retention_s: i64) -> i64 {
    now_ms / 1000 + retention_s
}
