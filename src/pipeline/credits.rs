//! A new payment's credit in four writes (#32): its claim is held on the payment item, taken by
//! the same conditional write that pays it, so the claims table is not written at all.
//!
//! | # | write | condition |
//! |---|---|---|
//! | 1 | `UpdateItem` payment: PAID + claim APPLYING (owner, lease, facts' fingerprint, `open = POSTING#{shard}`) | the paid write's own (sources, money guard) and `attribute_not_exists(claim_state)` |
//! | 2 | `PutItem` ledger entry (after any parked debits, each under its own key) | `attribute_not_exists` |
//! | 3 | `UpdateItem` payment: claim DONE + the answer, `REMOVE open` | `claim_owner = me AND claim_state = APPLYING` |
//! | 4 | `PutItem` delivery log | as every delivery |
//!
//! A duplicate's write 1 fails and shows the payment (`ALL_OLD`, or a consistent read): the
//! claim crate's one judge (`judge_existing`) decides from its claim, exactly as from a
//! claims-table item: DONE replays the stored answer byte for byte; APPLYING under a live lease
//! answers 409 `in_flight`; an expired lease is taken over under a condition on its owner, and
//! the steps resume (each idempotent by the key); our own token (the SDK resent write 1) is
//! ours; other facts under the key are a conflict. Other money fails write 1's money guard first
//! (422 `reference_conflict`). A payment paid without a claim on it (by the previous release,
//! or through the claims table) is the claims table's: the caller falls back to it.
//! Reconciliation finds a credit left APPLYING through `POSTING#{shard}` on the payments
//! table's `open` index, and resumes it through this same path.

use super::{conflict, contended, in_flight, not_ours, refused, Answer, Pipeline};
use super::{PipelineError, Settled, Store, Unassigned};
use crate::domain::{Fingerprint, IdempotencyKey, NormalisedEvent, PaymentFacts};
use crate::eventlog::Outcome;
use crate::idempotency::{
    judge_existing, ClaimOutcome, Existing, FinalizeOutcome, OwnerToken, StoredResponse,
};
use crate::payments::{NewCredit, NewHostClaim, PaidOutcome, PaymentRecord};

/// Rounds of write 1 -> judge -> takeover before answering "in flight": only reached when other
/// attempts keep taking the claim over under us, which a retry later settles.
const CREDIT_ROUNDS: usize = 3;

/// A paid write's outcome: the payment and whether an earlier write (ours or an earlier
/// attempt's) had paid it, or the answer when nothing was paid.
pub(super) fn paid_or_refused(
    outcome: PaidOutcome,
    key: &IdempotencyKey,
    p: &PaymentFacts,
) -> Result<(PaymentRecord, bool), Answer> {
    match outcome {
        PaidOutcome::Applied(rec) => Ok((rec, false)),
        PaidOutcome::AlreadyApplied(rec) => Ok((rec, true)),
        PaidOutcome::Mismatch(m, _) => Err(conflict(Some(key), &m)),
        PaidOutcome::NotPayable(rec) => {
            let why = format!(
                "payment is {} under another key; it needs a human",
                rec.status
            );
            Err(refused(key, "payment_not_payable", why))
        }
        // Acknowledged so the provider stops retrying; applicable later by a replay.
        PaidOutcome::Unassigned(_) => {
            let body = Unassigned {
                status: "unassigned",
                key: key.as_str(),
                reference: p.reference.as_str(),
            };
            Err(Answer::json(200, &body, Outcome::Unassigned))
        }
        PaidOutcome::Contended => Err(contended(key)),
    }
}

impl<S: Store> Pipeline<S> {
    /// The credit of `p` with its claim on the payment. `None`: the payment was paid without a
    /// claim on it, so the claims table holds this credit's claim (the caller's path).
    pub(super) async fn credit_on_payment(
        &self,
        ev: &NormalisedEvent,
        p: &PaymentFacts,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<Option<Answer>, PipelineError> {
        let layout = self.store.placement_layout().await?;
        let token = OwnerToken::generate();
        for _ in 0..CREDIT_ROUNDS {
            let new = NewCredit {
                shard: layout.place(key),
                default_account: self.default_account.as_ref(),
                claim: Some(NewHostClaim {
                    token: &token,
                    lease_ms,
                    fingerprint,
                }),
            };
            let outcome = self.store.mark_paid(ev.provider, p, key, new).await?;
            let (payment, resumed) = match paid_or_refused(outcome, key, p) {
                Ok(paid) => paid,
                Err(answer) => return Ok(Some(answer)),
            };
            let Some(claim) = payment.claim.as_ref() else {
                return Ok(None);
            };
            let now_ms = self.store.now_ms();
            match judge_existing(&claim.record(key), fingerprint, now_ms, &token) {
                Existing::Decided(ClaimOutcome::Claimed { .. }) => {
                    let answer = self.finish_credit(ev, p, key, &payment, &token, resumed);
                    return answer.await.map(Some);
                }
                Existing::Decided(other) => return Ok(Some(not_ours(other, key))),
                Existing::TakeOver { previous_owner } => {
                    let took = self
                        .store
                        .take_over_credit(
                            ev.provider,
                            &p.reference,
                            &previous_owner,
                            &token,
                            lease_ms,
                        )
                        .await?;
                    if took {
                        tracing::info!(key = %key, "took over an expired credit; resuming its steps");
                        let answer = self.finish_credit(ev, p, key, &payment, &token, true);
                        let mut answer = answer.await?;
                        answer.took_over = true;
                        return Ok(Some(answer));
                    }
                    // Someone else took it over or finished it first: judge again.
                }
            }
        }
        Ok(Some(in_flight(key, 1_000)))
    }

    /// Writes 2 and 3: the credit's tail, then its claim DONE with the answer (or, when it
    /// surely moved nothing, its lease given up so the next attempt takes over at once).
    async fn finish_credit(
        &self,
        ev: &NormalisedEvent,
        p: &PaymentFacts,
        key: &IdempotencyKey,
        payment: &PaymentRecord,
        token: &OwnerToken,
        resumed: bool,
    ) -> Result<Answer, PipelineError> {
        let reference = &p.reference;
        let answer = match self.credit_tail(payment, p, key, resumed).await? {
            Settled::NothingMoved(answer) => {
                self.store
                    .give_up_credit(ev.provider, reference, token)
                    .await?;
                return Ok(answer);
            }
            Settled::Final(answer) => answer,
        };
        let stored = StoredResponse {
            status: answer.status,
            body: answer.body.clone(),
        };
        let finalized = self
            .store
            .finalize_credit(ev.provider, reference, token, &stored)
            .await?;
        Ok(match finalized {
            FinalizeOutcome::Done => answer,
            // Our lease ran out and a successor finished first: its answer stands.
            FinalizeOutcome::Superseded(Some(theirs)) => Answer::replay(theirs),
            // A successor holds the claim and has not finished: it will.
            FinalizeOutcome::Superseded(None) => in_flight(key, 1_000),
        })
    }
}
