//! The reconciliation backstop. Idempotency prevents double application; this finds what we
//! never finished or never heard, and applies it through the same pipeline with the same keys,
//! so it can never double-apply what a webhook also applies:
//!
//! 1. claims stuck IN_PROGRESS past their lease (an invocation died): resumed from the facts the
//!    claim stores; each step is idempotent by the key, so resuming finishes, never repeats;
//! 2. payments PENDING/PROCESSING for longer than a threshold: the provider's API is asked, and
//!    a success or failure it reports is applied as an event;
//! 3. deliveries whose processing failed (store unavailable): re-driven from the stored body.

pub mod api;
pub mod config;
pub mod invoke;

use serde::Serialize;

use crate::domain::{
    now_ms, ClaimedFacts, EventKind, IdempotencyKey, NormalisedEvent, PaymentFacts, PaymentStatus,
    ProviderId, StateFacts,
};
use crate::eventlog::{LogFilter, Outcome};
use crate::ledger::PaymentRecord;
use crate::pipeline::{Answer, Delivered, Pipeline};
use crate::providers::Providers;
use crate::replay::{redrive, RESUME_EVENT_TYPE};
use crate::store::dynamodb::DynamoStore;
use crate::store::StoreError;

pub use api::{ApiEndpoint, ApiError, HttpProviderApi, ProviderApi, ProviderTruth};

/// Thresholds of one pass.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileSettings {
    /// A PENDING/PROCESSING payment untouched this long is asked about.
    pub pending_after_ms: i64,
    /// How far back failed deliveries are re-driven.
    pub failed_window_ms: i64,
    /// Lease of the claims this pass takes.
    pub lease_ms: i64,
    /// At most this many items of each kind per pass (a scheduled Lambda has a deadline).
    pub max_items: usize,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        ReconcileSettings { pending_after_ms: 15 * 60_000, failed_window_ms: 24 * 3_600_000, lease_ms: 30_000, max_items: 500 }
    }
}

/// One thing the pass looked at.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: &'static str,
    pub provider: ProviderId,
    pub subject: String,
    pub detail: String,
}

/// What a pass found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub completed: Vec<Finding>,
    pub still_unknown: Vec<Finding>,
    pub needs_human: Vec<Finding>,
}

impl Report {
    fn file(&mut self, answer: Result<Answer, String>, f: Finding) {
        let mut f = f;
        match answer {
            Ok(a) if a.status == 200 => {
                f.detail = format!("{}: {}", a.outcome, f.detail);
                self.completed.push(f);
            }
            Ok(a) if a.status == 422 => {
                f.detail = format!("{}: {}", a.outcome, a.body);
                self.needs_human.push(f);
            }
            Ok(a) => {
                f.detail = format!("{} {}", a.status, a.outcome);
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
pub struct Reconciler<'a, A> {
    pub pipeline: &'a Pipeline<DynamoStore>,
    pub providers: &'a Providers,
    pub api: &'a A,
    pub settings: ReconcileSettings,
}

impl<A: ProviderApi> Reconciler<'_, A> {
    pub async fn run(&self) -> Result<Report, StoreError> {
        let mut report = Report::default();
        self.resume_stuck_claims(&mut report).await?;
        self.ask_about_open_payments(&mut report).await?;
        self.redrive_failed_deliveries(&mut report).await?;
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
        };
        self.pipeline.process(delivered).await.map_err(|e| e.to_string())
    }

    async fn resume_stuck_claims(&self, report: &mut Report) -> Result<(), StoreError> {
        let store = self.pipeline.store();
        for claim in store.stuck_claims(now_ms(), self.settings.max_items).await? {
            let provider = provider_of(&claim.key);
            let finding = |detail: String| Finding { kind: "stuck_claim", provider: provider.unwrap_or(ProviderId::Generic), subject: claim.key.to_string(), detail };
            let (Some(provider), Ok(kind)) = (provider, ClaimedFacts::parse_kind(&claim.fingerprint)) else {
                report.needs_human.push(finding("claim facts unreadable".into()));
                continue;
            };
            let event = NormalisedEvent { provider, event_id: format!("resume:{}", claim.key), event_type: RESUME_EVENT_TYPE.into(), kind, transaction_id: None };
            let answer = self.process(&event, &claim.fingerprint).await;
            report.file(answer, finding("resumed".into()));
        }
        Ok(())
    }

    async fn ask_about_open_payments(&self, report: &mut Report) -> Result<(), StoreError> {
        let store = self.pipeline.store();
        let before = now_ms() - self.settings.pending_after_ms;
        for status in [PaymentStatus::Pending, PaymentStatus::Processing] {
            for payment in store.open_payments(status, before, self.settings.max_items).await? {
                self.settle_payment(&payment, report).await;
            }
        }
        Ok(())
    }

    async fn settle_payment(&self, p: &PaymentRecord, report: &mut Report) {
        let finding = |detail: String| Finding { kind: "open_payment", provider: p.provider, subject: p.reference.to_string(), detail };
        let truth = match self.api.payment_status(p.provider, &p.reference).await {
            Ok(t) => t,
            Err(e) => return report.still_unknown.push(finding(format!("provider API: {e}"))),
        };
        let kind = match truth {
            // No account from the provider: the payment's own (or the default); with neither the
            // pipeline answers `unassigned` and the report files it under needs_human.
            ProviderTruth::Succeeded { money, account } => EventKind::PaymentSucceeded(PaymentFacts {
                reference: p.reference.clone(),
                account: account.or_else(|| p.account.clone()),
                money,
            }),
            ProviderTruth::Failed => EventKind::PaymentState {
                facts: StateFacts { reference: p.reference.clone(), account: None, money: None },
                to: PaymentStatus::Failed,
            },
            ProviderTruth::Processing | ProviderTruth::NotFound => {
                return report.still_unknown.push(finding(format!("provider says {truth:?}")));
            }
        };
        let event = NormalisedEvent { provider: p.provider, event_id: format!("reconcile:{}", p.reference), event_type: "reconcile.provider_api".into(), kind, transaction_id: None };
        let body = serde_json::json!({ "reconciled": p.reference.as_str(), "provider": p.provider }).to_string();
        let answer = self.process(&event, &body).await;
        report.file(answer, finding("provider API".into()));
    }

    async fn redrive_failed_deliveries(&self, report: &mut Report) -> Result<(), StoreError> {
        use crate::eventlog::EventLog;
        let store = self.pipeline.store();
        let filter = LogFilter { outcome: Some(Outcome::Failed), since_ms: Some(now_ms() - self.settings.failed_window_ms), ..LogFilter::default() };
        let page = store.query(&filter, self.settings.max_items, None).await?;
        for d in page.deliveries.iter().filter(|d| d.replay_of.is_none()) {
            let finding = |detail: String| Finding { kind: "failed_delivery", provider: d.provider, subject: d.id.clone(), detail };
            let answer = redrive(self.pipeline, self.providers, d, "reconcile", self.settings.lease_ms).await.map_err(|e| e.to_string());
            report.file(answer, finding(d.event_id.clone()));
        }
        Ok(())
    }
}

/// The provider named by a key's first component.
fn provider_of(key: &IdempotencyKey) -> Option<ProviderId> {
    key.as_str().split(':').next().and_then(ProviderId::parse)
}
