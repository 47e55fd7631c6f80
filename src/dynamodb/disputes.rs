//! Dispute movements on the payments table: one conditional `UpdateItem` per attempt, which
//! records the movement's key in `dispute_keys`, moves `disputed_minor` and the refundable
//! remainder, and appends a history entry with the amount (its time is the ledger entry's).
//! A failed write is judged by [`judge_dispute`].

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{n, s};
use super::payment_item::{history_entry, totals_condition, Taking, WRITE_ROUNDS};
use super::DynamoStore;
use crate::domain::{DisputeFacts, DisputeMovement, IdempotencyKey, ProviderId};
use crate::payments::disputes::withdrawal_key;
use crate::payments::{
    judge_dispute, DisputeJudgement, DisputeOutcome, DisputeWrite, PaymentRecord,
};
use crate::store::StoreError;

impl DynamoStore {
    /// Records the dispute movement as `aim` says: in the paid status `aim.at`, and, on a payment
    /// whose refunds repeat its disputes, on the exact totals the judge read.
    pub(super) async fn dispute_write(
        &self,
        provider: ProviderId,
        facts: &DisputeFacts,
        movement: DisputeMovement,
        key: &IdempotencyKey,
        aim: DisputeWrite,
        claim: Option<&Taking<'_>>,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        let now = self.clock.now_ms();
        // The movement's claim, in the same write (#44).
        let (claim_set, claim_cond) = Taking::clauses(claim);
        let amount = facts.money.amount.get();
        let debit = aim.pair.map(|g| g.debit_minor(amount));
        let money = money_moves(movement, debit);
        // A reinstatement gives back a withdrawal already applied, never one still to come.
        let withdrawal = withdrawal_key(facts, key);
        let after_withdrawal = if withdrawal.is_some() {
            " AND contains(dispute_keys, :withdrawal)"
        } else {
            ""
        };
        let totals = aim.pair.map_or(String::new(), |g| totals_condition(&g));
        let mut update = self
            .payment_update(provider, &facts.payment_reference, now)
            .update_expression(format!(
                "SET {money}updated_at_ms = :now, \
                 history = list_append(if_not_exists(history, :empty), :h){claim_set} ADD dispute_keys :keys"
            ))
            .condition_expression(format!(
                "attribute_exists(pk) AND #status = :at AND currency = :cur \
                 AND NOT contains(dispute_keys, :key){after_withdrawal}{totals}{claim_cond}"
            ))
            .expression_attribute_values(":at", s(aim.at.as_str()))
            .expression_attribute_values(":cur", s(facts.money.currency.as_str()))
            .expression_attribute_values(":key", s(key.as_str()))
            .expression_attribute_values(":keys", AttributeValue::Ss(vec![key.to_string()]))
            .expression_attribute_values(
                ":h",
                history_entry(aim.at, key.as_str(), now, Some(amount), debit),
            );
        if !money.is_empty() {
            update = update
                .expression_attribute_values(":amt", n(amount))
                .expression_attribute_values(":zero", n(0));
        }
        if let Some(g) = aim.pair {
            update = update
                .expression_attribute_values(":r0", n(g.refunded_minor))
                .expression_attribute_values(":d0", n(g.disputed_minor));
        }
        if let Some(taking) = claim {
            update = taking.bind(update, now);
        }
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
        let mut aim = DisputeWrite::first(key);
        for _ in 0..WRITE_ROUNDS {
            let old = match self
                .dispute_write(provider, facts, movement, key, aim, None)
                .await?
            {
                Ok(record) => return Ok(DisputeOutcome::Applied(record)),
                Err(old) => old,
            };
            match judge_dispute(old, facts, key) {
                DisputeJudgement::Decided(outcome) => return Ok(outcome),
                DisputeJudgement::Aim(next) => aim = next,
            }
        }
        Ok(DisputeOutcome::Contended)
    }
}

/// The `SET` clauses that move the payment's money fields, each ending in ", ". A withdrawal
/// takes from what may still be refunded (below zero if the provider took more than remained)
/// and adds to the disputed total; a reinstatement gives both back. A paired withdrawal
/// (`debit` 0: its refund already lowered the remainder) adds to the disputed total only.
fn money_moves(movement: DisputeMovement, debit: Option<i64>) -> String {
    let disputed_up = "disputed_minor = if_not_exists(disputed_minor, :zero) + :amt, ";
    match (movement, debit) {
        (DisputeMovement::Withdrawal, Some(0)) => disputed_up.to_owned(),
        (DisputeMovement::Withdrawal, _) => {
            format!("refundable_minor = refundable_minor - :amt, {disputed_up}")
        }
        (DisputeMovement::Reinstatement, _) => "refundable_minor = refundable_minor + :amt, \
             disputed_minor = if_not_exists(disputed_minor, :zero) - :amt, "
            .to_owned(),
        // The merchant won before any money was taken: only the history and the key.
        (DisputeMovement::Declined, _) => String::new(),
    }
}
