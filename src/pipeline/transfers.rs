//! Settlement of payouts: the provider's word about a transfer payhook sent (a webhook, its
//! answer to the transfer call, or reconciliation asking it), applied once per word under the
//! word's key (`{provider}:payout_failed:{payout}`, …). A word that gives money back credits the
//! reservation once; a success after a failure debits it again once; anything else only moves
//! the status (see [`crate::payouts::settle`]). Money a provider returns or takes is its word:
//! applied, never refused.

use serde::Serialize;

use super::{ignored, retry_later, Answer, Pipeline, PipelineError, Settled, Store};
use crate::domain::{IdempotencyKey, NormalisedEvent, Operation, TransferFacts};
use crate::eventlog::Outcome;
use crate::ledger::{PostOutcome, Posting};
use crate::payouts::{flags_a_person, PayoutId, PayoutRecord, SettleOutcome, WordOrigin};

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

impl<S: Store> Pipeline<S> {
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
        let origin = WordOrigin {
            provider: ev.provider,
            money: facts.money,
            recipient: facts.recipient.clone(),
        };
        let outcome = self
            .store
            .settle_payout(&id, origin.clone(), facts.state, &facts.provider_status)
            .await?;
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
                if flags_a_person(&record, &origin) {
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
