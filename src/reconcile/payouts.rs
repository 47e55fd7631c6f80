//! Reconciliation of payouts: the backstop for a transfer whose word payhook never heard (a
//! webhook lost, an answer that timed out), and for a payout request that died mid-way.
//!
//! - A payout claim stuck IN_PROGRESS is taken over and finished from the request it stored
//!   ([`Pipeline::resume_payout`]): the same steps a retry of the key runs.
//! - A payout `sent` (or `reserved`) untouched for `PAYHOOK_RECONCILE_PENDING_AFTER_S` is asked
//!   about by its reference (behind the call fence: never while a call may run), and the
//!   answer is applied through the same mapping and the same keys as the provider's webhooks.
//!   A lookup that finds nothing fails nothing (see [`crate::payouts::calls`]).
//! - A payout still open past `PAYHOOK_PAYOUT_UNRESOLVED_AFTER_S`, or sent as often as allowed
//!   with no transfer shown, is reported as needing a person and logged `payout unresolved`
//!   (the PayoutsUnresolved alarm): never guessed.

use super::{Budget, Finding, Reconciler, Report};
use crate::idempotency::ClaimRecord;
use crate::payouts::calls::needs_person;
use crate::payouts::{PayoutId, PayoutRequest, PayoutStatus, Transfers};
use crate::pipeline::{PayoutAnswer, Store};
use crate::reconcile::ProviderApi;
use crate::store::StoreError;

impl<S: Store, A: ProviderApi + Transfers> Reconciler<'_, S, A> {
    /// A stuck payout claim: resumed. `false` when `claim` is not a payout's.
    pub(super) async fn resume_payout_claim(
        &self,
        claim: &ClaimRecord,
        report: &mut Report,
    ) -> bool {
        let Some(id) = PayoutId::of_claim(&crate::domain::IdempotencyKey::from_stored(
            claim.key.clone(),
        )) else {
            return false;
        };
        let request = PayoutRequest::from_fingerprint(&claim.fingerprint);
        let provider = request
            .as_ref()
            .map_or(crate::domain::ProviderId::GENERIC, |r| r.provider);
        let mut f = Finding::new("stuck_payout_claim", provider, id.to_string(), "resumed");
        let Ok(request) = request else {
            f.reason = Some("the stored request does not read".into());
            report.needs_human.push(f);
            return true;
        };
        let answer = self
            .pipeline
            .resume_payout(self.api, &id, &request, self.settings.lease_ms)
            .await;
        file_payout(report, answer, f);
        true
    }

    pub(super) async fn reconcile_payouts(
        &self,
        report: &mut Report,
        budget: Budget,
    ) -> Result<(), StoreError> {
        let store = self.pipeline.store();
        let before = store.now_ms() - self.settings.pending_after_ms;
        for record in store.open_payouts(before, self.settings.max_items).await? {
            if budget.spent() {
                report.deferred.push("payouts");
                break;
            }
            let subject = record.payout.to_string();
            let mut f = Finding::new("open_payout", record.provider, subject, "asked");
            let before_status = record.status;
            let result = self
                .pipeline
                .resolve(self.api, record, self.settings.lease_ms)
                .await;
            match result {
                Ok(now) if !now.status.is_open() => {
                    f.detail = format!("{before_status} -> {}", now.status);
                    report.completed.push(f);
                }
                Ok(now) => {
                    tracing::warn!(payout = %now.payout, status = %now.status, provider = %now.provider,
                        "payout still unsettled: the provider has not said how it ended");
                    f.detail = format!(
                        "still {}{}",
                        now.status,
                        now.provider_status
                            .as_deref()
                            .map(|s| format!(" (provider: {s})"))
                            .unwrap_or_default()
                    );
                    let horizon = self.settings.payout_unresolved_after_ms;
                    if let Some(why) = needs_person(&now, store.now_ms(), horizon) {
                        tracing::error!(payout = %now.payout, provider = %now.provider, why,
                            "payout unresolved: a person must ask the provider (payhook payouts list --unsettled)");
                        f.reason = Some(why.into());
                        f.resolve = Some("payhook payouts list --unsettled".into());
                        report.needs_human.push(f);
                    } else {
                        report.still_unknown.push(f);
                    }
                }
                Err(e) => {
                    f.detail = e.to_string();
                    report.still_unknown.push(f);
                }
            }
        }
        Ok(())
    }
}

fn file_payout(
    report: &mut Report,
    answer: Result<PayoutAnswer, crate::pipeline::PipelineError>,
    mut f: Finding,
) {
    match answer {
        Ok(a) if (200..300).contains(&a.status) || a.status == 422 => {
            f.detail = format!(
                "{} {}",
                a.status,
                a.payout_status.map_or("", PayoutStatus::as_str)
            );
            report.completed.push(f);
        }
        Ok(a) => {
            f.detail = format!("{}: {}", a.status, a.body);
            report.still_unknown.push(f);
        }
        Err(e) => {
            f.detail = e.to_string();
            report.still_unknown.push(f);
        }
    }
}
