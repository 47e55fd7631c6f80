//! A payout settlement word's claim held on its payout item (#44): the write that applies the
//! word takes it, so the claims table is not written. The same claim, fields and protocol as a
//! refund's on its payment (`held_claims.rs`, `payment_item.rs`): one map attribute
//! `rc#{word key}` (`st`, `ow`, `ls`, `fp`, and once DONE `as` + `ab`), and while it is
//! APPLYING the payout is listed under `open = POSTING#{shard}`, where reconciliation's stuck
//! sweep (`Payments::stuck_credits`) finds every claim held on an item.
//!
//! | write | condition | sets |
//! |---|---|---|
//! | word + claim (`UpdateItem`, `ALL_NEW`) | the word's own (status it moves from, provider, word not applied), `attribute_not_exists(rc#key)`, `open` not `POSTING…` | status, movement time, `words`, `rc#key` APPLYING, `open = POSTING#…` |
//! | takeover | `rc#key.ow = previous AND rc#key.st = APPLYING AND rc#key.ls <= now` | owner, lease |
//! | finalize | `rc#key.ow = me AND rc#key.st = APPLYING` | DONE + answer, `REMOVE open` |
//!
//! A payout's `open` was `PAYOUT#…` while it waited for its word; the word's write replaces it
//! (as the word's write without a claim removes it), so the payout leaves the open-payouts
//! sweep exactly when it did before #44, and the claim's finalize takes it off the index.

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use super::item::{condition_failed, s};
use super::payment_item::{
    finalize_clauses, finalized_over, held_claim_attribute, take_over_clauses, too_large,
    took_over_already, Taking, POSTING,
};
use super::payouts::{payout_pk, to_record, SettleAim, WordWrite};
use super::DynamoStore;
use crate::domain::IdempotencyKey;
use crate::idempotency::{FinalizeOutcome, HostClaim, NewHostClaim, OwnerToken, StoredResponse};
use crate::payouts::{
    judge_settle, HeldWord, HeldWordCall, PayoutId, SettleJudgement, SettleOutcome,
};
use crate::store::StoreError;

/// Rounds of read -> write before answering "contended" (retryable): each failed write means
/// another word or call moved the payout in between.
const WORD_ROUNDS: usize = 8;

impl DynamoStore {
    pub(super) async fn apply_held_word(
        &self,
        id: &PayoutId,
        w: HeldWordCall<'_>,
        claim: NewHostClaim<'_>,
    ) -> Result<HeldWord, StoreError> {
        // The first write of a money movement: never on tables that cannot referee it.
        self.replication_allows().await?;
        let layout = crate::ledger::Ledger::placement_layout(self).await?;
        let posting = format!("{POSTING}#{}", layout.index_shard(w.key.as_str()));
        let taking = Taking::new(w.key, claim, posting);
        for _ in 0..WORD_ROUNDS {
            let Some(current) = self.get_payout_item(id).await? else {
                return Ok(HeldWord::Unmoved(SettleOutcome::Unknown));
            };
            if let Some(claim) = current.held_claims.get(w.key.as_str()).cloned() {
                return Ok(HeldWord::Claimed(current, claim));
            }
            let (current, aim) = match judge_settle(Some(current), w.origin, w.word) {
                // Applied without a claim here: the claims table holds (or held) its claim.
                SettleJudgement::Decided(SettleOutcome::AlreadyApplied { .. }) => {
                    return Ok(HeldWord::Elsewhere)
                }
                SettleJudgement::Decided(outcome) => return Ok(HeldWord::Unmoved(outcome)),
                SettleJudgement::Move {
                    current,
                    from,
                    to,
                    movement,
                } => (current, SettleAim { from, to, movement }),
            };
            // Another word's claim is APPLYING here: one `open` entry per item.
            if current.posting {
                return Ok(HeldWord::Elsewhere);
            }
            let write = WordWrite {
                current: &current,
                origin: w.origin,
                word: w.word,
                provider_status: w.provider_status,
                aim,
            };
            match self.settle_write(write, Some(&taking)).await {
                Ok(Some(record)) => {
                    let movement = aim.movement;
                    return Ok(HeldWord::Taken { record, movement });
                }
                // Moved in between (or our own write, resent by the SDK): read and judge again.
                Ok(None) => {}
                // The claim does not fit on the payout: the claims table holds it.
                Err(e) if too_large(&e) => return Ok(HeldWord::Elsewhere),
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Contended {
            table: self.tables.payments.clone(),
            key: payout_pk(id),
        })
    }

    pub(super) async fn take_over_held_word(
        &self,
        id: &PayoutId,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<bool, StoreError> {
        let update = take_over_clauses(
            self.word_claim_update(id, key),
            previous,
            token,
            self.clock.now_ms(),
            lease_ms,
        );
        Ok(match self.word_claim_write(update, id, key).await? {
            Ok(()) => true,
            Err(old) => took_over_already(old.as_ref(), token),
        })
    }

    pub(super) async fn finalize_held_word(
        &self,
        id: &PayoutId,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        let write = |with_body| {
            let update =
                finalize_clauses(self.word_claim_update(id, key), token, answer, with_body);
            self.word_claim_write(update, id, key)
        };
        let written = match write(true).await {
            // The answer does not fit in the payout's 400 KB: the word moved its money, so its
            // claim is finished without the answer's body (a duplicate hears the status).
            Err(e) if too_large(&e) => {
                tracing::warn!(key = %key, payout = %id, "the answer does not fit on its payout: finished without it");
                write(false).await?
            }
            other => other?,
        };
        Ok(match written {
            Ok(()) => FinalizeOutcome::Done,
            Err(old) => finalized_over(old, token),
        })
    }

    /// An update of `key`'s claim on its payout (`#rc` named).
    fn word_claim_update(&self, id: &PayoutId, key: &IdempotencyKey) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.tables.payments)
            .key("pk", s(payout_pk(id)))
            .expression_attribute_names("#rc", held_claim_attribute(key))
    }

    /// A write of a word's claim alone: nothing read back on success; the claim the failed
    /// condition met (the server's `ALL_OLD`, else a consistent read) otherwise.
    async fn word_claim_write(
        &self,
        update: UpdateItemFluentBuilder,
        id: &PayoutId,
        key: &IdempotencyKey,
    ) -> Result<Result<(), Option<HostClaim>>, StoreError> {
        let table = &self.tables.payments;
        let result = update
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let e = match result {
            Ok(_) => return Ok(Ok(())),
            Err(e) => e,
        };
        let old = match condition_failed(e, "UpdateItem", table)? {
            Some(item) => Some(to_record(&item, table)?),
            None => self.get_payout_item(id).await?,
        };
        Ok(Err(
            old.and_then(|p| p.held_claims.get(key.as_str()).cloned())
        ))
    }
}
