//! Re-driving stored deliveries through the same pipeline. The stored raw body was verified on
//! arrival, so replay needs no signature; exactly-once under the key means replaying what was
//! applied changes nothing, and replaying what failed or was parked applies it now.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::domain::{now_ms, ClaimedFacts, NormalisedEvent};
use crate::eventlog::Outcome;
use crate::eventlog::{Delivery, EventLog, LogFilter};
use crate::pipeline::dry_run::DryRun;
use crate::pipeline::{Answer, Delivered, Pipeline, PipelineError, Store};
use crate::providers::{PayloadError, Providers};
use crate::store::StoreError;

pub use crate::pipeline::{
    RESUME_CREDIT_EVENT_TYPE, RESUME_EVENT_TYPE, RESUME_HELD_EVENT_TYPE, RESUME_REFUND_EVENT_TYPE,
};

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
    if [
        RESUME_EVENT_TYPE,
        RESUME_CREDIT_EVENT_TYPE,
        RESUME_REFUND_EVENT_TYPE,
        RESUME_HELD_EVENT_TYPE,
    ]
    .contains(&d.event_type.as_str())
    {
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
        headers: Vec::new(),
    };
    Ok(pipeline.process(delivered).await?)
}

/// What re-driving one delivery would do now: the pipeline's own answer over a store that
/// never writes ([`crate::pipeline::dry_run`]), so the same judges decide it as the replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Prediction {
    /// The outcome the replay would log (`applied`, `parked`, `replayed`, …).
    pub outcome: Outcome,
    pub http_status: u16,
    pub key: Option<String>,
    /// The answer the replay would give.
    pub answer: String,
    /// The ledger entries it would post: the balance effect.
    pub moves: Vec<Move>,
}

/// One ledger entry a replay would post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub account: String,
    pub currency: String,
    /// Positive credits, negative debits.
    pub amount_minor: i64,
}

impl std::fmt::Display for Prediction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.outcome)?;
        if let Some(key) = &self.key {
            write!(f, " {key}")?;
        }
        write!(f, " ({})", self.http_status)?;
        for m in &self.moves {
            write!(f, "; {} {:+} {}", m.account, m.amount_minor, m.currency)?;
        }
        Ok(())
    }
}

/// What a replay of `d` would do now, read without writing anything.
pub async fn predict<S: Store + Clone>(
    pipeline: &Pipeline<S>,
    providers: &Providers,
    d: &Delivery,
) -> Result<Prediction, ReplayError> {
    predict_in(&pipeline.dry_run(), providers, d).await
}

/// One delivery's prediction in a dry run that may already hold earlier ones' effects.
async fn predict_in<S: Store + Clone>(
    dry: &Pipeline<DryRun<S>>,
    providers: &Providers,
    d: &Delivery,
) -> Result<Prediction, ReplayError> {
    let d = dry.store().with_body(d).await?;
    let event = event_of(providers, &d)?;
    let delivered = Delivered {
        event: &event,
        raw_body: d.raw_body.as_deref().unwrap_or_default(),
        received_at_ms: now_ms(),
        lease_ms: 0,
        replay_of: Some(d.id.clone()),
        started_by: Some("dry run".to_owned()),
        headers: Vec::new(),
    };
    let answer = dry.process(delivered).await?;
    let moves = dry
        .store()
        .take_postings()
        .into_iter()
        .map(|p| Move {
            account: p.account.to_string(),
            currency: p.currency.to_string(),
            amount_minor: p.amount_minor,
        })
        .collect();
    Ok(Prediction {
        outcome: answer.outcome,
        http_status: answer.status,
        key: event.key().map(|k| k.to_string()),
        answer: answer.body,
        moves,
    })
}

/// How a replay run went. A dry run's `results` use the outcomes the run would log, so the
/// two can be compared line by line.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub selected: usize,
    pub dry_run: bool,
    /// Deliveries left out because an earlier one in the run has the same key: a key is
    /// driven once per run.
    pub same_key: usize,
    /// Outcome -> count.
    pub results: BTreeMap<String, usize>,
    /// `{account} {currency}` -> the signed minor units the run moves (would move).
    pub moves: BTreeMap<String, i64>,
    pub errors: Vec<String>,
}

impl Summary {
    fn count(&mut self, outcome: Outcome, moves: &[Move]) {
        *self.results.entry(outcome.to_string()).or_default() += 1;
        for m in moves {
            let total = self
                .moves
                .entry(format!("{} {}", m.account, m.currency))
                .or_default();
            *total = total.saturating_add(m.amount_minor);
        }
    }
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
pub async fn replay<S: Store + Clone>(
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
    // One delivery per key: a second one would only meet the first one's claim.
    let mut keys = std::collections::HashSet::new();
    let before = selected.len();
    selected.retain(|d| d.key.as_ref().is_none_or(|k| keys.insert(k.clone())));
    let total = selected.len();
    let mut summary = Summary {
        selected: total,
        dry_run: opts.dry_run,
        same_key: before - total,
        ..Summary::default()
    };
    if opts.dry_run {
        // One dry run for the whole selection, in order: each prediction sees the ones before.
        let dry = pipeline.dry_run();
        for (done, d) in selected.iter().enumerate() {
            match predict_in(&dry, providers, d).await {
                Ok(p) => summary.count(p.outcome, &p.moves),
                Err(e) => summary.errors.push(format!("{}: {e}", d.id)),
            }
            progress(done + 1, total);
        }
        return Ok(summary);
    }
    let mut results = futures::stream::iter(selected)
        .map(|d| async move {
            let r = redrive(pipeline, providers, &d, &opts.started_by, opts.lease_ms).await;
            (d.id.clone(), r)
        })
        .buffer_unordered(opts.concurrency.max(1));
    let mut done = 0;
    while let Some((id, r)) = results.next().await {
        done += 1;
        match r {
            Ok(a) => summary.count(a.outcome, &[]),
            Err(e) => summary.errors.push(format!("{id}: {e}")),
        }
        progress(done, total);
    }
    Ok(summary)
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
