//! Debits parked before their payment was paid, in the pipeline: a refund or a dispute
//! withdrawal that finds its payment not paid is written down on it ([`crate::payments::parked`])
//! and answered 409 (the provider redelivers); the credit that pays the payment applies and posts
//! each of them *before* it posts itself, so no balance ever holds money the provider has already
//! taken back, and a payout cannot reserve it.
//!
//! Each debit is applied by the same judged write as its own delivery would make, under its own
//! key, so its redelivery (or reconciliation's parked step) finds it done and posts nothing more.

use super::{parked, Pipeline, PipelineError, Settled, Signed, Store};
use crate::domain::{
    DisputeFacts, DisputeMovement, IdempotencyKey, Money, Operation, ProviderId, Reference,
    RefundFacts,
};
use crate::payments::parked::{to_take, ParkOutcome, ParkedDebit};
use crate::payments::{DisputeOutcome, PaymentRecord, RefundOutcome};

impl<S: Store> Pipeline<S> {
    /// Writes a debit down on its not-yet-paid payment: `None` when parked (answer 409), or
    /// `Some(())` when the payment was paid meanwhile and the debit must be judged again.
    pub(super) async fn park(
        &self,
        provider: ProviderId,
        payment_reference: &Reference,
        key: &IdempotencyKey,
        money: Money,
    ) -> Result<Option<Settled>, PipelineError> {
        let debit = ParkedDebit {
            key: key.clone(),
            money,
        };
        match self
            .store
            .park_debit(provider, payment_reference, &debit)
            .await?
        {
            ParkOutcome::Parked => Ok(Some(Settled::NothingMoved(parked(key)))),
            ParkOutcome::PaidMeanwhile => Ok(None),
        }
    }

    /// Applies and posts every debit parked on `payment`: called by the credit before it posts,
    /// on every attempt (a done step finds itself done under the debit's key).
    pub(super) async fn take_parked(&self, payment: &PaymentRecord) -> Result<(), PipelineError> {
        for debit in to_take(payment) {
            let Some((op, reference)) = debit.movement() else {
                continue;
            };
            let applied = match op {
                Operation::Refund => self.apply_parked_refund(payment, debit, reference).await?,
                Operation::DisputeWithdrawal => {
                    self.apply_parked_withdrawal(payment, debit, reference)
                        .await?
                }
                _ => None,
            };
            let Some((record, resumed)) = applied else {
                // Refused, voided or in conflict: its own redelivery is answered as before.
                tracing::warn!(key = %debit.key, payment = %payment.reference,
                    "a debit parked before its payment does not apply to it; left to its redelivery");
                continue;
            };
            let amount = debit.money.amount.get();
            let moved =
                crate::payments::pairs::debit_of(&record.history, &debit.key).unwrap_or(amount);
            if moved != 0 {
                let signed = Signed::of(-moved, debit.money.currency);
                self.post(&record, &debit.key, signed, &payment.reference, resumed)
                    .await?;
            }
            tracing::info!(key = %debit.key, payment = %payment.reference, debit_minor = moved,
                "a debit parked before its payment applied ahead of its credit");
        }
        Ok(())
    }

    async fn apply_parked_refund(
        &self,
        payment: &PaymentRecord,
        debit: &ParkedDebit,
        refund_reference: Reference,
    ) -> Result<Option<(PaymentRecord, bool)>, PipelineError> {
        let facts = RefundFacts {
            refund_reference,
            payment_reference: payment.reference.clone(),
            money: debit.money,
        };
        Ok(
            match self
                .store
                .refund(payment.provider, &facts, &debit.key)
                .await?
            {
                RefundOutcome::Applied(p) => Some((p, false)),
                RefundOutcome::AlreadyApplied(p) => Some((p, true)),
                _ => None,
            },
        )
    }

    async fn apply_parked_withdrawal(
        &self,
        payment: &PaymentRecord,
        debit: &ParkedDebit,
        dispute: Reference,
    ) -> Result<Option<(PaymentRecord, bool)>, PipelineError> {
        let facts = DisputeFacts {
            dispute,
            payment_reference: payment.reference.clone(),
            money: debit.money,
        };
        let movement = DisputeMovement::Withdrawal;
        Ok(
            match self
                .store
                .dispute(payment.provider, &facts, movement, &debit.key)
                .await?
            {
                DisputeOutcome::Applied(p) => Some((p, false)),
                DisputeOutcome::AlreadyApplied(p) => Some((p, true)),
                _ => None,
            },
        )
    }
}
