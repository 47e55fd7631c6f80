//! A refund's claim held on its payment item (#44): the write that applies the refund takes it,
//! so a new refund costs no claims-table writes.
//!
//! Item: one map attribute per refund claimed here, named `rc#{refund key}`:
//! `st` (APPLYING | DONE), `ow` (owner token, kept once DONE), `ls` (lease end, the store's
//! time), `fp` (the facts' fingerprint), and once DONE `as` + `ab` (the stored answer). While
//! a refund's claim is APPLYING the payment is listed under `open = POSTING#{shard}`, and it
//! holds no other claim APPLYING: a refund's write takes its claim only on a payment without
//! `open`, so the credit's claim and the refunds' never share the index entry, and the write
//! that finishes one removes it.
//!
//! | write | condition | sets |
//! |---|---|---|
//! | refund + claim (`UpdateItem`) | the refund's own, `attribute_not_exists(open)`, `attribute_not_exists(rc#key)` | the refund, `rc#key` APPLYING, `open` |
//! | takeover | `rc#key.ow = previous AND rc#key.st = APPLYING AND rc#key.ls <= now` | owner, lease |
//! | finalize | `rc#key.ow = me AND rc#key.st = APPLYING` | DONE + answer, `REMOVE open` |

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;

use super::item::{n, s};
use super::payment_item::{refund_claim_attribute, Taking, APPLYING, DONE, POSTING, REFUND_CLAIM};
use super::DynamoStore;
use crate::domain::{IdempotencyKey, ProviderId, Reference, RefundFacts};
use crate::idempotency::{ClaimState, FinalizeOutcome, OwnerToken, StoredResponse};
use crate::payments::{
    judge_refund, HostClaim, HostedRefund, NewHostClaim, PaymentRecord, RefundJudgement,
    RefundWrite,
};
use crate::store::StoreError;

/// `key`'s claim on `payment`, if it has one.
fn claim_in(payment: Option<&PaymentRecord>, key: &IdempotencyKey) -> Option<HostClaim> {
    payment.and_then(|p| p.refund_claims.get(key.as_str()).cloned())
}

impl DynamoStore {
    pub(super) async fn apply_hosted_refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        key: &IdempotencyKey,
        claim: NewHostClaim<'_>,
    ) -> Result<HostedRefund, StoreError> {
        // The first write of a money movement: never on tables that cannot referee it (as a
        // claims-table claim and a credit's, `dynamodb::regions`).
        self.replication_allows().await?;
        let layout = crate::ledger::Ledger::placement_layout(self).await?;
        let posting = format!("{POSTING}#{}", layout.index_shard(key.as_str()));
        let taking = Taking::new(key, claim, posting);
        let mut aim = RefundWrite::first(key);
        for _ in 0..super::payment_item::WRITE_ROUNDS {
            let old = match self
                .refund_to(provider, facts, key, aim, Some(&taking))
                .await?
            {
                Ok(record) => return Ok(HostedRefund::Taken(record)),
                Err(old) => old,
            };
            if let Some(claim) = claim_in(old.as_ref(), key) {
                let Some(payment) = old else {
                    return Ok(HostedRefund::Elsewhere);
                };
                return Ok(HostedRefund::Claimed(payment, claim));
            }
            // Another claim holds the payment: this refund goes through the claims table.
            if old.as_ref().is_some_and(|p| p.posting) {
                return Ok(HostedRefund::Elsewhere);
            }
            match judge_refund(old, facts, key) {
                RefundJudgement::Aim(next) => aim = next,
                RefundJudgement::Decided(_) => return Ok(HostedRefund::Elsewhere),
            }
        }
        Ok(HostedRefund::Elsewhere)
    }

    /// An update of `key`'s claim on its payment (`#rc` named).
    fn refund_claim_update(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
    ) -> UpdateItemFluentBuilder {
        self.claim_update(provider, payment)
            .expression_attribute_names("#rc", refund_claim_attribute(key))
    }

    /// Sends a refund claim's write: `Ok(())`, or the payment whole when the condition failed.
    async fn refund_claim_write(
        &self,
        update: UpdateItemFluentBuilder,
        provider: ProviderId,
        payment: &Reference,
    ) -> Result<Result<(), Option<PaymentRecord>>, StoreError> {
        use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;
        let result = update
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Ok(())),
            Err(e) => {
                self.failed_image(e, provider, payment, super::payments::View::Whole)
                    .await
            }
        }
    }

    pub(super) async fn take_over_hosted_refund(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let update = self
            .refund_claim_update(provider, payment, key)
            .update_expression("SET #rc.ow = :tok, #rc.ls = :lease")
            .condition_expression("#rc.ow = :prev AND #rc.st = :applying AND #rc.ls <= :now")
            .expression_attribute_values(":tok", s(token.as_str()))
            .expression_attribute_values(":prev", s(previous.as_str()))
            .expression_attribute_values(":applying", s(APPLYING))
            .expression_attribute_values(":lease", n(now.saturating_add(lease_ms)))
            .expression_attribute_values(":now", n(now));
        Ok(
            match self.refund_claim_write(update, provider, payment).await? {
                Ok(()) => true,
                // Ours already: the SDK resent a takeover whose reply was lost.
                Err(old) => claim_in(old.as_ref(), key).is_some_and(
                    |c| matches!(&c.state, ClaimState::InProgress { owner, .. } if owner == token),
                ),
            },
        )
    }

    pub(super) async fn finalize_hosted_refund(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        let update = self
            .refund_claim_update(provider, payment, key)
            .update_expression("SET #rc.st = :done, #rc.#as = :as, #rc.ab = :ab REMOVE #open")
            .condition_expression("#rc.ow = :tok AND #rc.st = :applying")
            .expression_attribute_names("#open", "open")
            .expression_attribute_names("#as", REFUND_CLAIM.answer_status)
            .expression_attribute_values(":tok", s(token.as_str()))
            .expression_attribute_values(":applying", s(APPLYING))
            .expression_attribute_values(":done", s(DONE))
            .expression_attribute_values(":as", n(i64::from(answer.status)))
            .expression_attribute_values(":ab", s(answer.body.as_str()));
        let old = match self.refund_claim_write(update, provider, payment).await? {
            Ok(()) => return Ok(FinalizeOutcome::Done),
            Err(old) => old,
        };
        Ok(match claim_in(old.as_ref(), key) {
            // DONE under our own token: the SDK resent our finalize after losing its reply.
            Some(HostClaim {
                state: ClaimState::Done(_),
                owner,
                ..
            }) if &owner == token => FinalizeOutcome::Done,
            Some(HostClaim {
                state: ClaimState::Done(stored),
                ..
            }) => FinalizeOutcome::Superseded(Some(stored)),
            _ => FinalizeOutcome::Superseded(None),
        })
    }
}
