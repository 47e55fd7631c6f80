//! Step 5, the disputes backstop: where a provider's API lists disputes (Stripe `GET
//! /v1/disputes`, Paystack `GET /dispute`), each pass reads the disputes created within
//! `dispute_window_ms`, maps each with the code that maps the provider's dispute webhooks, and
//! applies through the pipeline, under the same keys, every withdrawal or reinstatement the
//! payment does not record yet: a dispute whose webhooks never came still reaches the balance,
//! and one that did is only read (one `GetItem` of its payment), never applied again.

use super::{Budget, Finding, Reconciler, Report};
use crate::domain::NormalisedEvent;
use crate::pipeline::Store;
use crate::providers::{ListedMovement, Provider};
use crate::reconcile::api::{ApiError, ProviderApi};
use crate::store::StoreError;

/// The event type disputes read from a provider's list are logged under.
pub const DISPUTE_LIST_EVENT_TYPE: &str = "reconcile.dispute_list";

impl<S: Store, A: ProviderApi + crate::payouts::Transfers> Reconciler<'_, S, A> {
    pub(super) async fn reconcile_disputes(
        &self,
        report: &mut Report,
        budget: Budget,
    ) -> Result<(), StoreError> {
        let since_s =
            (self.pipeline.store().now_ms() - self.settings.dispute_window_ms).max(0) / 1_000;
        let mut applied = 0;
        for adapter in self.providers.iter() {
            let mut cursor: Option<String> = None;
            while let Some(path) = adapter.disputes_path(since_s, cursor.as_deref()) {
                if budget.spent() || applied >= self.settings.max_items {
                    report.deferred.push("disputes");
                    return Ok(());
                }
                let Some(page) = self.dispute_page(adapter, &path, report).await else {
                    break;
                };
                for listed in page.movements {
                    if self.apply_listed(adapter, listed, report).await? {
                        applied += 1;
                    }
                }
                match page.next {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// One page of the list, or `None` (reported) when the provider did not give one.
    async fn dispute_page(
        &self,
        adapter: &dyn Provider,
        path: &str,
        report: &mut Report,
    ) -> Option<crate::providers::DisputePage> {
        let provider = adapter.id();
        let finding =
            |detail: String| Finding::new("dispute_list", provider, path.to_owned(), detail);
        let body = match self.api.fetch(provider, path).await {
            Ok(Some(body)) => body,
            Ok(None) => return None,
            // No API key configured for this provider: nothing to ask.
            Err(ApiError::NotConfigured(_)) => return None,
            Err(e) => {
                report
                    .still_unknown
                    .push(finding(format!("provider API: {e}")));
                return None;
            }
        };
        match adapter.read_disputes(&body) {
            Ok(page) => Some(page),
            Err(e) => {
                let mut f = finding("the provider's dispute list does not map".into());
                f.reason = Some(e.to_string());
                report.needs_human.push(f);
                None
            }
        }
    }

    /// Applies one listed movement unless its payment records it already. True if it went
    /// through the pipeline.
    async fn apply_listed(
        &self,
        adapter: &dyn Provider,
        listed: ListedMovement,
        report: &mut Report,
    ) -> Result<bool, StoreError> {
        let event = NormalisedEvent {
            provider: adapter.id(),
            event_id: String::new(),
            event_type: DISPUTE_LIST_EVENT_TYPE.into(),
            kind: listed.kind,
            transaction_id: listed.transaction_id,
        };
        let (Some(key), Some(reference)) = (event.key(), event.reference().cloned()) else {
            return Ok(false);
        };
        let finding = Finding::new(
            "dispute",
            event.provider,
            key.to_string(),
            reference.to_string(),
        );
        match self
            .pipeline
            .store()
            .payment(event.provider, &reference)
            .await?
        {
            // Applied already (by its webhook or an earlier pass): read, never written again.
            Some(p) if p.dispute_keys.contains(&key) => return Ok(false),
            Some(p) if p.status.is_paid() => {}
            // Its payment is not paid here (yet): reported, looked at again next pass, and no
            // delivery logged for it until it can apply.
            _ => {
                report.waiting.push(finding);
                return Ok(false);
            }
        }
        let event = NormalisedEvent {
            event_id: format!("reconcile:{key}"),
            ..event
        };
        let body = serde_json::json!({ "reconciled": key.as_str(), "provider": event.provider })
            .to_string();
        let answer = self.process(&event, &body).await;
        let finding = Finding::new(
            "dispute",
            event.provider,
            key.to_string(),
            reference.to_string(),
        );
        report.file(answer, finding);
        Ok(true)
    }
}
