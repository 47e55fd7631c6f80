//! Settlement of payouts: the provider's word about a transfer payhook sent (a webhook, its
//! answer to the transfer call, or reconciliation asking it), applied once per word under the
//! word's key (`{provider}:payout_failed:{payout}`, …). A word that gives money back credits the
//! reservation once; a success after a failure debits it again once; anything else only moves
//! the status (see [`crate::payouts::settle`]). Money a provider returns or takes is its word:
//! applied, never refused.
//!
//! # A word in four calls (#44)
//!
//! A word about a payout payhook sent holds its claim on the payout item, taken by the write
//! that applies the word, so the claims table is not written (`dynamodb::payout_words`):
//!
//! | # | call | condition |
//! |---|---|---|
//! | 0 | `GetItem` payout (consistent) | the word is judged from it: a claim for its key there is judged by the claim crate's one judge; a word that moves nothing (stale, undecided, foreign, no payout) is answered without a claim |
//! | 1 | `UpdateItem` payout: the word (status, movement time, `words`) + its claim APPLYING (`rc#{key}`) and `open = POSTING#{shard}`, `ALL_NEW` | the word's own (status it moves from, provider, not applied) and no claim for this key, none APPLYING on the payout |
//! | 2 | `PutItem` ledger entry (only a word that moves money) | `attribute_not_exists` |
//! | 3 | `UpdateItem` payout: the claim DONE + the answer, `REMOVE open` | `rc#{key}.ow = me AND rc#{key}.st = APPLYING` |
//! | 4 | `PutItem` delivery log | as every delivery |
//!
//! A duplicate reads the payout (call 0) and replays the stored answer byte for byte: two
//! calls with its log entry. APPLYING under a live lease answers 409; an expired lease is taken
//! over under a condition on its owner and the word's movement is posted and the claim
//! finished, without judging the word again (write 1 judged it, atomically with the claim).
//! A word applied without a claim here (before #44, or through the claims table) and a payout
//! whose other word's claim is APPLYING go the claims table's way, unchanged; that path's write
//! never takes a payout off `POSTING`. Reconciliation finds a word left APPLYING under
//! `POSTING` (`Payments::stuck_credits` reads every claim held on an item) and resumes it here.

use serde::Serialize;

use super::{
    ignored, in_flight, not_ours, retry_later, Answer, Pipeline, PipelineError, Settled, Store,
};
use crate::domain::{
    Fingerprint, IdempotencyKey, NormalisedEvent, Operation, TransferFacts, TransferState,
};
use crate::eventlog::Outcome;
use crate::idempotency::{
    judge_existing, ClaimOutcome, Existing, FinalizeOutcome, NewHostClaim, OwnerToken,
    StoredResponse,
};
use crate::ledger::{PostOutcome, Posting};
use crate::payouts::{
    applied_movement, flags_a_person, HeldWord, HeldWordCall, PayoutId, PayoutRecord,
    SettleOutcome, WordOrigin,
};

/// The answer to a settlement word (stored on its key, replayed to duplicates).
#[derive(Serialize)]
struct Settlement<'a> {
    status: &'static str,
    key: &'a str,
    payout: &'a str,
    payout_status: &'a str,
    account: &'a str,
    /// The amount this word moved on the ledger (signed; 0 when it moved only the status).
    amount: i64,
    currency: &'a str,
}

/// Milliseconds a provider is asked to wait when its word is about a payout still deciding.
const UNDECIDED_RETRY_MS: i64 = 5_000;

/// Rounds of read -> judge -> takeover before answering "in flight": only reached when other
/// attempts keep taking the claim over under us, which a retry later settles.
const WORD_ROUNDS: usize = 3;

/// One attempt at a word with its claim on its payout: what its later writes are conditioned on.
struct WordAttempt<'a> {
    ev: &'a NormalisedEvent,
    key: &'a IdempotencyKey,
    origin: &'a WordOrigin,
    payout: &'a PayoutId,
    token: &'a OwnerToken,
}

fn origin_of(ev: &NormalisedEvent, facts: &TransferFacts) -> WordOrigin {
    WordOrigin {
        provider: ev.provider,
        money: facts.money,
        recipient: facts.recipient.clone(),
    }
}

impl<S: Store> Pipeline<S> {
    /// The word with its claim on its payout (see the module doc). `None`: the claims table
    /// decides it (the caller's path).
    pub(super) async fn word_on_payout(
        &self,
        ev: &NormalisedEvent,
        facts: &TransferFacts,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<Option<Answer>, PipelineError> {
        let Some(id) = PayoutId::parse(facts.reference.as_str()) else {
            // Not a reference payhook makes: a transfer someone else sent moves nothing.
            return Ok(Some(ignored(ev)));
        };
        let origin = origin_of(ev, facts);
        let word = HeldWordCall {
            origin: &origin,
            word: facts.state,
            provider_status: &facts.provider_status,
            key,
        };
        let token = OwnerToken::generate();
        let attempt = WordAttempt {
            ev,
            key,
            origin: &origin,
            payout: &id,
            token: &token,
        };
        for _ in 0..WORD_ROUNDS {
            let claim = NewHostClaim {
                token: &token,
                lease_ms,
                fingerprint,
            };
            let (record, held) = match self.store.settle_held(&id, word, claim).await? {
                HeldWord::Elsewhere => return Ok(None),
                HeldWord::Unmoved(outcome) => {
                    let (Settled::Final(answer) | Settled::NothingMoved(answer)) =
                        self.word_answer(ev, key, &origin, outcome).await?;
                    return Ok(Some(answer));
                }
                HeldWord::Taken { record, movement } => {
                    let applied = SettleOutcome::Applied { record, movement };
                    return self.finish_word(&attempt, applied).await.map(Some);
                }
                HeldWord::Claimed(record, held) => (record, held),
            };
            let now_ms = self.store.now_ms();
            match judge_existing(&held.record(key), fingerprint, now_ms, &token) {
                // Our own token: the SDK resent write 1 after losing its reply.
                Existing::Decided(ClaimOutcome::Claimed { .. }) => {
                    return self
                        .resume_word(&attempt, facts.state, record)
                        .await
                        .map(Some);
                }
                Existing::Decided(other) => return Ok(Some(not_ours(other, key))),
                Existing::TakeOver { previous_owner } => {
                    let took =
                        self.store
                            .take_over_word(&id, key, &previous_owner, &token, lease_ms);
                    if took.await? {
                        tracing::info!(key = %key, "took over an expired claim on its payout; resuming its steps");
                        let mut answer = self.resume_word(&attempt, facts.state, record).await?;
                        answer.took_over = true;
                        return Ok(Some(answer));
                    }
                    // Someone else took it over or finished it first: judge again.
                }
            }
        }
        Ok(Some(in_flight(key, 1_000)))
    }

    /// Finishes a word whose claim's write applied it: its movement, as that write made it
    /// (not judged again: the claim holds the fingerprint, not the money the word named).
    async fn resume_word(
        &self,
        at: &WordAttempt<'_>,
        word: TransferState,
        record: PayoutRecord,
    ) -> Result<Answer, PipelineError> {
        let movement = applied_movement(&record, word);
        let applied = SettleOutcome::AlreadyApplied { record, movement };
        self.finish_word(at, applied).await
    }

    /// Writes 2 and 3: the word's movement, then its claim DONE with the answer.
    async fn finish_word(
        &self,
        at: &WordAttempt<'_>,
        applied: SettleOutcome,
    ) -> Result<Answer, PipelineError> {
        let (Settled::Final(answer) | Settled::NothingMoved(answer)) =
            self.word_answer(at.ev, at.key, at.origin, applied).await?;
        let stored = StoredResponse {
            status: answer.status,
            body: answer.body.clone(),
        };
        let finalized = self
            .store
            .finalize_word(at.payout, at.key, at.token, &stored)
            .await?;
        Ok(match finalized {
            FinalizeOutcome::Done => answer,
            // Our lease ran out and a successor finished first: its answer stands.
            FinalizeOutcome::Superseded(Some(theirs)) => Answer::replay(theirs),
            // A successor holds the claim and has not finished: it will.
            FinalizeOutcome::Superseded(None) => in_flight(at.key, 1_000),
        })
    }

    pub(super) async fn transfer(
        &self,
        ev: &NormalisedEvent,
        facts: &TransferFacts,
        key: &IdempotencyKey,
    ) -> Result<Settled, PipelineError> {
        let Some(id) = PayoutId::parse(facts.reference.as_str()) else {
            // Not a reference payhook makes: a transfer someone else sent.
            return Ok(Settled::NothingMoved(ignored(ev)));
        };
        let origin = origin_of(ev, facts);
        let outcome = self
            .store
            .settle_payout(&id, origin.clone(), facts.state, &facts.provider_status)
            .await?;
        if let SettleOutcome::AlreadyApplied { record, .. } = &outcome {
            if let Some(settled) = super::held_won(record.held_claims.get(key.as_str()), key) {
                return Ok(settled);
            }
        }
        self.word_answer(ev, key, &origin, outcome).await
    }

    /// What a word's settle outcome answers, after posting the movement it made (idempotent by
    /// the word's key, so a resumed attempt posts it once).
    async fn word_answer(
        &self,
        ev: &NormalisedEvent,
        key: &IdempotencyKey,
        origin: &WordOrigin,
        outcome: SettleOutcome,
    ) -> Result<Settled, PipelineError> {
        let (record, movement, resumed) = match outcome {
            SettleOutcome::Applied { record, movement } => (record, movement, false),
            SettleOutcome::AlreadyApplied { record, movement } => (record, movement, true),
            SettleOutcome::Stale(record) => {
                let answer = self.payout_answer("stale", key, &record, 0, Outcome::Stale);
                return Ok(Settled::NothingMoved(answer));
            }
            SettleOutcome::Undecided(_) => {
                let why = "the payout this is about is still being decided; retry later";
                return Ok(Settled::NothingMoved(retry_later(
                    key,
                    "payout_undecided",
                    why,
                    Outcome::Parked,
                    UNDECIDED_RETRY_MS,
                )));
            }
            SettleOutcome::Foreign { record, reason } => {
                // Logged as a conflict and answered 200, so the sender stops retrying; the
                // claim is released, so the payout's own word can still apply.
                tracing::warn!(payout = %record.payout, provider = %ev.provider, reason, "a settlement word not about this payout moved nothing");
                // The payout's own provider holds something else under its reference: a
                // person must look, and nothing is sent under it again.
                if flags_a_person(&record, origin) {
                    tracing::error!(payout = %record.payout, provider = %ev.provider, reason, "payout unresolved: its provider's word names other money or another recipient");
                    self.store.note_conflict(&record.payout, &reason).await?;
                }
                let answer = self.payout_answer("conflict", key, &record, 0, Outcome::Conflict);
                return Ok(Settled::NothingMoved(answer));
            }
            SettleOutcome::Unknown => return Ok(Settled::NothingMoved(ignored(ev))),
        };
        let (amount, posted) = match movement {
            Some((op, sign)) => {
                let amount = sign * record.amount;
                (amount, self.post_payout(&record, op, amount).await?)
            }
            None => (0, PostOutcome::AlreadyPosted),
        };
        let outcome = if resumed && posted == PostOutcome::AlreadyPosted {
            Outcome::AlreadyApplied
        } else {
            Outcome::Applied
        };
        Ok(Settled::Final(
            self.payout_answer("applied", key, &record, amount, outcome),
        ))
    }

    fn payout_answer(
        &self,
        status: &'static str,
        key: &IdempotencyKey,
        record: &PayoutRecord,
        amount: i64,
        outcome: Outcome,
    ) -> Answer {
        let body = Settlement {
            status,
            key: key.as_str(),
            payout: record.payout.as_str(),
            payout_status: record.status.as_str(),
            account: record.account.as_str(),
            amount,
            currency: record.currency.as_str(),
        };
        Answer::json(200, &body, outcome)
    }

    /// Posts a payout's settlement movement `op` (signed `amount`), at the time the payout
    /// recorded for it, in its shard.
    async fn post_payout(
        &self,
        record: &PayoutRecord,
        op: Operation,
        amount: i64,
    ) -> Result<PostOutcome, PipelineError> {
        let at_ms = record.moves.get(op.as_str()).copied().ok_or_else(|| {
            crate::store::StoreError::Corrupt {
                table: "payments".into(),
                key: record.payout.to_string(),
                reason: format!("{} applied without its movement time", op.as_str()),
            }
        })?;
        let posting = Posting {
            key: IdempotencyKey::new(record.provider, op, &record.payout.reference()),
            account: record.account.clone(),
            shard: record.shard,
            at_ms: Some(at_ms),
            currency: record.currency,
            amount_minor: amount,
            reference: record.payout.reference(),
            posted_at_ms: self.store.now_ms(),
        };
        Ok(self.store.post(&posting).await?)
    }
}
