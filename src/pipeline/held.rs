//! A refund, a dispute movement or a reversal in four writes (#44): its claim is held on its
//! payment item, taken by the same conditional write that applies the movement, so the claims
//! table is not written.
//!
//! | # | write | condition |
//! |---|---|---|
//! | 1 | `UpdateItem` payment: the movement + its claim APPLYING (`rc#{key}`: owner, lease, fingerprint) and `open = POSTING#{shard}` | the movement's own (refund: paid, currency, remainder, key not applied or voided; dispute: paid status, currency, key not recorded, its withdrawal first; reversal: its refund applied, given back; a void claims in the claims table) and no claim APPLYING on the payment (`open` absent), none for this key |
//! | 2 | `PutItem` ledger entry (none when the movement moves nothing) | `attribute_not_exists` |
//! | 3 | `UpdateItem` payment: the claim DONE + the answer, `REMOVE open` | `rc#{key}.ow = me AND rc#{key}.st = APPLYING` |
//! | 4 | `PutItem` delivery log | as every delivery |
//!
//! A duplicate's write 1 fails and shows the payment (`ALL_OLD`, or a consistent read); the
//! claim crate's one judge (`judge_existing`) decides from the movement's claim there, as from
//! a claims-table item: DONE replays the stored answer byte for byte, APPLYING under a live
//! lease answers 409, an expired lease is taken over under a condition on its owner and the
//! steps resume (each idempotent by the key), our own token (the SDK resent write 1) is ours,
//! other facts under the key are a conflict.
//!
//! Everything else goes the claims table's way, unchanged since before #44: a movement applied
//! without a claim here (by the previous release, or through the claims table), a payment
//! holding another claim APPLYING (its credit's, or another movement's: one `open` entry per
//! payment), and every movement that does not apply now (not paid yet and parked, refused,
//! voided, awaiting its withdrawal, other money, contended). Those pay one failed write more
//! than before; a movement that applies, and its duplicates, pay one write less.
//!
//! Reconciliation finds a movement left APPLYING through `POSTING#{shard}` on the payments
//! table's `open` index (`Payments::stuck_credits`) and resumes it through this same path.

use super::{in_flight, not_ours, Answer, Pipeline, PipelineError, Settled, Store};
use crate::domain::{Fingerprint, IdempotencyKey, NormalisedEvent};
use crate::idempotency::{
    judge_existing, ClaimOutcome, Existing, FinalizeOutcome, OwnerToken, StoredResponse,
};
use crate::payments::{HeldMove, Hosted, NewHostClaim, PaymentRecord};

/// Rounds of write 1 -> judge -> takeover before answering "in flight": only reached when other
/// attempts keep taking the claim over under us, which a retry later settles.
const HELD_ROUNDS: usize = 3;

impl<S: Store> Pipeline<S> {
    /// The movement `m` with its claim on its payment. `None`: the claims table decides it (the
    /// caller's path).
    pub(super) async fn held_on_payment(
        &self,
        ev: &NormalisedEvent,
        m: HeldMove<'_>,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<Option<Answer>, PipelineError> {
        let token = OwnerToken::generate();
        for _ in 0..HELD_ROUNDS {
            let claim = NewHostClaim {
                token: &token,
                lease_ms,
                fingerprint,
            };
            let (payment, held) = match self.store.hold(ev.provider, m, key, claim).await? {
                Hosted::Elsewhere => return Ok(None),
                Hosted::Taken(payment) => {
                    let answer = self.finish_held(ev, m, key, &payment, &token, false);
                    return answer.await.map(Some);
                }
                Hosted::Claimed(payment, held) => (payment, held),
            };
            let now_ms = self.store.now_ms();
            match judge_existing(&held.record(key), fingerprint, now_ms, &token) {
                // Our own token: the SDK resent write 1 after losing its reply.
                Existing::Decided(ClaimOutcome::Claimed { .. }) => {
                    let answer = self.finish_held(ev, m, key, &payment, &token, true);
                    return answer.await.map(Some);
                }
                Existing::Decided(other) => return Ok(Some(not_ours(other, key))),
                Existing::TakeOver { previous_owner } => {
                    let took = self
                        .store
                        .take_over_held(
                            ev.provider,
                            m.payment(),
                            key,
                            &previous_owner,
                            &token,
                            lease_ms,
                        )
                        .await?;
                    if took {
                        tracing::info!(key = %key, "took over an expired claim on its payment; resuming its steps");
                        let answer = self.finish_held(ev, m, key, &payment, &token, true);
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

    /// Writes 2 and 3: the movement's tail, then its claim DONE with the answer.
    async fn finish_held(
        &self,
        ev: &NormalisedEvent,
        m: HeldMove<'_>,
        key: &IdempotencyKey,
        payment: &PaymentRecord,
        token: &OwnerToken,
        resumed: bool,
    ) -> Result<Answer, PipelineError> {
        let settled = match m {
            HeldMove::Refund(r) => self.refund_tail(payment, r, key, resumed).await?,
            HeldMove::Dispute(d, movement) => {
                self.dispute_tail(payment, d, movement, key, resumed)
                    .await?
            }
            HeldMove::Reversal(r) => self.reversal_tail(ev, payment, r, key, resumed).await?,
        };
        let answer = match settled {
            Settled::Final(answer) | Settled::NothingMoved(answer) => answer,
        };
        let stored = StoredResponse {
            status: answer.status,
            body: answer.body.clone(),
        };
        let finalized = self
            .store
            .finalize_held(ev.provider, m.payment(), key, token, &stored)
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
