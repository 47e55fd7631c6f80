//! A refund's tail, however it was claimed (on its payment, `held`, or in the claims table):
//! the ledger entry its own payment write decided, and its answer.

use super::{Applied, Pipeline, PipelineError, Settled, Signed, Store};
use crate::domain::{AccountId, IdempotencyKey, RefundFacts};
use crate::payments::PaymentRecord;

impl<S: Store> Pipeline<S> {
    /// An applied refund's ledger entry and answer, whichever way it was claimed: what its own
    /// payment write decided it debits (nothing when a dispute withdrawal already took its money,
    /// Paystack, `payments::pairs`), so a retry posts exactly that.
    pub(super) async fn refund_tail(
        &self,
        payment: &PaymentRecord,
        r: &RefundFacts,
        key: &IdempotencyKey,
        resumed: bool,
    ) -> Result<Settled, PipelineError> {
        let amount = r.money.amount.get();
        let debit = crate::payments::pairs::debit_of(&payment.history, key).unwrap_or(amount);
        let account = payment.account.as_ref().map_or("", AccountId::as_str);
        let body = Applied::refund(key, r, account, amount).moved(debit);
        let signed = Signed::of(-debit, r.money.currency);
        let (settled, _) = self
            .finish(payment, key, signed, &r.payment_reference, resumed, &body)
            .await?;
        Ok(settled)
    }
}
