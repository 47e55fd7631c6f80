//! Re-driving stored deliveries through the same pipeline. The stored raw body was verified on
//! arrival, so replay needs no signature; exactly-once under the key means replaying what was
//! applied changes nothing, and replaying what failed or was parked applies it now.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::domain::{now_ms, ClaimedFacts, EventKind, NormalisedEvent};
use crate::eventlog::{Delivery, LogFilter};
use crate::idempotency::ClaimState;
use crate::pipeline::{Answer, Delivered, Pipeline, PipelineError, Store};
use crate::providers::{PayloadError, Providers};
use crate::store::StoreError;

/// Event type of the deliveries reconciliation logs when it resumes a stuck claim: their body is
/// the claim's facts, not a provider payload.
pub const RESUME_EVENT_TYPE: &str = "reconcile.resume";

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("provider {0} is not configured here")]
    ProviderNotConfigured(crate::domain::ProviderId),
    #[error("stored body no longer maps: {0}")]
    Payload(#[from] PayloadError),
    #[error("stored facts are unreadable: {0}")]
    Facts(String),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ReplayError {
    /// The store did not answer (in the pipeline or reading the stored delivery): trying again
    /// later can succeed. Everything else needs a person (a body gone or unmappable, a provider
    /// not configured here).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ReplayError::Pipeline(_) | ReplayError::Store(StoreError::Unavailable { .. })
        )
    }
}

/// Rebuilds the normalised event of a stored delivery (read with its body).
pub fn event_of(providers: &Providers, d: &Delivery) -> Result<NormalisedEvent, ReplayError> {
    let body = d
        .raw_body
        .as_deref()
        .ok_or_else(|| ReplayError::Facts("the delivery was read without its body".into()))?;
    if d.event_type == RESUME_EVENT_TYPE {
        // A resume's stored body is the claim's fingerprint (reconcile logs it so).
        let fingerprint = crate::domain::Fingerprint::from_stored(body.to_owned());
        let kind = ClaimedFacts::parse_kind(&fingerprint).map_err(ReplayError::Facts)?;
        return Ok(NormalisedEvent {
            provider: d.provider,
            event_id: d.event_id.clone(),
            event_type: d.event_type.clone(),
            kind,
            transaction_id: None,
        });
    }
    let adapter = providers
        .get(d.provider)
        .ok_or(ReplayError::ProviderNotConfigured(d.provider))?;
    Ok(adapter.normalise(body.as_bytes())?)
}

/// Re-drives one stored delivery; the attempt is logged as a replay of it, by `started_by`.
pub async fn redrive<S: Store>(
    pipeline: &Pipeline<S>,
    providers: &Providers,
    d: &Delivery,
    started_by: &str,
    lease_ms: i64,
) -> Result<Answer, ReplayError> {
    let d = &pipeline.store().with_body(d).await?;
    let event = event_of(providers, d)?;
    let body = d.raw_body.as_deref().unwrap_or_default();
    let delivered = Delivered {
        event: &event,
        raw_body: body,
        received_at_ms: now_ms(),
        lease_ms,
        replay_of: Some(d.id.clone()),
        started_by: Some(started_by.to_owned()),
    };
    Ok(pipeline.process(delivered).await?)
}

/// What a replay would do, read without writing anything.
pub async fn predict<S: Store>(
    store: &S,
    providers: &Providers,
    d: &Delivery,
) -> Result<String, ReplayError> {
    let event = event_of(providers, &store.with_body(d).await?)?;
    if let Some(key) = event.key() {
        return Ok(match store.get_claim(&key).await? {
            Some(c) if matches!(c.state, ClaimState::Done(_)) => {
                "replay stored response (no change)".into()
            }
            Some(_) => "in flight (no change now)".into(),
            // No claim (never claimed, released, or expired): the payment says whether the
            // movement already happened under this key.
            None if already_moved(store, &event, &key).await? => {
                format!("already applied {key} (no change)")
            }
            None => format!("apply {key}"),
        });
    }
    Ok(match &event.kind {
        EventKind::PaymentState { facts, to } => {
            let now = store
                .payment(event.provider, &facts.reference)
                .await?
                .map(|p| p.status);
            match now {
                Some(s) if !to.sources_of().contains(&s) => format!("stale ({s} stays)"),
                Some(s) => format!("move {s} -> {to}"),
                None => format!("create as {to}"),
            }
        }
        _ => "ignore".into(),
    })
}

/// True when the payment records that `key` already moved its money (claim expired since).
async fn already_moved<S: Store>(
    store: &S,
    event: &NormalisedEvent,
    key: &crate::domain::IdempotencyKey,
) -> Result<bool, ReplayError> {
    let Some(reference) = event.reference() else {
        return Ok(false);
    };
    let Some(p) = store.payment(event.provider, reference).await? else {
        return Ok(false);
    };
    Ok(match &event.kind {
        EventKind::PaymentSucceeded(_) => p.paid_key.as_ref() == Some(key),
        EventKind::RefundSucceeded(_) | EventKind::CancelOrRefund(_) => p.refund_keys.contains(key),
        EventKind::RefundReversed(r) => {
            let refund = crate::domain::IdempotencyKey::new(
                event.provider,
                crate::domain::Operation::Refund,
                &r.refund_reference,
            );
            p.reversed_refund_keys.contains(&refund)
        }
        EventKind::Dispute { .. } => p.dispute_keys.contains(key),
        _ => false,
    })
}

/// How a replay run went.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub selected: usize,
    pub dry_run: bool,
    /// Outcome (or prediction) -> count.
    pub results: BTreeMap<String, usize>,
    pub errors: Vec<String>,
}

/// Options of a replay run.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub dry_run: bool,
    pub concurrency: usize,
    pub started_by: String,
    pub lease_ms: i64,
    /// Replay entries are skipped unless asked: replaying the log twice must not snowball.
    pub include_replays: bool,
    pub max: usize,
}

/// Selects the deliveries first (so the replay's own log entries are not picked up), then
/// re-drives them with bounded concurrency, calling `progress(done, total)` as it goes.
pub async fn replay<S: Store>(
    pipeline: &Pipeline<S>,
    providers: &Providers,
    filter: &LogFilter,
    opts: &ReplayOptions,
    progress: impl Fn(usize, usize),
) -> Result<Summary, ReplayError> {
    use futures::StreamExt;
    let store = pipeline.store();
    let mut selected = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.query(filter, 200, cursor.as_deref()).await?;
        selected.extend(
            page.deliveries
                .into_iter()
                .filter(|d| opts.include_replays || d.replay_of.is_none()),
        );
        cursor = page.next;
        if cursor.is_none() || selected.len() >= opts.max {
            break;
        }
    }
    selected.truncate(opts.max);
    // Oldest first: the order they arrived in.
    selected.reverse();
    let total = selected.len();
    let mut summary = Summary {
        selected: total,
        dry_run: opts.dry_run,
        ..Summary::default()
    };
    let mut results = futures::stream::iter(selected)
        .map(|d| replay_one(pipeline, providers, opts, d))
        .buffer_unordered(opts.concurrency.max(1));
    let mut done = 0;
    while let Some((id, r)) = results.next().await {
        done += 1;
        match r {
            Ok(label) => *summary.results.entry(label).or_default() += 1,
            Err(e) => summary.errors.push(format!("{id}: {e}")),
        }
        progress(done, total);
    }
    Ok(summary)
}

/// One delivery of a run: its prediction, or what re-driving it did. It owns its delivery (no
/// borrow of the selection per item), so the run's future is `Send` for a server to await it.
async fn replay_one<'a, S: Store>(
    pipeline: &'a Pipeline<S>,
    providers: &'a Providers,
    opts: &'a ReplayOptions,
    d: Delivery,
) -> (crate::eventlog::DeliveryId, Result<String, ReplayError>) {
    let r = if opts.dry_run {
        predict(pipeline.store(), providers, &d).await
    } else {
        redrive(pipeline, providers, &d, &opts.started_by, opts.lease_ms)
            .await
            .map(|a| a.outcome.to_string())
    };
    (d.id.clone(), r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unanswering_store_is_worth_another_pass() {
        let unavailable = || StoreError::Unavailable {
            operation: "GetItem",
            table: "events".into(),
            source: "timed out".into(),
        };
        assert!(ReplayError::Store(unavailable()).is_retryable());
        assert!(ReplayError::Pipeline(PipelineError::Store(unavailable())).is_retryable());
        let gone = StoreError::Corrupt {
            table: "events".into(),
            key: "d1".into(),
            reason: "gone".into(),
        };
        assert!(!ReplayError::Store(gone).is_retryable());
        assert!(!ReplayError::Facts("unreadable".into()).is_retryable());
    }
}
