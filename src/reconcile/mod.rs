//! The reconciliation backstop. Idempotency prevents double application; this finds what we
//! never finished or never heard, and applies it through the same pipeline with the same keys,
//! so it can never double-apply what a webhook also applies. One pass, within a time budget:
//!
//! 1. claims stuck IN_PROGRESS past their lease (an invocation died): resumed from the facts the
//!    claim stores; each step is idempotent by the key, so resuming finishes, never repeats;
//! 2. deliveries whose processing failed (store unavailable): re-driven from the stored body,
//!    oldest first from a cursor kept between passes, each marked with its re-drive's outcome so
//!    no pass repeats finished work;
//! 3. refunds parked because their payment was not PAID yet: re-driven once the payment is PAID
//!    (marked like 2); the ones still waiting are reported;
//! 4. payments PENDING/PROCESSING for longer than a threshold: the provider's API is asked (a
//!    timeout per call, a few at a time), and its answer is read by the provider's adapter, the
//!    same code as its webhooks. A success is applied; only a status the provider documents as
//!    final fails a payment; one still not final after `give_up_after_ms` is no longer asked
//!    about (reported `abandoned`; its webhook can still pay it).
//!
//! 5. disputes: where a provider's API lists them, the disputes created within a window, mapped
//!    as their webhooks are; a withdrawal or reinstatement the payment does not record yet is
//!    applied through the pipeline under the same key (a dispute whose webhooks never came).
//!
//! Steps 1–3 touch only the store, so they run first: a slow provider can only cut steps 4 and
//! 5 short, and a step cut short by the budget resumes on the next pass.

pub mod api;
mod disputes;
pub mod invoke;
mod payouts;

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;

use crate::domain::{
    now_ms, ClaimedFacts, EventKind, IdempotencyKey, NormalisedEvent, PaymentFacts, PaymentStatus,
    ProviderId, StateFacts,
};
use crate::eventlog::{Delivery, LogFilter, Outcome};
use crate::payments::PaymentRecord;
use crate::pipeline::{Answer, Delivered, Pipeline, Store};
use crate::providers::Providers;
use crate::replay::{
    event_of, redrive, RESUME_CREDIT_EVENT_TYPE, RESUME_EVENT_TYPE, RESUME_HELD_EVENT_TYPE,
    RESUME_REFUND_EVENT_TYPE,
};
use crate::store::StoreError;

pub use api::{ApiEndpoint, ApiError, HttpProviderApi, ProviderApi, ProviderTruth};

/// The cursor of step 2, stored with the log.
pub const FAILED_CURSOR: &str = "reconcile.failed_deliveries";

/// How far behind its cursor each pass walks failed deliveries again. A failure is logged at the
/// end of its attempt under an id taken when it *arrived*, so it can land behind a cursor that a
/// later arrival, failed faster, already moved: by at most the longest attempt (15 minutes, the
/// Lambda ceiling; payhook's attempts end within seconds) plus the difference between the clocks
/// of the two processes that received them. Deliveries walked again carry their re-drive mark
/// and are passed over, so each failure is still re-driven once.
pub const REDRIVE_LAG_MS: i64 = 30 * 60_000;

/// Where a pass starts walking failed deliveries: [`REDRIVE_LAG_MS`] before the stored cursor,
/// never before the window (the first pass starts at the window).
fn walk_start(saved: Option<&str>, window_start_ms: i64) -> String {
    let cursor_ms = saved
        .and_then(|c| c.get(..13))
        .and_then(|t| t.parse::<i64>().ok());
    let from_ms = cursor_ms.map_or(window_start_ms, |c| {
        (c - REDRIVE_LAG_MS).max(window_start_ms)
    });
    format!("{:013}", from_ms.max(0))
}

/// The thresholds an operator sets ([`crate::config::Config`] reads them from
/// `PAYHOOK_RECONCILE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcilePolicy {
    pub pending_after_ms: i64,
    pub give_up_after_ms: i64,
    /// A payout still not settled this long after it was opened needs a person.
    pub payout_unresolved_after_ms: i64,
}

impl ReconcileSettings {
    /// The default pass with the operator's thresholds and the lease its claims take.
    pub fn from_policy(policy: ReconcilePolicy, lease_ms: i64) -> Self {
        ReconcileSettings {
            pending_after_ms: policy.pending_after_ms,
            give_up_after_ms: policy.give_up_after_ms,
            payout_unresolved_after_ms: policy.payout_unresolved_after_ms,
            lease_ms,
            ..ReconcileSettings::default()
        }
    }
}

/// Thresholds of one pass.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileSettings {
    /// A PENDING/PROCESSING payment untouched this long is asked about.
    pub pending_after_ms: i64,
    /// Where the failed-delivery cursor starts when none is stored yet.
    pub failed_window_ms: i64,
    /// How far back parked refunds are looked for (the claim retention: older ones are gone).
    pub parked_window_ms: i64,
    /// A payment the provider still calls not final after this long is no longer asked about.
    pub give_up_after_ms: i64,
    /// A payout not settled this long after it was opened is listed as needing a person.
    pub payout_unresolved_after_ms: i64,
    /// Lease of the claims this pass takes.
    pub lease_ms: i64,
    /// At most this many items of each kind per pass.
    pub max_items: usize,
    /// Provider calls in flight at once.
    pub concurrency: usize,
    /// How long one provider call may take (the HTTP client's timeout is built from it).
    pub call_timeout_ms: i64,
    /// Wall time of a pass (inside Lambda: the invocation's deadline less a margin).
    pub budget_ms: i64,
    /// How far back disputes are listed (by creation): longer than a dispute takes to be won
    /// and reinstated (Stripe: up to about 75 days).
    pub dispute_window_ms: i64,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        ReconcileSettings {
            pending_after_ms: 15 * 60_000,
            failed_window_ms: 24 * 3_600_000,
            parked_window_ms: 30 * 86_400_000,
            give_up_after_ms: 72 * 3_600_000,
            payout_unresolved_after_ms: crate::payouts::calls::UNRESOLVED_AFTER_MS,
            lease_ms: 30_000,
            max_items: 500,
            concurrency: 8,
            call_timeout_ms: 5_000,
            budget_ms: 60_000,
            dispute_window_ms: 120 * 86_400_000,
        }
    }
}

/// One thing the pass looked at. `needs_human` findings say why, what the provider answered,
/// and the command that resolves it.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: &'static str,
    pub provider: ProviderId,
    pub subject: String,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_answer: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolve: Option<String>,
}

impl Finding {
    fn new(
        kind: &'static str,
        provider: ProviderId,
        subject: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Finding {
            kind,
            provider,
            subject: subject.into(),
            detail: detail.into(),
            reason: None,
            provider_answer: None,
            resolve: None,
        }
    }
}

/// What a pass found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub completed: Vec<Finding>,
    pub still_unknown: Vec<Finding>,
    pub needs_human: Vec<Finding>,
    /// Parked refunds whose payment is not PAID yet.
    pub waiting: Vec<Finding>,
    /// Payments no longer asked about: still not final past the give-up horizon.
    pub abandoned: Vec<Finding>,
    /// Steps the budget cut short; the next pass resumes them.
    pub deferred: Vec<&'static str>,
}

impl Report {
    /// Files a pipeline answer: 2xx done, 422 a human, anything else (409, 5xx) not yet known.
    fn file(&mut self, answer: Result<Answer, String>, mut f: Finding) {
        match answer {
            Ok(a) if a.outcome == Outcome::Unassigned => {
                f.detail = format!("unassigned: {}", f.detail);
                f.reason = Some("paid, but no account is known for it".into());
                f.resolve = Some(format!(
                    "payhook payments expect --provider {} --reference {} --account <ACCOUNT> … && payhook replay --outcome unassigned",
                    f.provider, f.subject
                ));
                self.needs_human.push(f);
            }
            Ok(a) if a.status == 200 => {
                f.detail = format!("{}: {}", a.outcome, f.detail);
                self.completed.push(f);
            }
            Ok(a) if a.status == 422 => {
                f.detail = format!("{}: {}", a.outcome, f.detail);
                f.reason = serde_json::from_str::<serde_json::Value>(&a.body)
                    .ok()
                    .and_then(|b| b.get("message").and_then(|m| m.as_str()).map(str::to_owned));
                f.resolve.get_or_insert_with(|| {
                    format!(
                        "payhook payments show --provider {} --reference {}",
                        f.provider, f.subject
                    )
                });
                self.needs_human.push(f);
            }
            Ok(a) => {
                f.detail = format!("{} {}: {}", a.status, a.outcome, f.detail);
                self.still_unknown.push(f);
            }
            Err(e) => {
                f.detail = e;
                self.still_unknown.push(f);
            }
        }
    }
}

/// A reconciliation pass over one store.
pub struct Reconciler<'a, S, A> {
    pub pipeline: &'a Pipeline<S>,
    pub providers: &'a Providers,
    pub api: &'a A,
    pub settings: ReconcileSettings,
}

/// When the pass must stop starting work.
#[derive(Debug, Clone, Copy)]
struct Budget {
    stop_at: Instant,
}

impl Budget {
    fn spent(&self) -> bool {
        Instant::now() >= self.stop_at
    }
}

impl<S: Store, A: ProviderApi + crate::payouts::Transfers> Reconciler<'_, S, A> {
    pub async fn run(&self) -> Result<Report, StoreError> {
        let budget_ms = u64::try_from(self.settings.budget_ms.max(0)).unwrap_or(0);
        // No new provider call starts later than one call's timeout before the end.
        let call_ms = u64::try_from(self.settings.call_timeout_ms.max(0)).unwrap_or(0);
        let stop_at = Instant::now() + Duration::from_millis(budget_ms.saturating_sub(call_ms));
        let budget = Budget { stop_at };
        let mut report = Report::default();
        self.resume_stuck_claims(&mut report, budget).await?;
        self.redrive_failed_deliveries(&mut report, budget).await?;
        self.redrive_parked_refunds(&mut report, budget).await?;
        self.ask_about_open_payments(&mut report, budget).await?;
        self.reconcile_disputes(&mut report, budget).await?;
        self.reconcile_payouts(&mut report, budget).await?;
        Ok(report)
    }

    async fn process(&self, event: &NormalisedEvent, body: &str) -> Result<Answer, String> {
        let delivered = Delivered {
            event,
            raw_body: body,
            received_at_ms: now_ms(),
            lease_ms: self.settings.lease_ms,
            replay_of: None,
            started_by: Some("reconcile".into()),
            headers: Vec::new(),
        };
        self.pipeline
            .process(delivered)
            .await
            .map_err(|e| e.to_string())
    }

    async fn resume_stuck_claims(
        &self,
        report: &mut Report,
        budget: Budget,
    ) -> Result<(), StoreError> {
        let store = self.pipeline.store();
        let now_ms = store.now_ms();
        // Claims the claims table holds, resumed through it; then credits, refunds, reversals
        // and dispute movements whose claim is held on their payment, and payout settlement
        // words held on their payout (#32, #44), resumed through that item.
        let claims = store.stuck_claims(now_ms, self.settings.max_items).await?;
        let credits = store.stuck_credits(now_ms, self.settings.max_items).await?;
        let stuck = claims
            .into_iter()
            .map(|c| (c, RESUME_EVENT_TYPE))
            .chain(credits.into_iter().map(|c| (c, RESUME_CREDIT_EVENT_TYPE)));
        for (claim, event_type) in stuck {
            if budget.spent() {
                report.deferred.push("stuck_claims");
                break;
            }
            if self.resume_payout_claim(&claim, report).await {
                continue;
            }
            let provider = IdempotencyKey::from_stored(claim.key.clone()).provider();
            let finding = |detail: &str| {
                Finding::new(
                    "stuck_claim",
                    provider.unwrap_or(ProviderId::GENERIC),
                    claim.key.to_string(),
                    detail,
                )
            };
            let (Some(provider), Ok(kind)) =
                (provider, ClaimedFacts::parse_kind(&claim.fingerprint))
            else {
                report.needs_human.push(finding("claim facts unreadable"));
                continue;
            };
            if !self.resumable(&kind).await? {
                report.still_unknown.push(finding(
                    "a settlement word not applied yet: its claim kept no money or recipient to judge it by; its redelivery or the payout's next look does",
                ));
                continue;
            }
            let event_type = match (&kind, event_type) {
                (EventKind::RefundSucceeded(_), RESUME_CREDIT_EVENT_TYPE) => {
                    RESUME_REFUND_EVENT_TYPE
                }
                (
                    EventKind::Dispute { .. }
                    | EventKind::RefundReversed(_)
                    | EventKind::Transfer(_),
                    RESUME_CREDIT_EVENT_TYPE,
                ) => RESUME_HELD_EVENT_TYPE,
                _ => event_type,
            };
            let event = NormalisedEvent {
                provider,
                event_id: format!("resume:{}", claim.key),
                event_type: event_type.into(),
                kind,
                transaction_id: None,
            };
            let answer = self.process(&event, claim.fingerprint.as_str()).await;
            report.file(answer, finding("resumed"));
        }
        Ok(())
    }

    /// Whether a stuck claim may be finished from its fingerprint alone. A payout settlement
    /// word's fingerprint is the word (reference and state), not the money or recipient it
    /// named, so it is resumed only to finish a word already applied (judged when it was):
    /// one not applied yet waits for a word that carries what the one judge needs.
    async fn resumable(&self, kind: &EventKind) -> Result<bool, StoreError> {
        let EventKind::Transfer(t) = kind else {
            return Ok(true);
        };
        let Some(id) = crate::payouts::PayoutId::parse(t.reference.as_str()) else {
            return Ok(true);
        };
        let store = self.pipeline.store();
        Ok(crate::payouts::Payouts::payout(store, &id)
            .await?
            .is_none_or(|p| p.words.iter().any(|w| w == t.state.as_str())))
    }

    /// Failed deliveries, oldest first from the stored cursor. A re-drive the store could not
    /// finish stops the step there (the next pass resumes from it); any answer marks the
    /// delivery and moves the cursor past it.
    async fn redrive_failed_deliveries(
        &self,
        report: &mut Report,
        budget: Budget,
    ) -> Result<(), StoreError> {
        let store = self.pipeline.store();
        let window_start = (now_ms() - self.settings.failed_window_ms).max(0);
        let saved = store.cursor(FAILED_CURSOR).await?;
        let mut after = walk_start(saved.as_deref(), window_start);
        let mut furthest = saved.unwrap_or_default();
        let filter = LogFilter {
            outcome: Some(Outcome::Failed),
            ..LogFilter::default()
        };
        let mut handled = 0;
        'pages: loop {
            let page = store.query_oldest_first(&filter, 100, &after).await?;
            if page.is_empty() {
                break;
            }
            for d in page {
                if budget.spent() || handled >= self.settings.max_items {
                    report.deferred.push("failed_deliveries");
                    break 'pages;
                }
                if d.replay_of.is_none() && d.redriven.is_none() {
                    handled += 1;
                    if self.redrive_failed(&d, report).await?.is_break() {
                        break 'pages;
                    }
                }
                after = d.id.to_string();
                // The cursor only moves forward: walking the lag again never undoes progress.
                if after > furthest {
                    furthest.clone_from(&after);
                    store.save_cursor(FAILED_CURSOR, &furthest).await?;
                }
            }
        }
        Ok(())
    }

    /// Re-drives one failed delivery and marks it with the re-drive's outcome, so no later pass
    /// repeats finished work. `Break` when the store is still failing: the delivery is left
    /// unmarked and the cursor before it, so the next pass starts from it.
    async fn redrive_failed(
        &self,
        d: &Delivery,
        report: &mut Report,
    ) -> Result<ControlFlow<()>, StoreError> {
        let store = self.pipeline.store();
        let finding = Finding::new(
            "failed_delivery",
            d.provider,
            d.id.to_string(),
            d.event_id.clone(),
        );
        match redrive(
            self.pipeline,
            self.providers,
            d,
            "reconcile",
            self.settings.lease_ms,
        )
        .await
        {
            Ok(answer) => {
                store.mark_redriven(d, answer.outcome).await?;
                report.file(Ok(answer), finding);
            }
            // The store is still failing (in the pipeline, or reading the stored body): stop
            // here, the next pass resumes. An outage is never a final answer.
            Err(e) if e.is_retryable() => {
                report.file(Err(e.to_string()), finding);
                return Ok(ControlFlow::Break(()));
            }
            // Any other failure: marked failed so passes move past it, and handed to a human.
            Err(e) => {
                store.mark_redriven(d, Outcome::Failed).await?;
                let mut f = finding;
                f.reason = Some(e.to_string());
                f.resolve = Some(format!(
                    "payhook events --event-id {} --format json",
                    d.event_id
                ));
                report.needs_human.push(f);
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Parked refunds (their payment was not PAID when they came): one re-drive per key once the
    /// payment is PAID, which marks every parked delivery of that key.
    async fn redrive_parked_refunds(
        &self,
        report: &mut Report,
        budget: Budget,
    ) -> Result<(), StoreError> {
        let store = self.pipeline.store();
        for (key, deliveries) in self.parked_refunds_by_key().await? {
            if budget.spent() {
                report.deferred.push("parked_refunds");
                break;
            }
            let Some(newest) = deliveries.last() else {
                continue;
            };
            let finding = Finding::new(
                "parked_refund",
                newest.provider,
                key.to_string(),
                newest.event_id.clone(),
            );
            if !self.refund_payment_is_paid(newest).await? {
                report.waiting.push(finding);
                continue;
            }
            match redrive(
                self.pipeline,
                self.providers,
                newest,
                "reconcile",
                self.settings.lease_ms,
            )
            .await
            {
                Ok(answer) => {
                    for d in &deliveries {
                        store.mark_redriven(d, answer.outcome).await?;
                    }
                    report.file(Ok(answer), finding);
                }
                Err(e) => report.file(Err(e.to_string()), finding),
            }
        }
        Ok(())
    }

    /// The parked refunds not yet re-driven within the window (about `max_items`, whole pages),
    /// grouped by key, oldest first: a key can be parked by several deliveries (redeliveries),
    /// and one re-drive settles them all.
    async fn parked_refunds_by_key(
        &self,
    ) -> Result<Vec<(IdempotencyKey, Vec<Delivery>)>, StoreError> {
        let store = self.pipeline.store();
        let filter = LogFilter {
            outcome: Some(Outcome::Parked),
            since_ms: Some(now_ms() - self.settings.parked_window_ms),
            ..LogFilter::default()
        };
        let mut parked: Vec<Delivery> = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.query(&filter, 200, cursor.as_deref()).await?;
            parked.extend(page.deliveries.into_iter().filter(|d| d.redriven.is_none()));
            cursor = page.next;
            if cursor.is_none() || parked.len() >= self.settings.max_items {
                break;
            }
        }
        // Oldest first, grouped by key: the newest delivery of a key is the one re-driven.
        parked.sort_by(|a, b| a.id.cmp(&b.id));
        let mut keys: Vec<(IdempotencyKey, Vec<Delivery>)> = Vec::new();
        for d in parked {
            let Some(key) = d.key.clone() else { continue };
            match keys.iter_mut().find(|(k, _)| *k == key) {
                Some((_, ds)) => ds.push(d),
                None => keys.push((key, vec![d])),
            }
        }
        Ok(keys)
    }

    /// Whether a parked refund's payment is PAID now, so a re-drive would apply rather than park
    /// again. A delivery without a reference, or whose body is gone or no longer maps, counts as
    /// not paid: it is reported waiting and looked at again next pass. A store that does not
    /// answer stops the step (the error), rather than pass for "not paid" and hide an outage.
    async fn refund_payment_is_paid(&self, newest: &Delivery) -> Result<bool, StoreError> {
        let store = self.pipeline.store();
        let body = match store.with_body(newest).await {
            Err(e @ StoreError::Unavailable { .. }) => return Err(e),
            other => other,
        };
        let paid = match (
            newest.reference.as_ref(),
            body.map(|d| event_of(self.providers, &d)),
        ) {
            (Some(r), Ok(Ok(_))) => store
                .payment(newest.provider, r)
                .await?
                .is_some_and(|p| p.status.is_paid()),
            _ => false,
        };
        Ok(paid)
    }

    async fn ask_about_open_payments(
        &self,
        report: &mut Report,
        budget: Budget,
    ) -> Result<(), StoreError> {
        let store = self.pipeline.store();
        let before = self.pipeline.store().now_ms() - self.settings.pending_after_ms;
        let mut open = Vec::new();
        for status in [PaymentStatus::Pending, PaymentStatus::Processing] {
            open.extend(
                store
                    .open_payments(status, before, self.settings.max_items)
                    .await?,
            );
        }
        let results: Vec<Option<Settled>> = futures::stream::iter(open.iter())
            .map(|p| async move {
                if budget.spent() {
                    return None;
                }
                Some(self.settle_payment(p).await)
            })
            .buffer_unordered(self.settings.concurrency.max(1))
            .collect()
            .await;
        if results.iter().any(Option::is_none) {
            report.deferred.push("open_payments");
        }
        for (answer, finding, bucket) in results.into_iter().flatten() {
            match bucket {
                Bucket::Pipeline => report.file(answer, finding),
                Bucket::StillUnknown => report.still_unknown.push(finding),
                Bucket::Abandoned => report.abandoned.push(finding),
                Bucket::NeedsHuman => report.needs_human.push(finding),
            }
        }
        Ok(())
    }

    /// Asks the provider about one payment and acts on its answer.
    async fn settle_payment(&self, p: &PaymentRecord) -> Settled {
        let mut finding = Finding::new(
            "open_payment",
            p.provider,
            p.reference.to_string(),
            "provider API",
        );
        let not_yet = |f: Finding| (Err(String::new()), f, Bucket::StillUnknown);
        let Some(adapter) = self.providers.get(p.provider) else {
            finding.detail = "provider not configured here".into();
            return not_yet(finding);
        };
        let body = match self
            .api
            .fetch(p.provider, &adapter.api_path(&p.reference))
            .await
        {
            Ok(Some(body)) => body,
            Ok(None) => return self.not_final(p, finding, "not found").await,
            Err(e) => {
                finding.detail = format!("provider API: {e}");
                return not_yet(finding);
            }
        };
        let truth = match adapter.read_api(&p.reference, &body) {
            Ok(t) => t,
            Err(e) => {
                finding.reason = Some(format!("the provider's answer does not map: {e}"));
                finding.provider_answer = serde_json::from_slice(&body).ok();
                return (Err(String::new()), finding, Bucket::NeedsHuman);
            }
        };
        let kind = match &truth {
            ProviderTruth::Succeeded(facts) => succeeded_kind(p, facts, &mut finding),
            ProviderTruth::Failed { status } => failed_kind(p, status, &mut finding),
            ProviderTruth::NotFinal { status } => return self.not_final(p, finding, status).await,
            ProviderTruth::NotFound => return self.not_final(p, finding, "not found").await,
        };
        let answer = self.apply_provider_answer(p, kind).await;
        (answer, finding, Bucket::Pipeline)
    }

    /// Applies the provider's final word through the same pipeline as the webhook carrying the
    /// same news, so the same keys and state checks hold: the two can never both apply it.
    async fn apply_provider_answer(
        &self,
        p: &PaymentRecord,
        kind: EventKind,
    ) -> Result<Answer, String> {
        let event = NormalisedEvent {
            provider: p.provider,
            event_id: format!("reconcile:{}", p.reference),
            event_type: "reconcile.provider_api".into(),
            kind,
            transaction_id: None,
        };
        let body =
            serde_json::json!({ "reconciled": p.reference.as_str(), "provider": p.provider })
                .to_string();
        self.process(&event, &body).await
    }

    /// The provider has no final word yet: ask again next pass, unless the payment has been
    /// open past the give-up horizon, in which case it leaves the open index (its webhook can
    /// still pay it).
    async fn not_final(
        &self,
        p: &PaymentRecord,
        mut finding: Finding,
        status: &str,
    ) -> (Result<Answer, String>, Finding, Bucket) {
        finding.provider_answer = Some(serde_json::json!({ "status": status }));
        let age_ms = self.pipeline.store().now_ms() - p.created_at_ms;
        if age_ms < self.settings.give_up_after_ms {
            finding.detail = format!("provider says {status}");
            return (Err(String::new()), finding, Bucket::StillUnknown);
        }
        let note = format!(
            "reconciliation stopped asking: provider says {status} after {} h",
            age_ms / 3_600_000
        );
        match self
            .pipeline
            .store()
            .stop_asking(p.provider, &p.reference, p.status, &note)
            .await
        {
            Ok(_) => {
                finding.detail = note;
                (Err(String::new()), finding, Bucket::Abandoned)
            }
            Err(e) => {
                finding.detail = format!("could not stop asking: {e}");
                (Err(String::new()), finding, Bucket::StillUnknown)
            }
        }
    }
}

/// The success the provider reports, as its webhook would carry it. The provider's API may not
/// name the account; the payment's stored one is kept then, so the credit still lands.
fn succeeded_kind(p: &PaymentRecord, facts: &PaymentFacts, finding: &mut Finding) -> EventKind {
    let mut facts = facts.clone();
    facts.account = facts.account.or_else(|| p.account.clone());
    finding.provider_answer = Some(serde_json::json!({
        "status": "succeeded", "amount": facts.money.amount.get(), "currency": facts.money.currency,
    }));
    EventKind::PaymentSucceeded(facts)
}

/// A status the provider documents as final without payment: the payment moves to FAILED.
/// The API's answer is only a status, so the state change names no account or money.
fn failed_kind(p: &PaymentRecord, status: &str, finding: &mut Finding) -> EventKind {
    finding.provider_answer = Some(serde_json::json!({ "status": status }));
    EventKind::PaymentState {
        facts: StateFacts {
            reference: p.reference.clone(),
            account: None,
            money: None,
        },
        to: PaymentStatus::Failed,
    }
}

/// Where a provider-API finding goes when it did not reach the pipeline.
#[derive(Debug, Clone, Copy)]
enum Bucket {
    Pipeline,
    StillUnknown,
    Abandoned,
    NeedsHuman,
}

/// One open payment's settlement: the pipeline's answer (or why there is none), the finding to
/// report and where it goes.
type Settled = (Result<Answer, String>, Finding, Bucket);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pass_walks_the_lag_behind_its_cursor_but_never_before_the_window() {
        let window = 1_000_000_000_000;
        assert_eq!(walk_start(None, window), format!("{window:013}"));
        let cursor = format!("{:013}0123abcd", window + 3 * REDRIVE_LAG_MS);
        assert_eq!(
            walk_start(Some(&cursor), window),
            format!("{:013}", window + 2 * REDRIVE_LAG_MS)
        );
        let near = format!("{:013}x", window + 5);
        assert_eq!(walk_start(Some(&near), window), format!("{window:013}"));
    }
}
