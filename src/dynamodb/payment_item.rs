//! What every writer of a payment item shares: its history entries, the totals condition that
//! orders a refund and a dispute withdrawal of one payment, and how many rounds a contended
//! write takes. It sits below `payments.rs` (credits, refunds) and `disputes.rs` (withdrawals,
//! reinstatements), which both write the payment item and must not import each other.

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{n, s};
use crate::domain::PaymentStatus;
use crate::payments::pairs::PairGuard;

/// Rounds of write -> judge -> write again before answering "contended" (retryable). Each failed
/// round means another writer changed the payment, so the rounds only run out under a storm of
/// concurrent refunds on one payment; the provider's retry then finishes it.
pub(super) const WRITE_ROUNDS: usize = 32;

/// One history entry as a one-element list (for `list_append`), with the money it moved when it
/// is a dispute's (or a paired provider's refund), and what it debited when pairing decided it.
pub(super) fn history_entry(
    status: PaymentStatus,
    note: &str,
    at_ms: i64,
    amount_minor: Option<i64>,
    debit_minor: Option<i64>,
) -> AttributeValue {
    let mut entry: std::collections::HashMap<String, AttributeValue> = [
        ("at_ms".to_owned(), n(at_ms)),
        ("status".to_owned(), s(status.as_str())),
        ("note".to_owned(), s(note)),
    ]
    .into_iter()
    .collect();
    if let Some(amount) = amount_minor {
        entry.insert("amount_minor".to_owned(), n(amount));
    }
    if let Some(debit) = debit_minor {
        entry.insert("debit_minor".to_owned(), n(debit));
    }
    AttributeValue::L(vec![AttributeValue::M(entry)])
}

/// ` AND refunded_minor = :r0 AND disputed_minor = :d0` (either absent counting as 0): the
/// totals the pairing judge read, so a refund and a withdrawal of one payment are decided one
/// after the other, never both as the first report of their money.
pub(super) fn totals_condition(g: &PairGuard) -> String {
    let exact = |field: &str, value: i64, placeholder: &str| {
        if value == 0 {
            format!(" AND (attribute_not_exists({field}) OR {field} = {placeholder})")
        } else {
            format!(" AND {field} = {placeholder}")
        }
    };
    exact("refunded_minor", g.refunded_minor, ":r0")
        + &exact("disputed_minor", g.disputed_minor, ":d0")
}
