//! Disputes in the pipeline: the money a provider took back from the merchant (withdrawal,
//! debited) or gave back (reinstatement, credited), each once under its own key, on the
//! payment's recorded account and ledger shard. A dispute may take a balance below zero: the
//! provider has already taken the money, so it is applied, never refused, and reported.
//!
//! Two movements post nothing and are answered 2xx: a withdrawal that is the second report of
//! money a refund already debited (Paystack, [`crate::payments::pairs`]), and a declined
//! dispute, recorded on its payment so it is listed there.

use super::{
    conflict, contended, parked, retry_later, Applied, Parking, Pipeline, PipelineError, Settled,
    Signed, Store, PARKED_RETRY_MS,
};
use crate::domain::{AccountId, DisputeFacts, DisputeMovement, IdempotencyKey, NormalisedEvent};
use crate::eventlog::Outcome;
use crate::ledger::PostOutcome;
use crate::payments::{DisputeOutcome, PaymentRecord};

impl<S: Store> Pipeline<S> {
    pub(super) async fn dispute(
        &self,
        ev: &NormalisedEvent,
        facts: &DisputeFacts,
        movement: DisputeMovement,
        key: &IdempotencyKey,
    ) -> Result<Settled, PipelineError> {
        let mut outcome = self
            .store
            .dispute(ev.provider, facts, movement, key)
            .await?;
        if matches!(outcome, DisputeOutcome::NotYetPaid(_))
            && movement == DisputeMovement::Withdrawal
        {
            // Written down on the payment, whose credit takes it first (`pipeline::parked`).
            let (reference, money) = (&facts.payment_reference, facts.money);
            match self.park(ev, reference, key, money).await? {
                Parking::Parked(settled) => return Ok(settled),
                Parking::PaidMeanwhile => {
                    outcome = self
                        .store
                        .dispute(ev.provider, facts, movement, key)
                        .await?
                }
                Parking::Bound(ev) => return Box::pin(self.apply(&ev, key)).await,
            }
        }
        let (payment, resumed) = match outcome {
            DisputeOutcome::Applied(p) => (p, false),
            DisputeOutcome::AlreadyApplied(p) => {
                match super::held_won(p.held_claims.get(key.as_str()), key) {
                    Some(settled) => return Ok(settled),
                    None => (p, true),
                }
            }
            // Not paid yet: no account or shard to move money on; the provider (or
            // reconciliation's parked step) re-drives it once the payment is paid.
            DisputeOutcome::NotYetPaid(_) => return Ok(Settled::NothingMoved(parked(key))),
            // Money back before the money left: not spendable yet; parked the same way.
            DisputeOutcome::AwaitingWithdrawal(_) => {
                return Ok(Settled::NothingMoved(awaiting_withdrawal(key)))
            }
            DisputeOutcome::Mismatch(m, _) => {
                return Ok(Settled::NothingMoved(conflict(Some(key), &m)))
            }
            DisputeOutcome::Contended => return Ok(Settled::NothingMoved(contended(key))),
        };
        self.dispute_tail(&payment, facts, movement, key, resumed)
            .await
    }

    /// An applied dispute movement's ledger entry and answer, however it was claimed (on its
    /// payment, `held`, or in the claims table).
    pub(super) async fn dispute_tail(
        &self,
        payment: &PaymentRecord,
        facts: &DisputeFacts,
        movement: DisputeMovement,
        key: &IdempotencyKey,
        resumed: bool,
    ) -> Result<Settled, PipelineError> {
        let amount = facts.money.amount.get();
        // What this movement's own write decided it moves (a paired withdrawal: nothing, its
        // refund already debited the money), so a retry posts exactly that.
        let signed = match movement {
            DisputeMovement::Withdrawal => {
                -crate::payments::pairs::debit_of(&payment.history, key).unwrap_or(amount)
            }
            DisputeMovement::Reinstatement => amount,
            DisputeMovement::Declined => 0,
        };
        let account = payment.account.as_ref().map_or("", AccountId::as_str);
        let body = Applied::dispute(key, facts, account, movement, signed);
        let amount = Signed::of(signed, facts.money.currency);
        let reference = &facts.payment_reference;
        let (settled, posted) = self
            .finish(payment, key, amount, reference, resumed, &body)
            .await?;
        if movement == DisputeMovement::Withdrawal && posted == Some(PostOutcome::Posted) {
            self.report_below_zero(payment.account.as_ref(), facts, key)
                .await;
        }
        Ok(settled)
    }

    /// Says so (a warning log line, for the operator's alarm) when a withdrawal took the
    /// account below zero in the dispute's currency. Best effort: a read that fails says nothing
    /// and the money stays moved.
    async fn report_below_zero(
        &self,
        account: Option<&AccountId>,
        facts: &DisputeFacts,
        key: &IdempotencyKey,
    ) {
        let Some(account) = account else { return };
        let Ok(balance) = self.store.balance(account).await else {
            return;
        };
        let currency = facts.money.currency;
        if let Some(b) = balance.balances.get(&currency).filter(|b| **b < 0) {
            tracing::warn!(account = %account, %currency, balance_minor = *b, key = %key,
                "a dispute withdrawal took the account below zero: the provider has already taken the money");
        }
    }
}

/// 409 with `Retry-After`, logged parked: a reinstatement waits for its withdrawal (the
/// provider's redelivery or reconciliation's parked step re-drives it).
fn awaiting_withdrawal(key: &IdempotencyKey) -> super::Answer {
    let why = "the dispute's withdrawal is not applied yet; retry later";
    retry_later(
        key,
        "withdrawal_not_applied",
        why,
        Outcome::Parked,
        PARKED_RETRY_MS,
    )
}
