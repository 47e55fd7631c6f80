//! The processing pipeline: claim -> move the money -> finalize -> log, for every delivery.
//! Knows neither HTTP nor DynamoDB: it answers with an [`Answer`] (status + body) that the http
//! layer sends and the claim stores for replay.

pub mod callers;
mod cancels;
mod credits;
mod disputes;
pub mod dry_run;
mod parked;

use parked::Parking;
mod held;
mod payouts;
mod refunds;
mod transfers;

pub use payouts::{PayoutAnswer, PayoutCall, PROVIDER_ANSWER};

use serde::Serialize;

use crate::domain::{
    now_ms, AccountId, ClaimedFacts, EventKind, IdempotencyKey, NormalisedEvent, Operation,
    PaymentFacts, RefundFacts,
};
use crate::eventlog::{Delivery, DeliveryId, Details, EventLog, Outcome};
use crate::idempotency::{
    ClaimOutcome, ClaimState, Claims, FinalizeOutcome, OwnerToken, StoredResponse,
};
use crate::ledger::{movement_time, shard_of_payment, Ledger, PostOutcome, Posting};
use crate::payments::{
    HeldMove, Mismatch, NewCredit, PaymentRecord, Payments, RefundOutcome, ReversalOutcome,
    StateOutcome,
};
use crate::payouts::Payouts;
use crate::providers::orders::OrderKeys;
use crate::store::StoreError;

/// Event type of the deliveries reconciliation logs when it resumes a claim the claims table
/// holds: their body is the claim's facts, not a provider payload. Such a resume goes through
/// the claims table, which holds the claim it must finish.
pub const RESUME_EVENT_TYPE: &str = "reconcile.resume";

/// Event type of the deliveries reconciliation logs when it resumes a credit whose claim is held
/// on its payment ([`credits`]); the body is the claim's facts too.
pub const RESUME_CREDIT_EVENT_TYPE: &str = "reconcile.resume_credit";

/// Event type of the deliveries reconciliation logs when it resumes a refund whose claim is
/// held on its payment ([`refunds`], #44); the body is the claim's facts too.
pub const RESUME_REFUND_EVENT_TYPE: &str = "reconcile.resume_refund";

/// Event type of the deliveries reconciliation logs when it resumes a dispute movement or a
/// reversal whose claim is held on its payment ([`held`], #44); the body is the claim's facts.
pub const RESUME_HELD_EVENT_TYPE: &str = "reconcile.resume_held";

/// Everything the pipeline (and the router, reconciliation and replay above it) needs from a
/// store: the four capabilities, shareable across tasks.
pub trait Store: Claims + Payments + Payouts + Ledger + EventLog + Send + Sync + 'static {}
impl<T: Claims + Payments + Payouts + Ledger + EventLog + Send + Sync + 'static> Store for T {}

/// What to answer, and what to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub body: String,
    /// A stored response replayed to a duplicate (`Idempotent-Replayed: true`).
    pub replayed: bool,
    pub retry_after_s: Option<u64>,
    pub outcome: Outcome,
    pub delivery_id: String,
    /// This attempt took over an expired claim and resumed its steps.
    pub took_over: bool,
}

impl Answer {
    fn json(status: u16, body: &impl Serialize, outcome: Outcome) -> Self {
        let body = serde_json::to_string(body).unwrap_or_else(|_| "{}".to_owned());
        Answer {
            status,
            body,
            replayed: false,
            retry_after_s: None,
            outcome,
            delivery_id: String::new(),
            took_over: false,
        }
    }

    fn retry_after(mut self, ms: i64) -> Self {
        self.retry_after_s = Some(u64::try_from(seconds_ceil(ms)).unwrap_or(1));
        self
    }

    fn replay(stored: StoredResponse) -> Self {
        Answer {
            status: stored.status,
            body: stored.body,
            replayed: true,
            retry_after_s: None,
            outcome: Outcome::Replayed,
            delivery_id: String::new(),
            took_over: false,
        }
    }
}

/// The pipeline failed to reach a decision; the provider should retry (5xx). Any claim taken
/// is kept: the outcome of the step that failed is unknown, and the retry resumes by the key.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("store unavailable")]
    Store(#[from] StoreError),
}

/// One delivery to process.
#[derive(Debug, Clone)]
pub struct Delivered<'a> {
    pub event: &'a NormalisedEvent,
    pub raw_body: &'a str,
    pub received_at_ms: i64,
    /// How long our claim may be held before another attempt may take over.
    pub lease_ms: i64,
    /// For replays: the stored delivery's id, and who started the replay.
    pub replay_of: Option<DeliveryId>,
    pub started_by: Option<String>,
    /// The headers its signature check read, masked ([`crate::providers::masked_headers`]);
    /// empty for replays and EventBridge events.
    pub headers: Vec<(String, String)>,
}

/// The body of an applied movement's answer: what the provider is told and the claim stores
/// for every duplicate.
#[derive(Debug, Serialize)]
pub struct Applied<'a> {
    status: &'static str,
    key: &'a str,
    reference: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_reference: Option<&'a str>,
    account: &'a str,
    amount: i64,
    currency: &'a str,
    /// Set when the movement debited less than `amount`: `0` for money another report of the
    /// same outflow already debited (or a declined dispute, which moves nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    moved_minor: Option<i64>,
}

impl<'a> Applied<'a> {
    /// A payment's credit.
    pub fn payment(key: &'a IdempotencyKey, p: &'a PaymentFacts, account: &'a str) -> Self {
        Applied {
            status: "applied",
            key: key.as_str(),
            reference: p.reference.as_str(),
            payment_reference: None,
            account,
            amount: p.money.amount.get(),
            currency: p.money.currency.as_str(),
            moved_minor: None,
        }
    }

    /// A dispute's withdrawal or reinstatement (`amount` the dispute's, positive either way;
    /// `signed` what was posted), or a declined dispute's record (`status` `recorded`).
    pub fn dispute(
        key: &'a IdempotencyKey,
        d: &'a crate::domain::DisputeFacts,
        account: &'a str,
        movement: crate::domain::DisputeMovement,
        signed: i64,
    ) -> Self {
        let amount = d.money.amount.get();
        Applied {
            status: match movement {
                crate::domain::DisputeMovement::Declined => "recorded",
                _ => "applied",
            },
            key: key.as_str(),
            reference: d.dispute.as_str(),
            payment_reference: Some(d.payment_reference.as_str()),
            account,
            amount,
            currency: d.money.currency.as_str(),
            moved_minor: (signed.unsigned_abs() != amount.unsigned_abs()).then_some(signed.abs()),
        }
    }

    /// A refund's debit (`amount` negative) or its reversal's credit back.
    pub fn refund(
        key: &'a IdempotencyKey,
        r: &'a RefundFacts,
        account: &'a str,
        amount: i64,
    ) -> Self {
        Applied {
            status: "applied",
            key: key.as_str(),
            reference: r.refund_reference.as_str(),
            payment_reference: Some(r.payment_reference.as_str()),
            account,
            amount,
            currency: r.money.currency.as_str(),
            moved_minor: None,
        }
    }

    /// Says the movement moved `moved` (positive), when that is not its whole amount.
    fn moved(mut self, moved: i64) -> Self {
        self.moved_minor = (moved != self.amount.abs()).then_some(moved);
        self
    }
}

#[derive(Serialize)]
struct Problem<'a> {
    error: &'a str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mismatch: Option<&'a Mismatch>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<i64>,
}

impl<'a> Problem<'a> {
    fn new(error: &'a str, message: impl Into<String>, key: Option<&'a IdempotencyKey>) -> Self {
        Problem {
            error,
            message: message.into(),
            key: key.map(|k| k.as_str()),
            mismatch: None,
            retry_after_s: None,
        }
    }
}

#[derive(Serialize)]
struct Status<'a> {
    status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reference: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment_status: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_type: Option<&'a str>,
}

/// How a claimed attempt ended.
enum Settled {
    /// Money moved (or was found moved under our key): finalize, store this answer.
    Final(Answer),
    /// Surely nothing moved (a mismatch, a refund before its payment): release the claim so the
    /// right event (or a redelivery) can still apply, and answer this.
    NothingMoved(Answer),
}

/// Milliseconds a provider is asked to wait before redelivering a parked refund.
const PARKED_RETRY_MS: i64 = 30_000;
/// Milliseconds to wait after concurrent writers kept a payment busy.
const CONTENDED_RETRY_MS: i64 = 1_000;

pub struct Pipeline<S> {
    store: S,
    /// Credited when a payment success names no account and the payment has none.
    default_account: Option<AccountId>,
    /// Where each provider's payloads carry the merchant's order id, for the log.
    orders: OrderKeys,
}

impl<S: Store> Pipeline<S> {
    pub fn new(store: S) -> Self {
        Pipeline {
            store,
            default_account: None,
            orders: OrderKeys::default(),
        }
    }

    /// Logs each delivery's merchant order id from these keys (`PAYHOOK_ORDER_KEYS`).
    pub fn with_order_keys(mut self, orders: OrderKeys) -> Self {
        self.orders = orders;
        self
    }

    /// Credits `account` for payment successes that name none (`PAYHOOK_DEFAULT_ACCOUNT`).
    pub fn with_default_account(mut self, account: Option<AccountId>) -> Self {
        self.default_account = account;
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    /// The same pipeline over a store that reads and never writes ([`dry_run`]): what
    /// processing a delivery would do now, with this pipeline's settings.
    pub fn dry_run(&self) -> Pipeline<dry_run::DryRun<S>>
    where
        S: Clone,
    {
        Pipeline {
            store: dry_run::DryRun::new(self.store.clone()),
            default_account: self.default_account.clone(),
            orders: self.orders.clone(),
        }
    }

    /// Processes one delivery and logs it. On error nothing is answered but 5xx, and a claim
    /// taken is kept for the retry to resume.
    pub async fn process(&self, d: Delivered<'_>) -> Result<Answer, PipelineError> {
        let bound = match self.bind(d.event).await {
            Ok(b) => b,
            Err(e) => return Err(self.failed(&d, e).await),
        };
        let d = Delivered {
            event: bound.as_ref().unwrap_or(d.event),
            ..d
        };
        let mut answer = match self.decide(d.event, d.lease_ms).await {
            Ok(a) => a,
            Err(e) => return Err(self.failed(&d, e).await),
        };
        let record = self.delivery(&d, &answer);
        self.store.append(&record).await?;
        answer.delivery_id = record.id.to_string();
        Ok(answer)
    }

    /// Best effort: records that this delivery failed, for operators and reconciliation.
    async fn failed(&self, d: &Delivered<'_>, e: PipelineError) -> PipelineError {
        let failed = Answer::json(
            503,
            &Problem::new("store_unavailable", "retry later", None),
            Outcome::Failed,
        );
        if let Err(log_err) = self.store.append(&self.delivery(d, &failed)).await {
            tracing::warn!(error = %log_err, "could not log a failed delivery");
        }
        e
    }

    async fn decide(&self, ev: &NormalisedEvent, lease_ms: i64) -> Result<Answer, PipelineError> {
        match &ev.kind {
            EventKind::Ignored => Ok(ignored(ev)),
            EventKind::PaymentState { facts, to } => {
                let answer = match self.store.move_state(ev.provider, facts, *to).await? {
                    StateOutcome::Applied(p) => {
                        state_answer("applied", &p.reference, p.status.as_str(), Outcome::Applied)
                    }
                    // Already at or past that state: a late or duplicate event changes nothing.
                    StateOutcome::Stale(p) => {
                        let status = p.as_ref().map_or("UNKNOWN", |p| p.status.as_str());
                        state_answer("stale", &facts.reference, status, Outcome::Stale)
                    }
                    StateOutcome::Mismatch(m, _) => conflict(None, &m),
                };
                Ok(answer)
            }
            EventKind::PaymentSucceeded(_)
            | EventKind::RefundSucceeded(_)
            | EventKind::CancelOrRefund(_)
            | EventKind::RefundReversed(_)
            | EventKind::Dispute { .. } => self.money(ev, lease_ms).await,
            EventKind::Transfer(t) => match ev.key() {
                Some(_) => self.money(ev, lease_ms).await,
                // Pending: changes nothing.
                None => Ok(state_answer(
                    "stale",
                    &t.reference,
                    "pending",
                    Outcome::Stale,
                )),
            },
            // Still unpriced: its payment (and so its currency) is not known yet.
            EventKind::RefundUnpriced(_) | EventKind::DisputeUnpriced(_) => match ev.key() {
                Some(key) => Ok(parked(&key)),
                None => Ok(ignored(ev)),
            },
        }
    }

    /// An event about a provider transaction is re-addressed to the payment reference that
    /// transaction was first seen under, so a changed key setting never re-keys a payment.
    /// An unpriced refund is then priced in its payment's currency (stored once, never changed).
    async fn bind(&self, ev: &NormalisedEvent) -> Result<Option<NormalisedEvent>, PipelineError> {
        let mut out = None;
        if let (Some(txn), Some(reference)) = (ev.transaction_id.as_deref(), ev.reference()) {
            // Only an event about the payment itself binds its transaction: a refund or dispute
            // that arrives first must not bind the transaction to itself (its payment would then
            // be keyed by it); it looks the binding up, and while there is none it parks on the
            // transaction (`parked`), which the binding event moves onto its payment.
            if matches!(
                ev.kind,
                EventKind::PaymentSucceeded(_) | EventKind::PaymentState { .. }
            ) {
                let binding = self
                    .store
                    .bind_reference(ev.provider, txn, reference)
                    .await?;
                self.move_parked(ev.provider, &binding).await?;
                if &binding.reference != reference {
                    tracing::info!(transaction = txn, reference = %binding.reference, "transaction bound to its first reference");
                    out = Some(ev.clone().with_payment_reference(binding.reference));
                }
            } else if let Some(bound) = self.store.bound_reference(ev.provider, txn).await? {
                // Resolved: it no longer names the transaction, which `park` reads as unbound.
                out = Some(parked::resolved(ev, bound));
            }
        }
        let current = out.as_ref().unwrap_or(ev);
        if let Some((payment_reference, amount_major)) = current.kind.unpriced() {
            let payment = self
                .store
                .payment(current.provider, payment_reference)
                .await?;
            if let Some(currency) = payment.and_then(|p| p.currency) {
                let units = crate::providers::units_of(current.provider);
                match units.from_api_decimal(amount_major, currency) {
                    Ok(money) => {
                        out = current.kind.priced(money).map(|kind| NormalisedEvent {
                            kind,
                            ..current.clone()
                        });
                    }
                    // Stays unpriced (parked): an amount the payment's currency cannot hold.
                    Err(e) => {
                        tracing::warn!(amount = %amount_major, %currency, error = %e, "amount not in its payment's currency")
                    }
                }
            }
        }
        Ok(out)
    }

    /// The claim protocol around one money movement.
    async fn money(&self, ev: &NormalisedEvent, lease_ms: i64) -> Result<Answer, PipelineError> {
        let (key, fingerprint) = match (ev.key(), ClaimedFacts::of(&ev.kind)) {
            (Some(k), Some(facts)) => (k, facts.fingerprint()),
            _ => return Ok(ignored(ev)),
        };
        // A payment's credit claims on its payment (`credits`), unless reconciliation resumes a
        // claim the claims table holds (it must finish that claim).
        if let EventKind::PaymentSucceeded(p) = &ev.kind {
            if ev.event_type != RESUME_EVENT_TYPE {
                let on_payment = self.credit_on_payment(ev, p, &key, &fingerprint, lease_ms);
                if let Some(answer) = on_payment.await? {
                    return Ok(answer);
                }
            }
        }
        // So does a refund, a dispute movement or a reversal that applies now (`held`), on the
        // same terms.
        if let Some(m) = held_move(&ev.kind) {
            if ev.event_type != RESUME_EVENT_TYPE {
                let on_payment = self.held_on_payment(ev, m, &key, &fingerprint, lease_ms);
                if let Some(answer) = on_payment.await? {
                    return Ok(answer);
                }
            }
        }
        // So does a word about a payout payhook sent (`transfers`), on its payout.
        if let EventKind::Transfer(t) = &ev.kind {
            if ev.event_type != RESUME_EVENT_TYPE {
                let on_payout = self.word_on_payout(ev, t, &key, &fingerprint, lease_ms);
                if let Some(answer) = on_payout.await? {
                    return Ok(answer);
                }
            }
        }
        let (token, took_over) = match self.store.claim(&key, &fingerprint, lease_ms).await? {
            ClaimOutcome::Claimed { token, took_over } => {
                if took_over {
                    tracing::info!(key = %key, "took over an expired claim; resuming its steps");
                }
                (token, took_over)
            }
            other => return Ok(not_ours(other, &key)),
        };
        let settled = self.apply(ev, &key).await?;
        let mut answer = self.settle(&key, &token, settled).await?;
        answer.took_over = took_over;
        Ok(answer)
    }

    /// Finalizes (money moved) or releases (surely nothing moved) our claim.
    async fn settle(
        &self,
        key: &IdempotencyKey,
        token: &OwnerToken,
        settled: Settled,
    ) -> Result<Answer, PipelineError> {
        match settled {
            Settled::Final(answer) => {
                let stored = StoredResponse {
                    status: answer.status,
                    body: answer.body.clone(),
                };
                match self.store.finalize(key, token, &stored).await? {
                    FinalizeOutcome::Done => Ok(answer),
                    // Our lease expired and a successor finished first: its answer stands.
                    FinalizeOutcome::Superseded(Some(theirs)) => Ok(Answer::replay(theirs)),
                    // A successor holds the claim and has not finished: it will.
                    FinalizeOutcome::Superseded(None) => {
                        let p =
                            Problem::new("in_flight", "superseded by a newer attempt", Some(key));
                        Ok(Answer::json(409, &p, Outcome::InFlight).retry_after(1_000))
                    }
                }
            }
            Settled::NothingMoved(answer) => {
                self.store.release(key, token).await?;
                Ok(answer)
            }
        }
    }

    /// The money movement itself: payment transition, then the ledger entry. Each step is
    /// idempotent by `key`, so a resumed attempt re-runs them safely.
    async fn apply(
        &self,
        ev: &NormalisedEvent,
        key: &IdempotencyKey,
    ) -> Result<Settled, PipelineError> {
        match &ev.kind {
            EventKind::PaymentSucceeded(p) => self.credit(ev, p, key).await,
            EventKind::RefundSucceeded(r) => self.debit(ev, r, key, Uncredited::Park).await,
            EventKind::CancelOrRefund(r) => self.cancel_or_refund(ev, r, key).await,
            EventKind::RefundReversed(r) => self.reverse(ev, r, key).await,
            EventKind::Dispute { facts, movement } => self.dispute(ev, facts, *movement, key).await,
            EventKind::Transfer(t) => self.transfer(ev, t, key).await,
            // `money` only calls this for money events; anything else moves nothing.
            EventKind::RefundUnpriced(_)
            | EventKind::DisputeUnpriced(_)
            | EventKind::PaymentState { .. }
            | EventKind::Ignored => Ok(Settled::NothingMoved(ignored(ev))),
        }
    }

    /// A credit through the claims table (a payment paid before credits were claimed on the
    /// payment, or a claims-table claim reconciliation resumes). A credit claimed on its payment
    /// ([`credits`]) is that claim's to finish: met here, it is answered from it.
    async fn credit(
        &self,
        ev: &NormalisedEvent,
        p: &PaymentFacts,
        key: &IdempotencyKey,
    ) -> Result<Settled, PipelineError> {
        // Read once per process; only places a payment paid for the first time (the placement
        // is then recorded on it).
        let layout = self.store.placement_layout().await?;
        let new = NewCredit {
            shard: layout.place(key),
            default_account: self.default_account.as_ref(),
            claim: None,
        };
        let outcome = self.store.mark_paid(ev.provider, p, key, new).await?;
        let (payment, resumed) = match credits::paid_or_refused(outcome, key, p) {
            Ok(paid) => paid,
            Err(answer) => return Ok(Settled::NothingMoved(answer)),
        };
        match payment.claim.as_ref().map(|c| &c.state) {
            Some(ClaimState::Done(stored)) => Ok(Settled::Final(Answer::replay(stored.clone()))),
            Some(ClaimState::DoneUnrecorded { status }) => Ok(Settled::Final(Answer::replay(
                StoredResponse::unrecorded(*status),
            ))),
            Some(ClaimState::InProgress { .. }) => Ok(Settled::NothingMoved(in_flight(key, 1_000))),
            None => self.credit_tail(&payment, p, key, resumed).await,
        }
    }

    /// What every credit does after its paid write: the debits parked on the payment leave
    /// first (nothing of the credit is spendable before them), then the credit is posted.
    async fn credit_tail(
        &self,
        payment: &PaymentRecord,
        p: &PaymentFacts,
        key: &IdempotencyKey,
        resumed: bool,
    ) -> Result<Settled, PipelineError> {
        if self.take_parked(payment).await? == parked::Taken::Contended {
            return Ok(Settled::NothingMoved(contended(key)));
        }
        let account = payment.account.as_ref().map_or("", AccountId::as_str);
        let body = Applied::payment(key, p, account);
        let signed = Signed::of(p.money.amount.get(), p.money.currency);
        let (settled, _) = self
            .finish(payment, key, signed, &p.reference, resumed, &body)
            .await?;
        Ok(settled)
    }

    /// How every payment movement ends (credit, refund debit, reversal, dispute), once its own
    /// write on the payment decided it (`resumed`: an earlier attempt under the key had made
    /// that write): post `amount` (signed; nothing when it is zero) in the payment's shard under
    /// the key, then answer applied, "already applied" only when the earlier attempt had made
    /// both the write and the entry. What was posted, if anything, is returned beside.
    async fn finish(
        &self,
        payment: &PaymentRecord,
        key: &IdempotencyKey,
        amount: Signed,
        reference: &crate::domain::Reference,
        resumed: bool,
        body: &Applied<'_>,
    ) -> Result<(Settled, Option<PostOutcome>), PipelineError> {
        if amount.amount_minor == 0 {
            return Ok((Settled::Final(applied(body, resumed)), None));
        }
        let posted = self.post(payment, key, amount, reference, resumed).await?;
        let all_done_before = resumed && posted == PostOutcome::AlreadyPosted;
        Ok((Settled::Final(applied(body, all_done_before)), Some(posted)))
    }

    /// Posts `amount_minor` (signed) for `payment` under `key`, in the payment's recorded shard.
    /// `resumed`: the movement's payment write was found done by an earlier attempt, which may
    /// have run the previous release and posted the entry under the bare key; a timed retry
    /// looks there first, so an upgrade in the middle of a movement never posts it twice.
    async fn post(
        &self,
        payment: &PaymentRecord,
        key: &IdempotencyKey,
        amount: Signed,
        reference: &crate::domain::Reference,
        resumed: bool,
    ) -> Result<PostOutcome, PipelineError> {
        let Signed {
            amount_minor,
            currency,
        } = amount;
        let account = payment
            .account
            .clone()
            .ok_or_else(|| crate::store::StoreError::Corrupt {
                table: "payments".into(),
                key: payment.reference.to_string(),
                reason: "a paid payment without an account".into(),
            })?;
        let posting = Posting {
            key: key.clone(),
            account,
            // Entries of a payment all live where its credit was placed.
            shard: shard_of_payment(payment, key),
            at_ms: movement_time(payment, key),
            currency,
            amount_minor,
            reference: reference.clone(),
            posted_at_ms: now_ms(),
        };
        if resumed && posting.at_ms.is_some() {
            let legacy = Posting {
                at_ms: None,
                ..posting.clone()
            };
            if self.store.posted(&legacy).await? {
                return Ok(PostOutcome::AlreadyPosted);
            }
        }
        Ok(self.store.post(&posting).await?)
    }

    /// A refund's debit. `uncredited` says what a payment payhook has not credited means:
    /// wait for it (a refund), or nothing to give back (a cancel-or-refund).
    async fn debit(
        &self,
        ev: &NormalisedEvent,
        r: &RefundFacts,
        key: &IdempotencyKey,
        uncredited: Uncredited,
    ) -> Result<Settled, PipelineError> {
        let mut outcome = self.store.refund(ev.provider, r, key).await?;
        if matches!(outcome, RefundOutcome::NotYetPaid(_)) && uncredited == Uncredited::Park {
            // Not paid yet: written down on the payment, whose credit takes it first; not
            // claimed for good, so the provider's redelivery finds it applied.
            match self.park(ev, &r.payment_reference, key, r.money).await? {
                Parking::Parked(settled) => return Ok(settled),
                Parking::PaidMeanwhile => outcome = self.store.refund(ev.provider, r, key).await?,
                Parking::Bound(ev) => return Box::pin(self.apply(&ev, key)).await,
            }
        }
        let (payment, resumed) = match outcome {
            RefundOutcome::Applied(p) => (p, false),
            RefundOutcome::AlreadyApplied(p) => {
                match held_won(p.held_claims.get(key.as_str()), key) {
                    Some(settled) => return Ok(settled),
                    None => (p, true),
                }
            }
            RefundOutcome::NotYetPaid(_) if uncredited == Uncredited::Park => {
                return Ok(Settled::NothingMoved(parked(key)))
            }
            RefundOutcome::NotYetPaid(p) => {
                return Ok(Settled::NothingMoved(cancels::not_credited(ev, r, p)))
            }
            RefundOutcome::Refused { reason, payment } => {
                let why = format!("refund refused; payment is {}", payment.status);
                return Ok(Settled::NothingMoved(refused(key, reason, why)));
            }
            // The provider reported this refund failed before its success arrived: it never applies.
            RefundOutcome::Voided(_) => {
                let body = Status {
                    status: "stale",
                    reference: Some(r.refund_reference.as_str()),
                    payment_status: None,
                    event_type: Some(&ev.event_type),
                };
                return Ok(Settled::Final(Answer::json(200, &body, Outcome::Stale)));
            }
            RefundOutcome::Mismatch(m, _) => {
                return Ok(Settled::NothingMoved(conflict(Some(key), &m)))
            }
            RefundOutcome::Contended => return Ok(Settled::NothingMoved(contended(key))),
        };
        self.refund_tail(&payment, r, key, resumed).await
    }

    /// A refund the provider reports failed: its debit is credited back once (under the
    /// reversal's own key), or, if it never applied, it is voided.
    async fn reverse(
        &self,
        ev: &NormalisedEvent,
        r: &RefundFacts,
        key: &IdempotencyKey,
    ) -> Result<Settled, PipelineError> {
        let refund_key = IdempotencyKey::new(ev.provider, Operation::Refund, &r.refund_reference);
        let (payment, resumed) = match self
            .store
            .reverse_refund(ev.provider, r, &refund_key)
            .await?
        {
            ReversalOutcome::Applied(p) => (p, false),
            ReversalOutcome::AlreadyApplied(p) => {
                match held_won(p.held_claims.get(key.as_str()), key) {
                    Some(settled) => return Ok(settled),
                    None => (p, true),
                }
            }
            ReversalOutcome::Voided(_) => return Ok(Settled::Final(voided(ev, r))),
            ReversalOutcome::NotYetPaid => return Ok(Settled::NothingMoved(parked(key))),
            ReversalOutcome::Mismatch(m, _) => {
                return Ok(Settled::NothingMoved(conflict(Some(key), &m)))
            }
            ReversalOutcome::Contended => return Ok(Settled::NothingMoved(contended(key))),
        };
        self.restore_tail(&payment, r, key, resumed).await
    }

    /// A reversal's tail once its own write on the payment decided it, however it was claimed:
    /// the payment says which write that was (its refund applied and now given back, or never
    /// applied and voided), so a resumed attempt answers as the first did.
    async fn reversal_tail(
        &self,
        ev: &NormalisedEvent,
        payment: &PaymentRecord,
        r: &RefundFacts,
        key: &IdempotencyKey,
        resumed: bool,
    ) -> Result<Settled, PipelineError> {
        let refund_key = IdempotencyKey::new(ev.provider, Operation::Refund, &r.refund_reference);
        if payment.refund_keys.contains(&refund_key) {
            return self.restore_tail(payment, r, key, resumed).await;
        }
        Ok(Settled::Final(voided(ev, r)))
    }

    /// A reversal that gave its refund's debit back: the credit under the reversal's key.
    async fn restore_tail(
        &self,
        payment: &PaymentRecord,
        r: &RefundFacts,
        key: &IdempotencyKey,
        resumed: bool,
    ) -> Result<Settled, PipelineError> {
        let amount = r.money.amount.get();
        let account = payment.account.as_ref().map_or("", AccountId::as_str);
        let body = Applied::refund(key, r, account, amount);
        let signed = Signed::of(amount, r.money.currency);
        let (settled, _) = self
            .finish(payment, key, signed, &r.payment_reference, resumed, &body)
            .await?;
        Ok(settled)
    }
}

/// What the claims table's path answers a movement it finds applied under a claim held on its
/// item (#44), if there is one: that claim won (its write applied the movement with it), so its
/// stored answer is this key's, or it is still running and this attempt retries later (its
/// claims-table claim released). `None`: no claim there, the path finishes the movement.
fn held_won(
    claim: Option<&crate::idempotency::HostClaim>,
    key: &IdempotencyKey,
) -> Option<Settled> {
    Some(match &claim?.state {
        ClaimState::Done(stored) => Settled::Final(Answer::replay(stored.clone())),
        ClaimState::DoneUnrecorded { status } => {
            Settled::Final(Answer::replay(StoredResponse::unrecorded(*status)))
        }
        ClaimState::InProgress { .. } => Settled::NothingMoved(in_flight(key, 1_000)),
    })
}

/// The movement of `kind` whose claim its payment can hold (#44), if it is one. A
/// cancel-or-refund is not: what it moves depends on whether payhook credited the payment, and
/// it is rare.
fn held_move(kind: &EventKind) -> Option<HeldMove<'_>> {
    match kind {
        EventKind::RefundSucceeded(r) => Some(HeldMove::Refund(r)),
        EventKind::Dispute { facts, movement } => Some(HeldMove::Dispute(facts, *movement)),
        EventKind::RefundReversed(r) => Some(HeldMove::Reversal(r)),
        _ => None,
    }
}

/// What a money-returning event means for a payment payhook has not credited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Uncredited {
    /// A refund before its payment: parked until the payment is paid.
    Park,
    /// A cancel-or-refund: the provider cancelled what payhook never credited; nothing moves.
    NothingToReturn,
}

/// A posting's signed amount: positive credits, negative debits.
#[derive(Debug, Clone, Copy)]
struct Signed {
    amount_minor: i64,
    currency: crate::domain::Currency,
}

impl Signed {
    fn of(amount_minor: i64, currency: crate::domain::Currency) -> Self {
        Signed {
            amount_minor,
            currency,
        }
    }
}

#[derive(Serialize)]
struct Unassigned<'a> {
    status: &'static str,
    key: &'a str,
    reference: &'a str,
}

/// The applied answer. When every step was already done by an earlier attempt under the key
/// (a resumed or re-driven attempt), the answer is the same but the outcome says so: operators
/// must never be led to "fix" a double credit that did not happen.
fn applied(body: &Applied<'_>, all_done_before: bool) -> Answer {
    let outcome = if all_done_before {
        Outcome::AlreadyApplied
    } else {
        Outcome::Applied
    };
    Answer::json(200, body, outcome)
}

/// 200, logged stale: a reversal of a refund that never applied, now voided so its late
/// success never applies.
fn voided(ev: &NormalisedEvent, r: &RefundFacts) -> Answer {
    let body = Status {
        status: "voided",
        reference: Some(r.refund_reference.as_str()),
        payment_status: None,
        event_type: Some(&ev.event_type),
    };
    Answer::json(200, &body, Outcome::Stale)
}

fn parked(key: &IdempotencyKey) -> Answer {
    let why = "the payment this moves money of is not PAID yet; retry later";
    retry_later(
        key,
        "payment_not_paid",
        why,
        Outcome::Parked,
        PARKED_RETRY_MS,
    )
}

/// A lost race is never final: answered retryable, nothing moved.
fn contended(key: &IdempotencyKey) -> Answer {
    let why = "concurrent updates to this payment; retry later";
    retry_later(key, "in_flight", why, Outcome::InFlight, CONTENDED_RETRY_MS)
}

/// 409 with `Retry-After`: nothing moved, the provider's redelivery settles it.
fn retry_later(
    key: &IdempotencyKey,
    error: &str,
    message: &str,
    outcome: Outcome,
    retry_ms: i64,
) -> Answer {
    let mut p = Problem::new(error, message, Some(key));
    p.retry_after_s = Some(seconds_ceil(retry_ms));
    Answer::json(409, &p, outcome).retry_after(retry_ms)
}

/// Types we acknowledge (200, so the provider stops retrying) and log, but do not act on.
fn ignored(ev: &NormalisedEvent) -> Answer {
    let body = Status {
        status: "ignored",
        reference: None,
        payment_status: None,
        event_type: Some(&ev.event_type),
    };
    Answer::json(200, &body, Outcome::Ignored)
}

/// Whole seconds to wait, rounded up: a client retrying after `Retry-After` must find the lease
/// expired, not a few hundred milliseconds short of it.
fn seconds_ceil(ms: i64) -> i64 {
    (ms.max(1) + 999) / 1_000
}

fn state_answer(
    status: &str,
    reference: &crate::domain::Reference,
    payment_status: &str,
    outcome: Outcome,
) -> Answer {
    Answer::json(
        200,
        &Status {
            status,
            reference: Some(reference.as_str()),
            payment_status: Some(payment_status),
            event_type: None,
        },
        outcome,
    )
}

/// A movement a human must look at (422): final for the provider, nothing moved.
fn refused(key: &IdempotencyKey, error: &str, message: String) -> Answer {
    Answer::json(
        422,
        &Problem::new(error, message, Some(key)),
        Outcome::Conflict,
    )
}

/// Another attempt holds the key's claim under a live lease: 409 with `Retry-After`.
fn in_flight(key: &IdempotencyKey, retry_after_ms: i64) -> Answer {
    let mut p = Problem::new(
        "in_flight",
        "this operation is being processed; retry later",
        Some(key),
    );
    p.retry_after_s = Some(seconds_ceil(retry_after_ms));
    Answer::json(409, &p, Outcome::InFlight).retry_after(retry_after_ms)
}

/// The key was claimed for other facts: 422, nothing moves.
/// The answer to a claim that is not this attempt's to run, wherever it is held: a replay of
/// the stored answer, in flight (409), or other facts under the key (422). Only called with an
/// outcome other than `Claimed`, which answers in flight rather than run steps it does not own.
fn not_ours(outcome: ClaimOutcome, key: &IdempotencyKey) -> Answer {
    match outcome {
        ClaimOutcome::Replay(stored) => Answer::replay(stored),
        ClaimOutcome::ReplayUnrecorded { status } => {
            Answer::replay(StoredResponse::unrecorded(status))
        }
        ClaimOutcome::Conflict { .. } => reference_conflict(key),
        ClaimOutcome::InFlight { retry_after_ms } => in_flight(key, retry_after_ms),
        ClaimOutcome::Claimed { .. } => in_flight(key, 1_000),
    }
}

fn reference_conflict(key: &IdempotencyKey) -> Answer {
    let p = Problem::new(
        "reference_conflict",
        "this reference was already used for a different amount, currency or account",
        Some(key),
    );
    Answer::json(422, &p, Outcome::Conflict)
}

fn conflict(key: Option<&IdempotencyKey>, m: &Mismatch) -> Answer {
    let mut p = Problem::new(
        "reference_conflict",
        format!("{} differs from the registered payment", m.field),
        key,
    );
    p.mismatch = Some(m);
    Answer::json(422, &p, Outcome::Conflict)
}

impl<S> Pipeline<S> {
    /// The log record of `d` answered with `answer`.
    fn delivery(&self, d: &Delivered<'_>, answer: &Answer) -> Delivery {
        let details = Details {
            money: d.event.money(),
            account: account_in(&answer.body).or_else(|| d.event.account().cloned()),
            order_id: self
                .orders
                .order_of(d.event.provider, d.raw_body.as_bytes()),
            answer: Some(answer.body.clone()),
            headers: d.headers.clone(),
        };
        Delivery {
            details,
            ..delivery(d, answer)
        }
    }
}

/// The account an answer names (an applied movement's: the payment's own account, whoever
/// registered it), read back from its body so a replayed answer names it too.
fn account_in(body: &str) -> Option<AccountId> {
    #[derive(serde::Deserialize)]
    struct Named<'a> {
        #[serde(borrow)]
        account: Option<&'a str>,
    }
    let named: Named<'_> = serde_json::from_str(body).ok()?;
    named
        .account
        .filter(|a| !a.is_empty())
        .and_then(|a| AccountId::parse(a).ok())
}

fn delivery(d: &Delivered<'_>, answer: &Answer) -> Delivery {
    Delivery {
        id: Delivery::new_id(d.received_at_ms),
        provider: d.event.provider,
        event_id: d.event.event_id.clone(),
        event_type: d.event.event_type.clone(),
        key: d.event.key(),
        reference: d.event.reference().cloned(),
        outcome: answer.outcome,
        http_status: answer.status,
        received_at_ms: d.received_at_ms,
        raw_body: Some(d.raw_body.to_owned()),
        replay_of: d.replay_of.clone(),
        started_by: d.started_by.clone(),
        redriven: None,
        details: Details::default(),
    }
}
