//! Cancel-or-refund (Adyen `CANCEL_OR_REFUND`, success): the provider returned the customer's
//! money, by cancelling the payment if it was not captured or refunding it if it was. What the
//! ledger must do depends only on what payhook itself did: a payment payhook credited gets a
//! refund's debit (the same write, key and answer as a refund, so once); a payment payhook never
//! credited (absent, PENDING, PROCESSING, FAILED) had nothing in the balance to take back, so
//! nothing moves and the provider is answered 200 (its claim released, so nothing stored stands
//! in the way of a later look).

use super::{Answer, Pipeline, PipelineError, Settled, Status, Store, Uncredited};
use crate::domain::{IdempotencyKey, NormalisedEvent, RefundFacts};
use crate::eventlog::Outcome;
use crate::payments::PaymentRecord;

impl<S: Store> Pipeline<S> {
    pub(super) async fn cancel_or_refund(
        &self,
        ev: &NormalisedEvent,
        r: &RefundFacts,
        key: &IdempotencyKey,
    ) -> Result<Settled, PipelineError> {
        self.debit(ev, r, key, Uncredited::NothingToReturn).await
    }
}

/// 200 `not_credited`: the payment was never credited by payhook, so there is nothing to take
/// back; logged stale (a delivery that changed nothing).
pub(super) fn not_credited(
    ev: &NormalisedEvent,
    r: &RefundFacts,
    payment: Option<PaymentRecord>,
) -> Answer {
    let status = payment.as_ref().map_or("UNKNOWN", |p| p.status.as_str());
    let body = Status {
        status: "not_credited",
        reference: Some(r.payment_reference.as_str()),
        payment_status: Some(status),
        event_type: Some(&ev.event_type),
    };
    Answer::json(200, &body, Outcome::Stale)
}
