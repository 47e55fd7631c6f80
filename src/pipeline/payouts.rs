//! Money out: one `POST /payouts` request, exactly once. The article's protocol for an outgoing
//! call: claim the caller's key, record the payout (its id is the provider reference), reserve
//! its amount against the balance, mark it sent, call the provider once, apply its word, and
//! finalize the claim with the answer. Every step is idempotent by the payout's id, so a retry,
//! a takeover or reconciliation finishes a request that died between any two of them.
//!
//! A call that times out, resets or answers 5xx is *ambiguous*: the payout stays `sent`
//! (answered 202), and whoever looks next asks the provider about the reference before any new
//! call, never while the first call may still run (the fence), and resends only under the same
//! reference, only when a lookup past the send's visibility window finds nothing. Money comes
//! back only on the provider's word: see [`crate::payouts::calls`].
//!
//! Every answer about a payout is the payout as it is: its body and `Payout-Status` agree, and
//! only the attempt that finalized the key's claim answers first-hand (the others are marked
//! `Idempotent-Replayed`).

use serde::Serialize;

use super::{Answer, Delivered, Pipeline, PipelineError, Store};
use crate::domain::{EventKind, NormalisedEvent, TransferFacts, TransferState};
use crate::eventlog::Outcome;
use crate::idempotency::{ClaimOutcome, FinalizeOutcome, OwnerToken, StoredResponse};
use crate::payouts::calls::{
    ask_purpose, may_resend, next, AskPurpose, Budget, CallKind, CallTicket, Next, ProviderNote,
    FENCE_WRITE_MAX_MS, PREPARE_MS,
};
use crate::payouts::{
    flags_a_person, foreign, reservation_key, NewPayout, PayoutId, PayoutRecord, PayoutRequest,
    PayoutStatus, RequestKey, TransferAnswer, TransferCall, TransferWord, Transfers, WordOrigin,
};

/// One payout request as the caller made it.
#[derive(Debug, Clone, Copy)]
pub struct PayoutCall<'a> {
    /// Who asks (the IAM principal, the local token's holder, `cli:{user}`): keys are theirs.
    pub caller: &'a str,
    pub key: &'a RequestKey,
    pub request: &'a PayoutRequest,
    pub lease_ms: i64,
    /// Earlier names of the same caller (before keys were scoped by a named caller): a payout
    /// already opened under one of them is the one this key names.
    pub aliases: &'a [String],
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
    /// The payout the key names, when the answer is about one.
    pub payout: Option<PayoutId>,
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
    // Sent, and the provider has not said it has the transfer: not known yet.
    let unresolved = record.status == PayoutStatus::Sent && !record.accepted;
    let status = if unresolved && (record.ambiguous || record.refused.is_some()) {
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
        // The budget counts from here: the lease was computed from the deadline just before.
        let look = Look::new(call.lease_ms);
        if !look.budget.allows(transfers.bound_ms() + PREPARE_MS) {
            // Reserving now would debit money no call of this request could send: refuse
            // before any write, so the caller retries with time (a new invocation).
            return Ok(no_time(call.lease_ms, transfers.bound_ms()));
        }
        let id = self.payout_id(&call).await?;
        let key = id.claim_key();
        let fingerprint = call.request.fingerprint();
        match self.store.claim(&key, &fingerprint, call.lease_ms).await? {
            ClaimOutcome::Claimed { token, took_over } => {
                if took_over {
                    tracing::info!(payout = %id, "took over an expired payout claim; resuming");
                }
                self.drive_and_finalize(transfers, &id, call.request, &token, &look)
                    .await
            }
            ClaimOutcome::Replay(stored) => self.replayed(transfers, &id, stored, &look).await,
            ClaimOutcome::ReplayUnrecorded { status } => {
                let stored = StoredResponse::unrecorded(status);
                self.replayed(transfers, &id, stored, &look).await
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
                    payout: Some(id.clone()),
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
                    payout: None,
                })
            }
        }
    }

    /// Whether the caller's key already names a payout (its claim exists): a request refused
    /// before any write (an amount its provider cannot carry, by today's table) is still
    /// answered as the payout it names when an earlier attempt opened one.
    pub async fn names_a_payout(&self, call: &PayoutCall<'_>) -> Result<bool, PipelineError> {
        let id = self.payout_id(call).await?;
        Ok(self.store.get_claim(&id.claim_key()).await?.is_some())
    }

    /// The payout a caller's key names: the one already opened under an earlier name of the
    /// caller (a request in flight across the release that named callers), else the caller's.
    async fn payout_id(&self, call: &PayoutCall<'_>) -> Result<PayoutId, PipelineError> {
        for alias in call.aliases {
            let old = PayoutId::derive(alias, call.key);
            // Its claim is written before its record: a request under the old name that died
            // (or still runs) between the two is found by the claim.
            if self.store.get_claim(&old.claim_key()).await?.is_some()
                || self.store.payout(&old).await?.is_some()
            {
                return Ok(old);
            }
        }
        Ok(PayoutId::derive(call.caller, call.key))
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
        let look = Look::new(lease_ms);
        match self
            .store
            .claim(&key, &request.fingerprint(), lease_ms)
            .await?
        {
            ClaimOutcome::Claimed { token, .. } => {
                self.drive_and_finalize(transfers, id, request, &token, &look)
                    .await
            }
            ClaimOutcome::Replay(stored) => self.replayed(transfers, id, stored, &look).await,
            ClaimOutcome::ReplayUnrecorded { status } => {
                let stored = StoredResponse::unrecorded(status);
                self.replayed(transfers, id, stored, &look).await
            }
            ClaimOutcome::InFlight { .. } | ClaimOutcome::Conflict { .. } => {
                let record = self.store.payout(id).await?;
                Ok(match record {
                    Some(r) => told(&r, true),
                    None => PayoutAnswer {
                        status: 409,
                        body: String::new(),
                        replayed: true,
                        retry_after_s: None,
                        payout_status: None,
                        payout: Some(id.clone()),
                    },
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
        look: &Look,
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
        let record = self.look_at(transfers, record, look).await?;
        let (status, body) = answer_of(&record);
        let stored = StoredResponse { status, body };
        // Only the attempt whose finalize lands answers first-hand; one that lost its claim
        // tells the same payout as it is, marked replayed.
        let first_hand = matches!(
            self.store.finalize(&id.claim_key(), token, &stored).await?,
            FinalizeOutcome::Done
        );
        Ok(told(&record, !first_hand))
    }

    /// A key already answered: the payout as it is now (a send still unresolved is first
    /// looked at again, within the fence: a retry of the key is one of the ways it resolves).
    async fn replayed<T: Transfers>(
        &self,
        transfers: &T,
        id: &PayoutId,
        stored: StoredResponse,
        look: &Look,
    ) -> Result<PayoutAnswer, PipelineError> {
        match self.store.payout(id).await? {
            Some(record) => {
                // Not settled, and not waiting on a provider that has it: look again (a look
                // that ran out of time left it reserved; a send may be unresolved).
                let unsettled = record.status.is_open()
                    && !(record.status == PayoutStatus::Sent && record.accepted);
                let record = if unsettled {
                    self.look_at(transfers, record, look).await?
                } else {
                    record
                };
                Ok(told(&record, true))
            }
            None => Ok(PayoutAnswer {
                status: stored.status,
                body: stored.body,
                replayed: true,
                retry_after_s: None,
                payout_status: None,
                payout: Some(id.clone()),
            }),
        }
    }

    /// Moves a payout as far as it can go now (reconciliation's entry): decide its
    /// reservation, send it, or ask about it, as [`next`] says, within `lease_ms`.
    pub async fn resolve<T: Transfers>(
        &self,
        transfers: &T,
        record: PayoutRecord,
        lease_ms: i64,
    ) -> Result<PayoutRecord, PipelineError> {
        self.look_at(transfers, record, &Look::new(lease_ms)).await
    }

    /// One look at a payout: at most one send and one question (or a question and a resend),
    /// each behind the fence and inside the budget. Returns the record as it then is.
    async fn look_at<T: Transfers>(
        &self,
        transfers: &T,
        mut record: PayoutRecord,
        look: &Look,
    ) -> Result<PayoutRecord, PipelineError> {
        for _ in 0..4 {
            match next(&record, self.store.now_ms()) {
                Next::Reserve => record = self.store.reserve(&record).await?,
                Next::Nothing | Next::Wait { .. } => return Ok(record),
                // Sent or not (no time left, no API here, or someone else's call may run): the
                // record as it now is answers.
                Next::Send => {
                    self.send(transfers, &record, look).await?;
                    return self.reread(record).await;
                }
                Next::Ask(_) => {
                    self.ask(transfers, &record, look).await?;
                    return self.reread(record).await;
                }
            }
        }
        Ok(record)
    }

    async fn reread(&self, record: PayoutRecord) -> Result<PayoutRecord, PipelineError> {
        Ok(self.store.payout(&record.payout).await?.unwrap_or(record))
    }

    /// Takes the fence for one call, if the provider can be called from here and the budget
    /// outlasts the call. `None`: do not call.
    async fn fence<T: Transfers>(
        &self,
        transfers: &T,
        record: &PayoutRecord,
        kind: CallKind,
        look: &Look,
    ) -> Result<Option<PayoutRecord>, PipelineError> {
        if !transfers.supports(record.provider) {
            // Another process (with the provider's API configured) calls; this one must not
            // decide anything from its own configuration.
            tracing::warn!(payout = %record.payout, provider = %record.provider, "no transfer API for this provider here; the payout waits for a process that has one");
            return Ok(None);
        }
        let bound_ms = transfers.bound_ms();
        if !look.budget.allows(bound_ms) {
            tracing::info!(payout = %record.payout, ?kind, "too little time left for a call; the payout is left for the next look");
            return Ok(None);
        }
        let ticket = CallTicket {
            kind,
            holder: &look.holder,
            seen_sends: record.sends,
            bound_ms,
            visibility_ms: transfers.visibility_ms(record.provider),
        };
        let started = tokio::time::Instant::now();
        let taken = self.store.take_call(&record.payout, ticket).await?;
        // The fence counts from the store's now before its write: a write that took longer than
        // the clock's share of the margin, or that spent the budget, leaves no room for the
        // call inside it. The fence stands, uncalled: as a crash between fence and call, the
        // next look resolves it.
        let slow = started.elapsed()
            > std::time::Duration::from_millis(u64::try_from(FENCE_WRITE_MAX_MS).unwrap_or(0));
        if taken.is_some() && (slow || !look.budget.allows(bound_ms)) {
            tracing::warn!(payout = %record.payout, ?kind, "the fence took too long to write; not calling inside it");
            return Ok(None);
        }
        Ok(taken)
    }

    /// Sends the transfer (behind the fence) and applies what the provider answered; sends
    /// nothing when someone else's call may run, or no time is left.
    async fn send<T: Transfers>(
        &self,
        transfers: &T,
        record: &PayoutRecord,
        look: &Look,
    ) -> Result<(), PipelineError> {
        let Some(marked) = self.fence(transfers, record, CallKind::Send, look).await? else {
            return Ok(());
        };
        let money = marked
            .money()
            .map_err(|e| crate::store::StoreError::Corrupt {
                table: "payments".into(),
                key: marked.payout.to_string(),
                reason: e.to_string(),
            })?;
        let call = TransferCall {
            payout: &marked.payout,
            money,
            destination: &marked.destination,
            narration: marked.narration.as_deref(),
        };
        let id = &marked.payout;
        match transfers.send(marked.provider, call).await {
            Ok(TransferAnswer::Known(word)) => {
                self.accepted(&marked, &word, look).await?;
            }
            // Refused in words that prove the provider holds a transfer under the reference:
            // never a failure, never sent again; its word is asked for (behind our fence).
            Ok(TransferAnswer::Held { status }) => {
                tracing::warn!(payout = %id, status, "the provider refused the send as a duplicate of a transfer it holds; waiting for that transfer's word");
                let note = ProviderNote {
                    status: &status,
                    accepted: true,
                    refused: false,
                };
                self.store.note_provider(id, note).await?;
                let held = PayoutRecord {
                    accepted: true,
                    ambiguous: false,
                    ..marked.clone()
                };
                self.ask(transfers, &held, look).await?;
            }
            // A lookup answer to a send: read as "no transfer", which a send never proves.
            Ok(TransferAnswer::Absent { status }) => {
                tracing::warn!(payout = %id, status, "the provider answered the send without the transfer; the outcome stays unknown");
                let note = ProviderNote {
                    status: &format!("no answer: {status}"),
                    accepted: false,
                    refused: false,
                };
                self.store.note_provider(id, note).await?;
            }
            // Refused outright (a 4xx): asked about once, then failed (a transfer under the
            // reference, from an earlier send, would be found and its word applied instead).
            Ok(TransferAnswer::Refused { status }) => {
                tracing::warn!(payout = %id, status, "the provider refused the transfer; asking about its reference once");
                let note = ProviderNote {
                    status: &status,
                    accepted: false,
                    refused: true,
                };
                self.store.note_provider(id, note).await?;
                let refused = PayoutRecord {
                    refused: Some(status),
                    ambiguous: false,
                    ..marked.clone()
                };
                self.ask(transfers, &refused, look).await?;
            }
            Err(e) => {
                tracing::warn!(payout = %id, error = %e, "transfer outcome unknown; the payout stays sent until the provider is asked, after the call's fence");
                let note = ProviderNote {
                    status: &format!("no answer: {e}"),
                    accepted: false,
                    refused: false,
                };
                self.store.note_provider(id, note).await?;
            }
        }
        Ok(())
    }

    /// Asks the provider about the payout's reference (behind the fence) and acts on its
    /// answer as `purpose` says: a word is applied; "not found" fails the payout only after a
    /// refusal, allows a resend only past the send's visibility window, and otherwise proves
    /// nothing.
    async fn ask<T: Transfers>(
        &self,
        transfers: &T,
        record: &PayoutRecord,
        look: &Look,
    ) -> Result<(), PipelineError> {
        let Some(current) = self.fence(transfers, record, CallKind::Ask, look).await? else {
            return Ok(());
        };
        // Judged on the record as the fence found it (with any refusal just noted): a send
        // that came and went since our first read cannot pass for an old one.
        let purpose = ask_purpose(&current, self.store.now_ms());
        let id = &current.payout;
        match transfers.ask(current.provider, id).await {
            Ok(TransferAnswer::Known(word)) => self.accepted(&current, &word, look).await,
            Ok(
                TransferAnswer::Absent { status }
                | TransferAnswer::Refused { status }
                | TransferAnswer::Held { status },
            ) => match purpose {
                AskPurpose::AfterRefusal {
                    absence_proves: true,
                } => {
                    let refusal = current.refused.clone().unwrap_or(status);
                    let failed = TransferWord::new(TransferState::Failed, refusal);
                    self.word(&current, &failed, look.lease_ms).await
                }
                AskPurpose::AfterRefusal {
                    absence_proves: false,
                } => {
                    tracing::warn!(payout = %id, sends = current.sends, "a resend was refused and the provider does not show an earlier send yet; nothing is failed inside the window");
                    Ok(())
                }
                AskPurpose::AfterAmbiguous {
                    absence_proves: true,
                } if may_resend(&current) => {
                    tracing::warn!(payout = %id, sends = current.sends, "no transfer under the reference past the send's visibility window; sending again under the same reference");
                    Box::pin(self.send(transfers, &current, look)).await
                }
                AskPurpose::AfterAmbiguous {
                    absence_proves: true,
                } => {
                    tracing::warn!(payout = %id, sends = current.sends, "payout unresolved: sent as often as allowed and the provider has no transfer; a person must look (payhook payouts list --unsettled)");
                    Ok(())
                }
                AskPurpose::AfterAmbiguous {
                    absence_proves: false,
                }
                | AskPurpose::Status => {
                    tracing::info!(payout = %id, status, "the provider does not show the transfer yet; that proves nothing inside its visibility window or after it accepted it");
                    Ok(())
                }
            },
            Err(e) => {
                tracing::warn!(payout = %id, error = %e, "could not ask the provider; the payout stays sent");
                Ok(())
            }
        }
    }

    /// The provider answered with a word about a transfer under the reference: judged as the
    /// same word by webhook would be ([`foreign`]). One about other money or another
    /// recipient moves nothing and shows the payout to a person; the payout's own is recorded
    /// (the provider has it) and a final state applied.
    async fn accepted(
        &self,
        record: &PayoutRecord,
        word: &TransferWord,
        look: &Look,
    ) -> Result<(), PipelineError> {
        let origin = WordOrigin {
            provider: record.provider,
            money: word.money,
            recipient: word.recipient.clone(),
        };
        if let Some(reason) = foreign(record, &origin) {
            tracing::error!(payout = %record.payout, provider = %record.provider, reason, "payout unresolved: the provider's answer about its reference names other money or another recipient; it moved nothing, and a person must ask the provider");
            if flags_a_person(record, &origin) {
                self.store.note_conflict(&record.payout, &reason).await?;
            }
            return Ok(());
        }
        let note = ProviderNote {
            status: &word.status,
            accepted: true,
            refused: false,
        };
        self.store.note_provider(&record.payout, note).await?;
        self.word(record, word, look.lease_ms).await
    }

    /// Applies a provider word through the pipeline, under the word's own key, exactly as its
    /// webhook would be (and logged as a delivery of the `transfer_api` kind).
    async fn word(
        &self,
        record: &PayoutRecord,
        word: &TransferWord,
        lease_ms: i64,
    ) -> Result<(), PipelineError> {
        let (state, status) = (word.state, word.status.as_str());
        if state == TransferState::Pending {
            return Ok(());
        }
        let event = NormalisedEvent {
            provider: record.provider,
            event_id: format!("{}:{}", record.payout, state.as_str()),
            event_type: PROVIDER_ANSWER.into(),
            kind: EventKind::Transfer(TransferFacts {
                reference: record.payout.reference(),
                state,
                provider_status: status.to_owned(),
                // Judged again where every word is (the store's settle): the same rule as a
                // webhook's, whatever carried the word.
                money: word.money,
                recipient: word.recipient.clone(),
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
                headers: Vec::new(),
            })
            .await?;
        if answer.outcome == Outcome::InFlight {
            tracing::info!(payout = %record.payout, "the word is being applied by another attempt");
        }
        Ok(())
    }
}

/// The event type of payhook's own record of a provider's answer about a payout, logged with
/// the body `{"payout", "state", "provider_status"}`.
pub const PROVIDER_ANSWER: &str = "payout.provider_answer";

/// One look at a payout: its time, and who holds its fence.
struct Look {
    lease_ms: i64,
    budget: Budget,
    /// One id per look: its own fence does not stop its own next call (ask, then resend).
    holder: String,
}

impl Look {
    fn new(lease_ms: i64) -> Self {
        Look {
            lease_ms,
            // The claim's lease, less the store clock's second: a call must end before anyone
            // could take the claim over.
            budget: Budget::of_lease_ms(lease_ms),
            holder: OwnerToken::generate().as_str().to_owned(),
        }
    }
}

/// The answer to a request with too little time left for any call (a Lambda invocation near
/// its deadline): nothing written, retryable.
fn no_time(lease_ms: i64, bound_ms: i64) -> PayoutAnswer {
    let body = Refusal {
        error: "no_time_for_a_call",
        message: format!(
            "this request has {lease_ms} ms, too little to reserve and make a {bound_ms} ms provider call; nothing was reserved, retry"
        ),
        payout: None,
        available: None,
        retry_after_s: Some(1),
    };
    PayoutAnswer {
        status: 503,
        body: json(&body),
        replayed: false,
        retry_after_s: Some(1),
        payout_status: None,
        payout: None,
    }
}

/// The answer a payout's record gives, first-hand or replayed.
fn told(record: &PayoutRecord, replayed: bool) -> PayoutAnswer {
    let (status, body) = answer_of(record);
    PayoutAnswer {
        status,
        body,
        replayed,
        retry_after_s: None,
        payout_status: Some(record.status),
        payout: Some(record.payout.clone()),
    }
}
