//! Dispute movements on the payments table: one conditional `UpdateItem` per attempt, which
//! records the movement's key in `dispute_keys`, moves `disputed_minor` and the refundable
//! remainder, and appends a history entry with the amount (its time is the ledger entry's).
//! A failed write is judged by [`judge_dispute`].

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{n, s};
use super::payments::{history_entry, WRITE_ROUNDS};
use super::DynamoStore;
use crate::domain::{DisputeFacts, DisputeMovement, IdempotencyKey, PaymentStatus, ProviderId};
use crate::payments::disputes::withdrawal_key;
use crate::payments::{judge_dispute, DisputeJudgement, DisputeOutcome, PaymentRecord};
use crate::store::StoreError;

impl DynamoStore {
    /// Records the dispute movement, expecting the payment in the paid status `at`.
    async fn dispute_write(
        &self,
        provider: ProviderId,
        facts: &DisputeFacts,
        movement: DisputeMovement,
        key: &IdempotencyKey,
        at: PaymentStatus,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        let now = self.clock.now_ms();
        // A withdrawal takes from what may still be refunded (below zero if the provider took
        // more than remained); a reinstatement gives it back.
        let (refundable, disputed) = match movement {
            DisputeMovement::Withdrawal => (
                "refundable_minor = refundable_minor - :amt",
                "disputed_minor = if_not_exists(disputed_minor, :zero) + :amt",
            ),
            DisputeMovement::Reinstatement => (
                "refundable_minor = refundable_minor + :amt",
                "disputed_minor = if_not_exists(disputed_minor, :zero) - :amt",
            ),
        };
        let amount = facts.money.amount.get();
        // A reinstatement gives back a withdrawal already applied, never one still to come.
        let withdrawal = withdrawal_key(facts, key);
        let after_withdrawal = if withdrawal.is_some() {
            " AND contains(dispute_keys, :withdrawal)"
        } else {
            ""
        };
        let mut update = self
            .payment_update(provider, &facts.payment_reference, now)
            .update_expression(format!(
                "SET {refundable}, {disputed}, updated_at_ms = :now, \
                 history = list_append(if_not_exists(history, :empty), :h) ADD dispute_keys :keys"
            ))
            .condition_expression(format!(
                "attribute_exists(pk) AND #status = :at AND currency = :cur \
                 AND NOT contains(dispute_keys, :key){after_withdrawal}"
            ))
            .expression_attribute_values(":amt", n(amount))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":at", s(at.as_str()))
            .expression_attribute_values(":cur", s(facts.money.currency.as_str()))
            .expression_attribute_values(":key", s(key.as_str()))
            .expression_attribute_values(":keys", AttributeValue::Ss(vec![key.to_string()]))
            .expression_attribute_values(":h", history_entry(at, key.as_str(), now, Some(amount)));
        if let Some(w) = withdrawal {
            update = update.expression_attribute_values(":withdrawal", s(w.as_str()));
        }
        self.conditional_update(update, provider, &facts.payment_reference)
            .await
    }

    /// Applies a dispute movement to its payment: a few judged writes, like a refund's.
    pub(super) async fn apply_dispute(
        &self,
        provider: ProviderId,
        facts: &DisputeFacts,
        movement: DisputeMovement,
        key: &IdempotencyKey,
    ) -> Result<DisputeOutcome, StoreError> {
        // Most disputes hit a payment that is PAID.
        let mut at = PaymentStatus::Paid;
        for _ in 0..WRITE_ROUNDS {
            let old = match self
                .dispute_write(provider, facts, movement, key, at)
                .await?
            {
                Ok(record) => return Ok(DisputeOutcome::Applied(record)),
                Err(old) => old,
            };
            match judge_dispute(old, facts, key) {
                DisputeJudgement::Decided(outcome) => return Ok(outcome),
                DisputeJudgement::Aim(status) => at = status,
            }
        }
        Ok(DisputeOutcome::Contended)
    }
}
