//! A new refund's debit in four writes (#44): its claim is held on its payment item, taken by
//! the same conditional write that applies the refund, so the claims table is not written.
//!
//! | # | write | condition |
//! |---|---|---|
//! | 1 | `UpdateItem` payment: the refund + its claim APPLYING (`rc#{key}`: owner, lease, fingerprint) and `open = POSTING#{shard}` | the refund's own (paid, currency, remainder, key not applied or voided) and no claim APPLYING on the payment (`open` absent), none for this key |
//! | 2 | `PutItem` ledger entry | `attribute_not_exists` |
//! | 3 | `UpdateItem` payment: the claim DONE + the answer, `REMOVE open` | `rc#{key}.ow = me AND rc#{key}.st = APPLYING` |
//! | 4 | `PutItem` delivery log | as every delivery |
//!
//! A duplicate's write 1 fails and shows the payment (`ALL_OLD`, or a consistent read); the
//! claim crate's one judge (`judge_existing`) decides from the refund's claim there, as from a
//! claims-table item: DONE replays the stored answer byte for byte, APPLYING under a live lease
//! answers 409, an expired lease is taken over under a condition on its owner and the steps
//! resume (each idempotent by the key), our own token (the SDK resent write 1) is ours, other
//! facts under the key are a conflict.
//!
//! Everything else goes the claims table's way, unchanged since before #44: a refund applied
//! without a claim here (by the previous release, or through the claims table), a payment
//! holding another claim APPLYING (its credit's, or another refund's: one `open` entry per
//! payment), and every refund that does not apply now (not paid yet and parked, refused,
//! voided, other money, contended). Those pay one failed write more than before; a refund that
//! applies, and its duplicates, pay one write less.
//!
//! Reconciliation finds a refund left APPLYING through `POSTING#{shard}` on the payments
//! table's `open` index (`Payments::stuck_credits`) and resumes it through this same path.

use super::{in_flight, reference_conflict, Answer, Applied, Pipeline, PipelineError, Settled};
use super::{Signed, Store};
use crate::domain::{AccountId, Fingerprint, IdempotencyKey, NormalisedEvent, RefundFacts};
use crate::idempotency::{
    judge_existing, ClaimOutcome, Existing, FinalizeOutcome, OwnerToken, StoredResponse,
};
use crate::payments::{HostedRefund, NewHostClaim, PaymentRecord};

/// Rounds of write 1 -> judge -> takeover before answering "in flight": only reached when other
/// attempts keep taking the claim over under us, which a retry later settles.
const REFUND_ROUNDS: usize = 3;

impl<S: Store> Pipeline<S> {
    /// The refund `r` with its claim on its payment. `None`: the claims table decides it (the
    /// caller's path).
    pub(super) async fn refund_on_payment(
        &self,
        ev: &NormalisedEvent,
        r: &RefundFacts,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<Option<Answer>, PipelineError> {
        let token = OwnerToken::generate();
        for _ in 0..REFUND_ROUNDS {
            let claim = NewHostClaim {
                token: &token,
                lease_ms,
                fingerprint,
            };
            let (payment, held) = match self.store.refund_hosted(ev.provider, r, key, claim).await?
            {
                HostedRefund::Elsewhere => return Ok(None),
                HostedRefund::Taken(payment) => {
                    return self
                        .finish_refund(ev, r, key, &payment, &token, false)
                        .await
                        .map(Some)
                }
                HostedRefund::Claimed(payment, held) => (payment, held),
            };
            let now_ms = self.store.now_ms();
            match judge_existing(&held.record(key), fingerprint, now_ms, &token) {
                // Our own token: the SDK resent write 1 after losing its reply.
                Existing::Decided(ClaimOutcome::Claimed { .. }) => {
                    return self
                        .finish_refund(ev, r, key, &payment, &token, true)
                        .await
                        .map(Some)
                }
                Existing::Decided(ClaimOutcome::Replay(stored)) => {
                    return Ok(Some(Answer::replay(stored)))
                }
                Existing::Decided(ClaimOutcome::ReplayUnrecorded { status }) => {
                    return Ok(Some(Answer::replay(StoredResponse::unrecorded(status))))
                }
                Existing::Decided(ClaimOutcome::InFlight { retry_after_ms }) => {
                    return Ok(Some(in_flight(key, retry_after_ms)))
                }
                Existing::Decided(ClaimOutcome::Conflict { .. }) => {
                    return Ok(Some(reference_conflict(key)))
                }
                Existing::TakeOver { previous_owner } => {
                    let took = self
                        .store
                        .take_over_refund(
                            ev.provider,
                            &r.payment_reference,
                            key,
                            &previous_owner,
                            &token,
                            lease_ms,
                        )
                        .await?;
                    if took {
                        tracing::info!(key = %key, "took over an expired refund; resuming its steps");
                        let answer = self.finish_refund(ev, r, key, &payment, &token, true);
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

    /// Writes 2 and 3: the refund's ledger entry, then its claim DONE with the answer.
    async fn finish_refund(
        &self,
        ev: &NormalisedEvent,
        r: &RefundFacts,
        key: &IdempotencyKey,
        payment: &PaymentRecord,
        token: &OwnerToken,
        resumed: bool,
    ) -> Result<Answer, PipelineError> {
        let answer = match self.refund_tail(payment, r, key, resumed).await? {
            Settled::Final(answer) | Settled::NothingMoved(answer) => answer,
        };
        let stored = StoredResponse {
            status: answer.status,
            body: answer.body.clone(),
        };
        let finalized = self
            .store
            .finalize_refund(ev.provider, &r.payment_reference, key, token, &stored)
            .await?;
        Ok(match finalized {
            FinalizeOutcome::Done => answer,
            // Our lease ran out and a successor finished first: its answer stands.
            FinalizeOutcome::Superseded(Some(theirs)) => Answer::replay(theirs),
            // A successor holds the claim and has not finished: it will.
            FinalizeOutcome::Superseded(None) => in_flight(key, 1_000),
        })
    }

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
