//! Money out: one `POST /payouts` request, exactly once. The article's protocol for an outgoing
//! call: claim the caller's key, record the payout (its id is the provider reference), reserve
//! its amount against the balance, mark it sent, call the provider once, apply its word, and
//! finalize the claim with the answer. Every step is idempotent by the payout's id, so a retry,
//! a takeover or reconciliation finishes a request that died between any two of them.
//!
//! A call that times out, resets or answers 5xx is *ambiguous*: the payout stays `sent`
//! (answered 202), and whoever looks next asks the provider about the reference before any new
//! call, and resends only under the same reference, only when the provider says it has none.

use serde::Serialize;

use super::{Answer, Delivered, Pipeline, PipelineError, Store};
use crate::domain::{EventKind, NormalisedEvent, TransferFacts, TransferState};
use crate::eventlog::Outcome;
use crate::idempotency::{ClaimOutcome, FinalizeOutcome, OwnerToken, StoredResponse};
use crate::payouts::{
    reservation_key, NewPayout, PayoutId, PayoutRecord, PayoutRequest, PayoutStatus, RequestKey,
    TransferAnswer, TransferCall, Transfers, MAX_SENDS,
};

/// One payout request as the caller made it.
#[derive(Debug, Clone, Copy)]
pub struct PayoutCall<'a> {
    /// Who asks (the IAM principal, the local token's holder, `cli:{user}`): keys are theirs.
    pub caller: &'a str,
    pub key: &'a RequestKey,
    pub request: &'a PayoutRequest,
    pub lease_ms: i64,
}

/// What to answer a payout request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutAnswer {
    pub status: u16,
    pub body: String,
    /// The stored answer of an earlier attempt (`Idempotent-Replayed: true`).
    pub replayed: bool,
    pub retry_after_s: Option<u64>,
    /// The payout's status now (`Payout-Status`), when there is a payout.
    pub payout_status: Option<PayoutStatus>,
}

#[derive(Serialize)]
struct PayoutBody<'a> {
    payout: &'a str,
    status: &'a str,
    provider: &'a str,
    reference: &'a str,
    account: &'a str,
    amount: i64,
    currency: &'a str,
}

#[derive(Serialize)]
struct Refusal<'a> {
    error: &'a str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    payout: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    available: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<i64>,
}

fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned())
}

/// The answer a payout's record gives: 201 with its status (202 while the send is ambiguous),
/// or 422 `insufficient_funds`.
pub fn answer_of(record: &PayoutRecord) -> (u16, String) {
    if record.status == PayoutStatus::Refused {
        let body = Refusal {
            error: "insufficient_funds",
            message: format!(
                "the {} balance of {} does not cover {}; this key's answer is final, use a new key to try again",
                record.currency, record.account, record.amount
            ),
            payout: Some(record.payout.as_str()),
            available: record.available_minor,
            retry_after_s: None,
        };
        return (422, json(&body));
    }
    let status = if record.status == PayoutStatus::Sent && record.ambiguous {
        202
    } else {
        201
    };
    let body = PayoutBody {
        payout: record.payout.as_str(),
        status: record.status.as_str(),
        provider: record.provider.as_str(),
        reference: record.payout.as_str(),
        account: record.account.as_str(),
        amount: record.amount,
        currency: record.currency.as_str(),
    };
    (status, json(&body))
}

impl<S: Store> Pipeline<S> {
    /// Serves one payout request (see the module doc).
    pub async fn payout<T: Transfers>(
        &self,
        transfers: &T,
        call: PayoutCall<'_>,
    ) -> Result<PayoutAnswer, PipelineError> {
        let id = PayoutId::derive(call.caller, call.key);
        let key = id.claim_key();
        let fingerprint = call.request.fingerprint();
        match self.store.claim(&key, &fingerprint, call.lease_ms).await? {
            ClaimOutcome::Claimed { token, took_over } => {
                if took_over {
                    tracing::info!(payout = %id, "took over an expired payout claim; resuming");
                }
                self.drive_and_finalize(transfers, &id, call.request, &token, call.lease_ms)
                    .await
            }
            ClaimOutcome::Replay(stored) => {
                self.replayed(transfers, &id, stored, call.lease_ms).await
            }
            ClaimOutcome::InFlight { retry_after_ms } => {
                let retry_after_s = (retry_after_ms.max(1) + 999) / 1_000;
                let body = Refusal {
                    error: "in_flight",
                    message: "this Idempotency-Key is being processed; retry later".into(),
                    payout: Some(id.as_str()),
                    available: None,
                    retry_after_s: Some(retry_after_s),
                };
                Ok(PayoutAnswer {
                    status: 409,
                    body: json(&body),
                    replayed: false,
                    retry_after_s: u64::try_from(retry_after_s).ok(),
                    payout_status: None,
                })
            }
            ClaimOutcome::Conflict { .. } => {
                let body = Refusal {
                    error: "idempotency_key_reused",
                    message: "this Idempotency-Key was used with a different request body".into(),
                    payout: None,
                    available: None,
                    retry_after_s: None,
                };
                Ok(PayoutAnswer {
                    status: 422,
                    body: json(&body),
                    replayed: false,
                    retry_after_s: None,
                    payout_status: None,
                })
            }
        }
    }

    /// Finishes a payout claim whose request died (reconciliation): takes it over with the
    /// request it stored, and drives the payout to its answer.
    pub async fn resume_payout<T: Transfers>(
        &self,
        transfers: &T,
        id: &PayoutId,
        request: &PayoutRequest,
        lease_ms: i64,
    ) -> Result<PayoutAnswer, PipelineError> {
        let key = id.claim_key();
        match self
            .store
            .claim(&key, &request.fingerprint(), lease_ms)
            .await?
        {
            ClaimOutcome::Claimed { token, .. } => {
                self.drive_and_finalize(transfers, id, request, &token, lease_ms)
                    .await
            }
            ClaimOutcome::Replay(stored) => self.replayed(transfers, id, stored, lease_ms).await,
            ClaimOutcome::InFlight { .. } | ClaimOutcome::Conflict { .. } => {
                let record = self.store.payout(id).await?;
                let (status, body) = record.as_ref().map_or((409, String::new()), answer_of);
                Ok(PayoutAnswer {
                    status,
                    body,
                    replayed: false,
                    retry_after_s: None,
                    payout_status: record.map(|r| r.status),
                })
            }
        }
    }

    async fn drive_and_finalize<T: Transfers>(
        &self,
        transfers: &T,
        id: &PayoutId,
        request: &PayoutRequest,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> Result<PayoutAnswer, PipelineError> {
        let layout = self.store.placement_layout().await?;
        let shard = layout.place(&reservation_key(request.provider, id));
        let record = self
            .store
            .open_payout(NewPayout {
                payout: id,
                request,
                shard,
            })
            .await?;
        let record = self.resolve(transfers, record, lease_ms).await?;
        let (status, body) = answer_of(&record);
        let stored = StoredResponse {
            status,
            body: body.clone(),
        };
        let (status, body, replayed) =
            match self.store.finalize(&id.claim_key(), token, &stored).await? {
                FinalizeOutcome::Done => (status, body, false),
                FinalizeOutcome::Superseded(Some(theirs)) => (theirs.status, theirs.body, true),
                // A successor holds the claim and will answer; this answer is the payout's.
                FinalizeOutcome::Superseded(None) => (status, body, false),
            };
        Ok(PayoutAnswer {
            status,
            body,
            replayed,
            retry_after_s: None,
            payout_status: Some(record.status),
        })
    }

    /// The stored answer, with the payout's status now; a send still ambiguous is first
    /// resolved by asking the provider (a retry of the same key is one of the ways it resolves).
    async fn replayed<T: Transfers>(
        &self,
        transfers: &T,
        id: &PayoutId,
        stored: StoredResponse,
        lease_ms: i64,
    ) -> Result<PayoutAnswer, PipelineError> {
        let mut record = self.store.payout(id).await?;
        if let Some(r) = record.take() {
            record = Some(if r.status == PayoutStatus::Sent && r.ambiguous {
                self.resolve(transfers, r, lease_ms).await?
            } else {
                r
            });
        }
        Ok(PayoutAnswer {
            status: stored.status,
            body: stored.body,
            replayed: true,
            retry_after_s: None,
            payout_status: record.map(|r| r.status),
        })
    }

    /// Moves a payout as far as it can go now: decide its reservation, send it, or ask about
    /// a send whose outcome is unknown (and resend under the same reference only if the
    /// provider has none). Returns the record as it then is.
    pub async fn resolve<T: Transfers>(
        &self,
        transfers: &T,
        mut record: PayoutRecord,
        lease_ms: i64,
    ) -> Result<PayoutRecord, PipelineError> {
        for _ in 0..4 {
            let id = record.payout.clone();
            match record.status {
                PayoutStatus::New => record = self.store.reserve(&record).await?,
                PayoutStatus::Reserved => match self.store.mark_sent(&id, record.sends).await? {
                    Some(marked) => {
                        self.send(transfers, &marked, lease_ms).await?;
                        return self.reread(record).await;
                    }
                    None => record = self.reread(record).await?,
                },
                PayoutStatus::Sent if record.ambiguous => {
                    self.ask(transfers, &record, lease_ms).await?;
                    return self.reread(record).await;
                }
                _ => return Ok(record),
            }
        }
        Ok(record)
    }

    /// Asks the provider about a sent payout and applies its word (reconciliation).
    pub async fn ask_payout<T: Transfers>(
        &self,
        transfers: &T,
        record: &PayoutRecord,
        lease_ms: i64,
    ) -> Result<PayoutRecord, PipelineError> {
        self.ask(transfers, record, lease_ms).await?;
        self.reread(record.clone()).await
    }

    async fn reread(&self, record: PayoutRecord) -> Result<PayoutRecord, PipelineError> {
        Ok(self.store.payout(&record.payout).await?.unwrap_or(record))
    }

    /// Sends the transfer (the record is marked sent) and applies what the provider answered.
    async fn send<T: Transfers>(
        &self,
        transfers: &T,
        record: &PayoutRecord,
        lease_ms: i64,
    ) -> Result<(), PipelineError> {
        let money = record
            .money()
            .map_err(|e| crate::store::StoreError::Corrupt {
                table: "payments".into(),
                key: record.payout.to_string(),
                reason: e.to_string(),
            })?;
        let call = TransferCall {
            payout: &record.payout,
            money,
            destination: &record.destination,
            narration: record.narration.as_deref(),
        };
        match transfers.send(record.provider, call).await {
            Ok(TransferAnswer::Known { state, status }) => {
                self.word(record, state, &status, lease_ms).await
            }
            // Refused outright (a 4xx): ask whether a transfer exists under the reference
            // before calling it failed (a duplicate reference is refused too).
            Ok(TransferAnswer::Absent { status }) => {
                tracing::warn!(payout = %record.payout, status, "the provider refused the transfer; asking about its reference");
                self.ask(transfers, record, lease_ms).await
            }
            Err(e) => {
                tracing::warn!(payout = %record.payout, error = %e, "transfer outcome unknown; the payout stays sent until the provider is asked");
                self.store
                    .note_provider(&record.payout, true, &format!("no answer: {e}"))
                    .await?;
                Ok(())
            }
        }
    }

    /// Asks the provider about the payout's reference and applies its word. A provider with
    /// no transfer under it gets it sent again, under the same reference, if the sends left
    /// allow (one attempt wins the right to send: `mark_sent` is conditioned on the count).
    async fn ask<T: Transfers>(
        &self,
        transfers: &T,
        record: &PayoutRecord,
        lease_ms: i64,
    ) -> Result<(), PipelineError> {
        match transfers.ask(record.provider, &record.payout).await {
            Ok(TransferAnswer::Known { state, status }) => {
                self.word(record, state, &status, lease_ms).await
            }
            Ok(TransferAnswer::Absent { status }) => {
                let current = self.reread(record.clone()).await?;
                if current.status != PayoutStatus::Sent {
                    return Ok(());
                }
                if current.sends >= MAX_SENDS {
                    // Sent that many times and the provider refused or never got each: its
                    // word is that no transfer exists, which is final for the money.
                    let status = format!("no transfer after {} sends: {status}", current.sends);
                    return self
                        .word(&current, TransferState::Failed, &status, lease_ms)
                        .await;
                }
                match self.store.mark_sent(&current.payout, current.sends).await? {
                    Some(marked) => Box::pin(self.send(transfers, &marked, lease_ms)).await,
                    None => Ok(()),
                }
            }
            Err(e) => {
                tracing::warn!(payout = %record.payout, error = %e, "could not ask the provider; the payout stays sent");
                Ok(())
            }
        }
    }

    /// Applies a provider word through the pipeline, under the word's own key, exactly as its
    /// webhook would be (and logged as a delivery of the `transfer_api` kind).
    async fn word(
        &self,
        record: &PayoutRecord,
        state: TransferState,
        status: &str,
        lease_ms: i64,
    ) -> Result<(), PipelineError> {
        if state == TransferState::Pending {
            self.store
                .note_provider(&record.payout, false, status)
                .await?;
            return Ok(());
        }
        let event = NormalisedEvent {
            provider: record.provider,
            event_id: format!("{}:{}", record.payout, state.as_str()),
            event_type: "payout.provider_answer".into(),
            kind: EventKind::Transfer(TransferFacts {
                reference: record.payout.reference(),
                state,
                provider_status: status.to_owned(),
            }),
            transaction_id: None,
        };
        let body = serde_json::json!({
            "payout": record.payout.as_str(),
            "state": state.as_str(),
            "provider_status": status,
        })
        .to_string();
        let answer: Answer = self
            .process(Delivered {
                event: &event,
                raw_body: &body,
                received_at_ms: crate::domain::now_ms(),
                lease_ms,
                replay_of: None,
                started_by: Some("payouts".into()),
            })
            .await?;
        if answer.outcome == Outcome::InFlight {
            tracing::info!(payout = %record.payout, "the word is being applied by another attempt");
        }
        Ok(())
    }
}
