//! A refund's, a dispute movement's or a reversal's claim held on its payment item (#44): the
//! write that applies the movement takes it, so it costs no claims-table writes.
//!
//! Item: one map attribute per movement claimed here, named `rc#{its key}` (the prefix from
//! when refunds alone held claims here; items written then read the same): `st` (APPLYING |
//! DONE), `ow` (owner token, kept once DONE), `ls` (lease end, the store's time), `fp` (the
//! facts' fingerprint), and once DONE `as` + `ab` (the stored answer). While a claim is
//! APPLYING the payment is listed under `open = POSTING#{shard}`, and it holds no other claim
//! APPLYING: a movement's write takes its claim only on a payment without `open`, so the
//! credit's claim and the others' never share the index entry, and the write that finishes one
//! removes it.
//!
//! | write | condition | sets |
//! |---|---|---|
//! | movement + claim (`UpdateItem`) | the movement's own, `attribute_not_exists(open)`, `attribute_not_exists(rc#key)` | the movement, `rc#key` APPLYING, `open` |
//! | takeover | `rc#key.ow = previous AND rc#key.st = APPLYING AND rc#key.ls <= now` | owner, lease |
//! | finalize | `rc#key.ow = me AND rc#key.st = APPLYING` | DONE + answer, `REMOVE open` |

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;

use super::payment_item::{
    finalize_clauses, finalized_over, held_claim_attribute, take_over_clauses, too_large,
    took_over_already, Taking, POSTING,
};
use super::payments::View;
use super::DynamoStore;
use crate::domain::{IdempotencyKey, Operation, PaymentStatus, ProviderId, Reference, RefundFacts};
use crate::idempotency::{FinalizeOutcome, OwnerToken, StoredResponse};
use crate::payments::{
    judge_dispute, judge_refund, judge_reversal, DisputeJudgement, DisputeWrite, HeldMove,
    HostClaim, Hosted, NewHostClaim, PaymentRecord, RefundJudgement, RefundWrite,
    ReversalJudgement, ReversalWrite,
};
use crate::store::StoreError;

/// `key`'s claim on `payment`, if it has one.
fn claim_in(payment: Option<&PaymentRecord>, key: &IdempotencyKey) -> Option<HostClaim> {
    payment.and_then(|p| p.held_claims.get(key.as_str()).cloned())
}

/// What a held movement's next write aims at: its own write's aim, judged after each failure
/// as the movement's own path judges it.
#[derive(Debug, Clone, Copy)]
enum Aim {
    Refund(RefundWrite),
    Dispute(DisputeWrite),
    Reversal(ReversalWrite),
}

impl Aim {
    fn first(movement: HeldMove<'_>, key: &IdempotencyKey) -> Self {
        match movement {
            HeldMove::Refund(_) => Aim::Refund(RefundWrite::first(key)),
            HeldMove::Dispute(..) => Aim::Dispute(DisputeWrite::first(key)),
            // Most reversals follow an applied refund that took the whole remainder.
            HeldMove::Reversal(_) => Aim::Reversal(ReversalWrite::Restore(PaymentStatus::Paid)),
        }
    }

    /// The aim after a failed write met `old`, or `None` when the movement does not apply now
    /// (the claims table's path decides it).
    fn next(
        movement: HeldMove<'_>,
        provider: ProviderId,
        old: Option<PaymentRecord>,
        key: &IdempotencyKey,
    ) -> Option<Self> {
        match movement {
            HeldMove::Refund(r) => match judge_refund(old, r, key) {
                RefundJudgement::Aim(next) => Some(Aim::Refund(next)),
                RefundJudgement::Decided(_) => None,
            },
            HeldMove::Dispute(d, _) => match judge_dispute(old, d, key) {
                DisputeJudgement::Aim(next) => Some(Aim::Dispute(next)),
                DisputeJudgement::Decided(_) => None,
            },
            // Only a reversal that gives a refund back claims here: its payment is paid, so no
            // credit's paid write can meet its claim. A void may meet a payment not paid yet,
            // whose credit's write would list its own claim over this one's `open` entry (and
            // the void's finalize would then take it off the index): voids, rare, claim in the
            // claims table.
            HeldMove::Reversal(r) => match judge_reversal(old, r, &refund_key(provider, r)) {
                ReversalJudgement::Write(ReversalWrite::Restore(to)) => {
                    Some(Aim::Reversal(ReversalWrite::Restore(to)))
                }
                ReversalJudgement::Write(ReversalWrite::Void) | ReversalJudgement::Decided(_) => {
                    None
                }
            },
        }
    }
}

/// The refund a reversal gives back (as `pipeline::reverse` names it).
fn refund_key(provider: ProviderId, r: &RefundFacts) -> IdempotencyKey {
    IdempotencyKey::new(provider, Operation::Refund, &r.refund_reference)
}

impl DynamoStore {
    pub(super) async fn apply_hosted(
        &self,
        provider: ProviderId,
        movement: HeldMove<'_>,
        key: &IdempotencyKey,
        claim: NewHostClaim<'_>,
    ) -> Result<Hosted, StoreError> {
        // The first write of a money movement: never on tables that cannot referee it (as a
        // claims-table claim and a credit's, `dynamodb::regions`).
        self.replication_allows().await?;
        let layout = crate::ledger::Ledger::placement_layout(self).await?;
        let posting = format!("{POSTING}#{}", layout.index_shard(key.as_str()));
        let taking = Taking::new(key, claim, posting);
        let mut aim = Aim::first(movement, key);
        for _ in 0..super::payment_item::WRITE_ROUNDS {
            let old = match self.held_write(provider, movement, key, aim, &taking).await {
                Ok(Ok(record)) => return Ok(Hosted::Taken(record)),
                Ok(Err(old)) => old,
                // The claim does not fit on the payment (400 KB): the claims table holds it,
                // and the movement's own write, smaller by the claim, is tried there.
                Err(e) if too_large(&e) => return Ok(Hosted::Elsewhere),
                Err(e) => return Err(e),
            };
            if let Some(claim) = claim_in(old.as_ref(), key) {
                let Some(payment) = old else {
                    return Ok(Hosted::Elsewhere);
                };
                return Ok(Hosted::Claimed(payment, claim));
            }
            // Another claim holds the payment: this movement goes through the claims table.
            if old.as_ref().is_some_and(|p| p.posting) {
                return Ok(Hosted::Elsewhere);
            }
            match Aim::next(movement, provider, old, key) {
                Some(next) => aim = next,
                None => return Ok(Hosted::Elsewhere),
            }
        }
        Ok(Hosted::Elsewhere)
    }

    /// The movement's own write as `aim` says, taking its claim too.
    async fn held_write(
        &self,
        provider: ProviderId,
        movement: HeldMove<'_>,
        key: &IdempotencyKey,
        aim: Aim,
        taking: &Taking<'_>,
    ) -> Result<Result<PaymentRecord, Option<PaymentRecord>>, StoreError> {
        let taking = Some(taking);
        match (movement, aim) {
            (HeldMove::Refund(r), Aim::Refund(aim)) => {
                self.refund_to(provider, r, key, aim, taking).await
            }
            (HeldMove::Dispute(d, m), Aim::Dispute(aim)) => {
                self.dispute_write(provider, d, m, key, aim, taking).await
            }
            (HeldMove::Reversal(r), Aim::Reversal(write)) => {
                let refund = refund_key(provider, r);
                self.reversal_write(provider, r, &refund, write, taking)
                    .await
            }
            // `Aim::first` and `Aim::next` aim each movement at its own write only.
            _ => Err(StoreError::Corrupt {
                table: self.tables.payments.clone(),
                key: key.to_string(),
                reason: "a held movement aimed at another movement's write".into(),
            }),
        }
    }

    /// An update of `key`'s claim on its payment (`#rc` named).
    fn held_claim_update(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
    ) -> UpdateItemFluentBuilder {
        self.claim_update(provider, payment)
            .expression_attribute_names("#rc", held_claim_attribute(key))
    }

    pub(super) async fn take_over_hosted(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let update = take_over_clauses(
            self.held_claim_update(provider, payment, key),
            previous,
            token,
            self.clock.now_ms(),
            lease_ms,
        );
        Ok(
            match self
                .claim_write(update, provider, payment, View::Whole)
                .await?
            {
                Ok(()) => true,
                Err(old) => took_over_already(claim_in(old.as_ref(), key).as_ref(), token),
            },
        )
    }

    pub(super) async fn finalize_hosted(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        let written = match self
            .finalize_write(provider, payment, key, token, answer, true)
            .await
        {
            // The answer does not fit in the payment's 400 KB (a payment with a long life): the
            // movement happened, so its claim is finished without the answer's body, as the
            // claim crate finishes one (a duplicate hears the status), never left to run again.
            Err(e) if too_large(&e) => {
                tracing::warn!(key = %key, payment = %payment, "the answer does not fit on its payment: finished without it");
                self.finalize_write(provider, payment, key, token, answer, false)
                    .await?
            }
            other => other?,
        };
        Ok(match written {
            Ok(()) => FinalizeOutcome::Done,
            Err(old) => finalized_over(claim_in(old.as_ref(), key), token),
        })
    }

    /// The finalize's write: the claim DONE with the answer's status, and its body when
    /// `with_body` (without it the item only shrinks: `st` shorter, `open` removed, so it
    /// always fits where the APPLYING claim did).
    async fn finalize_write(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
        with_body: bool,
    ) -> Result<Result<(), Option<PaymentRecord>>, StoreError> {
        let update = finalize_clauses(
            self.held_claim_update(provider, payment, key),
            token,
            answer,
            with_body,
        );
        self.claim_write(update, provider, payment, View::Whole)
            .await
    }
}
